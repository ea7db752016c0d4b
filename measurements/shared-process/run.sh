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
  TRACE=(--snapshot --snapshot-dir "$SNAPS" --snapshot-md "$OUT/snapshots-$NAME.md")
  [ "${NOTRACE:-0}" = 1 ] && TRACE=()
  log "history $NAME"
  timeout 420 python3 "$HARNESS" --batch "$HERE/cases/$NAME.jsonl" --one-process \
      --out "$OUT/measured-$NAME.jsonl" --nvml "${TRACE[@]}" >> "$OUT/log.txt" 2>&1
  log "exit $?"
  if [ "${NOTRACE:-0}" != 1 ]; then
    python3 "$ROOT/measurements/h200-segments/compact_snapshots.py" "$SNAPS" "$OUT/trace-$NAME.jsonl" >> "$OUT/log.txt" 2>&1
    gzip -9f "$OUT/trace-$NAME.jsonl"
  fi
  rm -rf "$SNAPS"
done
log "done"
