#!/usr/bin/env bash
# How often the old bucket outlives its rebuild: the one-rank DDP job of
# run.sh, repeated in fresh torchrun processes, alternating as the harness
# runs it and with TORCH_NCCL_AVOID_RECORD_STREAMS=0 (NCCL's work objects
# then stash no tensors; the caching allocator's record_stream keeps them
# from reuse instead).
#   measurements/h200-parallel/ddp-bucket/run-repeats.sh OUT_DIR REPEATS
set -uo pipefail
OUT="$1"; REPEATS="${2:-6}"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
HARNESS="$HERE/../../../calibration-collector/python/headroom_parallel.py"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OMP_NUM_THREADS=4
CASE='{"case": "NAME", "model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 2, "seq_len": 4096, "attention": "sdpa", "training": {"optimizer": "adamw", "steps": 2, "zero_grad": "set_to_none", "precision": "amp_bf16", "grad_checkpointing": true}, "parallel": {"strategy": "ddp", "world_size": 1, "bucket_cap_mb": 25, "gradient_as_bucket_view": false}, "loss": "cross_entropy_on_all_tokens"}}'
run() { # NAME, then environment assignments
    local name="$1"; shift
    echo "[run] $name $*" | tee -a "$OUT/log.txt"
    env "$@" timeout 300 torchrun --standalone --nproc-per-node 1 "$HARNESS" \
        --case-json "${CASE/NAME/$name}" > "$OUT/$name.out" 2>&1
    echo "[run] exit $?" | tee -a "$OUT/log.txt"
    grep -h '^HEADROOM_RESULT ' "$OUT/$name.out" | sed 's/^HEADROOM_RESULT //' >> "$OUT/measured-repeats.jsonl"
    grep -h '"driver_peak"' "$OUT/$name.out" | sed 's/.*"measured": //' | tee -a "$OUT/log.txt"
}
for r in $(seq 1 "$REPEATS"); do
    run "ddp_b2_L4096_ckpt1_default_$r"
    run "ddp_b2_L4096_ckpt1_record_streams_$r" TORCH_NCCL_AVOID_RECORD_STREAMS=0
done
