#!/usr/bin/env bash
# Polls torch's allocated bytes right after DDP's bucket rebuild (see
# probe_release.py), in fresh one-rank jobs: twice as the harness runs the
# step, twice with the step synchronized first, twice with
# TORCH_NCCL_AVOID_RECORD_STREAMS=0.
#   measurements/h200-parallel/ddp-bucket/run-probe.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OMP_NUM_THREADS=4
run() { # NAME, then arguments, then optional environment after --
    local name="$1"; shift
    local args=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    echo "[probe] $name ${args[*]} $*" | tee -a "$OUT/log.txt"
    env "$@" timeout 300 torchrun --standalone --nproc-per-node 1 "$HERE/probe_release.py" "${args[@]}" \
        > "$OUT/$name.out" 2>&1
    echo "[probe] exit $?" | tee -a "$OUT/log.txt"
    grep -h '^PROBE ' "$OUT/$name.out" | sed "s/^PROBE /{\"run\": \"$name\", \"probe\": /; s/\$/}/" >> "$OUT/probe.jsonl"
}
for r in a b; do run "as_harness_$r"; done
for r in a b; do run "sync_first_$r" --sync-first; done
for r in a b; do run "record_streams_$r" -- TORCH_NCCL_AVOID_RECORD_STREAMS=0; done
