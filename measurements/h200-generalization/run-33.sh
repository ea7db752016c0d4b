#!/bin/bash
# Batch 33 on the H200: the thirteen cases measured, each its own build, so
# a fresh process. Writes under $OUT.
set -u
cd "$(dirname "$0")/../.."
RESERVE_S=5 bash measurements/h200/run-h200.sh 420 validation:measurements/h200-generalization/generalization-cases-33.jsonl
cp "$OUT/validation.jsonl" "$OUT/measured-33.jsonl"; cp "$OUT/log.txt" "$OUT/log-33.txt"; cp "$OUT/env.txt" "$OUT/env-33.txt"
