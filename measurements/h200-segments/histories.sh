# Sourced by the `run.sh` of measurements/history-traces/ and
# measurements/shared-process/: `source histories.sh OUT_DIR [HISTORY ...]`
# from a script whose cases/ holds the histories, then
# `run_histories TIMEOUT [HARNESS FLAG ...]`. Each history file
# cases/NAME.jsonl is one `headroom_measure.py --batch` run with NVML
# polled and, unless NOTRACE=1, every case under `--snapshot`, its pickles
# reduced by compact_snapshots.py (events of at least 256 KiB and each
# case's final segment table with addresses and the blocks still
# allocated). OUT_DIR gets log.txt, env.txt, measured-NAME.jsonl,
# snapshots-NAME.md and trace-NAME.jsonl.gz; `log` appends to log.txt.
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

run_histories() {
  local timeout_s="$1"; shift
  local name snaps trace
  for name in "${NAMES[@]}"; do
    snaps="$(mktemp -d)"
    trace=(--snapshot --snapshot-dir "$snaps" --snapshot-md "$OUT/snapshots-$name.md")
    [ "${NOTRACE:-0}" = 1 ] && trace=()
    log "history $name"
    timeout "$timeout_s" python3 "$HARNESS" --batch "$HERE/cases/$name.jsonl" "$@" \
        --out "$OUT/measured-$name.jsonl" --nvml "${trace[@]}" >> "$OUT/log.txt" 2>&1
    log "exit $?"
    if [ "${NOTRACE:-0}" != 1 ]; then
      python3 "$ROOT/measurements/h200-segments/compact_snapshots.py" "$snaps" "$OUT/trace-$name.jsonl" >> "$OUT/log.txt" 2>&1
      gzip -9f "$OUT/trace-$name.jsonl"
    fi
    rm -rf "$snaps"
  done
}
