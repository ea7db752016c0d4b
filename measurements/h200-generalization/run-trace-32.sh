#!/bin/bash
# Trace 32 on the H200: two ViT-B/16 training jobs, each its own build (a
# fresh process), with the allocator's history recorded. Writes under $OUT.
set -u
cd "$(dirname "$0")"
timeout 300 python3 ../../calibration-collector/python/headroom_measure.py --batch trace-cases-32.jsonl \
  --out "$OUT/trace-measured-32.jsonl" --nvml --snapshot --snapshot-md /tmp/x.md --snapshot-dir /tmp/snaps32 \
  > "$OUT/trace-log-32.txt" 2>&1
python3 ../h200-segments/compact_snapshots.py /tmp/snaps32 "$OUT/trace-segments-32.jsonl" && gzip -9 "$OUT/trace-segments-32.jsonl"
