#!/bin/bash
# The collector's poller through NVML against the one through a CUDA context
# of its own, on one GPU. From the repository root:
#
#   bash measurements/h200-nvml/run.sh OUTDIR
#
# Needs .collector-bin/calibration-collector (this commit's collector,
# release build), .collector-bin/calibration-collector-cudarc (the collector
# before it, which polled cuMemGetInfo through a context of its own),
# .collector-bin/gpu-tests (the release build of calibration-collector's
# tests/gpu.rs), and python3 with torch, transformers and pynvml.
set -u
D=measurements/h200-nvml
O=${1:?give an output folder}
NEW=.collector-bin/calibration-collector
OLD=.collector-bin/calibration-collector-cudarc
mkdir -p "$O"
log() { echo "== $(date +%T) $*"; }
state() { python3 $D/nvml_state.py "$1" >> "$O/nvml-state.jsonl"; }

log environment
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
echo "cargo: $(command -v cargo || echo none)"
state idle

log "0. what a process holds once it has called cuInit (no context) or nvmlInit"
python3 -c "import ctypes, time; assert ctypes.CDLL('libcuda.so.1').cuInit(0) == 0; time.sleep(2)" &
sleep 1; state "a process after cuInit only"; wait
python3 -c "import pynvml, time; pynvml.nvmlInit(); time.sleep(2)" &
sleep 1; state "a process after nvmlInit only"; wait
$NEW probe --list --json > "$O/probe-list.json"; echo "probe --list exit $?"

log "1. the fill job alone, twice"
for i in 1 2; do python3 $D/fill.py | tee -a "$O/fill-alone.txt"; done
state "after alone"

# The fill job under a collector; NVML's compute processes are listed from
# another process all the while (the collector's PID is in the label).
under() {
    local name=$1 bin=$2
    log "fill under the $name collector"
    $bin run --cmd "python3 $D/fill.py --hold-s 3 --pid-file $O/fill-$name.pid --tag {seq_len}" \
        --seq-lens 1 --out "$O/fill-$name.jsonl" --json > "$O/fill-$name.out" 2>&1 &
    local pid=$!
    while kill -0 $pid 2>/dev/null; do state "$name collector_pid=$pid"; sleep 0.2; done
    wait $pid
    echo "collector pid $pid exit $? job pid $(cat "$O/fill-$name.pid")" | tee -a "$O/fill-pids.txt"
    cat "$O/fill-$name.jsonl"
}
under cudarc $OLD
under nvml $NEW
state "after fill"

log "2. probe (its child's context and cuBLAS, read through NVML)"
timeout 120 $NEW probe --json --device 0 > "$O/probe.json" 2> "$O/probe.err"; echo "probe exit $?"

log "3. the longest length that gpus --margin 0 fits, alone and under both collectors"
W='{"mode":"training","dtype":"bf16","training":{"precision":"bf16","optimizer":"adamw"}}'
echo '{"model":"llama-3.2-1b","workload":{"mode":"training","dtype":"bf16","batch":1,"seq_len":4096,"training":{"precision":"bf16","optimizer":"adamw"}}}' > "$O/spec.json"
$NEW gpus --margin 0 "$O/spec.json" > "$O/gpus.txt"
read -r L B < <(python3 -c "
import sys
row = next(l for l in open('$O/gpus.txt') if l.startswith('NVIDIA H200 '))
w = row[len('NVIDIA H200 141GB'):].split()
print(w[4], w[5])")
echo "longest length at batch 1: $L; largest batch at 4096: $B (the GPU tests run both)"
for pt in "1 $L"; do
    set -- $pt
    tag=b$1_L$2
    args=(run --model llama-3.2-1b --workload "$W" --seq-lens "$2" --batches "$1" --python python3)
    case_json=$($NEW "${args[@]}" --dry-run | sed -n 2p | python3 -c "import shlex, sys; print(shlex.split(sys.stdin.read())[3])")
    log "$tag alone (the harness measures its own NVML peak: --nvml)"
    timeout 200 python3 calibration-collector/python/headroom_measure.py --case-json "$case_json" --nvml > "$O/$tag-alone.out" 2>&1
    echo "alone exit $?"; grep HEADROOM_RESULT "$O/$tag-alone.out"
    for c in nvml cudarc; do
        bin=$NEW; [ $c = cudarc ] && bin=$OLD
        log "$tag under the $c collector"
        timeout 200 $bin "${args[@]}" --out "$O/$tag-$c.jsonl" 2>&1 | tail -3
        cat "$O/$tag-$c.jsonl"
    done
done

left=$((${BUDGET_S:-570} - SECONDS))
log "4. the GPU tests (${left} s left)"
HEADROOM_COLLECTOR_BIN=$NEW timeout $left .collector-bin/gpu-tests --ignored --test-threads=1 2>&1 | tee "$O/gpu-tests.txt"
state end
log done
