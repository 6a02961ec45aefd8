#!/usr/bin/env bash
# scripts/bundle_manifest.sh DIR — writes DIR/MANIFEST.txt: what each program in DIR (the GPU
# bundle of `make gpu-bundle`, docs/gpu_check.md) needs from the machine it runs on: the shared
# libraries it names (NEEDED) and where the loader finds each here, its run path, the newest
# glibc and libstdc++ symbol versions it uses, and its size; for the GoogleTest suites (the
# programs named *test*), that GoogleTest is linked in (the GPU machine need not have it) and
# that the suite lists its tests here with the flags gpu_check.sh gives it. Exit status 1 when
# the loader here finds no copy of a library other than the driver's libcuda.so.1 (which the GPU
# machine has and this one need not), or a suite needs a shared GoogleTest or lists no test, so
# a bundle that cannot start anywhere is not made.
set -u
dir=${1:?usage: scripts/bundle_manifest.sh DIR}
[ -d "$dir" ] || { echo "bundle_manifest.sh: no folder '$dir'" >&2; exit 2; }
manifest=$dir/MANIFEST.txt
missing_any=0
{
  echo "MANIFEST of $(cd "$dir" && pwd), made $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n)"
  echo
  echo "Each program needs from the GPU machine:"
  echo "  - an NVIDIA driver for CUDA 13.0 or newer (R580+), which provides libcuda.so.1 (the CUDA runtime"
  echo "    is linked in statically and opens it at start-up);"
  echo "  - the libraries listed under it below that are not part of the C library: libcublas.so.13 and"
  echo "    libcublasLt.so.13 come with the CUDA 13 toolkit (/usr/local/cuda/lib64, on the run path) or"
  echo "    PyTorch's nvidia wheels (scripts/gpu_check.sh --prebuilt looks there too);"
  echo "  - glibc and libstdc++ at least as new as the GLIBC and GLIBCXX versions shown; an x86-64-v3"
  echo "    CPU (AVX2, FMA);"
  echo "  - a GPU of compute capability 9.0 (sm_90 code), or newer (compute_90 PTX the driver compiles);"
  echo "  - nothing of GoogleTest: the test suites carry it (linked in statically; each listed its tests here);"
  echo "  - the repository beside it: scripts/gpu_check.sh, data/ (the bundled corpus), test/golden/,"
  echo "    test/fixtures/gpu_reference.txt (the CPU reference of the training rows, computed beforehand)."
  echo
  for program in "$dir"/*; do
    [ -f "$program" ] && [ -x "$program" ] || continue
    name=$(basename "$program")
    echo "== $name ($(du -k "$program" | cut -f1) KiB)"
    if ! readelf -h "$program" >/dev/null 2>&1; then
      echo "   not an ELF program"
      continue
    fi
    runpath=$(readelf -d "$program" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
    echo "   run path: ${runpath:-none}"
    glibc=$(objdump -T "$program" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
    glibcxx=$(objdump -T "$program" 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
    echo "   newest symbol versions: ${glibc:-no glibc symbols}${glibcxx:+, $glibcxx}"
    resolved=$(ldd "$program" 2>&1)
    for library in $(readelf -d "$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      # ldd: "lib => /path (address)", "lib => not found", or the loader's "/path/lib (address)".
      where=$(echo "$resolved" | awk -v lib="$library" '$1 == lib {print ($3 == "not" ? "NOT FOUND here" : $3)}
                                                       substr($1, length($1) - length(lib)) == "/" lib {print $1}')
      if [ "${where:-NOT FOUND here}" = "NOT FOUND here" ] && [ "$library" != libcuda.so.1 ]; then missing_any=1; fi
      printf '   needs %-28s %s\n' "$library" "${where:-NOT FOUND here}"
    done
    case $name in
      *test*)
        if readelf -d "$program" | grep -q 'NEEDED.*libgtest'; then
          echo "   GoogleTest: a shared library, which the GPU machine need not have: NOT LINKED IN"
          missing_any=1
        else
          listed=$(timeout -k 5 60 "$program" --gtest_list_tests --gtest_brief=1 2>&1)
          tests=$(echo "$listed" | grep -c '^  [A-Za-z0-9_/]')
          if [ "$tests" -gt 0 ] && ! echo "$listed" | grep -q 'This program contains tests written using Google Test'; then
            echo "   GoogleTest: linked in; $tests tests listed here (--gtest_list_tests --gtest_brief=1)"
          else
            echo "   GoogleTest: linked in, but it LISTED NO TEST here (--gtest_list_tests --gtest_brief=1)"
            missing_any=1
          fi
        fi ;;
    esac
  done
} >"$manifest"
cat "$manifest"
[ $missing_any = 0 ] || { echo "bundle_manifest.sh: a library above is not found on this machine, or a test suite does not carry GoogleTest" >&2; exit 1; }
