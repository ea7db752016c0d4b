#!/usr/bin/env bash
# Jobs of several models in one process, as a notebook runs them: each
# history file is one `headroom_measure.py --batch --one-process` run (every
# build in one process, one after another; the model, its optimizer and
# outputs dropped and the cache emptied between builds), every case under
# `--snapshot`, NVML polled. The pickles are reduced by
# ../h200-segments/compact_snapshots.py (events of at least 256 KiB and
# each case's final segment table with addresses and the blocks still
# allocated: what the next case finds).
#
#   measurements/shared-process/run.sh OUT_DIR [HISTORY ...]
#
# From the repository root; HISTORY names a file of cases/ without `.jsonl`
# (default: every one). NOTRACE=1 measures without `--snapshot`. OUT_DIR
# gets log.txt, env.txt, measured-NAME.jsonl and trace-NAME.jsonl.gz.
source "$(dirname "$0")/../h200-segments/histories.sh" "$@"
run_histories 420 --one-process
log "done"
