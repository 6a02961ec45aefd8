#!/usr/bin/env bash
# Runs every GoogleTest binary given on the command line and prints one closing line
# "N passed, N failed, N skipped" that CI reads. Exit status 1 when any test failed or a
# binary crashed.
#
# An argument may also be NAME=VALUE:BINARY, which runs BINARY with the environment variable
# NAME set to VALUE (VALUE may itself contain ':'), e.g. SIMT_ORDER=reverse:build/emu/cuda_test_x
# runs an emulated CUDA test with the reverse thread order. Its tests count once per run.
#
# With TEST_JOBS=N in the environment (default 1) up to N binaries run at once; each one's
# output is printed whole, in the order given, once it and those before it have finished.
set -u
jobs=${TEST_JOBS:-1}
passed=0; failed=0; skipped=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run INDEX ENTRY: runs one entry, its output into $work/INDEX.out, its counts into $work/INDEX.counts
run() {
  local index=$1 entry=$2 bin assignment="" label xml status tests fails skips crashed=0
  bin="$entry"
  if [[ "$entry" == *=*:* ]]; then assignment="${entry%:*}"; bin="${entry##*:}"; fi
  label="$bin${assignment:+ ($assignment)}"
  xml="$work/$index.xml"
  {
    echo "=== $label"
    env ${assignment:+"$assignment"} "$bin" --gtest_brief=1 --gtest_output="xml:$xml"
    status=$?
    tests=0; fails=0; skips=0
    if [ -s "$xml" ]; then
      tests=$(grep -o '<testsuites [^>]*tests="[0-9]*"' "$xml" | grep -o 'tests="[0-9]*"' | head -1 | tr -dc 0-9)
      fails=$(grep -o '<testsuites [^>]*failures="[0-9]*"' "$xml" | grep -o 'failures="[0-9]*"' | head -1 | tr -dc 0-9)
      skips=$(grep -c '<skipped' "$xml")
      tests=${tests:-0}; fails=${fails:-0}
      grep -o '<skipped message="[^"]*"' "$xml" | sed 's/<skipped message=/  skipped: /' | head -50
    fi
    if [ $status -ne 0 ] && { [ ! -s "$xml" ] || [ "$fails" -eq 0 ]; }; then
      echo "  $label exited with status $status"
      crashed=1
    fi
    echo "$((tests - fails - skips)) $((fails + crashed)) $skips" > "$work/$index.counts"
  } > "$work/$index.out" 2>&1
}

# Prints, in the order given, the output of every entry that has finished and all before it.
printed=0
flush() {
  while [ $printed -lt $index ] && [ -e "$work/$printed.counts" ]; do
    cat "$work/$printed.out"
    read -r p f s < "$work/$printed.counts"
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    printed=$((printed + 1))
  done
}

index=0
for entry in "$@"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; flush; done
  run $index "$entry" &
  index=$((index + 1))
  if [ "$jobs" -eq 1 ]; then wait; flush; fi
done
wait
flush
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
