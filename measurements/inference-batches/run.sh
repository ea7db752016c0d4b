#!/usr/bin/env bash
# Inference jobs that run several batches in one process: allocation traces
# (PyTorch's allocation history, reduced by ../h200-segments/compact_snapshots.py)
# of timm's inference loop (../real-jobs/jobs/timm_infer.py) with one and
# three batches, of the harness cases whose process ran another case first,
# and of one ResNet-152 fp16 training job whose reserved peak the replay
# over-estimates.
#
#   measurements/inference-batches/run.sh OUT_DIR
#
# From the repository root, on the GPU machine. OUT_DIR gets log.txt and
# traces.tar.gz (trace-segments.jsonl, harness-measured.jsonl,
# harness-snapshots.md, each job's output).
set -uo pipefail
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
OUT="$(mktemp -d)"
ROOT="$(pwd)"
HERE="$ROOT/measurements/inference-batches"
SNAPS="$OUT/snaps"; mkdir -p "$SNAPS"
START=$SECONDS
export PYTHONUNBUFFERED=1
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/log.txt"; }
python3 -c 'import sys, torch, timm; print("python", sys.version.split()[0], "torch", torch.__version__, "timm", timm.__version__)' > "$OUT/env.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$OUT/env.txt"

cd "$ROOT/measurements/real-jobs"
# name | arguments of jobs/timm_infer.py or jobs/timm_train.py
while IFS='|' read -r NAME ARGS; do
  [ -z "$NAME" ] && continue
  log "trace $NAME: $ARGS"
  # shellcheck disable=SC2086
  timeout 150 python3 trace/trace_job.py "$SNAPS" "$NAME" $ARGS > "$OUT/$NAME.out" 2>&1
  log "exit $? $(grep HEADROOM_RESULT "$OUT/$NAME.out")"
done <<'JOBS'
infer_resnet50_fp16_b256_x1|jobs/timm_infer.py --model resnet50 --dtype fp16 --batch 256 --image-size 224 --batches 1
infer_resnet50_fp16_b256_x3|jobs/timm_infer.py --model resnet50 --dtype fp16 --batch 256 --image-size 224 --batches 3
infer_resnet50_cl_fp16_b256_x1|jobs/timm_infer.py --model resnet50 --dtype fp16 --batch 256 --image-size 224 --channels-last --batches 1
infer_resnet50_cl_fp16_b256_x3|jobs/timm_infer.py --model resnet50 --dtype fp16 --batch 256 --image-size 224 --channels-last --batches 3
infer_resnet101_cl_fp32_b128_r288_x3|jobs/timm_infer.py --model resnet101 --dtype fp32 --batch 128 --image-size 288 --channels-last --batches 3
infer_resnet18_cl_bf16_b512_x3|jobs/timm_infer.py --model resnet18 --dtype bf16 --batch 512 --image-size 224 --channels-last --batches 3
train_resnet152_fp16_b64|jobs/timm_train.py --model resnet152 --opt sgd --precision amp_fp16 --batch 64 --image-size 224
JOBS

cd "$ROOT"
log "harness cases with --snapshot"
timeout 200 python3 calibration-collector/python/headroom_measure.py --batch "$HERE/harness-cases.jsonl" \
  --out "$OUT/harness-measured.jsonl" --snapshot --snapshot-md "$OUT/harness-snapshots.md" \
  --snapshot-dir "$SNAPS" > "$OUT/harness.out" 2>&1
log "exit $?"
python3 measurements/h200-segments/compact_snapshots.py "$SNAPS" "$OUT/trace-segments.jsonl" >> "$OUT/log.txt" 2>&1
rm -rf "$SNAPS"
log done
cp "$OUT/log.txt" "$DEST/log.txt"
tar -czf "$DEST/traces.tar.gz" -C "$OUT" .
