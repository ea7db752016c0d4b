#!/usr/bin/env bash
# Measures every real job under `calibration-collector run --cmd`, one fresh
# process per job, with the spec that describes it; then, while the time
# budget lasts, runs each job again under trace_job.py (allocation history).
#
#   COLLECTOR=.collector-bin/calibration-collector BUDGET_S=420 \
#       measurements/real-jobs/run.sh OUT_DIR [JOB ...]
#
# With JOB names, only those (traced in the order given); PHASES="trace" skips
# the measurements, PHASES="measure" the traces.
#
# From the repository root. OUT_DIR gets measured.jsonl (every job's line),
# log.txt (this script's log) and real-jobs.tar.gz (per job: the collector's
# line and output, the trace summary and its output; env.txt).
set -uo pipefail
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"; shift
ROOT="$(pwd)"
COLLECTOR="$(cd "$(dirname "${COLLECTOR:-.collector-bin/calibration-collector}")" && pwd)/$(basename "${COLLECTOR:-calibration-collector}")"
BUDGET_S="${BUDGET_S:-420}"
PHASES="${PHASES:-measure trace}"
WORK="$(mktemp -d)"
START=$SECONDS
cd "$ROOT/measurements/real-jobs"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/log.txt"; }

# name | length (tokens, or the image edge) | batch | command
JOBS=(
  "trainer_llama1b|1024|4|python3 jobs/trainer_llama.py --batch {batch} --seq-len {seq_len}"
  "trainer_llama1b_gc|2048|8|python3 jobs/trainer_llama.py --batch {batch} --seq-len {seq_len} --gradient-checkpointing"
  "trainer_llama1b_lora|1024|4|python3 jobs/trainer_llama.py --batch {batch} --seq-len {seq_len} --lora"
  "lightning_gpt2|1024|8|python3 jobs/lightning_gpt2.py --batch {batch} --seq-len {seq_len}"
  "timm_resnet50|224|128|python3 jobs/timm_train.py --model resnet50 --opt sgd --batch {batch} --image-size {image_size}"
  "timm_resnet50_cl|224|128|python3 jobs/timm_train.py --model resnet50 --opt sgd --batch {batch} --image-size {image_size} --channels-last"
  "timm_vit_b16|224|32|python3 jobs/timm_train.py --model vit_base_patch16_224 --opt adamw --batch {batch} --image-size {image_size}"
  "generate_qwen05b|2048|8|python3 jobs/generate_qwen.py --batch {batch} --prompt-len {seq_len} --new-tokens 256"
  "embed_bert|512|64|python3 jobs/embed_bert.py --batch {batch} --seq-len {seq_len}"
  "compile_gpt2|1024|8|python3 jobs/compile_gpt2.py --batch {batch} --seq-len {seq_len}"
)
selected() { local n; for n in "${ONLY[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }
ONLY=("$@")
JOBS_TO_MEASURE=("${JOBS[@]}")

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys, torch, transformers, accelerate, peft, lightning, timm; print("python", sys.version.split()[0]); [print(m.__name__, m.__version__) for m in (torch, transformers, accelerate, peft, lightning, timm)]; print("cuda", torch.version.cuda)'
  "$COLLECTOR" --version
} > "$WORK/env.txt" 2>&1
cat "$WORK/env.txt" | tee -a "$OUT/log.txt"

# 1. Measurements: every job once under the collector.
[[ " $PHASES " == *" measure "* ]] || JOBS_TO_MEASURE=()
for entry in "${JOBS_TO_MEASURE[@]}"; do
  IFS='|' read -r NAME LEN BATCH CMD <<< "$entry"
  [ ${#ONLY[@]} -eq 0 ] || selected "$NAME" || continue
  LEFT=$((BUDGET_S - (SECONDS - START)))
  if [ "$LEFT" -lt 60 ]; then log "run $NAME: skipped, ${LEFT}s left"; continue; fi
  LIMIT=$((LEFT - 20 < 240 ? LEFT - 20 : 240))
  log "run $NAME: $CMD (seq-lens $LEN, batches $BATCH)"
  "$COLLECTOR" run --cmd "$CMD" --spec "specs/$NAME.json" --seq-lens "$LEN" --batches "$BATCH" \
      --name "$NAME" --timeout-s "$LIMIT" --verbose --out "$WORK/$NAME.jsonl" > "$WORK/$NAME.out" 2>&1
  log "exit $?"
  grep -v '^\s*$' "$WORK/$NAME.out" | grep -i 'measured\|predicted\|error\|Traceback\|out of memory' | tail -5 | tee -a "$OUT/log.txt"
  cat "$WORK/$NAME.jsonl" >> "$OUT/measured.jsonl" 2>/dev/null
done

# 2. Allocation histories, while the budget lasts (each job run directly, not under the collector),
# the jobs furthest from the harness's runs first.
TRACE_ORDER=(trainer_llama1b timm_resnet50_cl timm_vit_b16 trainer_llama1b_lora lightning_gpt2 compile_gpt2
             generate_qwen05b embed_bert timm_resnet50 trainer_llama1b_gc)
[ ${#ONLY[@]} -eq 0 ] || TRACE_ORDER=("${ONLY[@]}")
[[ " $PHASES " == *" trace "* ]] || TRACE_ORDER=()
mkdir -p "$WORK/traces"
for T in "${TRACE_ORDER[@]}"; do
  for entry in "${JOBS[@]}"; do [ "${entry%%|*}" = "$T" ] && break; done
  IFS='|' read -r NAME LEN BATCH CMD <<< "$entry"
  [ ${#ONLY[@]} -eq 0 ] || selected "$NAME" || continue
  LEFT=$((BUDGET_S - (SECONDS - START)))
  if [ "$LEFT" -lt 45 ]; then log "trace $NAME: skipped, ${LEFT}s left"; continue; fi
  ARGS="${CMD#python3 }"; ARGS="${ARGS//\{batch\}/$BATCH}"; ARGS="${ARGS//\{seq_len\}/$LEN}"; ARGS="${ARGS//\{image_size\}/$LEN}"
  log "trace $NAME: $ARGS"
  # shellcheck disable=SC2086
  timeout "$((LEFT - 10))" python3 trace_job.py --out "$WORK/traces/$NAME.trace.json.gz" -- $ARGS \
      > "$WORK/traces/$NAME.out" 2>&1
  log "exit $?"
  grep -h '^trace:\|^HEADROOM_RESULT' "$WORK/traces/$NAME.out" | tee -a "$OUT/log.txt"
done

log "done"
cp "$OUT/log.txt" "$WORK/log.txt"
tar -czf "$OUT/real-jobs.tar.gz" -C "$WORK" .
ls -la "$OUT" | tee -a "$OUT/log.txt"
