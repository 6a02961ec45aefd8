#!/usr/bin/env bash
# scripts/gpu_check.sh — first contact of the CUDA backend with a real GPU, in about 8 minutes
# on one H100/H200 with 16 cores and no network (docs/cuda.md §8):
#   1. checks the driver (nvidia-smi) and builds train, eval, the benchmark and the GPU tests
#      for sm_90; GoogleTest is taken from the system, else built from /usr/src/googletest,
#      else the GoogleTest binaries are skipped (said in the summary) and the rest still runs;
#   2. runs the GPU tests natively (every kernel, whole training steps against the CPU, the
#      memory plan, and ./train, ./eval, the benchmark with -device cuda against the CPU);
#   3. the hidden-state precision test (|x| ~ 100, Δt = 0.01: the fp32 stream under bf16);
#   4. 20 steps of d12 (T = 256, B = 8, the bundled data) with -ln pre and -ln peri -dt 0.1,
#      in fp32 and bf16, each against the first 3 losses of the same run on the CPU backend
#      (relative tolerance 1e-3 in fp32, 3e-2 in bf16), and its loss must fall;
#   5. the benchmark (d12, T = 1024) and the memory plan of d48;
#   6. compute-sanitizer memcheck on a 2-step run in each precision, when it is installed;
# then one summary line last. Logs go to build/gpu_check/; exit status 1 if a step failed.
#
#   scripts/gpu_check.sh
#   scripts/gpu_check.sh --dry     # no GPU: everything else (the CUDA runs go to the CPU)
#   GPU_ARCH="-gencode arch=compute_80,code=sm_80" scripts/gpu_check.sh     # an A100
#   CHECK_INIT=l2h4c64 scripts/gpu_check.sh --dry   # a smaller model for the training runs
set -u
cd "$(dirname "$0")/.." || exit 1
DRY=0
[ "${1:-}" = --dry ] && DRY=1
ARCH=${GPU_ARCH:-"-gencode arch=compute_90,code=sm_90"}
INIT=${CHECK_INIT:-d12}
OUT=build/gpu_check
rm -rf "$OUT"
mkdir -p "$OUT"
SUMMARY=()
COUNTS=(0 0 0)  # ok, FAIL, skip
TOTAL_START=$SECONDS

# row STEP RESULT DETAILS: one line of the summary table (RESULT ok, FAIL or skip).
row() {
  SUMMARY+=("$(printf '%-26s %-5s %s' "$1" "$2" "$3")")
  case $2 in ok) COUNTS[0]=$((COUNTS[0] + 1)) ;; FAIL) COUNTS[1]=$((COUNTS[1] + 1)) ;; *) COUNTS[2]=$((COUNTS[2] + 1)) ;; esac
}

finish() {
  echo
  echo "==== gpu_check ($(date -u '+%Y-%m-%d %H:%M UTC')$([ $DRY = 1 ] && echo ', dry run: no GPU'))"
  printf '%-26s %-5s %s\n' step result details
  printf '%s\n' "${SUMMARY[@]}"
  echo "gpu_check-summary: ${COUNTS[0]} ok, ${COUNTS[1]} failed, ${COUNTS[2]} skipped, $((SECONDS - TOTAL_START)) s"
  [ "${COUNTS[1]}" = 0 ]
  exit $?
}

# 1. The driver, GoogleTest, the build.
if [ $DRY = 1 ]; then
  row driver skip "dry run"
elif GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>"$OUT/nvidia-smi.log" | head -1) &&
     [ -n "$GPU" ]; then
  row driver ok "$GPU"
else
  row driver FAIL "nvidia-smi: $(head -1 "$OUT/nvidia-smi.log")"
  finish
fi

GTEST=system
if ! echo '#include <gtest/gtest.h>' | g++ -std=c++17 -E -x c++ - >/dev/null 2>&1; then
  SRC=/usr/src/googletest/googletest
  if [ -f "$SRC/src/gtest-all.cc" ]; then
    mkdir -p "$OUT/gtest/lib"
    if g++ -std=c++17 -O2 -pthread -I"$SRC/include" -I"$SRC" -c "$SRC/src/gtest-all.cc" -o "$OUT/gtest/gtest-all.o" &&
       g++ -std=c++17 -O2 -pthread -I"$SRC/include" -c "$SRC/src/gtest_main.cc" -o "$OUT/gtest/gtest_main.o" &&
       ar rcs "$OUT/gtest/lib/libgtest.a" "$OUT/gtest/gtest-all.o" &&
       ar rcs "$OUT/gtest/lib/libgtest_main.a" "$OUT/gtest/gtest_main.o"; then
      export CPATH="$SRC/include${CPATH:+:$CPATH}" LIBRARY_PATH="$PWD/$OUT/gtest/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
      GTEST="built from $SRC"
    else
      GTEST=none
    fi
  else
    GTEST=none
  fi
fi
TESTS=(build/cuda/cuda_test_kernels build/cuda/cuda_test_model build/test_cli_cuda)
[ "$GTEST" = none ] && TESTS=()

# The CUDA objects are removed first: make cannot tell which GPU_ARCH built them.
rm -f build/gpt2_cuda.o build/bench_gpu build/cuda/cuda_test_* train eval
start=$SECONDS
if make -j"$(nproc)" GPU_ARCH="$ARCH" train eval build/bench_gpu "${TESTS[@]}" >"$OUT/build.log" 2>&1; then
  row build ok "$((SECONDS - start)) s ($ARCH), GoogleTest: $GTEST"
else
  row build FAIL "see $OUT/build.log"
  finish
fi
[ "$GTEST" = none ] && row "GoogleTest binaries" skip "no GoogleTest and no /usr/src/googletest: GPU tests not built"

# 2. The GPU tests. On a GPU nothing may be skipped.
run_test() {  # run_test NAME BINARY [ARGS]
  local name=$1 test=$2
  shift 2
  local start=$SECONDS
  CUDA_TEST_REPORT=1 "$test" --gtest_brief=1 "$@" >"$OUT/$name.log" 2>&1
  local status=$?
  local passed skipped failed worst
  passed=$(grep -o '\[  PASSED  \] [0-9]*' "$OUT/$name.log" | grep -o '[0-9]*$')
  skipped=$(grep -o '\[  SKIPPED \] [0-9]*' "$OUT/$name.log" | grep -o '[0-9]*$')
  failed=$(grep -c '^\[  FAILED  \] .*\.' "$OUT/$name.log")
  worst=$(grep -o 'relative error [0-9.e+-]\+' "$OUT/$name.log" | awk '{print $3}' | sort -g | tail -1)
  local details="${passed:-0} passed, $failed failed, ${skipped:-0} skipped, worst error ${worst:-?}, $((SECONDS - start)) s"
  if [ $DRY = 1 ]; then row "$name" skip "dry run: $details"
  elif [ $status -eq 0 ] && [ "${skipped:-0}" = 0 ]; then row "$name" ok "$details"
  else row "$name" FAIL "$details"; fi
}
for test in "${TESTS[@]}"; do run_test "$(basename "$test")" "$test"; done

# 3. The precision test alone, with its numbers.
if [ "$GTEST" != none ]; then
  run_test precision build/cuda/cuda_test_model --gtest_filter='CudaMixedPrecision.*'
  numbers=$(grep -o 'precision: [A-Za-z]*-LN.*' "$OUT/precision.log" | sed 's/.*precision: \([A-Za-z]*-LN\).*fp32 stream (bf16 run) \([^,]*\), bf16 stream \(.*\)/\1 fp32 stream \2, bf16 stream \3/' | paste -sd ';' -)
  [ -n "$numbers" ] && SUMMARY[-1]+="; $numbers"
fi

# 4. d12 for 20 steps on the device against the CPU backend's first 3 losses (steps 1-3 see
# only warm-up learning rates, which do not depend on -steps).
CUDA_DEVICE=cuda
[ $DRY = 1 ] && CUDA_DEVICE=cpu
train_args() {  # train_args STEPS
  echo "-init $INIT -T 256 -B 8 -total_batch 2048 -steps $1 -warmup 2 -seed 7 -eval_every 0 -save_every 0 -stats_every 0"
}
losses_of() { grep '"loss"' "$1/log.jsonl" 2>/dev/null | grep -v -e val_loss -e event | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
for ln in pre peri; do
  flags="-ln $ln"
  [ $ln = peri ] && flags="-ln peri -dt 0.1"
  start=$SECONDS
  # shellcheck disable=SC2046,SC2086
  ./train -device cpu $(train_args 3) $flags -out "$OUT/cpu_$ln" >"$OUT/cpu_$ln.log" 2>&1
  cpu_status=$?
  reference=$(losses_of "$OUT/cpu_$ln")
  if [ $cpu_status -ne 0 ] || [ "$(echo "$reference" | wc -l)" -ne 3 ]; then
    row "cpu reference $ln" FAIL "see $OUT/cpu_$ln.log"
    continue
  fi
  row "cpu reference $ln" ok "losses $(echo "$reference" | paste -sd ' ' -), $((SECONDS - start)) s"
  for precision in fp32 bf16; do
    tol=1e-3
    [ $precision = bf16 ] && tol=3e-2
    name="$ln $precision"
    dir="$OUT/cuda_${ln}_$precision"
    start=$SECONDS
    # shellcheck disable=SC2046,SC2086
    ./train -device $CUDA_DEVICE -precision $precision $(train_args 20) $flags -out "$dir" >"$dir.log" 2>&1
    status=$?
    losses=$(losses_of "$dir")
    first=$(echo "$losses" | head -1)
    last=$(echo "$losses" | tail -1)
    worst=$(paste -d ' ' <(echo "$losses" | head -3) <(echo "$reference") |
      awk '{d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d} END {printf "%.1e", w}')
    details="loss $first -> $last, first 3 vs cpu: rel. diff $worst (tol $tol), $((SECONDS - start)) s"
    if [ $status -eq 0 ] && [ "$(echo "$losses" | wc -l)" -eq 20 ] &&
       awk -v w="$worst" -v t="$tol" -v a="$first" -v b="$last" 'BEGIN {exit !(w <= t && b < a)}'; then
      row "train $name" ok "$details"
    else
      row "train $name" FAIL "$details; see $dir.log"
    fi
  done
done

# 5. The benchmark (B: the largest up to 64 whose plan fits) and the plan of the largest model.
start=$SECONDS
if [ $DRY = 1 ]; then
  row bench skip "dry run"
else
  build/bench_gpu >"$OUT/bench.log" 2>&1
  status=$?
  bench=$(grep '^bench-summary:' "$OUT/bench.log" | sed 's/^bench-summary: //')
  if [ $status -eq 0 ] && [ -n "$bench" ]; then row bench ok "$bench, $((SECONDS - start)) s"
  else row bench FAIL "see $OUT/bench.log"; fi
  # The traffic model assumes every product with a bias or GELU runs fused (docs/cuda.md §3).
  unfused=$(grep -c '^cuBLASLt has no algorithm' "$OUT/bench.log")
  if [ "$unfused" = 0 ]; then row "fused products" ok "cuBLASLt ran every epilogue"
  else row "fused products" FAIL "$unfused kinds of product ran unfused; see $OUT/bench.log"; fi
fi
if build/bench_gpu -plan -init d48 -B 32 -T 1024 -fit 139 >"$OUT/plan.log" 2>&1; then
  row "plan d48 bf16 B=32" ok "$(tail -2 "$OUT/plan.log" | paste -sd ';' -)"
else
  row "plan d48 bf16 B=32" FAIL "see $OUT/plan.log"
fi

# 6. compute-sanitizer on a short run in each precision.
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ $DRY = 1 ]; then
  row compute-sanitizer skip "dry run"
elif [ -z "$SANITIZER" ]; then
  row compute-sanitizer skip "not installed"
else
  for precision in fp32 bf16; do
    start=$SECONDS
    "$SANITIZER" --tool memcheck --error-exitcode 1 ./train -device cuda -precision $precision -init l2h4c64 \
      -T 64 -B 2 -total_batch 128 -steps 2 -eval_every 0 -save_every 0 -stats_every 1 -ln peri \
      -out "$OUT/sanitizer_$precision" >"$OUT/sanitizer_$precision.log" 2>&1
    status=$?
    summary=$(grep -o 'ERROR SUMMARY: [0-9]* errors' "$OUT/sanitizer_$precision.log")
    if [ $status -eq 0 ]; then row "compute-sanitizer $precision" ok "${summary:-?}, $((SECONDS - start)) s"
    else row "compute-sanitizer $precision" FAIL "${summary:-exit $status}; see $OUT/sanitizer_$precision.log"; fi
  done
fi

finish
