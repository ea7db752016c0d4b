#!/usr/bin/env bash
# Process history on the H200: BERT inference after BERT training in the
# same process (bert_after_training.py), for three training shapes; ESM-2
# fp16 inference after fp32 inference and model.half(), and in a fresh
# process (esm2_half_after_fp32.py).
#   measurements/h200-history/run.sh OUT_DIR
set -euo pipefail
OUT="$1"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
for shape in "32 128" "16 512" "64 256"; do
    python3 "$HERE/bert_after_training.py" $shape >> "$OUT/bert-after-training.jsonl"
done
for mode in after fresh; do
    python3 "$HERE/esm2_half_after_fp32.py" $mode | sed "s/^{/{\"process\": \"$mode\", /" >> "$OUT/esm2-half-after-fp32.jsonl"
done
