#!/bin/bash
# The first collector run on an H200 machine (probe, run, fit, GPU tests), in one call:
#   bash calibration/runs/run-h200.sh
# Needs the release collector and its GPU-test binary in .collector-bin/
# (built on the workstation: x86-64 glibc). Writes everything under $OUT.
set -u
OUT=${OUT:-/tmp/headroom-collector-out}
mkdir -p "$OUT"
B=.collector-bin/calibration-collector
export PYTHONUNBUFFERED=1
# cuBLAS for `probe` (cudarc loads it by name): the CUDA toolkit's or torch's.
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

stage probe
$B probe --json > "$OUT/probe.json" 2>> "$OUT/log.txt"; echo "exit $?" >> "$OUT/log.txt"
$B probe --list >> "$OUT/log.txt" 2>&1

stage esmfold
timeout -s INT -k 15 ${ESM_S:-150} $B run --model esmfold-v1 \
  --workload '{"dtype":"fp32","esmfold":{"stem_dtype":"fp16","chunk_size":null,"num_recycles":4}}' \
  --seq-lens 64,256,512,1024 --out "$OUT/esmfold-v1.jsonl" >> "$OUT/log.txt" 2>&1
echo "exit $?" >> "$OUT/log.txt"

stage llama
W='{"dtype":"bf16","attention":"sdpa","inference":{"kind":"generate","logits":"last","kv_cache":true,"new_tokens":16}}'
timeout -s INT -k 15 ${LLAMA_S:-80} $B run --model llama-3.1-8b --workload "$W" --seq-lens 2048,8192 \
  --out "$OUT/llama-3.1-8b.jsonl" >> "$OUT/log.txt" 2>&1
echo "exit $?" >> "$OUT/log.txt"
timeout -s INT -k 15 ${LLAMA8_S:-45} $B run --model llama-3.1-8b --workload "$W" --seq-lens 4096 --batches 8 \
  --out "$OUT/llama-3.1-8b.jsonl" >> "$OUT/log.txt" 2>&1
echo "exit $?" >> "$OUT/log.txt"

stage fit
$B fit "$OUT/esmfold-v1.jsonl" "$OUT/llama-3.1-8b.jsonl" --probe "$OUT/probe.json" \
  --out "$OUT/profile.json" --force > "$OUT/fit.txt" 2>&1
echo "exit $?" >> "$OUT/log.txt"

stage gpu-tests
HEADROOM_COLLECTOR_BIN=$B timeout -s INT -k 10 ${TESTS_S:-50} .collector-bin/gpu-tests --ignored --test-threads 1 \
  > "$OUT/gpu-tests.txt" 2>&1
echo "exit $?" >> "$OUT/log.txt"
stage done
