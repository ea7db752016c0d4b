#!/bin/bash
# Batch 31 on the H200: the nine cases measured (each its own build, so a
# fresh process), then three of them traced. Writes under $OUT.
set -u
cd "$(dirname "$0")/../.."
RESERVE_S=5 bash measurements/h200/run-h200.sh 330 validation:measurements/h200-generalization/generalization-cases-31.jsonl
cp "$OUT/validation.jsonl" "$OUT/measured-31.jsonl"; cp "$OUT/log.txt" "$OUT/log-31.txt"; cp "$OUT/env.txt" "$OUT/env-31.txt"
cd measurements/h200-generalization
timeout 200 python3 ../../calibration-collector/python/headroom_measure.py --batch trace-cases-31.jsonl \
  --out "$OUT/trace-measured-31.jsonl" --nvml --snapshot --snapshot-md /tmp/x.md --snapshot-dir /tmp/snaps31 \
  > "$OUT/trace-log-31.txt" 2>&1
python3 ../h200-segments/compact_snapshots.py /tmp/snaps31 "$OUT/trace-segments-31.jsonl" && gzip -9 "$OUT/trace-segments-31.jsonl"
