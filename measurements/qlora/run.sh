#!/usr/bin/env bash
# QLoRA and bitsandbytes-quantized jobs (jobs/): each once under
# `headroom run --cmd` with its spec (specs/NAME.json, `make_specs.py`): a
# fresh process, NVML polled from outside; after the
# jobs named in TRACE under PyTorch's allocation history (reduced by
# ../h200-segments/compact_snapshots.py to every allocation of 256 KiB and
# more, with its innermost frame).
#
#   COLLECTOR=.collector-bin/headroom PYTHONPATH=.whl/site JOBS_FILE=jobs-1.txt \
#       [TRACE="NAME|LEN|BATCH|ARGS ..."] [ONLY=REGEX] measurements/qlora/run.sh OUT_DIR
#
# ONLY keeps the jobs whose name matches the (extended) regular expression.
#
# From the repository root, on the GPU machine, with bitsandbytes on
# PYTHONPATH. The random checkpoints (jobs/make_checkpoint.py) are written
# to $QLORA_CHECKPOINTS (default /tmp/qlora-checkpoints) first, once.
# OUT_DIR gets log.txt, measured.jsonl, details.jsonl, trace-segments.jsonl
# and each job's collector output.
set -uo pipefail
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
ROOT="$(pwd)"
HERE="$ROOT/measurements/qlora"
COLLECTOR="$ROOT/${COLLECTOR:-.collector-bin/headroom}"
START=$SECONDS
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 QLORA_DETAIL_FILE="$DEST/details.jsonl"
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$DEST/log.txt"; }
cd "$HERE/jobs"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys, torch, transformers, peft, bitsandbytes; print("python", sys.version.split()[0]); [print(m.__name__, m.__version__) for m in (torch, transformers, peft, bitsandbytes)]'
  "$COLLECTOR" --version
} > "$DEST/env.txt" 2>&1
log "checkpoints: ${CHECKPOINTS:-llama1b llama8b qwen7b}"
# shellcheck disable=SC2086
python3 make_checkpoint.py ${CHECKPOINTS:-llama1b llama8b qwen7b} 2>&1 | tee -a "$DEST/log.txt"

SNAPS="$(mktemp -d)"
for entry in ${TRACE:-}; do
  IFS='|' read -r NAME LEN BATCH ARGS <<< "${entry//,/ }"
  log "trace $NAME: $ARGS"
  # shellcheck disable=SC2086
  QLORA_DETAIL_FILE="$DEST/trace-details.jsonl" timeout 150 python3 "$ROOT/measurements/real-jobs/trace/trace_job.py" \
      "$SNAPS" "$NAME" $ARGS > "$DEST/$NAME.trace.out" 2>&1
  log "exit $?"
done
if [ -n "${TRACE:-}" ]; then
  python3 "$ROOT/measurements/h200-segments/compact_snapshots.py" "$SNAPS" "$DEST/trace-segments.jsonl" >> "$DEST/log.txt" 2>&1
  gzip -f "$DEST/trace-segments.jsonl"
fi
rm -rf "$SNAPS"
mapfile -t JOBS < <(grep -v '^#' "$HERE/${JOBS_FILE:-jobs-1.txt}" | grep . | grep -E "^(${ONLY:-.*})[^|]*\|")
for entry in "${JOBS[@]}"; do
  IFS='|' read -r NAME LEN BATCH CMD <<< "$entry"
  log "run $NAME: $CMD"
  SPEC=(); [ -f "$HERE/specs/$NAME.json" ] && SPEC=(--spec "$HERE/specs/$NAME.json")
  "$COLLECTOR" run --cmd "$CMD" "${SPEC[@]}" --seq-lens "$LEN" --batches "$BATCH" \
      --name "$NAME" --timeout-s "${JOB_TIMEOUT_S:-150}" --verbose --out "$DEST/$NAME.jsonl" > "$DEST/$NAME.out" 2>&1
  log "exit $?"
  grep -i 'driver peak\|measured\|Traceback\|out of memory\|Error' "$DEST/$NAME.out" | tail -3 | tee -a "$DEST/log.txt"
  cat "$DEST/$NAME.jsonl" >> "$DEST/measured.jsonl" 2>/dev/null && rm -f "$DEST/$NAME.jsonl"
done

log done
