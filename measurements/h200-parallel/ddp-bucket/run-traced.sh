#!/usr/bin/env bash
# Which thread frees DDP's old bucket, and when: the one-rank DDP job of
# run.sh, repeated in fresh torchrun processes with the allocator's
# history recorded (every frame, C++ included, of blocks of 1 GiB or
# more). The runs that kept the old bucket were among the first five of a
# freshly started machine: run this first on one.
#   measurements/h200-parallel/ddp-bucket/run-traced.sh OUT_DIR [REPEATS]
# Writes OUT_DIR/measured-traced.jsonl, OUT_DIR/traces/*.trace.json.gz,
# OUT_DIR/log.txt and OUT_DIR/bucket-frees.txt (bucket_frees.py's summary).
set -uo pipefail
OUT="$1"; REPEATS="${2:-6}"; mkdir -p "$OUT/traces"
. "$(dirname "$0")/job.sh"
uptime | tee "$OUT/uptime.txt"
export HARNESS_ARGS="--snapshot-dir $OUT/traces"
for r in $(seq 1 "$REPEATS"); do
    run_job measured-traced.jsonl "ddp_b2_L4096_ckpt1_traced_$r"
done
python3 "$(dirname "$0")/bucket_frees.py" "$OUT"/traces/*.trace.json.gz | tee "$OUT/bucket-frees.txt"
