#!/usr/bin/env bash
# Each load path of load_llama.py once under `headroom run --cmd` (a fresh
# process, NVML polled from outside, the whole process measured), then the
# build-then-cast job again under PyTorch's allocation history.
#
#   COLLECTOR=.collector-bin/headroom measurements/load-paths/run.sh OUT_DIR [SEQ_LEN]
#
# From the repository root, on the GPU machine. OUT_DIR gets log.txt,
# measured.jsonl, each job's collector output and
# trace-build_then_cast.jsonl.gz (every allocation of 256 KiB and more).
set -uo pipefail
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
LEN="${2:-16384}"
ROOT="$(pwd)"
HERE="$ROOT/measurements/load-paths"
COLLECTOR="$ROOT/${COLLECTOR:-.collector-bin/headroom}"
START=$SECONDS
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$DEST/log.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$DEST/env.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' >> "$DEST/env.txt" 2>&1
for load in build_then_cast build_in_dtype cpu_then_move; do
  spec=compact; [ "$load" = build_then_cast ] && spec=build_then_cast
  log "run $load"
  "$COLLECTOR" run --cmd "python3 $HERE/load_llama.py --load $load --batch {batch} --seq-len {seq_len}" \
      --spec "$HERE/spec-$spec.json" --seq-lens "$LEN" --batches 1 --name "load_$load" \
      --timeout-s 150 --verbose --out "$DEST/load_$load.jsonl" > "$DEST/load_$load.out" 2>&1
  log "exit $?"
  grep 'LOAD_DETAIL\|Traceback\|Error' "$DEST/load_$load.out" | tail -2 | tee -a "$DEST/log.txt"
  cat "$DEST/load_$load.jsonl" >> "$DEST/measured.jsonl" 2>/dev/null && rm -f "$DEST/load_$load.jsonl"
done
SNAPS="$(mktemp -d)"
log "trace build_then_cast"
timeout 150 python3 "$ROOT/measurements/real-jobs/trace/trace_job.py" "$SNAPS" build_then_cast \
    "$HERE/load_llama.py" --load build_then_cast --seq-len "$LEN" > "$DEST/trace.out" 2>&1
log "exit $?"
python3 "$ROOT/measurements/h200-segments/compact_snapshots.py" "$SNAPS" "$DEST/trace-build_then_cast.jsonl" >> "$DEST/log.txt" 2>&1
gzip -f "$DEST/trace-build_then_cast.jsonl"
rm -rf "$SNAPS"
log done
