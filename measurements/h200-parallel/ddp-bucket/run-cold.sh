#!/usr/bin/env bash
# The one-rank DDP job of run.sh as the first GPU work of a freshly started
# machine (the two runs whose old bucket outlived its rebuild were each in
# the first batch of a day), then twice more, warm. Run it as the first
# command on a machine just started:
#   measurements/h200-parallel/ddp-bucket/run-cold.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT"
. "$(dirname "$0")/job.sh"
{ uptime; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv;
  ls -d ~/.nv/ComputeCache 2>&1; } > "$OUT/env.txt" 2>&1
for name in cold warm_a warm_b; do
    run_job measured-cold.jsonl "ddp_b2_L4096_ckpt1_$name"
done
