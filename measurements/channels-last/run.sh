#!/usr/bin/env bash
# channels_last training of torchvision/timm ResNets on one GPU:
#   1. every job below once under `calibration-collector run --cmd`, a fresh
#      process each, with the spec that describes it (specs/NAME.json);
#   2. two of them traced (allocation history, reduced to large-pool events
#      for measurements/h200-segments/align_trace.py);
#   3. per-convolution cuDNN workspaces in channels_last
#      (measurements/h200-cudnn/conv_workspaces.py, CHANNELS_LAST=1).
#
#   COLLECTOR=.collector-bin/calibration-collector measurements/channels-last/run.sh OUT_DIR [JOBS_FILE]
#
# JOBS_FILE (lines `name|image edge|batch|command`, relative to this
# folder) replaces the jobs below; PHASES (default "measure trace
# workspaces") picks the steps.
#
# From the repository root. OUT_DIR gets log.txt and channels-last.tar.gz:
# measured.jsonl, trace-segments.jsonl, conv_workspaces_*_cl.jsonl and each
# job's collector output.
set -uo pipefail
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
OUT="$(mktemp -d)"
ROOT="$(pwd)"
COLLECTOR="$(cd "$(dirname "${COLLECTOR:-.collector-bin/calibration-collector}")" && pwd)/$(basename "${COLLECTOR:-calibration-collector}")"
START=$SECONDS
export PYTHONUNBUFFERED=1
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/log.txt"; }
cd "$ROOT/measurements/channels-last"
PHASES="${PHASES:-measure trace workspaces}"

# name | image edge | batch | command
JOBS=(
  "cl_resnet18_amp_sgd_b256_r224|224|256|python3 ../real-jobs/jobs/timm_train.py --model resnet18 --opt sgd --precision amp_bf16 --batch {batch} --image-size {image_size} --channels-last"
  "cl_resnet18_amp_sgd_b128_r224|224|128|python3 ../real-jobs/jobs/timm_train.py --model resnet18 --opt sgd --precision amp_bf16 --batch {batch} --image-size {image_size} --channels-last"
  "cl_resnet18_fp32_sgd_b64_r448|448|64|python3 ../real-jobs/jobs/timm_train.py --model resnet18 --opt sgd --precision fp32 --batch {batch} --image-size {image_size} --channels-last"
  "cl_resnet50_amp_adamw_b64_r224|224|64|python3 ../real-jobs/jobs/timm_train.py --model resnet50 --opt adamw --precision amp_bf16 --batch {batch} --image-size {image_size} --channels-last"
  "cl_resnet50_amp_adamw_b32_r384|384|32|python3 ../real-jobs/jobs/timm_train.py --model resnet50 --opt adamw --precision amp_bf16 --batch {batch} --image-size {image_size} --channels-last"
  "cl_resnet50_fp32_sgd_b64_r224|224|64|python3 ../real-jobs/jobs/timm_train.py --model resnet50 --opt sgd --precision fp32 --batch {batch} --image-size {image_size} --channels-last"
  "cl_resnet101_amp_adamw_b64_r224|224|64|python3 ../real-jobs/jobs/timm_train.py --model resnet101 --opt adamw --precision amp_bf16 --batch {batch} --image-size {image_size} --channels-last"
)
if [ -n "${2:-}" ]; then mapfile -t JOBS < <(grep -v '^#' "$2"); fi
[[ " $PHASES " == *" measure "* ]] || JOBS=()
for entry in "${JOBS[@]}"; do
  IFS='|' read -r NAME LEN BATCH CMD <<< "$entry"
  log "run $NAME: $CMD"
  "$COLLECTOR" run --cmd "$CMD" --spec "specs/$NAME.json" --seq-lens "$LEN" --batches "$BATCH" \
      --name "$NAME" --timeout-s 120 --verbose --out "$OUT/$NAME.jsonl" > "$OUT/$NAME.out" 2>&1
  log "exit $?"
  grep -i 'measured\|predicted\|error\|Traceback\|out of memory' "$OUT/$NAME.out" | tail -3 | tee -a "$OUT/log.txt"
  cat "$OUT/$NAME.jsonl" >> "$OUT/measured.jsonl" 2>/dev/null
done

if [[ " $PHASES " == *" trace "* ]]; then
SNAPS="$OUT/snaps"; mkdir -p "$SNAPS"
JOB=../real-jobs/jobs/timm_train.py
trace() {  # CASE ARGS...
  local case="$1"; shift
  log "trace $case"
  python3 ../real-jobs/trace/trace_job.py "$SNAPS" "$case" "$JOB" "$@" 2>&1 | tee -a "$OUT/log.txt"
}
trace cl_resnet50_amp_sgd_b128_r224 --model resnet50 --opt sgd --batch 128 --image-size 224 --channels-last
trace cl_resnet18_amp_sgd_b256_r224 --model resnet18 --opt sgd --batch 256 --image-size 224 --channels-last
python3 ../h200-segments/compact_snapshots.py "$SNAPS" "$OUT/trace-segments.jsonl"
rm -rf "$SNAPS"
fi

cd ../h200-cudnn
[[ " $PHASES " == *" workspaces "* ]] && for model in resnet50 resnet18; do
  log "workspaces $model"
  CHANNELS_LAST=1 python3 conv_workspaces.py "$OUT/conv_workspaces_${model}_sweep_cl.jsonl" "$model" sweep > /dev/null 2>&1
  log "exit $?"
done
log done
cp "$OUT/log.txt" "$DEST/log.txt"
tar -czf "$DEST/channels-last.tar.gz" -C "$OUT" .
