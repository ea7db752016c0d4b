#!/usr/bin/env bash
# Whether DDP's first bucket outlives its rebuild depends on Python's
# garbage collector: the same DDP job (Llama-3.2-1B, amp bf16, b2 L4096,
# checkpointing, one rank) in fresh processes under fixed hash seeds, and
# with the collector off.
#   measurements/h200-parallel/ddp-bucket/run.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT"
. "$(dirname "$0")/job.sh"
# sitecustomize.py runs before the harness: the collector's setting.
mkdir -p "$OUT/gc-off"
echo 'import gc; gc.disable()' > "$OUT/gc-off/sitecustomize.py"
run() { run_job measured.jsonl "$@"; }
for seed in 0 1 2; do
    for repeat in a b; do
        run "ddp_b2_L4096_ckpt1_hashseed${seed}_${repeat}" PYTHONHASHSEED=$seed
    done
done
for repeat in a b; do
    run "ddp_b2_L4096_ckpt1_gc_off_${repeat}" PYTHONPATH="$OUT/gc-off"
done
