#!/usr/bin/env bash
# timm ResNet-50 bf16-autocast SGD training, batch 128, 224 px, NCHW, as
# jobs/timm_train.py runs it (a fresh batch of images each step) and with
# one batch made before the loop and reused (--reuse-batch), each traced in
# a fresh process on the H200 and reduced to large-pool events for
# measurements/h200-segments/align_trace.py.
#   measurements/real-jobs/trace/run.sh OUT_DIR
set -euo pipefail
OUT="$1"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$HERE/../../.."
JOB="$HERE/../jobs/timm_train.py"
SNAPS="$OUT/snaps"; mkdir -p "$SNAPS"
run() {  # CASE ARGS...
    local case="$1"; shift
    echo "== $case" | tee -a "$OUT/log.txt"
    python3 "$HERE/trace_job.py" "$SNAPS" "$case" "$JOB" "$@" 2>&1 | tee -a "$OUT/log.txt"
    # The same job untraced: its peaks without the history's bookkeeping.
    python3 "$JOB" "$@" 2>&1 | grep HEADROOM_RESULT | sed "s/^/$case untraced /" | tee -a "$OUT/log.txt"
}
run timm_resnet50_b128_r224 --model resnet50 --opt sgd --batch 128 --image-size 224
run timm_resnet50_b128_r224_reuse --model resnet50 --opt sgd --batch 128 --image-size 224 --reuse-batch
python3 "$ROOT/measurements/h200-segments/compact_snapshots.py" "$SNAPS" "$OUT/trace-segments.jsonl"
