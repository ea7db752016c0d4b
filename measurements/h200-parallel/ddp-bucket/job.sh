# Sourced by run.sh, run-cold.sh and run-repeats.sh: the one-rank DDP job
# they all run (Llama-3.2-1B, amp bf16, b2 L4096, checkpointing) and
# `run_job RESULTS NAME [VAR=VALUE ...]`, which runs it once in a fresh
# torchrun under those environment assignments, logs to "$OUT/log.txt",
# keeps its output in "$OUT/NAME.out" and appends its result line to
# "$OUT/RESULTS". Needs OUT set; HARNESS_ARGS, when set, is added to the
# harness's command line (run-traced.sh: --snapshot-dir).
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HARNESS="$HERE/../../../calibration-collector/python/headroom_parallel.py"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OMP_NUM_THREADS=4
CASE='{"case": "NAME", "model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 2, "seq_len": 4096, "attention": "sdpa", "training": {"optimizer": "adamw", "steps": 2, "zero_grad": "set_to_none", "precision": "amp_bf16", "grad_checkpointing": true}, "parallel": {"strategy": "ddp", "world_size": 1, "bucket_cap_mb": 25, "gradient_as_bucket_view": false}, "loss": "cross_entropy_on_all_tokens"}}'
run_job() {
    local results="$1" name="$2"; shift 2
    echo "[run] $name $*" | tee -a "$OUT/log.txt"
    env "$@" timeout 300 torchrun --standalone --nproc-per-node 1 "$HARNESS" \
        --case-json "${CASE/NAME/$name}" ${HARNESS_ARGS:-} > "$OUT/$name.out" 2>&1
    echo "[run] exit $?" | tee -a "$OUT/log.txt"
    grep -h '^HEADROOM_RESULT ' "$OUT/$name.out" | sed 's/^HEADROOM_RESULT //' >> "$OUT/$results"
    grep -h '"driver_peak"' "$OUT/$name.out" | sed 's/.*"measured": //' | tee -a "$OUT/log.txt"
}
