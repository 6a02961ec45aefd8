#!/usr/bin/env bash
# scripts/gpu_reference.sh TRAIN FILE [ARGS...] — the CPU reference of gpu_check.sh's training
# rows (docs/gpu_check.md): runs TRAIN (./train) on the CPU backend in fp32 once per placement of
# the check (Pre-LN; Peri-LN with Δt = 0.1) with ARGS (default: the d12 configuration below) and
# writes each step's loss and gradient norm to FILE. The runs are deterministic (a fixed seed,
# and every sum of the CPU backend in a fixed order whatever the number of threads), so FILE is
# computed once, here, and committed: `make gpu-reference` writes test/fixtures/gpu_reference.txt,
# and the GPU machine spends no time on CPU training.
#
# FILE's format: '#' lines first, naming the arguments every run shares ("# args: ...") and the
# flags of each run ("# run NAME: ..."); then one line per step: NAME STEP LOSS GRAD_NORM.
# FILE is written only when every run finished (exit status 1 otherwise; 2 for bad arguments).
# GPU_REFERENCE_THREADS sets -threads, which changes no number.
set -u
DEFAULT_ARGS="-init d12 -T 128 -B 4 -total_batch 512 -steps 10 -warmup 2 -seed 7 -eval_every 0 -save_every 0 -stats_every 0"
train=${1:-}
file=${2:-}
[ -x "$train" ] && [ -n "$file" ] || { echo "usage: scripts/gpu_reference.sh TRAIN FILE [ARGS...] (TRAIN: ./train)" >&2; exit 2; }
shift 2
args=${*:-$DEFAULT_ARGS}
runs=("pre:-ln pre" "peri:-ln peri -dt 0.1")

work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
{
  echo "# gpu_check.sh's CPU reference: $(basename "$train") -device cpu, fp32 (scripts/gpu_reference.sh)"
  echo "# args: $args"
  for run in "${runs[@]}"; do echo "# run ${run%%:*}: ${run#*:}"; done
  echo "# run step loss grad_norm"
} >"$work/reference"
for run in "${runs[@]}"; do
  name=${run%%:*}
  start=$SECONDS
  # shellcheck disable=SC2086
  if ! "$train" -device cpu ${GPU_REFERENCE_THREADS:+-threads $GPU_REFERENCE_THREADS} $args ${run#*:} -out "$work/$name" >"$work/$name.log" 2>&1; then
    echo "gpu_reference.sh: run $name failed:" >&2
    tail -5 "$work/$name.log" >&2
    exit 1
  fi
  # The step records of log.jsonl (not the evaluations or events): step, loss, grad_norm.
  grep '"loss"' "$work/$name/log.jsonl" | grep -v -e val_loss -e event |
    sed 's/.*"step": \([^,}]*\).*"loss": \([^,}]*\).*"grad_norm": \([^,}]*\).*/\1 \2 \3/' |
    awk -v name="$name" '{print name, $0}' >>"$work/reference"
  echo "gpu_reference.sh: $name, $((SECONDS - start)) s" >&2
done
mkdir -p "$(dirname "$file")" && cp "$work/reference" "$file.tmp" && mv "$file.tmp" "$file"
