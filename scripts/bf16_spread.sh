#!/usr/bin/env bash
# scripts/bf16_spread.sh [SEEDS] — how far bf16 training is from fp32, step by step: the spread
# that scripts/gpu_check.sh's bf16 tolerances are derived from (docs/gpu_check.md). For each seed
# (default 1-4) and each placement of the check (Pre-LN; Peri-LN with Δt = 0.1) it trains a
# small model for 10 steps twice with the same arguments: ./train on the CPU in fp32, and the
# CUDA backend in bf16 through the emulation layer (EMU_TRAIN, default build/emu/train: make
# build/emu/train; docs/simt.md), every product fused (-fused all, not a timing). It prints, for every step, the relative differences
# |bf16 − fp32| / |fp32| of the loss and of the gradient norm over the runs: median and largest.
# Runs on the CPU, about a minute a run on the loaded 2-core development machine.
set -u
cd "$(dirname "$0")/.." || exit 1
seeds=${1:-1-4}
[[ $seeds =~ ^[0-9]+-[0-9]+$ ]] || { echo "usage: scripts/bf16_spread.sh [FIRST-LAST seeds]" >&2; exit 2; }
EMU_TRAIN=${EMU_TRAIN:-build/emu/train}
for program in ./train "$EMU_TRAIN"; do
  [ -x "$program" ] || { echo "bf16_spread.sh: no $program (make train build/emu/train)" >&2; exit 2; }
done
ARGS="-init l2h4c64v4096 -train_data data/mobydick_v4096_train_000000.bin -val_data data/mobydick_v4096_val_000000.bin
      -T 64 -B 4 -total_batch 256 -steps 10 -warmup 2 -eval_every 0 -save_every 0 -stats_every 0"
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT

# records_of DIR: "step loss grad_norm" of DIR/log.jsonl's step records, one a line.
records_of() {
  grep '"loss"' "$1/log.jsonl" | grep -v -e val_loss -e event |
    sed 's/.*"step": \([^,}]*\).*"loss": \([^,}]*\).*"grad_norm": \([^,}]*\).*/\1 \2 \3/'
}

for seed in $(seq "${seeds%-*}" "${seeds#*-}"); do
  for flags in "-ln pre" "-ln peri -dt 0.1"; do
    name="seed$seed${flags// /}"
    # shellcheck disable=SC2086
    ./train -device cpu $ARGS -seed "$seed" $flags -out "$work/$name.fp32" >"$work/$name.fp32.log" 2>&1 &&
      "$EMU_TRAIN" -device cuda -precision bf16 -fused all $ARGS -seed "$seed" $flags -out "$work/$name.bf16" >"$work/$name.bf16.log" 2>&1 ||
      { echo "bf16_spread.sh: $name failed:" >&2; tail -3 "$work/$name".*.log >&2; exit 1; }
    paste -d ' ' <(records_of "$work/$name.fp32") <(records_of "$work/$name.bf16") |
      awk '{d = ($5 - $2) / $2; n = ($6 - $3) / $3; print $1, (d < 0 ? -d : d), (n < 0 ? -n : n)}' >>"$work/differences"
    echo "bf16_spread.sh: seed $seed $flags done" >&2
  done
done

echo "relative difference of bf16 (emulated CUDA) from fp32 (CPU), l2h4c64v4096, T = 64, B = 4, seeds $seeds, Pre-LN and Peri-LN (Δt = 0.1)"
printf '%-5s %5s %12s %12s %12s %12s\n' step runs "loss median" "loss max" "norm median" "norm max"
sort -k1,1n "$work/differences" | awk '
  function median(list, n,    sorted, i, j, t) {
    for (i = 1; i <= n; i++) sorted[i] = list[i]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && sorted[j - 1] > sorted[j]; j--) {t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t}
    return n % 2 ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
  }
  function flush() {
    if (n == 0) return
    lmax = nmax = 0
    for (i = 1; i <= n; i++) {if (loss[i] > lmax) lmax = loss[i]; if (norm[i] > nmax) nmax = norm[i]}
    printf "%-5d %5d %12.1e %12.1e %12.1e %12.1e\n", step, n, median(loss, n), lmax, median(norm, n), nmax
    n = 0
  }
  $1 != step {flush(); step = $1}
  {n++; loss[n] = $2; norm[n] = $3}
  END {flush()}'
