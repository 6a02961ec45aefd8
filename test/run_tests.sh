#!/usr/bin/env bash
# Runs every GoogleTest binary given on the command line and prints one closing line
# "N passed, N failed, N skipped" that CI reads. Exit status 1 when any test failed or a
# binary crashed.
#
# An argument may also be NAME=VALUE:BINARY, which runs BINARY with the environment variable
# NAME set to VALUE (VALUE may itself contain ':'), e.g. SIMT_ORDER=reverse:build/emu/cuda_test_x
# runs an emulated CUDA test with the reverse thread order. Its tests count once per run.
set -u
passed=0; failed=0; skipped=0; crashed=0
for entry in "$@"; do
  bin="$entry"; assignment=""
  if [[ "$entry" == *=*:* ]]; then assignment="${entry%:*}"; bin="${entry##*:}"; fi
  label="$bin${assignment:+ ($assignment)}"
  xml=$(mktemp)
  echo "=== $label"
  env ${assignment:+"$assignment"} "$bin" --gtest_brief=1 --gtest_output="xml:$xml"
  status=$?
  if [ -s "$xml" ]; then
    tests=$(grep -o '<testsuites [^>]*tests="[0-9]*"' "$xml" | grep -o 'tests="[0-9]*"' | head -1 | tr -dc 0-9)
    fails=$(grep -o '<testsuites [^>]*failures="[0-9]*"' "$xml" | grep -o 'failures="[0-9]*"' | head -1 | tr -dc 0-9)
    skips=$(grep -c '<skipped' "$xml")
    tests=${tests:-0}; fails=${fails:-0}
    passed=$((passed + tests - fails - skips)); failed=$((failed + fails)); skipped=$((skipped + skips))
    grep -o '<skipped message="[^"]*"' "$xml" | sed 's/<skipped message=/  skipped: /' | head -50
  fi
  if [ $status -ne 0 ] && { [ ! -s "$xml" ] || [ "${fails:-0}" -eq 0 ]; }; then
    echo "  $label exited with status $status"
    crashed=$((crashed + 1)); failed=$((failed + 1))
  fi
  rm -f "$xml"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
