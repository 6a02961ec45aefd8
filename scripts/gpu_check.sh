#!/usr/bin/env bash
# scripts/gpu_check.sh — the CUDA backend on a real GPU, in a few minutes:
#   1. builds train, eval, the GPU tests and the benchmark for sm_90 (H100, H200);
#   2. runs the GPU tests natively (every kernel and whole training steps against the CPU, and
#      ./train, ./eval and the benchmark with -device cuda against the CPU programs);
#   3. trains 20 steps of GPT-2 124M (d12, T = 1024, B = 16) on the bundled data with -ln pre,
#      then with -ln peri -dt 0.1 (which also records the hidden-state statistics);
#   4. runs the benchmark (make bench);
# and prints a summary table last. Logs go to build/gpu_check/; exit status 1 if a step failed.
#
#   scripts/gpu_check.sh
#   GPU_ARCH="-gencode arch=compute_80,code=sm_80" scripts/gpu_check.sh     # an A100
set -u
cd "$(dirname "$0")/.." || exit 1
ARCH=${GPU_ARCH:-"-gencode arch=compute_90,code=sm_90"}
OUT=build/gpu_check
rm -rf "$OUT"
mkdir -p "$OUT"
SUMMARY=()
FAILED=0

# row STEP RESULT DETAILS: one line of the summary table.
row() {
  SUMMARY+=("$(printf '%-24s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = ok ] || FAILED=1
}

print_summary() {
  echo
  echo "==== gpu_check summary ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  printf '%-24s %-5s %s\n' step result details
  printf '%s\n' "${SUMMARY[@]}"
}

# 1. Build. The CUDA objects are removed first: make cannot tell which GPU_ARCH built them.
rm -f build/gpt2_cuda.o build/bench_gpu build/cuda/cuda_test_* train eval
start=$SECONDS
if make -j"$(nproc)" GPU_ARCH="$ARCH" train eval build/bench_gpu build/cuda/cuda_test_kernels \
     build/cuda/cuda_test_model build/test_cli_cuda >"$OUT/build.log" 2>&1; then
  row build ok "$((SECONDS - start)) s ($ARCH)"
else
  row build FAIL "see $OUT/build.log"
  print_summary
  exit 1
fi
GPU=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
row device ok "${GPU:-unknown (no nvidia-smi)}"

# 2. The GPU tests. On a GPU nothing may be skipped.
for test in build/cuda/cuda_test_kernels build/cuda/cuda_test_model build/test_cli_cuda; do
  name=$(basename "$test")
  start=$SECONDS
  CUDA_TEST_REPORT=1 "$test" --gtest_brief=1 >"$OUT/$name.log" 2>&1
  status=$?
  passed=$(grep -o '\[  PASSED  \] [0-9]*' "$OUT/$name.log" | grep -o '[0-9]*$')
  skipped=$(grep -o '\[  SKIPPED \] [0-9]*' "$OUT/$name.log" | grep -o '[0-9]*$')
  failed=$(grep -c '^\[  FAILED  \] .*\.' "$OUT/$name.log")
  worst=$(grep -o 'relative error [0-9.e+-]*' "$OUT/$name.log" | awk '{print $3}' | sort -g | tail -1)
  details="${passed:-0} passed, $failed failed, ${skipped:-0} skipped, worst error ${worst:-?}, $((SECONDS - start)) s"
  if [ $status -eq 0 ] && [ "${skipped:-0}" = 0 ]; then row "$name" ok "$details"; else row "$name" FAIL "$details"; fi
done

# 3. Twenty training steps of d12 per configuration: first and last loss, median ms per step.
train_run() {
  local name=$1
  shift
  ./train -device cuda -init d12 -T 1024 -B 16 -total_batch 16384 -steps 20 -warmup 2 \
    -eval_every 0 -save_every 0 -out "$OUT/$name" "$@" >"$OUT/$name.log" 2>&1
  local status=$?
  local steps="$OUT/$name/log.jsonl"
  local losses ms first last median
  losses=$(grep '"loss"' "$steps" 2>/dev/null | grep -v -e val_loss -e event | sed 's/.*"loss": \([^,]*\),.*/\1/')
  ms=$(grep '"ms"' "$steps" 2>/dev/null | sed 's/.*"ms": \([^,]*\),.*/\1/' | tail -n +3 | sort -g)
  first=$(echo "$losses" | head -1)
  last=$(echo "$losses" | tail -1)
  median=$(printf "%s" "$ms" | awk '{v[NR] = $1} END {if (NR) printf "%.0f", v[int((NR + 1) / 2)]}')
  local details="loss ${first:-?} -> ${last:-?}, ${median:-?} ms/step (steps 2..19)"
  if [ $status -eq 0 ] && [ "$(echo "$losses" | wc -l)" -eq 20 ] &&
     awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a)}'; then
    row "train $name" ok "$details"
  else
    row "train $name" FAIL "$details; see $OUT/$name.log"
  fi
}
train_run pre -ln pre
train_run peri_dt0.1 -ln peri -dt 0.1 -stats_every 10

# 4. The benchmark.
start=$SECONDS
make bench GPU_ARCH="$ARCH" >"$OUT/bench.log" 2>&1
status=$?
bench=$(grep '^bench-summary:' "$OUT/bench.log" | sed 's/^bench-summary: //')
if [ $status -eq 0 ] && [ -n "$bench" ]; then
  row bench ok "$bench, $((SECONDS - start)) s"
else
  row bench FAIL "see $OUT/bench.log"
fi

print_summary
exit $FAILED
