#!/usr/bin/env bash
# The fp32 jobs under in reserved memory in both formats, traced in fresh
# processes (allocation history reduced to large-pool events for
# measurements/h200-segments/align_trace.py), each also run untraced:
#
#   measurements/channels-last/trace-fp32.sh OUT_DIR     (from the repository root)
#
# OUT_DIR gets log.txt and trace-fp32.tar.gz (trace-segments-fp32.jsonl).
set -uo pipefail
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
OUT="$(mktemp -d)"
cd "$(dirname "$0")"
JOB=../real-jobs/jobs/timm_train.py
SNAPS="$OUT/snaps"; mkdir -p "$SNAPS"
trace() {  # CASE ARGS...
  local case="$1"; shift
  echo "== $case" | tee -a "$OUT/log.txt"
  python3 ../real-jobs/trace/trace_job.py "$SNAPS" "$case" "$JOB" "$@" 2>&1 | tail -1 | tee -a "$OUT/log.txt"
  python3 "$JOB" "$@" 2>&1 | grep HEADROOM_RESULT | sed "s/^/$case untraced /" | tee -a "$OUT/log.txt"
}
trace cl_resnet18_fp32_sgd_b64_r448 --model resnet18 --opt sgd --precision fp32 --batch 64 --image-size 448 --channels-last
trace resnet18_fp32_sgd_b64_r448 --model resnet18 --opt sgd --precision fp32 --batch 64 --image-size 448
trace cl_resnet50_fp32_sgd_b64_r224 --model resnet50 --opt sgd --precision fp32 --batch 64 --image-size 224 --channels-last
python3 ../h200-segments/compact_snapshots.py "$SNAPS" "$OUT/trace-segments-fp32.jsonl" | tee -a "$OUT/log.txt"
rm -rf "$SNAPS"
cp "$OUT/log.txt" "$DEST/log.txt"
tar -czf "$DEST/trace-fp32.tar.gz" -C "$OUT" trace-segments-fp32.jsonl log.txt
