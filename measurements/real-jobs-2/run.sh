#!/usr/bin/env bash
# Real jobs, second batch: fp16 mixed precision (GradScaler) and gradient
# accumulation, written with the HF Trainer, Lightning and timm loops of
# ../real-jobs/jobs/. Each job once under `calibration-collector run --cmd`
# (a fresh process, NVML polled from outside) with the spec that describes it
# (specs/NAME.json), which records the prediction of the collector that ran
# it beside the measurement; then the jobs named in TRACE (allocation
# history, reduced by ../h200-segments/compact_snapshots.py).
#
#   COLLECTOR=.collector-bin/calibration-collector [JOBS_FILE=jobs-2.txt] [TRACE="NAME ..."] \
#       measurements/real-jobs-2/run.sh OUT_DIR
#
# From the repository root. OUT_DIR gets log.txt and real-jobs-2.tar.gz
# (measured.jsonl, trace-segments.jsonl, each job's collector output, env.txt).
set -uo pipefail
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
OUT="$(mktemp -d)"
ROOT="$(pwd)"
HERE="$ROOT/measurements/real-jobs-2"
COLLECTOR="$(cd "$(dirname "${COLLECTOR:-.collector-bin/calibration-collector}")" && pwd)/$(basename "${COLLECTOR:-calibration-collector}")"
TRACE="${TRACE-trainer_llama1b_ga4}"
START=$SECONDS
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/log.txt"; }
cd "$ROOT/measurements/real-jobs"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys, torch, transformers, accelerate, lightning, timm; print("python", sys.version.split()[0]); [print(m.__name__, m.__version__) for m in (torch, transformers, accelerate, lightning, timm)]'
  "$COLLECTOR" --version
} > "$OUT/env.txt" 2>&1

mapfile -t JOBS < <(grep -v '^#' "$HERE/${JOBS_FILE:-jobs.txt}")
for entry in "${JOBS[@]}"; do
  IFS='|' read -r NAME LEN BATCH CMD <<< "$entry"
  log "run $NAME: $CMD"
  "$COLLECTOR" run --cmd "$CMD" --spec "$HERE/specs/$NAME.json" --seq-lens "$LEN" --batches "$BATCH" \
      --name "$NAME" --timeout-s 180 --verbose --out "$OUT/$NAME.jsonl" > "$OUT/$NAME.out" 2>&1
  log "exit $?"
  grep -i 'measured\|predicted\|error\|Traceback\|out of memory' "$OUT/$NAME.out" | tail -3 | tee -a "$OUT/log.txt"
  cat "$OUT/$NAME.jsonl" >> "$OUT/measured.jsonl" 2>/dev/null
done

SNAPS="$OUT/snaps"; mkdir -p "$SNAPS"
for NAME in $TRACE; do
  for entry in "${JOBS[@]}"; do [ "${entry%%|*}" = "$NAME" ] && break; done
  IFS='|' read -r _ LEN BATCH CMD <<< "$entry"
  ARGS="${CMD#python3 }"; ARGS="${ARGS//\{batch\}/$BATCH}"; ARGS="${ARGS//\{seq_len\}/$LEN}"; ARGS="${ARGS//\{image_size\}/$LEN}"
  log "trace $NAME: $ARGS"
  # shellcheck disable=SC2086
  timeout 150 python3 trace/trace_job.py "$SNAPS" "$NAME" $ARGS > "$OUT/$NAME.trace.out" 2>&1
  log "exit $?"
done
python3 ../h200-segments/compact_snapshots.py "$SNAPS" "$OUT/trace-segments.jsonl" >> "$OUT/log.txt" 2>&1
rm -rf "$SNAPS"
log done
cp "$OUT/log.txt" "$DEST/log.txt"
tar -czf "$DEST/real-jobs-2.tar.gz" -C "$OUT" .
