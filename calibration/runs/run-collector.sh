#!/bin/bash
# The collector on a GPU as a user runs it, in stages that fit one device
# call each (every point a fresh process, measured from outside):
#   bash calibration/runs/run-collector.sh calibrate  # calibrate (probe, sweep, fit) as a user would, upload to a registry
#   bash calibration/runs/run-collector.sh public     # the public set's ESMFold and Llama 8B shapes
#   bash calibration/runs/run-collector.sh public2    # the public set's other shapes
#   bash calibration/runs/run-collector.sh tests    # the collector's GPU tests
#   bash calibration/runs/run-collector.sh emulate [REGEX]  # the points of measurements/emulated-cards/plan.jsonl
#   bash calibration/runs/run-collector.sh trace MODEL WORKLOAD LEN LIMIT NAME  # one case under PyTorch's allocation history
#   bash calibration/runs/run-collector.sh point NAME SECS MODEL WORKLOAD LEN LIMIT  # one length under an allocator limit, into emulated.jsonl
# Needs in .collector-bin/ (built on the workstation: x86-64 glibc) the
# release `headroom` and `headroom-registry`, and `gpu-tests`, the
# collector's test binary (`cargo test --release -p calibration-collector
# --test it --no-run`). Writes under $OUT.
set -u
OUT=${OUT:-/tmp/headroom-collector-out}
mkdir -p "$OUT"
B=.collector-bin/headroom
export PYTHONUNBUFFERED=1
for d in /usr/local/cuda/lib64 $(python3 - <<'PY' 2>/dev/null
import glob, os, site
for p in site.getsitepackages():
    for f in glob.glob(os.path.join(p, "nvidia", "**", "libcublas.so*"), recursive=True):
        print(os.path.dirname(f)); break
PY
); do LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; done
export LD_LIBRARY_PATH
START=$(date +%s)
stage() { echo "=== $* ($(( $(date +%s) - START )) s)" | tee -a "$OUT/log.txt"; }
{ date -u; nvidia-smi; python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'; } >> "$OUT/log.txt" 2>&1
sweep() { # name seconds model workload seq-lens batches [extra...]
  local name=$1 secs=$2 model=$3 w=$4 lens=$5 batches=$6; shift 6
  stage "$name"
  timeout -s INT -k 15 "$secs" $B run --model "$model" --workload "$w" --seq-lens "$lens" --batches "$batches" \
    --out "$OUT/${FILE:-$name}.jsonl" "$@" >> "$OUT/log.txt" 2>&1
  echo "exit $?" >> "$OUT/log.txt"
}
ESM='{"mode":"inference","dtype":"fp32","esmfold":{"stem_dtype":"fp16","chunk_size":null,"num_recycles":4}}'
LLAMA='{"mode":"inference","dtype":"bf16","attention":"sdpa","inference":{"kind":"generate","logits":"last","kv_cache":true,"new_tokens":16}}'
case "${1:-public}" in
calibrate)
  stage calibrate
  timeout -s INT -k 15 300 $B calibrate --out-dir "$OUT/calibration" >> "$OUT/log.txt" 2>&1
  echo "exit $?" >> "$OUT/log.txt"
  stage upload
  REG=$(mktemp -d)
  .collector-bin/headroom-registry --db "$REG/registry.sqlite" --listen 127.0.0.1:0 --dist "$REG/none" > "$REG/out" 2>&1 &
  for _ in $(seq 1 50); do grep -q 'listening on' "$REG/out" && break; sleep 0.1; done
  URL=$(grep -o 'http://[0-9.:]*' "$REG/out" | head -n 1)
  { $B upload "$OUT/calibration/profile.json" --to "$URL/api/v1/profiles"; echo "exit $?";
    curl -s "$URL/api/v1/profiles"; echo; } > "$OUT/upload.txt" 2>&1
  ;;
public)
  # First: where chunked ESMFold's boundary lies under the RTX 4090's
  # limit (1,356 residues, 3% under the predicted 1,398, ran out of memory).
  FILE=emulated sweep "esmfold-chunk64 rtx-4090 search" 150 esmfold-v1 \
    '{"mode":"inference","dtype":"fp32","esmfold":{"stem_dtype":"fp16","chunk_size":64,"num_recycles":4}}' \
    1200,1280,1320 1 --capacity 24566235136 --name esmfold-chunk64_rtx-4090_search
  export FILE=public
  sweep esmfold-v1 200 esmfold-v1 "$ESM" 64,128,256,384,512,640,768,1024 1
  sweep llama-3.1-8b 130 llama-3.1-8b "$LLAMA" 2048,8192,32768,65536 1
  sweep llama-3.1-8b 45 llama-3.1-8b "$LLAMA" 4096 8
  sweep llama-3.1-8b 45 llama-3.1-8b "$LLAMA" 2048 32
  ;;
public2)
  export FILE=public2
  sweep llama-3.2-1b 80 llama-3.2-1b '{"mode":"training","attention":"sdpa","training":{"optimizer":"adamw","steps":2,"precision":"amp_bf16","grad_checkpointing":false}}' 512,1024,2048 4
  sweep bert-base-uncased 40 bert-base-uncased '{"mode":"inference","dtype":"fp32","attention":"sdpa","inference":{"kind":"forward","logits":"all","kv_cache":false}}' 128,512 32
  sweep esm2-t33-650m 30 esm2-t33-650m '{"mode":"inference","dtype":"fp32","attention":"sdpa","inference":{"kind":"forward","logits":"none","kv_cache":false}}' 1024 1
  sweep esm2-t33-650m 40 esm2-t33-650m '{"mode":"inference","dtype":"fp32","attention":"sdpa","inference":{"kind":"forward","logits":"none","kv_cache":false}}' 512,1024 8
  sweep resnet-50 50 resnet-50 '{"mode":"inference","dtype":"fp32"}' 224 64,256
  ;;
tests)
  stage gpu-tests
  HEADROOM_COLLECTOR_BIN=$B timeout -s INT -k 10 150 .collector-bin/gpu-tests gpu:: --ignored --test-threads 1 \
    > "$OUT/gpu-tests.txt" 2>&1
  echo "exit $?" >> "$OUT/log.txt"
  ;;
emulate)
  CMDS=$(mktemp)
  python3 - "${2:-}" > "$CMDS" <<'PY'
import json, re, sys
for line in open("measurements/emulated-cards/plan.jsonl"):
    p = json.loads(line)
    if sys.argv[1] and not re.search(sys.argv[1], p["job"] + " " + p["card"]):
        continue
    print(p["job"], p["card"], p["model"], p["axis"], p["under"], p["over"], p["allocator_limit_bytes"])
PY
  while read -r job card model axis under over limit; do
    W=$(python3 -c "import json,sys; sys.path.insert(0,'measurements/emulated-cards'); import plan; print(json.dumps(plan.JOBS['$job'][1]))")
    if [ "$axis" = length ]; then LENS="$under,$over"; BATCHES=1; else LENS=224; BATCHES="$under,$over"; fi
    FILE=emulated sweep "emulated $job $card" "${EMULATE_SECS:-140}" "$model" "$W" "$LENS" "$BATCHES" --capacity "$limit" --name "${job}_${card}"
  done < "$CMDS"
  ;;
point)
  FILE=emulated sweep "point $2" "$3" "$4" "$5" "$6" 1 --capacity "$7" --name "$2"
  ;;
trace)
  # One case (batch 1) under an allocator limit, run by the harness inside
  # PyTorch's allocation history (every allocation, free, segment event and
  # out-of-memory event; the segments at the first out-of-memory error),
  # reduced to JSON lines: NAME.trace.jsonl.gz.
  stage "trace $6"
  CASE=$($B run --model "$2" --workload "$3" --seq-lens "$4" --batches 1 --capacity "$5" --dry-run \
    | sed -n "s/^python3 .* --case-json '\(.*\)'$/\1/p" | head -n 1)
  SNAPS=$(mktemp -d)
  timeout -s INT -k 15 "${TRACE_SECS:-150}" python3 measurements/real-jobs/trace/trace_job.py "$SNAPS" "$6" \
    calibration-collector/python/headroom_measure.py --case-json "$CASE" > "$OUT/$6.trace.out" 2>&1
  echo "exit $?" >> "$OUT/log.txt"
  python3 measurements/h200-segments/compact_snapshots.py "$SNAPS" "$OUT/$6.trace.jsonl" >> "$OUT/log.txt" 2>&1
  gzip -f "$OUT/$6.trace.jsonl"
  rm -rf "$SNAPS"
  ;;
esac
stage done
