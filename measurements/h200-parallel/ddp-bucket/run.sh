#!/usr/bin/env bash
# Whether DDP's first bucket outlives its rebuild depends on Python's
# garbage collector: the same DDP job (Llama-3.2-1B, amp bf16, b2 L4096,
# checkpointing, one rank) in fresh processes under fixed hash seeds, and
# with the collector off.
#   measurements/h200-parallel/ddp-bucket/run.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
HARNESS="$HERE/../../../calibration-collector/python/headroom_parallel.py"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OMP_NUM_THREADS=4
CASE='{"case": "NAME", "model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 2, "seq_len": 4096, "attention": "sdpa", "training": {"optimizer": "adamw", "steps": 2, "zero_grad": "set_to_none", "precision": "amp_bf16", "grad_checkpointing": true}, "parallel": {"strategy": "ddp", "world_size": 1, "bucket_cap_mb": 25, "gradient_as_bucket_view": false}, "loss": "cross_entropy_on_all_tokens"}}'
# sitecustomize.py runs before the harness: the collector's setting.
mkdir -p "$OUT/gc-off"
echo 'import gc; gc.disable()' > "$OUT/gc-off/sitecustomize.py"
run() { # NAME, then environment assignments
    local name="$1"; shift
    echo "[run] $name $*" | tee -a "$OUT/log.txt"
    env "$@" timeout 300 torchrun --standalone --nproc-per-node 1 "$HARNESS" \
        --case-json "${CASE/NAME/$name}" > "$OUT/$name.out" 2>&1
    echo "[run] exit $?" | tee -a "$OUT/log.txt"
    grep -h '^HEADROOM_RESULT ' "$OUT/$name.out" | sed 's/^HEADROOM_RESULT //' >> "$OUT/measured.jsonl"
    grep -h '"driver_peak"' "$OUT/$name.out" | sed 's/.*"measured": //' | tee -a "$OUT/log.txt"
}
for seed in 0 1 2; do
    for repeat in a b; do
        run "ddp_b2_L4096_ckpt1_hashseed${seed}_${repeat}" PYTHONHASHSEED=$seed
    done
done
for repeat in a b; do
    run "ddp_b2_L4096_ckpt1_gc_off_${repeat}" PYTHONPATH="$OUT/gc-off"
done
