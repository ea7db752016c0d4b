#!/usr/bin/env bash
# Allocation traces of every allocation, the small pool's included (earlier
# traces kept those of at least 256 KiB): timm's ResNet-50 fp16
# channels_last inference loop with one and three batches
# (../real-jobs/jobs/timm_infer.py) and a fresh process's BERT fp32
# inference (the harness). The BERT training pair was traced by the
# commands in README.md.
#
#   measurements/small-pool/run.sh OUT_DIR
#
# From the repository root, on the GPU machine. OUT_DIR gets log-2.txt,
# trace-all-sizes-2.jsonl, measured-inference.jsonl and each job's output.
set -uo pipefail
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
ROOT="$(pwd)"
HERE="$ROOT/measurements/small-pool"
SNAPS="$(mktemp -d)"
START=$SECONDS
export PYTHONUNBUFFERED=1
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$DEST/log-2.txt"; }

cd "$ROOT/measurements/real-jobs"
while IFS='|' read -r NAME ARGS; do
  [ -z "$NAME" ] && continue
  log "trace $NAME: $ARGS"
  # shellcheck disable=SC2086
  timeout 150 python3 trace/trace_job.py "$SNAPS" "$NAME" $ARGS > "$DEST/$NAME.out" 2>&1
  log "exit $? $(grep HEADROOM_RESULT "$DEST/$NAME.out")"
done <<'JOBS'
infer_resnet50_cl_fp16_b256_x1|jobs/timm_infer.py --model resnet50 --dtype fp16 --batch 256 --image-size 224 --channels-last --batches 1
infer_resnet50_cl_fp16_b256_x3|jobs/timm_infer.py --model resnet50 --dtype fp16 --batch 256 --image-size 224 --channels-last --batches 3
JOBS

cd "$ROOT"
log "harness: a fresh process's BERT fp32 inference"
timeout 200 python3 calibration-collector/python/headroom_measure.py --batch "$HERE/cases-inference.jsonl" \
  --out "$DEST/measured-inference.jsonl" --nvml --snapshot --snapshot-md "$DEST/snapshots-inference.md" \
  --snapshot-dir "$SNAPS" > "$DEST/harness.out" 2>&1
log "exit $?"
python3 measurements/h200-segments/compact_snapshots.py "$SNAPS" "$DEST/trace-all-sizes-2.jsonl" 0 >> "$DEST/log-2.txt" 2>&1
rm -rf "$SNAPS"
log done
