#!/usr/bin/env bash
# How often the old bucket outlives its rebuild: the one-rank DDP job of
# run.sh, repeated in fresh torchrun processes, alternating as the harness
# runs it and with TORCH_NCCL_AVOID_RECORD_STREAMS=0 (NCCL's work objects
# then stash no tensors; the caching allocator's record_stream keeps them
# from reuse instead).
#   measurements/h200-parallel/ddp-bucket/run-repeats.sh OUT_DIR REPEATS
set -uo pipefail
OUT="$1"; REPEATS="${2:-6}"; mkdir -p "$OUT"
. "$(dirname "$0")/job.sh"
run() { run_job measured-repeats.jsonl "$@"; }
for r in $(seq 1 "$REPEATS"); do
    run "ddp_b2_L4096_ckpt1_default_$r"
    run "ddp_b2_L4096_ckpt1_record_streams_$r" TORCH_NCCL_AVOID_RECORD_STREAMS=0
done
