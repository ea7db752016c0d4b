#!/bin/bash
# Batch 34 on the H200: fifteen cases in seven builds, each build one
# process running its cases in file order (jobs after jobs). Writes under $OUT.
set -u
cd "$(dirname "$0")/../.."
RESERVE_S=5 bash measurements/h200/run-h200.sh 420 validation:measurements/h200-generalization/generalization-cases-34.jsonl
cp "$OUT/validation.jsonl" "$OUT/measured-34.jsonl"; cp "$OUT/log.txt" "$OUT/log-34.txt"; cp "$OUT/env.txt" "$OUT/env-34.txt"
