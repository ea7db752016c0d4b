#!/usr/bin/env bash
# Runs every case of a cases file, each in a fresh torchrun job of
# `workload.parallel.world_size` ranks, and appends each rank's result line.
#   measurements/h200-parallel/run.sh CASES.jsonl OUT_DIR
set -uo pipefail
CASES="$1"; OUT="$2"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
HARNESS="$HERE/../../calibration-collector/python/headroom_parallel.py"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/env.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "transformers", transformers.__version__)' >> "$OUT/env.txt"
while IFS= read -r line; do
    [ -z "$line" ] && continue
    NAME="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["case"])' "$line")"
    WORLD="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["workload"]["parallel"]["world_size"])' "$line")"
    SNAP="$(python3 -c 'import json,sys; print(int(json.loads(sys.argv[1]).get("snapshot", False)))' "$line")"
    CASE="$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); c.pop("snapshot", None); print(json.dumps(c))' "$line")"
    EXTRA=(); [ "$SNAP" = 1 ] && EXTRA=(--snapshot-dir "$OUT/traces")
    echo "[run] $NAME on $WORLD GPU(s)" | tee -a "$OUT/log.txt"
    timeout 300 torchrun --standalone --nproc-per-node "$WORLD" "$HARNESS" --case-json "$CASE" "${EXTRA[@]}" \
        > "$OUT/$NAME.out" 2>&1
    echo "[run] exit $?" | tee -a "$OUT/log.txt"
    grep -h '^HEADROOM_RESULT ' "$OUT/$NAME.out" | sed 's/^HEADROOM_RESULT //' >> "$OUT/measured.jsonl"
    grep -h '"driver_peak"' "$OUT/$NAME.out" | sed 's/.*"measured": //' | tee -a "$OUT/log.txt"
done < "$CASES"
