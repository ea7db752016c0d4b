#!/usr/bin/env bash
# BERT-base fp32 inference b16 L512 (masked-LM logits), eager and SDPA
# attention, each traced in a fresh process on the H200, and the traces
# reduced to large-pool events for measurements/h200-segments/align_trace.py.
#   measurements/h200-bert-eager/run.sh OUT_DIR
set -euo pipefail
OUT="$1"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$HERE/../.."
for kind in eager sdpa; do
    SNAPS="$OUT/snaps-$kind"; mkdir -p "$SNAPS"
    python3 "$ROOT/calibration-collector/python/headroom_measure.py" --batch "$HERE/$kind.jsonl" \
        --out "$OUT/measured-$kind.jsonl" --nvml --snapshot --snapshot-md "$OUT/snapshots-$kind.md" \
        --snapshot-dir "$SNAPS"
    python3 "$ROOT/measurements/h200-segments/compact_snapshots.py" "$SNAPS" "$OUT/trace-segments-$kind.jsonl"
done
