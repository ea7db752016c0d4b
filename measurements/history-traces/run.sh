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
set -uo pipefail
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"; shift
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
HARNESS="$ROOT/calibration-collector/python/headroom_measure.py"
START=$SECONDS
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/log.txt"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0]); [print(m.__name__, m.__version__) for m in (torch, transformers)]'
} > "$OUT/env.txt" 2>&1
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && mapfile -t NAMES < <(cd "$HERE/cases" && ls *.jsonl | sed 's/\.jsonl$//')
for NAME in "${NAMES[@]}"; do
  SNAPS="$(mktemp -d)"
  log "history $NAME"
  timeout 400 python3 "$HARNESS" --batch "$HERE/cases/$NAME.jsonl" --out "$OUT/measured-$NAME.jsonl" --nvml \
      --snapshot --snapshot-dir "$SNAPS" --snapshot-md "$OUT/snapshots-$NAME.md" >> "$OUT/log.txt" 2>&1
  log "exit $?"
  python3 "$ROOT/measurements/h200-segments/compact_snapshots.py" "$SNAPS" "$OUT/trace-$NAME.jsonl" >> "$OUT/log.txt" 2>&1
  gzip -9f "$OUT/trace-$NAME.jsonl"
  rm -rf "$SNAPS"
done
log "stem sweep"
python3 "$ROOT/measurements/h200-cudnn/stem_sweep.py" "$OUT/stem-sweep-vit-fp32.jsonl" \
    vit_s16_patch,vit_b16_patch fp32 384,512,768,1024 >> "$OUT/log.txt" 2>&1
log "done"
