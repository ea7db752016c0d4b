#!/usr/bin/env bash
# The one-rank DDP job of run.sh as the first GPU work of a freshly started
# machine (the two runs whose old bucket outlived its rebuild were each in
# the first batch of a day), then twice more, warm. Run it as the first
# command on a machine just started:
#   measurements/h200-parallel/ddp-bucket/run-cold.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
HARNESS="$HERE/../../../calibration-collector/python/headroom_parallel.py"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OMP_NUM_THREADS=4
CASE='{"case": "NAME", "model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 2, "seq_len": 4096, "attention": "sdpa", "training": {"optimizer": "adamw", "steps": 2, "zero_grad": "set_to_none", "precision": "amp_bf16", "grad_checkpointing": true}, "parallel": {"strategy": "ddp", "world_size": 1, "bucket_cap_mb": 25, "gradient_as_bucket_view": false}, "loss": "cross_entropy_on_all_tokens"}}'
{ uptime; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv;
  ls -d ~/.nv/ComputeCache 2>&1; } > "$OUT/env.txt" 2>&1
for name in cold warm_a warm_b; do
    echo "[run] $name" | tee -a "$OUT/log.txt"
    timeout 300 torchrun --standalone --nproc-per-node 1 "$HARNESS" \
        --case-json "${CASE/NAME/ddp_b2_L4096_ckpt1_$name}" > "$OUT/$name.out" 2>&1
    echo "[run] exit $?" | tee -a "$OUT/log.txt"
    grep -h '^HEADROOM_RESULT ' "$OUT/$name.out" | sed 's/^HEADROOM_RESULT //' >> "$OUT/measured-cold.jsonl"
    grep -h '"driver_peak"' "$OUT/$name.out" | sed 's/.*"measured": //' | tee -a "$OUT/log.txt"
done
