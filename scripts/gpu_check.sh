#!/usr/bin/env bash
# scripts/gpu_check.sh — first contact of the CUDA backend with a real GPU (docs/cuda.md §8):
# every check that needs the hardware, one row each, then one summary line. It passes only
# when everything ran and passed: a missing GoogleTest, a test binary that ran no test or did
# not know a flag, a skipped test, a missing compute-sanitizer are FAIL rows.
#
#   scripts/gpu_check.sh                          build (for sm_90, GPU_ARCH overrides) and check
#   scripts/gpu_check.sh --prebuilt build/gpu-bundle   check with binaries built elsewhere
#                                                 (make gpu-bundle): nothing is compiled here
#   scripts/gpu_check.sh --dry                    list the rows and what each runs; needs no GPU
#   scripts/gpu_check.sh --only tests,bench       only these groups of rows (below)
#
# Groups, in order:
#   driver     nvidia-smi names the GPU (without it the check stops there)
#   bundle     (--prebuilt) every binary finds its libraries (libcublas from the CUDA toolkit
#              or PyTorch's wheels is looked for when the loader does not find it)
#   googletest (otherwise) GoogleTest from the system, else built from /usr/src/googletest
#   build      (otherwise) train, eval, the benchmark and the tests for sm_90
#   tests      cuda_test_kernels, cuda_test_model, cuda_test_tensor_cores, cuda_test_wmma,
#              cuda_test_simt and test_cli_cuda natively, each from its GoogleTest XML: FAIL unless it ran tests,
#              none failed and none skipped; then the precision test alone, with its numbers
#   train      20 steps of d12 (T = 256, B = 8, the bundled data) with -ln pre and -ln peri
#              -dt 0.1 in fp32 and bf16 against the CPU backend's 20 (run in the background
#              from the start): every loss and gradient norm within 1e-4 relative in fp32,
#              3e-2 in bf16, and the loss falls
#   bench      build/bench_gpu (d12, T = 1024): its first loss finite and within 0.5 of ln V,
#              and no fused product refused by cuBLASLt
#   plan       the memory plan of d48 and the benchmark's B on 139 GiB
#   sanitizer  compute-sanitizer memcheck, racecheck and synccheck on the attention and
#              LayerNorm kernel tests, memcheck on 2 steps of ./train in each precision
# Logs go to build/gpu_check/ (GPU_CHECK_OUT overrides); exit status 1 when a row failed (2 for
# an unknown argument). COMPUTE_SANITIZER names compute-sanitizer where it is not on PATH or in
# /usr/local/cuda/bin.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DRY=0
BUNDLE=""
ONLY=all
while [ $# -gt 0 ]; do
  case $1 in
    --dry) DRY=1 ;;
    --prebuilt) BUNDLE=${2:-}; shift ;;
    --only) ONLY=${2:-}; shift ;;
    *) echo "gpu_check.sh: unknown argument '$1' (--dry, --prebuilt DIR, --only GROUP,...)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$BUNDLE" ]; then
  [ -d "$BUNDLE" ] || { echo "gpu_check.sh: --prebuilt: no folder '$BUNDLE' (make gpu-bundle makes build/gpu-bundle)" >&2; exit 2; }
  BUNDLE=$(cd "$BUNDLE" && pwd)
fi
ARCH=${GPU_ARCH:-"-gencode arch=compute_90,code=sm_90"}
INIT=${CHECK_INIT:-d12}
OUT=${GPU_CHECK_OUT:-build/gpu_check}
SUMMARY=()
COUNTS=(0 0 0)  # ok, FAIL, skip
TOTAL_START=$SECONDS

# The programs: the bundle's, or those this repository builds.
if [ -n "$BUNDLE" ]; then
  TRAIN=$BUNDLE/train BENCH=$BUNDLE/bench_gpu TEST_DIR=$BUNDLE CLI_TEST=$BUNDLE/test_cli_cuda
else
  TRAIN=$ROOT/train BENCH=$ROOT/build/bench_gpu TEST_DIR=$ROOT/build/cuda CLI_TEST=$ROOT/build/test_cli_cuda
fi
GPU_TESTS=(cuda_test_kernels cuda_test_model cuda_test_tensor_cores cuda_test_wmma cuda_test_simt)

# selected GROUP: true when --only names GROUP (or is not given).
selected() { [ "$ONLY" = all ] || [[ ",$ONLY," == *",$1,"* ]]; }

# row STEP RESULT DETAILS: one line of the summary table (RESULT ok, FAIL or skip).
row() {
  SUMMARY+=("$(printf '%-30s %-5s %s' "$1" "$2" "$3")")
  case $2 in ok) COUNTS[0]=$((COUNTS[0] + 1)) ;; FAIL) COUNTS[1]=$((COUNTS[1] + 1)) ;; *) COUNTS[2]=$((COUNTS[2] + 1)) ;; esac
}

finish() {
  for pid in ${CPU_PIDS:-}; do pkill -TERM -P "$pid" 2>/dev/null; done  # CPU references still running
  echo
  echo "==== gpu_check ($(date -u '+%Y-%m-%d %H:%M UTC')${BUNDLE:+, prebuilt $BUNDLE})"
  printf '%-30s %-5s %s\n' step result details
  printf '%s\n' "${SUMMARY[@]}"
  echo "gpu_check-summary: ${COUNTS[0]} ok, ${COUNTS[1]} failed, ${COUNTS[2]} skipped, $((SECONDS - TOTAL_START)) s"
  [ "${COUNTS[1]}" = 0 ]
  exit $?
}

# --dry: the rows, the command behind each and when it passes; nothing runs.
if [ $DRY = 1 ]; then
  t=${TEST_DIR#$ROOT/} TRAIN=${TRAIN#$ROOT/} BENCH=${BENCH#$ROOT/} CLI_TEST=${CLI_TEST#$ROOT/}
  cat <<EOF
gpu_check rows (--dry: nothing runs)${BUNDLE:+, prebuilt $BUNDLE}
group      row                            runs                                                     passes when
driver     driver                         nvidia-smi --query-gpu=name,driver_version,memory.total   it names a GPU
EOF
  if [ -n "$BUNDLE" ]; then
    printf 'bundle     %-30s %-56s %s\n' "bundle libraries" "ldd on every binary of the bundle" "nothing missing (libcublas looked for)"
  else
    printf 'googletest %-30s %-56s %s\n' GoogleTest "g++ -E on gtest/gtest.h, else /usr/src/googletest" "found, or built"
    printf 'build      %-30s %-56s %s\n' build "make GPU_ARCH=\"$ARCH\" train eval bench_gpu tests" "it builds"
  fi
  for test in "${GPU_TESTS[@]}"; do
    printf 'tests      %-30s %-56s %s\n' "$test" "$t/$test --gtest_output=xml" "tests ran, none failed or skipped"
  done
  printf 'tests      %-30s %-56s %s\n' test_cli_cuda "$CLI_TEST (./train, ./eval, bench_gpu: the GPU's)" "tests ran, none failed or skipped"
  printf 'tests      %-30s %-56s %s\n' precision "$t/cuda_test_model --gtest_filter=CudaMixedPrecision.*" "as above; numbers in the row"
  for ln in pre peri; do
    printf 'train      %-30s %-56s %s\n' "cpu reference $ln" "$TRAIN -device cpu -init $INIT ... -steps 20 (background)" "20 steps"
    for p in fp32 bf16; do
      tol=1e-4; [ $p = bf16 ] && tol=3e-2
      printf 'train      %-30s %-56s %s\n' "train $ln $p" "$TRAIN -device cuda -precision $p -init $INIT ... -steps 20" "20 losses and grad norms within $tol of the CPU's; loss falls"
    done
  done
  printf 'bench      %-30s %-56s %s\n' bench "$BENCH (d12, T = 1024)" "runs; first loss finite, within 0.5 of ln V"
  printf 'bench      %-30s %-56s %s\n' "fused products" "(the bench's stderr)" "no 'cuBLASLt refused' line"
  printf 'plan       %-30s %-56s %s\n' "plan d48 bf16 B=32" "$BENCH -plan -init d48 -B 32 -T 1024 -fit 139" "runs"
  for tool in memcheck racecheck synccheck; do
    printf 'sanitizer  %-30s %-56s %s\n' "$tool attention+LN" "compute-sanitizer --tool $tool $t/cuda_test_kernels (attention, LayerNorm)" "0 errors, tests pass"
  done
  for p in fp32 bf16; do
    printf 'sanitizer  %-30s %-56s %s\n' "memcheck train $p" "compute-sanitizer --tool memcheck $TRAIN -device cuda -precision $p (2 steps)" "0 errors"
  done
  exit 0
fi

rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# 1. The driver.
if selected driver; then
  if GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>"$OUT/nvidia-smi.log" | head -1) &&
     [ -n "$GPU" ]; then
    row driver ok "$GPU"
  else
    row driver FAIL "nvidia-smi: $(head -1 "$OUT/nvidia-smi.log")"
    finish
  fi
fi

# 2. The bundle's libraries, or GoogleTest and the build.
# find_library NAME: a folder holding NAME (a CUDA toolkit's, the system's, PyTorch's wheels').
find_library() {
  local dir
  for dir in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu \
             $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null | xargs -n1 2>/dev/null |
               sed 's|$|/nvidia/cu13/lib|; p; s|/cu13/lib$|/cublas/lib|'); do
    [ -e "$dir/$1" ] && { echo "$dir"; return 0; }
  done
  return 1
}
# missing_libraries BINARY: the libraries the loader does not find for BINARY, one a line.
missing_libraries() { ldd "$1" 2>&1 | awk '/not found/ {print $1}'; }

if selected bundle && [ -n "$BUNDLE" ]; then
  missing=$(for bin in "$BUNDLE"/*; do [ -x "$bin" ] && [ -f "$bin" ] && missing_libraries "$bin"; done | sort -u)
  added=""
  for lib in $missing; do
    if dir=$(find_library "$lib"); then
      export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      added="$added $lib from $dir;"
    fi
  done
  still=$(for bin in "$BUNDLE"/*; do [ -x "$bin" ] && [ -f "$bin" ] && missing_libraries "$bin"; done | sort -u | paste -sd ' ' -)
  if [ -z "$still" ]; then row "bundle libraries" ok "every binary finds its libraries${added:+;$added}"
  else row "bundle libraries" FAIL "not found: $still (see $BUNDLE/MANIFEST.txt)"; fi
fi
GTEST=system
if selected googletest && [ -z "$BUNDLE" ]; then
  CXX_FOR_PROBE=${CXX:-g++}
  GTEST_SRC=${GTEST_SRC:-/usr/src/googletest/googletest}
  if ! echo '#include <gtest/gtest.h>' | $CXX_FOR_PROBE -std=c++17 -E -x c++ - >/dev/null 2>&1; then
    GTEST=none
    if [ -f "$GTEST_SRC/src/gtest-all.cc" ]; then
      mkdir -p "$OUT/gtest/lib"
      if $CXX_FOR_PROBE -std=c++17 -O2 -pthread -I"$GTEST_SRC/include" -I"$GTEST_SRC" -c "$GTEST_SRC/src/gtest-all.cc" -o "$OUT/gtest/gtest-all.o" &&
         $CXX_FOR_PROBE -std=c++17 -O2 -pthread -I"$GTEST_SRC/include" -c "$GTEST_SRC/src/gtest_main.cc" -o "$OUT/gtest/gtest_main.o" &&
         ar rcs "$OUT/gtest/lib/libgtest.a" "$OUT/gtest/gtest-all.o" &&
         ar rcs "$OUT/gtest/lib/libgtest_main.a" "$OUT/gtest/gtest_main.o"; then
        export CPATH="$GTEST_SRC/include${CPATH:+:$CPATH}" LIBRARY_PATH="$OUT/gtest/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
        GTEST="built from $GTEST_SRC"
      fi
    fi
  fi
  if [ "$GTEST" = none ]; then
    row GoogleTest FAIL "no gtest/gtest.h for $CXX_FOR_PROBE and no $GTEST_SRC: the GPU tests cannot be built (make gpu-bundle elsewhere, then --prebuilt)"
  else
    row GoogleTest ok "$GTEST"
  fi
fi
if selected build && [ -z "$BUNDLE" ]; then
  TARGETS=(train eval build/bench_gpu)
  [ "$GTEST" != none ] && TARGETS+=("${GPU_TESTS[@]/#/build/cuda/}" build/test_cli_cuda)
  # The CUDA objects are removed first: make cannot tell which GPU_ARCH built them.
  rm -f build/gpt2_cuda.o build/bench_gpu build/cuda/cuda_test_* train eval
  start=$SECONDS
  if make -j"$(nproc)" GPU_ARCH="$ARCH" "${TARGETS[@]}" >"$OUT/build.log" 2>&1; then
    row build ok "$((SECONDS - start)) s ($ARCH)"
  else
    row build FAIL "see $OUT/build.log"
    finish
  fi
fi

# 3. The CPU references of the training rows, in the background from now on (half the cores).
train_args() {  # train_args STEPS
  echo "-init $INIT -T 256 -B 8 -total_batch 2048 -steps $1 -warmup 2 -seed 7 -eval_every 0 -save_every 0 -stats_every 0"
}
CPU_PIDS=""
if selected train; then
  threads=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
  for ln in pre peri; do
    flags="-ln $ln"; [ $ln = peri ] && flags="-ln peri -dt 0.1"
    # shellcheck disable=SC2046,SC2086
    ( start=$SECONDS; timeout 600 "$TRAIN" -device cpu -threads $threads $(train_args 20) $flags -out "$OUT/cpu_$ln" \
        >"$OUT/cpu_$ln.log" 2>&1; echo "$? $((SECONDS - start))" >"$OUT/cpu_$ln.status" ) &
    CPU_PIDS="$CPU_PIDS $!"
  done
fi

# 4. The GPU tests. gtest_row NAME LOG XML STATUS SECONDS: the row of one GoogleTest run, from
# its XML report: FAIL unless it ran tests, none failed, none was skipped and it exited 0. A
# GoogleTest that did not know a flag prints its help, runs nothing and writes no report.
gtest_row() {
  local name=$1 log=$2 xml=$3 status=$4 seconds=$5
  local tests=0 failures=0 skips=0 worst
  if [ -s "$xml" ]; then
    tests=$(grep -o '<testsuites [^>]*' "$xml" | grep -o ' tests="[0-9]*"' | head -1 | tr -dc 0-9)
    failures=$(grep -o '<testsuites [^>]*' "$xml" | grep -o ' failures="[0-9]*"' | head -1 | tr -dc 0-9)
    skips=$(grep -c '<skipped' "$xml")
  fi
  tests=${tests:-0} failures=${failures:-0}
  worst=$(grep -o 'relative error [0-9.e+-]\+' "$log" | awk '{print $3}' | sort -g | tail -1)
  local details="$((tests - failures - skips)) passed, $failures failed, $skips skipped${worst:+, worst error $worst}, $seconds s"
  if grep -q 'This program contains tests written using Google Test' "$log"; then
    row "$name" FAIL "GoogleTest printed its help and ran nothing: a flag it does not know ($(grep -o -- '--gtest_[a-z_]*' "$log" | head -1)); see $log"
  elif [ "$status" = 124 ]; then row "$name" FAIL "timed out: $details; see $log"
  elif [ ! -s "$xml" ]; then row "$name" FAIL "no GoogleTest report (exit status $status); see $log"
  elif [ "$tests" = 0 ]; then row "$name" FAIL "ran 0 tests; see $log"
  elif [ "$skips" != 0 ]; then row "$name" FAIL "$details (on a GPU nothing may skip; see $log)"
  elif [ "$failures" != 0 ] || [ "$status" != 0 ]; then row "$name" FAIL "$details, exit status $status; see $log"
  else row "$name" ok "$details"; fi
}

# run_gtest NAME DIR BINARY [ARGS]: runs a GoogleTest binary in folder DIR (at most 300 s)
# and writes its row.
run_gtest() {
  local name=$1 dir=$2 binary=$3
  shift 3
  local start=$SECONDS xml="$OUT/$name.xml" log="$OUT/$name.log"
  if [ ! -x "$binary" ]; then row "$name" FAIL "$binary is not there"; return; fi
  (cd "$dir" && CUDA_TEST_REPORT=1 exec timeout 300 "$binary" --gtest_brief=1 --gtest_output="xml:$xml" "$@") >"$log" 2>&1
  gtest_row "$name" "$log" "$xml" $? $((SECONDS - start))
}

if selected tests; then
  for test in "${GPU_TESTS[@]}"; do run_gtest "$test" "$ROOT" "$TEST_DIR/$test"; done
  # test_cli_cuda runs ./train, ./eval and build/bench_gpu from where it runs, and reads
  # test/golden: with a bundle, from a folder that links them to the bundle's programs.
  cli_dir=$ROOT
  if [ -n "$BUNDLE" ]; then
    cli_dir=$OUT/cli
    mkdir -p "$cli_dir/build"
    ln -s "$BUNDLE/train" "$cli_dir/train"
    ln -s "$BUNDLE/eval" "$cli_dir/eval"
    ln -s "$BUNDLE/bench_gpu" "$cli_dir/build/bench_gpu"
    ln -s "$ROOT/test" "$cli_dir/test"
  fi
  # (BenchmarkHoldsOneModelAtATime sets the emulated device's memory: emulated only.)
  run_gtest test_cli_cuda "$cli_dir" "$CLI_TEST" --gtest_filter=-CliCuda.BenchmarkHoldsOneModelAtATime
  run_gtest precision "$ROOT" "$TEST_DIR/cuda_test_model" --gtest_filter='CudaMixedPrecision.*'
  numbers=$(grep -o 'precision: [A-Za-z]*-LN.*' "$OUT/precision.log" | sed 's/.*precision: \([A-Za-z]*-LN\).*fp32 stream (bf16 run) \([^,]*\), bf16 stream \(.*\)/\1 fp32 stream \2, bf16 stream \3/' | paste -sd ';' -)
  [ -n "$numbers" ] && SUMMARY[-1]+="; $numbers"
fi

# 5. d12 for 20 steps on the device against the CPU backend's 20 steps.
# records_of DIR KEY: the values of KEY in DIR/log.jsonl's step records, one a line.
records_of() { grep '"loss"' "$1/log.jsonl" 2>/dev/null | grep -v -e val_loss -e event | sed "s/.*\"$2\": \([^,}]*\).*/\1/"; }
# A finite decimal number, as an awk pattern (awks differ in what they make of "nan" and "inf").
NUMBER='^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$'
# worst_difference GOT WANT: the largest |got − want| / |want| of two columns of numbers; "inf"
# when a value is not a finite number.
worst_difference() {
  paste -d ' ' <(echo "$1") <(echo "$2") |
    awk -v number="$NUMBER" '{if ($1 !~ number || $2 !~ number || $2 == 0) {w = "inf"; exit}
                              d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d}
                             END {if (w == "inf") print "inf"; else printf "%.1e", w}'
}
if selected train; then
  for ln in pre peri; do
    flags="-ln $ln"; [ $ln = peri ] && flags="-ln peri -dt 0.1"
    wait_start=$SECONDS
    while [ ! -s "$OUT/cpu_$ln.status" ] && [ $((SECONDS - wait_start)) -lt 600 ]; do sleep 0.2; done
    read -r cpu_status cpu_seconds <"$OUT/cpu_$ln.status" 2>/dev/null
    ref_loss=$(records_of "$OUT/cpu_$ln" loss)
    ref_norm=$(records_of "$OUT/cpu_$ln" grad_norm)
    if [ "${cpu_status:-1}" != 0 ] || [ "$(echo "$ref_loss" | grep -c .)" -ne 20 ]; then
      row "cpu reference $ln" FAIL "exit status ${cpu_status:-none}; see $OUT/cpu_$ln.log"
      continue
    fi
    row "cpu reference $ln" ok "losses $(echo "$ref_loss" | head -1) -> $(echo "$ref_loss" | tail -1), ${cpu_seconds} s"
    for precision in fp32 bf16; do
      tol=1e-4; [ $precision = bf16 ] && tol=3e-2
      dir="$OUT/cuda_${ln}_$precision"
      start=$SECONDS
      # shellcheck disable=SC2046,SC2086
      timeout 300 "$TRAIN" -device cuda -precision $precision $(train_args 20) $flags -out "$dir" >"$dir.log" 2>&1
      status=$?
      loss=$(records_of "$dir" loss)
      norm=$(records_of "$dir" grad_norm)
      worst_loss=$(worst_difference "$loss" "$ref_loss")
      worst_norm=$(worst_difference "$norm" "$ref_norm")
      first=$(echo "$loss" | head -1) last=$(echo "$loss" | tail -1)
      details="loss $first -> $last; vs cpu: losses $worst_loss, grad norms $worst_norm (tol $tol), $((SECONDS - start)) s"
      if [ $status -eq 0 ] && [ "$(echo "$loss" | grep -c .)" -eq 20 ] &&
         awk -v l="$worst_loss" -v n="$worst_norm" -v t="$tol" -v a="$first" -v b="$last" \
           'BEGIN {exit !(l != "inf" && n != "inf" && l + 0 <= t + 0 && n + 0 <= t + 0 && b + 0 < a + 0)}'; then
        row "train $ln $precision" ok "$details"
      else
        row "train $ln $precision" FAIL "$details; exit status $status, see $dir.log"
      fi
    done
  done
fi

# 6. The benchmark (B: the largest up to 64 whose plan fits): its first loss, on fresh weights,
# is about ln V; every fused product must have run fused (docs/cuda.md §3).
if selected bench; then
  start=$SECONDS
  timeout 300 "$BENCH" >"$OUT/bench.log" 2>&1
  status=$?
  summary=$(grep '^bench-summary:' "$OUT/bench.log" | sed 's/^bench-summary: //')
  first=$(echo "$summary" | grep -o 'first_loss=[^ ]*' | cut -d= -f2)
  ln_v=$(echo "$summary" | grep -o 'ln_V=[^ ]*' | cut -d= -f2)
  if [ $status -eq 0 ] && [ -n "$summary" ] && [[ $first =~ $NUMBER ]] && [[ $ln_v =~ $NUMBER ]] &&
     awk -v f="$first" -v v="$ln_v" 'BEGIN {d = f - v; if (d < 0) d = -d; exit !(d <= 0.5)}'; then
    row bench ok "$summary, $((SECONDS - start)) s"
  else
    row bench FAIL "${summary:-no summary} (first loss must be finite and within 0.5 of ln V), exit status $status; see $OUT/bench.log"
  fi
  refused=$(grep -c '^cuBLASLt refused' "$OUT/bench.log")
  if [ "$refused" = 0 ] && [ $status -eq 0 ]; then row "fused products" ok "cuBLASLt ran every epilogue"
  else row "fused products" FAIL "$refused kinds of product ran unfused; see $OUT/bench.log"; fi
fi

if selected plan; then
  if "$BENCH" -plan -init d48 -B 32 -T 1024 -fit 139 >"$OUT/plan.log" 2>&1; then
    row "plan d48 bf16 B=32" ok "$(grep -e "default B" -e "planned device memory" "$OUT/plan.log" | paste -sd ';' -)"
  else
    row "plan d48 bf16 B=32" FAIL "see $OUT/plan.log"
  fi
fi

# 7. compute-sanitizer: memcheck, racecheck and synccheck on the kernels most likely to race
# (attention's tiles, LayerNorm's warps and shared column sums), memcheck on whole steps.
if selected sanitizer; then
  SANITIZER=${COMPUTE_SANITIZER-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)}
  if [ ! -x "$SANITIZER" ]; then
    row compute-sanitizer FAIL "not installed (the CUDA toolkit's compute-sanitizer): nothing was sanitised"
  else
    for tool in memcheck racecheck synccheck; do
      start=$SECONDS
      log="$OUT/sanitizer_$tool.log"
      timeout 300 "$SANITIZER" --tool $tool --error-exitcode 1 "$TEST_DIR/cuda_test_kernels" --gtest_brief=1 \
        --gtest_filter='*Attention*:*LayerNorm*' >"$log" 2>&1
      status=$?
      summary=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*\|RACECHECK SUMMARY: [0-9]* hazard[s]*' "$log" | tail -1)
      passed=$(grep -o '\[  PASSED  \] [0-9]*' "$log" | grep -o '[0-9]*$')
      if [ $status -eq 0 ] && [ "${passed:-0}" -gt 0 ]; then row "$tool attention+LN" ok "${summary:-?}, ${passed} tests, $((SECONDS - start)) s"
      else row "$tool attention+LN" FAIL "${summary:-exit status $status}, ${passed:-0} tests passed; see $log"; fi
    done
    for precision in fp32 bf16; do
      start=$SECONDS
      log="$OUT/sanitizer_train_$precision.log"
      timeout 300 "$SANITIZER" --tool memcheck --error-exitcode 1 "$TRAIN" -device cuda -precision $precision -init l2h4c64 \
        -T 64 -B 2 -total_batch 128 -steps 2 -eval_every 0 -save_every 0 -stats_every 1 -ln peri \
        -out "$OUT/sanitizer_$precision" >"$log" 2>&1
      status=$?
      summary=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$log" | tail -1)
      if [ $status -eq 0 ]; then row "memcheck train $precision" ok "${summary:-?}, $((SECONDS - start)) s"
      else row "memcheck train $precision" FAIL "${summary:-exit status $status}; see $log"; fi
    done
  fi
fi

finish
