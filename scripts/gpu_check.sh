#!/usr/bin/env bash
# scripts/gpu_check.sh — first contact of the CUDA backend with a real GPU (docs/gpu_check.md):
# every check that needs the hardware, one row each, printed the moment it is decided, then one
# summary line. It passes only when everything ran and passed: a missing GoogleTest, a test
# binary that ran no test or did not know a flag, a skipped test, a missing compute-sanitizer
# are FAIL rows.
#
#   scripts/gpu_check.sh                          build (for sm_90, GPU_ARCH overrides) and check
#   scripts/gpu_check.sh --prebuilt build/gpu-bundle   check with binaries built elsewhere
#                                                 (make gpu-bundle): nothing is compiled here
#   scripts/gpu_check.sh --dry                    list the rows and what each runs; needs no GPU
#   scripts/gpu_check.sh --only tests,train       only these groups of rows (below)
#   scripts/gpu_check.sh --limit 270              stop after 270 s (default 560, GPU_CHECK_LIMIT)
#
# Results go, as each row is decided, to the folder GPU_CHECK_OUT names, else to $OUT (the
# folder a lent GPU machine returns after a command), else to build/gpu_check/results: three
# files, rows.txt (the table so far), summary.txt (the summary line so far, and whether the
# check finished or was stopped) and logs.tar.gz (the logs so far, from build/gpu_check/logs).
# A SIGTERM, a SIGINT or the time limit stops the check: the row running is a FAIL row saying
# so, and the three files are written once more. The default limit, 560 s, fits a command of
# 10 minutes: a stopped command gets SIGKILL at most KILL_GRACE (10 s) after its SIGTERM, and
# the results are written before that wait, so the check ends about 570 s in, leaving the rest
# for the copy back. Every program the check starts runs under `timeout -k` (a time of its
# own, then SIGTERM, then SIGKILL), nvidia-smi included, so that neither a hanging driver call
# nor a child that ignores SIGTERM can hold the check past its limit.
#
# Groups, in the order they run (docs/gpu_check.md splits them into calls of at most 5 minutes):
#   driver     nvidia-smi names the GPU and its memory (always; without it the check stops)
#   bundle     (--prebuilt, always) every binary finds its libraries (libcublas from the CUDA
#              toolkit or PyTorch's wheels is looked for when the loader does not find it)
#   googletest (otherwise) GoogleTest from the system, else built from /usr/src/googletest
#   build      (otherwise) train, eval, the benchmark and the tests for sm_90
#   tests      cuda_test_kernels, cuda_test_model, cuda_test_tensor_cores, cuda_test_wmma,
#              cuda_test_simt and test_cli_cuda natively, each from its GoogleTest XML: FAIL unless it ran tests,
#              none failed and none skipped; then the precision test alone, with its numbers
#   train      the runs of the CPU reference computed beforehand (GPU_CHECK_REFERENCE, default
#              test/fixtures/gpu_reference.txt; make gpu-reference) in fp32 and bf16 on the
#              device: every loss and gradient norm within its step's tolerance of the CPU's
#              (fp32 1e-4; bf16 from the measured spread, docs/gpu_check.md), and the loss falls
#   bench      build/bench_gpu (d12, T = 1024, B as fits): its first loss finite and within 0.5
#              of ln V; its timing of each kind of product fused and plain and its choice
#   anchors    scripts/torch_gpt2_bench.py: bench_gpu, a PyTorch GPT-2 and llm.c's trainer (where
#              a prebuilt one is found: GPU_CHECK_LLMC, default DIR/anchors/llmc of the bundle, or
#              build/anchors/llmc) at d12, bf16, B = 16, T = 1024: tokens/s and MFU in one table
#   plan       the memory plans sized from the memory the device reports: the largest B of each
#              size, the benchmark's B, the GPU protocol's runs at once
#   sanitizer  compute-sanitizer memcheck on 2 steps of ./train in each precision; memcheck,
#              synccheck and racecheck on the attention and LayerNorm kernel tests; each row
#              from the sanitizer's XML report and the tests' GoogleTest report; a sanitizer
#              that cannot start on the device is a row of its own (a skip, not a kernel error)
# Exit status 1 when a row failed or the check was stopped (2 for a bad argument).
# COMPUTE_SANITIZER names compute-sanitizer where it is not on PATH or in /usr/local/cuda/bin.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DRY=0
BUNDLE=""
ONLY=all
LIMIT=${GPU_CHECK_LIMIT:-560}
KILL_GRACE=10  # seconds from a command's SIGTERM to its SIGKILL (timeout -k)
GROUPS_KNOWN="driver bundle googletest build tests train bench anchors plan sanitizer"
while [ $# -gt 0 ]; do
  case $1 in
    --dry) DRY=1 ;;
    --prebuilt) BUNDLE=${2:-}; shift ;;
    --only) ONLY=${2:-}; shift ;;
    --limit) LIMIT=${2:-}; shift ;;
    *) echo "gpu_check.sh: unknown argument '$1' (--dry, --prebuilt DIR, --only GROUP,..., --limit SECONDS)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$BUNDLE" ]; then
  [ -d "$BUNDLE" ] || { echo "gpu_check.sh: --prebuilt: no folder '$BUNDLE' (make gpu-bundle makes build/gpu-bundle)" >&2; exit 2; }
  BUNDLE=$(cd "$BUNDLE" && pwd)
fi
[[ $LIMIT =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: --limit: '$LIMIT' is not a number of seconds" >&2; exit 2; }
if [ "$ONLY" != all ]; then
  for group in ${ONLY//,/ }; do
    [[ " $GROUPS_KNOWN " == *" $group "* ]] || { echo "gpu_check.sh: --only: no group '$group' ($GROUPS_KNOWN)" >&2; exit 2; }
  done
fi
ARCH=${GPU_ARCH:-"-gencode arch=compute_90,code=sm_90"}
RESULTS=${GPU_CHECK_OUT:-${OUT:-build/gpu_check/results}}
LOGS=build/gpu_check/logs
REFERENCE=${GPU_CHECK_REFERENCE:-$ROOT/test/fixtures/gpu_reference.txt}
SUMMARY_STATE=running
COUNTS=(0 0 0)  # ok, FAIL, skip
CURRENT=""      # the row being decided
CHILD=""        # the command running for it
TOTAL_START=$SECONDS

# The programs: the bundle's, or those this repository builds.
if [ -n "$BUNDLE" ]; then
  TRAIN=$BUNDLE/train BENCH=$BUNDLE/bench_gpu TEST_DIR=$BUNDLE CLI_TEST=$BUNDLE/test_cli_cuda
  LLMC=${GPU_CHECK_LLMC:-$BUNDLE/anchors/llmc}
else
  TRAIN=$ROOT/train BENCH=$ROOT/build/bench_gpu TEST_DIR=$ROOT/build/cuda CLI_TEST=$ROOT/build/test_cli_cuda
  LLMC=${GPU_CHECK_LLMC:-$ROOT/build/anchors/llmc}
fi
GPU_TESTS=(cuda_test_kernels cuda_test_model cuda_test_tensor_cores cuda_test_wmma cuda_test_simt)

# selected GROUP: true when --only names GROUP (or is not given).
selected() { [ "$ONLY" = all ] || [[ ",$ONLY," == *",$1,"* ]]; }

# ---- the training comparison's tolerances ----
# Relative difference allowed between a device run and the CPU reference at step s (counted
# from 0): BASE + SLOPE·s. fp32 computes what the CPU computes, up to the order of sums. bf16's
# come from the spread of bf16 against fp32 measured on the emulated device over 4 seeds and
# both placements (scripts/bf16_spread.sh; docs/gpu_check.md gives the distribution): a line over
# four times the largest difference seen at each step, never below fp32's. Measured largest: the
# loss 1.2e-5 at step 0 growing to 9.6e-5 at step 9, the gradient norm 1.0e-3 to 2.7e-3 at every step.
FP32_TOL=(1e-4 0 1e-4 0)           # loss base, slope; grad norm base, slope
BF16_TOL=(1e-4 4e-5 1.1e-2 0)

# ---- results: rows as they are decided, the summary, the logs ----
# write_results: RESULTS/summary.txt and RESULTS/logs.tar.gz as they stand (each replaced whole,
# so a kill leaves the previous one; logs over 4 MiB and anything but logs and reports are left out).
write_results() {
  local summary
  summary=$(printf 'gpu_check-summary: %d ok, %d failed, %d skipped, %d s (%s)' \
            "${COUNTS[0]}" "${COUNTS[1]}" "${COUNTS[2]}" $((SECONDS - TOTAL_START)) "$SUMMARY_STATE")
  echo "$summary" >"$RESULTS/summary.txt.tmp" && mv "$RESULTS/summary.txt.tmp" "$RESULTS/summary.txt"
  (cd "$LOGS" && find . -type f -size -4M \( -name '*.log' -o -name '*.xml' -o -name '*.jsonl' -o -name '*.txt' \) -print0 |
     bounded 60 tar -czf "$RESULTS/logs.tar.gz.tmp" --null -T - 2>/dev/null) && mv "$RESULTS/logs.tar.gz.tmp" "$RESULTS/logs.tar.gz"
}

# row STEP RESULT DETAILS: one row of the table (RESULT ok, FAIL or skip), printed and kept now.
row() {
  local line
  line=$(printf '%-30s %-5s %s' "$1" "$2" "$3")
  echo "$line"
  echo "$line" >>"$RESULTS/rows.txt"
  case $2 in ok) COUNTS[0]=$((COUNTS[0] + 1)) ;; FAIL) COUNTS[1]=$((COUNTS[1] + 1)) ;; *) COUNTS[2]=$((COUNTS[2] + 1)) ;; esac
  CURRENT=""
  write_results
}

# finish: the summary line; exit status 1 when a row failed.
finish() {
  trap - TERM INT USR1
  [ -n "$WATCHDOG" ] && { pkill -TERM -P "$WATCHDOG" 2>/dev/null; kill "$WATCHDOG" 2>/dev/null; }
  [ "$SUMMARY_STATE" = running ] && SUMMARY_STATE=finished
  write_results
  cat "$RESULTS/summary.txt"
  [ "${COUNTS[1]}" = 0 ]
  exit $?
}

# stop WHY: the check is stopped (a signal, or its time limit): the command running is sent
# SIGTERM (and, by its timeout -k, SIGKILL KILL_GRACE s later), the row it was deciding fails,
# saying so, and the results are written; then the check waits for that command to end, so that
# none of its processes outlives it. Further signals are ignored meanwhile: the stop is bounded.
stop() {
  trap '' TERM INT USR1
  local child=$CHILD
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  SUMMARY_STATE="stopped by $1 after $((SECONDS - TOTAL_START)) s"
  row "${CURRENT:-stopped}" FAIL "unfinished: stopped by $1"
  [ -n "$child" ] && wait "$child" 2>/dev/null
  finish
}

# run_limited SECONDS LOG COMMAND...: runs COMMAND for at most SECONDS (then SIGTERM, and SIGKILL
# KILL_GRACE s later should it ignore that), its output in LOG, in the background so that a
# signal reaches stop() at once; returns COMMAND's exit status (124, or 137 after the SIGKILL,
# when it timed out: timed_out).
run_limited() {
  local seconds=$1 log=$2
  shift 2
  timeout -k "$KILL_GRACE" "$seconds" "$@" >"$log" 2>&1 &
  CHILD=$!
  wait "$CHILD" 2>/dev/null  # (no "Killed" line from bash for a command ended by SIGKILL)
  local status=$?
  CHILD=""
  return $status
}

# timed_out STATUS: true when run_limited's STATUS says the command ran out of time.
timed_out() { [ "$1" = 124 ] || [ "$1" = 137 ]; }

# bounded SECONDS COMMAND...: a short command whose output is read (ldd, python3, tar), in the
# foreground, under the same timeout -k: a signal waits for it at most SECONDS + KILL_GRACE.
bounded() {
  local seconds=$1
  shift
  timeout -k "$KILL_GRACE" "$seconds" "$@"
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
  for run in $(sed -n 's/^# run \([A-Za-z0-9_]*\): .*/\1/p' "$REFERENCE" 2>/dev/null); do
    for p in fp32 bf16; do
      printf 'train      %-30s %-56s %s\n' "train $run $p" "$TRAIN -device cuda -precision $p (${REFERENCE#$ROOT/}'s args)" "each loss and grad norm within its step's tolerance; loss falls"
    done
  done
  printf 'bench      %-30s %-56s %s\n' bench "$BENCH (d12, T = 1024)" "runs; first loss finite, within 0.5 of ln V"
  printf 'bench      %-30s %-56s %s\n' "fused products" "$BENCH's timing of each kind fused and plain" "its choice (a refused kind runs plain)"
  printf 'anchors    %-30s %-56s %s\n' "side by side" "scripts/torch_gpt2_bench.py (bench_gpu, PyTorch, llm.c)" "every program found ran; the table"
  for size in d12 d24 d36 d48; do
    printf 'plan       %-30s %-56s %s\n' "plan $size bf16" "$BENCH -plan -init $size -T 1024 -fit (device GiB)" "a B fits"
  done
  printf 'plan       %-30s %-56s %s\n' "plan gpu protocol" "$BENCH -plan (its largest run) -fit (device GiB)" "its runs at once fit"
  for p in fp32 bf16; do
    printf 'sanitizer  %-30s %-56s %s\n' "memcheck train $p" "compute-sanitizer --tool memcheck --xml $TRAIN -device cuda -precision $p (2 steps)" "no record, exit 0"
  done
  for tool in memcheck synccheck racecheck; do
    printf 'sanitizer  %-30s %-56s %s\n' "$tool attention+LN" "compute-sanitizer --tool $tool --xml $t/cuda_test_kernels (attention, LayerNorm)" "no record; tests ran, none failed or skipped"
  done
  exit 0
fi

mkdir -p "$RESULTS" "$LOGS" || exit 2
RESULTS=$(cd "$RESULTS" && pwd) LOGS=$(cd "$LOGS" && pwd)
rm -rf "${LOGS:?}"/* "$RESULTS/rows.txt" "$RESULTS/summary.txt" "$RESULTS/logs.tar.gz"
# The time limit: a watchdog that signals this script (stop() writes what is there).
WATCHDOG=""
trap 'stop SIGTERM' TERM
trap 'stop SIGINT' INT
# shellcheck disable=SC2064  # the limit is fixed: expanded now
trap "stop 'its time limit of $LIMIT s'" USR1
{ sleep "$LIMIT" && kill -USR1 $$; } >/dev/null 2>&1 &
WATCHDOG=$!
echo "==== gpu_check ($(date -u '+%Y-%m-%d %H:%M UTC')${BUNDLE:+, prebuilt $BUNDLE}; groups: $ONLY; limit $LIMIT s; results in $RESULTS)"
printf '%-30s %-5s %s\n' step result details | tee "$RESULTS/rows.txt"

# 1. The driver, and the memory the device reports (MiB). nvidia-smi runs in the background, so
# that a driver that does not answer is stopped by its own time (20 s) or by the check's limit.
CURRENT=driver
DEVICE_MIB=0
run_limited 20 "$LOGS/nvidia-smi.log" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=$?
GPU=$(head -1 "$LOGS/nvidia-smi.log")
if [ $status = 0 ] && [ -n "$GPU" ]; then
  DEVICE_MIB=$(echo "$GPU" | awk -F, '{print $3 + 0}')
  row driver ok "$GPU"
elif timed_out $status; then
  row driver FAIL "nvidia-smi did not answer in 20 s: the driver or the device hangs"
  finish
else
  row driver FAIL "nvidia-smi (exit status $status): ${GPU:-it named no GPU}"
  finish
fi

# 2. The bundle's libraries (every call needs them), or GoogleTest and the build.
# find_library NAME: a folder holding NAME (a CUDA toolkit's, the system's, PyTorch's wheels').
find_library() {
  local dir
  for dir in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu \
             $(bounded 20 python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null | xargs -n1 2>/dev/null |
               sed 's|$|/nvidia/cu13/lib|; p; s|/cu13/lib$|/cublas/lib|'); do
    [ -e "$dir/$1" ] && { echo "$dir"; return 0; }
  done
  return 1
}
# missing_libraries BINARY: the libraries the loader does not find for BINARY, one a line.
missing_libraries() { bounded 20 ldd "$1" 2>&1 | awk '/not found/ {print $1}'; }

if [ -n "$BUNDLE" ]; then
  CURRENT="bundle libraries"
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
  CURRENT=GoogleTest
  CXX_FOR_PROBE=${CXX:-g++}
  GTEST_SRC=${GTEST_SRC:-/usr/src/googletest/googletest}
  if ! echo '#include <gtest/gtest.h>' | $CXX_FOR_PROBE -std=c++17 -E -x c++ - >/dev/null 2>&1; then
    GTEST=none
    if [ -f "$GTEST_SRC/src/gtest-all.cc" ]; then
      mkdir -p "$LOGS/gtest/lib"
      if $CXX_FOR_PROBE -std=c++17 -O2 -pthread -I"$GTEST_SRC/include" -I"$GTEST_SRC" -c "$GTEST_SRC/src/gtest-all.cc" -o "$LOGS/gtest/gtest-all.o" &&
         $CXX_FOR_PROBE -std=c++17 -O2 -pthread -I"$GTEST_SRC/include" -c "$GTEST_SRC/src/gtest_main.cc" -o "$LOGS/gtest/gtest_main.o" &&
         ar rcs "$LOGS/gtest/lib/libgtest.a" "$LOGS/gtest/gtest-all.o" &&
         ar rcs "$LOGS/gtest/lib/libgtest_main.a" "$LOGS/gtest/gtest_main.o"; then
        export CPATH="$GTEST_SRC/include${CPATH:+:$CPATH}" LIBRARY_PATH="$LOGS/gtest/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
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
  CURRENT=build
  TARGETS=(train eval build/bench_gpu)
  [ "$GTEST" != none ] && TARGETS+=("${GPU_TESTS[@]/#/build/cuda/}" build/test_cli_cuda)
  # The CUDA objects are removed first: make cannot tell which GPU_ARCH built them.
  rm -f build/gpt2_cuda.o build/bench_gpu build/cuda/cuda_test_* train eval
  start=$SECONDS
  if run_limited "$LIMIT" "$LOGS/build.log" make -j"$(nproc)" GPU_ARCH="$ARCH" "${TARGETS[@]}"; then
    row build ok "$((SECONDS - start)) s ($ARCH)"
  else
    row build FAIL "see logs/build.log"
    finish
  fi
fi

# 3. The GPU tests. gtest_verdict LOG XML STATUS SECONDS: sets VERDICT (ok or FAIL) and DETAILS
# for one GoogleTest run, from its XML report: FAIL unless it ran tests, none failed, none was
# skipped and it exited 0. A GoogleTest that did not know a flag prints its help, runs nothing
# and writes no report.
gtest_verdict() {
  local log=$1 xml=$2 status=$3 seconds=$4
  local tests=0 failures=0 skips=0 worst
  if [ -s "$xml" ]; then
    tests=$(grep -o '<testsuites [^>]*' "$xml" | grep -o ' tests="[0-9]*"' | head -1 | tr -dc 0-9)
    failures=$(grep -o '<testsuites [^>]*' "$xml" | grep -o ' failures="[0-9]*"' | head -1 | tr -dc 0-9)
    skips=$(grep -c '<skipped' "$xml")
  fi
  tests=${tests:-0} failures=${failures:-0}
  worst=$(grep -o 'relative error [0-9.e+-]\+' "$log" | awk '{print $3}' | sort -g | tail -1)
  local counted="$((tests - failures - skips)) passed, $failures failed, $skips skipped${worst:+, worst error $worst}, $seconds s"
  VERDICT=FAIL
  if grep -q 'This program contains tests written using Google Test' "$log"; then
    DETAILS="GoogleTest printed its help and ran nothing: a flag it does not know ($(grep -o -- '--gtest_[a-z_]*' "$log" | head -1))"
  elif timed_out "$status"; then DETAILS="timed out: $counted"
  elif [ ! -s "$xml" ]; then DETAILS="no GoogleTest report (exit status $status)"
  elif [ "$tests" = 0 ]; then DETAILS="ran 0 tests"
  elif [ "$skips" != 0 ]; then DETAILS="$counted (on a GPU nothing may skip)"
  elif [ "$failures" != 0 ] || [ "$status" != 0 ]; then DETAILS="$counted, exit status $status"
  else VERDICT=ok DETAILS=$counted; fi
}

# run_gtest NAME DIR BINARY [ARGS]: runs a GoogleTest binary in folder DIR (at most 240 s) and
# writes its row; ROW_EXTRA (a command) may add to the details from the log.
run_gtest() {
  local name=$1 dir=$2 binary=$3
  shift 3
  CURRENT=$name
  local start=$SECONDS xml="$LOGS/$name.xml" log="$LOGS/$name.log"
  if [ ! -x "$binary" ]; then row "$name" FAIL "$binary is not there"; return; fi
  run_limited 240 "$log" env -C "$dir" CUDA_TEST_REPORT=1 "$binary" --gtest_brief=1 --gtest_output="xml:$xml" "$@"
  gtest_verdict "$log" "$xml" $? $((SECONDS - start))
  [ "$VERDICT" = ok ] || DETAILS="$DETAILS; see logs/$name.log"
  row "$name" "$VERDICT" "$DETAILS${ROW_EXTRA:+$($ROW_EXTRA "$log")}"
}

# precision_numbers LOG: the precision test's errors, as "; Pre-LN fp32 stream ..., bf16 stream ...".
precision_numbers() {
  grep -o 'precision: [A-Za-z]*-LN.*' "$1" |
    sed 's/.*precision: \([A-Za-z]*-LN\).*fp32 stream (bf16 run) \([^,]*\), bf16 stream \(.*\)/\1 fp32 stream \2, bf16 stream \3/' |
    paste -sd ';' - | sed 's/^./; &/'
}

if selected tests; then
  for test in "${GPU_TESTS[@]}"; do run_gtest "$test" "$ROOT" "$TEST_DIR/$test"; done
  # test_cli_cuda runs ./train, ./eval and build/bench_gpu from where it runs, and reads
  # test/golden: with a bundle, from a folder that links them to the bundle's programs.
  cli_dir=$ROOT
  if [ -n "$BUNDLE" ]; then
    cli_dir=$LOGS/cli
    mkdir -p "$cli_dir/build"
    ln -s "$BUNDLE/train" "$cli_dir/train"
    ln -s "$BUNDLE/eval" "$cli_dir/eval"
    ln -s "$BUNDLE/bench_gpu" "$cli_dir/build/bench_gpu"
    ln -s "$ROOT/test" "$cli_dir/test"
  fi
  # (BenchmarkHoldsOneModelAtATime sets the emulated device's memory: emulated only.)
  run_gtest test_cli_cuda "$cli_dir" "$CLI_TEST" --gtest_filter=-CliCuda.BenchmarkHoldsOneModelAtATime
  ROW_EXTRA=precision_numbers run_gtest precision "$ROOT" "$TEST_DIR/cuda_test_model" --gtest_filter='CudaMixedPrecision.*'
fi

# 4. The runs of the CPU reference on the device, each against the reference's numbers.
# records_of DIR KEY: the values of KEY in DIR/log.jsonl's step records, one a line.
records_of() { grep '"loss"' "$1/log.jsonl" 2>/dev/null | grep -v -e val_loss -e event | sed "s/.*\"$2\": \([^,}]*\).*/\1/"; }
# reference_of RUN COLUMN: the reference's column (3 loss, 4 grad norm) of RUN, one step a line.
reference_of() { awk -v run="$1" -v column="$2" '!/^#/ && $1 == run {print $column}' "$REFERENCE"; }
# A finite decimal number, as an awk pattern (awks differ in what they make of "nan" and "inf").
NUMBER='^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$'
# compare GOT WANT BASE SLOPE: "WORST PASS": the largest |got − want| / |want| of two columns of
# numbers (step s on line s + 1), and 1 when every step is within BASE + SLOPE·s, else 0; WORST
# is "inf" when a value is not a finite number.
compare() {
  paste -d ' ' <(echo "$1") <(echo "$2") |
    awk -v number="$NUMBER" -v base="$3" -v slope="$4" '
      {if ($1 !~ number || $2 !~ number || $2 == 0) {w = "inf"; exit}
       d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d
       if (d > base + slope * (NR - 1)) over = 1}
      END {if (w == "inf") print "inf 0"; else printf "%.1e %d\n", w, !over}'
}
# tolerance_text BASE SLOPE: "1e-4" or "4e-3 + 1e-3·step".
tolerance_text() { if [ "$2" = 0 ]; then echo "$1"; else echo "$1 + $2·step"; fi; }

if selected train; then
  CURRENT=reference
  runs=$(sed -n 's/^# run \([A-Za-z0-9_]*\): .*/\1/p' "$REFERENCE" 2>/dev/null)
  args=$(sed -n 's/^# args: //p' "$REFERENCE" 2>/dev/null)
  if [ -z "$runs" ] || [ -z "$args" ]; then
    row reference FAIL "no CPU reference in $REFERENCE (make gpu-reference writes it)"
  fi
  for run in $runs; do
    flags=$(sed -n "s/^# run $run: //p" "$REFERENCE")
    ref_loss=$(reference_of "$run" 3)
    ref_norm=$(reference_of "$run" 4)
    steps=$(echo "$ref_loss" | grep -c .)
    for precision in fp32 bf16; do
      CURRENT="train $run $precision"
      tol=("${FP32_TOL[@]}"); [ $precision = bf16 ] && tol=("${BF16_TOL[@]}")
      dir="$LOGS/cuda_${run}_$precision"
      start=$SECONDS
      # shellcheck disable=SC2086
      run_limited 120 "$dir.log" "$TRAIN" -device cuda -precision $precision $args $flags -out "$dir"
      status=$?
      loss=$(records_of "$dir" loss)
      norm=$(records_of "$dir" grad_norm)
      read -r worst_loss loss_ok < <(compare "$loss" "$ref_loss" "${tol[0]}" "${tol[1]}")
      read -r worst_norm norm_ok < <(compare "$norm" "$ref_norm" "${tol[2]}" "${tol[3]}")
      first=$(echo "$loss" | head -1) last=$(echo "$loss" | tail -1)
      details="loss $first -> $last; vs cpu: losses $worst_loss (tol $(tolerance_text "${tol[0]}" "${tol[1]}")),"
      details="$details grad norms $worst_norm (tol $(tolerance_text "${tol[2]}" "${tol[3]}")), $((SECONDS - start)) s"
      if [ $status -eq 0 ] && [ "$(echo "$loss" | grep -c .)" -eq "$steps" ] && [ "$loss_ok" = 1 ] && [ "$norm_ok" = 1 ] &&
         awk -v a="$first" -v b="$last" 'BEGIN {exit !(b + 0 < a + 0)}'; then
        row "train $run $precision" ok "$details"
      else
        row "train $run $precision" FAIL "$details; $(echo "$loss" | grep -c .) of $steps steps, exit status $status, see logs/cuda_${run}_$precision.log"
      fi
    done
  done
fi

# 5. The benchmark (B: the largest up to 64 whose plan fits the free memory): its first loss, on
# fresh weights, is about ln V; and its timing of each kind of product fused and plain, with the
# choice -fused auto makes from it (docs/cuda.md §3, "Fused or plain"): a kind cuBLASLt refuses
# runs plain, named in the row, not a failure.
if selected bench; then
  CURRENT=bench
  start=$SECONDS
  run_limited 240 "$LOGS/bench.log" "$BENCH"
  status=$?
  summary=$(grep '^bench-summary:' "$LOGS/bench.log" | sed 's/^bench-summary: //')
  first=$(echo "$summary" | grep -o 'first_loss=[^ ]*' | cut -d= -f2)
  ln_v=$(echo "$summary" | grep -o 'ln_V=[^ ]*' | cut -d= -f2)
  if [ $status -eq 0 ] && [ -n "$summary" ] && [[ $first =~ $NUMBER ]] && [[ $ln_v =~ $NUMBER ]] &&
     awk -v f="$first" -v v="$ln_v" 'BEGIN {d = f - v; if (d < 0) d = -d; exit !(d <= 0.5)}'; then
    row bench ok "$summary, $((SECONDS - start)) s"
  else
    row bench FAIL "${summary:-no summary} (first loss must be finite and within 0.5 of ln V), exit status $status; see logs/bench.log"
  fi
  fused=$(grep '^bench-fused:' "$LOGS/bench.log" | sed 's/^bench-fused: //')
  if [ -n "$fused" ]; then row "fused products" ok "$fused"
  else row "fused products" FAIL "the bench timed no product fused and plain, exit status $status; see logs/bench.log"; fi
fi

# 6. Side by side: this project's step, a PyTorch GPT-2's and llm.c's, one table.
if selected anchors; then
  CURRENT="side by side"
  start=$SECONDS
  run_limited 280 "$LOGS/side_by_side.log" python3 "$ROOT/scripts/torch_gpt2_bench.py" --bench-gpu "$BENCH" --llmc "$LLMC" \
    --table "$RESULTS/side_by_side.txt"
  status=$?
  summary=$(grep '^side-by-side-summary:' "$LOGS/side_by_side.log" | sed 's/^side-by-side-summary: //')
  if [ $status -eq 0 ] && [ -n "$summary" ]; then row "side by side" ok "$summary, $((SECONDS - start)) s"
  else row "side by side" FAIL "${summary:-no table}, exit status $status; see logs/side_by_side.log"; fi
fi

# 7. The memory plans, sized from the memory the device reports (docs/cuda_memory.md).
if selected plan; then
  gib=$(awk -v m="$DEVICE_MIB" 'BEGIN {printf "%.1f", m / 1024}')
  for size in d12 d24 d36 d48; do
    CURRENT="plan $size bf16"
    if run_limited 60 "$LOGS/plan_$size.log" "$BENCH" -plan -init "$size" -T 1024 -fit "$gib" &&
       largest=$(sed -n 's/^largest B that fits.*: \([0-9]*\)$/\1/p' "$LOGS/plan_$size.log") && [ "${largest:-0}" -gt 0 ]; then
      bench_b=$(sed -n "s/^bench_gpu's default B with .*: \([0-9]*\) .*/\1/p" "$LOGS/plan_$size.log")
      row "plan $size bf16" ok "$gib GiB: ./train's largest B $largest, bench_gpu's B ${bench_b:-none}"
    else
      row "plan $size bf16" FAIL "no B of $size fits $gib GiB; see logs/plan_$size.log"
    fi
  done
  CURRENT="plan gpu protocol"
  if run_limited 60 "$LOGS/plan_protocol.log" "$ROOT/scripts/gpu_protocol.sh" --jobs-for "$gib" --bench "$BENCH"; then
    row "plan gpu protocol" ok "$(tail -1 "$LOGS/plan_protocol.log")"
  else
    row "plan gpu protocol" FAIL "$(tail -1 "$LOGS/plan_protocol.log"); see logs/plan_protocol.log"
  fi
fi

# 8. compute-sanitizer, each row from its XML report (--xml --save): memcheck on whole steps,
# then memcheck, synccheck and racecheck (the slowest) on the kernels most likely to race
# (attention's tiles, LayerNorm's warps and shared column sums).
# sanitize NAME TOOL COMMAND...: runs COMMAND under TOOL; sets FINDINGS (the report's records,
# or "no report") and STATUS; returns 1 when the sanitizer could not start on the device.
sanitize() {
  local name=$1 tool=$2
  shift 2
  CURRENT=$name
  local xml="$LOGS/${name// /_}.sanitizer.xml"
  run_limited 240 "$LOGS/${name// /_}.log" "$SANITIZER" --tool "$tool" --xml yes --save "$xml" --error-exitcode 1 "$@"
  STATUS=$?
  grep -q 'Device not supported' "$LOGS/${name// /_}.log" && return 1
  if grep -q '<ComputeSanitizerOutput' "$xml" 2>/dev/null; then
    FINDINGS="$(grep -o '<record[ >]' "$xml" | wc -l) records"
  else
    FINDINGS="no report"
  fi
  return 0
}
if selected sanitizer; then
  SANITIZER=${COMPUTE_SANITIZER-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)}
  if [ ! -x "$SANITIZER" ]; then
    row compute-sanitizer FAIL "not installed (the CUDA toolkit's compute-sanitizer): nothing was sanitised"
  else
    starts=1
    for precision in fp32 bf16; do
      start=$SECONDS
      if ! sanitize "memcheck train $precision" memcheck "$TRAIN" -device cuda -precision $precision -init l2h4c64 \
             -T 64 -B 2 -total_batch 128 -steps 2 -eval_every 0 -save_every 0 -stats_every 1 -ln peri \
             -out "$LOGS/sanitizer_$precision"; then
        starts=0
        break
      fi
      if [ "$FINDINGS" = "0 records" ] && [ $STATUS -eq 0 ]; then row "memcheck train $precision" ok "$FINDINGS, $((SECONDS - start)) s"
      else row "memcheck train $precision" FAIL "$FINDINGS, exit status $STATUS; see logs/memcheck_train_$precision.log"; fi
    done
    for tool in memcheck synccheck racecheck; do
      [ $starts = 1 ] || break
      start=$SECONDS
      name="$tool attention+LN"
      xml="$LOGS/${tool}_kernels.xml"
      sanitize "$name" $tool "$TEST_DIR/cuda_test_kernels" --gtest_brief=1 --gtest_output="xml:$xml" \
        --gtest_filter='*Attention*:*LayerNorm*' || { starts=0; break; }
      gtest_verdict "$LOGS/${name// /_}.log" "$xml" $STATUS $((SECONDS - start))
      if [ "$FINDINGS" = "0 records" ] && [ "$VERDICT" = ok ]; then row "$name" ok "$FINDINGS; $DETAILS"
      else row "$name" FAIL "$FINDINGS; $DETAILS; see logs/${name// /_}.log"; fi
    done
    [ $starts = 1 ] ||
      row compute-sanitizer skip "it cannot start on this device (Device not supported, see logs/${CURRENT// /_}.log): nothing more was sanitised; not a kernel error"
  fi
fi

finish
