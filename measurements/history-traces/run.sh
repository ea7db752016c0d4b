#!/usr/bin/env bash
# Cases that ran after others of their build in one harness process, traced
# again in the same order: each history file is one `headroom_measure.py
# --batch` process (one build), every case under `--snapshot`, NVML polled.
# The pickles are reduced by ../h200-segments/compact_snapshots.py (all
# events of at least 256 KiB, and each case's final segment table with
# addresses and the blocks still allocated: what the next case finds after
# the cache is emptied). Then the fp32 ViT patch embeddings' cuDNN blocks
# at batches beyond ../h200-cudnn/stem_sweep.jsonl's.
#
#   measurements/history-traces/run.sh OUT_DIR [HISTORY ...]
#
# From the repository root; HISTORY names a file of cases/ without `.jsonl`
# (default: every one). OUT_DIR gets log.txt, env.txt, measured-NAME.jsonl,
# trace-NAME.jsonl.gz and stem-sweep-vit-fp32.jsonl.
source "$(dirname "$0")/../h200-segments/histories.sh" "$@"
run_histories 400
log "stem sweep"
python3 "$ROOT/measurements/h200-cudnn/stem_sweep.py" "$OUT/stem-sweep-vit-fp32.jsonl" \
    vit_s16_patch,vit_b16_patch fp32 384,512,768,1024 >> "$OUT/log.txt" 2>&1
log "done"
