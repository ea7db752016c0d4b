#!/usr/bin/env bash
# Process history on the H200: BERT inference after BERT training in the
# same process (bert_after_training.py), for three training shapes.
#   measurements/h200-history/run.sh OUT_DIR
set -euo pipefail
OUT="$1"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
for shape in "32 128" "16 512" "64 256"; do
    python3 "$HERE/bert_after_training.py" $shape >> "$OUT/bert-after-training.jsonl"
done
