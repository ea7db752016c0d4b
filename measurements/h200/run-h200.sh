#!/bin/bash
# Runs headroom_measure.py stages on an H200 machine, writing under $OUT.
# usage: bash measurements/h200/run-h200.sh BUDGET_SECONDS STAGE...
#   stages: probes | validation | snapshots | validation:FILE | snapshots:FILE
# Every stage writes its results incrementally; the budget bounds the whole run.
set -u
BUDGET=$1; shift
H=calibration-collector/python/headroom_measure.py
M=measurements/h200
OUT=${OUT:-/tmp/headroom-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }

{
  date -u; nvidia-smi; echo
  python3 -c 'import sys, torch, transformers, torchvision, peft, pynvml
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("transformers", transformers.__version__, "torchvision", torchvision.__version__, "peft", peft.__version__)
pynvml.nvmlInit(); print("driver", pynvml.nvmlSystemGetDriverVersion())'
  env | grep -E '^(CUDA_|PYTORCH_|CUBLAS)' || true
} >> "$OUT/env.txt" 2>&1

for stage in "$@"; do
  file=${stage#*:}
  echo "=== stage $stage, $(left)s left" | tee -a "$OUT/log.txt"
  case $stage in
    probes)
      timeout $(( $(left) - 5 )) python3 $H --probe-overheads --out "$OUT/overheads.json" 2>&1 | tee -a "$OUT/log.txt" ;;
    validation*)
      [ "$file" = "$stage" ] && file=$M/validation-cases.jsonl
      python3 $H --batch "$file" --out "$OUT/validation.jsonl" --nvml \
        --deadline-s $(( $(left) - ${RESERVE_S:-0} )) --group-timeout-s 300 2>&1 | tee -a "$OUT/log.txt" ;;
    snapshots*)
      [ "$file" = "$stage" ] && file=$M/snapshot-cases.jsonl
      python3 $H --batch "$file" --out "$OUT/snapshot-measured.jsonl" --nvml --snapshot \
        --snapshot-md "$OUT/snapshots.md" --snapshot-dir /tmp/headroom-snapshots \
        --deadline-s $(( $(left) - 10 )) --group-timeout-s 200 2>&1 | tee -a "$OUT/log.txt" ;;
  esac
done
echo "=== done, $(left)s left" | tee -a "$OUT/log.txt"
