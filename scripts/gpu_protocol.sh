#!/usr/bin/env bash
# scripts/gpu_protocol.sh — the CPU protocol's design at larger width and depth, on one GPU
# (docs/protocol.md, *On a GPU*): gpu-e1 (Pre- and Peri-LN × Δt 1, 0.1 over E1's learning rates),
# gpu-e2 (deep runs at L = 48 and 96, C = 256, Δt = 1, lr 0.01 and 0.03) and gpu-e3 (divergence
# over lr 0.13 to 1, wd 0 and 0.1, Δt 1 and 0.1), then the claims table; bf16 first, then fp32;
# every run with the same fused products (the presets' -fused all). It runs in parts, each one
# command that resumes where it stopped and is modelled within 8 minutes on one 80 GB H100: e1,
# e2-sSEED for each seed of E2 (501 to 504), e3-sSEED for each seed of E3 (601 to 605), claims.
# Every table, report, figure and claims.md goes to OUT/PRECISION/ (the runs to
# OUT/PRECISION/runs/); OUT/summary.txt has the wall time of each part. Not yet run on a GPU.
#
#   scripts/gpu_protocol.sh OUT                           every part, bf16 then fp32
#   scripts/gpu_protocol.sh --precision bf16 --part e1 OUT   one part of one precision
#   scripts/gpu_protocol.sh --prebuilt build/gpu-bundle OUT   the binaries of make gpu-bundle
#   TRAIN_BIN=... EVAL_BIN=... scripts/gpu_protocol.sh OUT    any others
#   E1_SEEDS=1 E2_SEEDS=2 E3_SEEDS=3 scripts/gpu_protocol.sh ...   other seeds (default the presets')
#   E1_LRS=1e-3,1e-2 E2_DEPTHS=2,4 E3_LRS=0.1,1 scripts/gpu_protocol.sh ...   a smaller grid
#                                                          (test_sweep's tiny run)
#   scripts/gpu_protocol.sh --device cpu OUT -- FLAGS...  on the CPU (one pass, no precision),
#                                                          FLAGS added to every sweep (test_sweep
#                                                          runs it so on a tiny model)
#   scripts/gpu_protocol.sh --jobs-for GIB [--bench BENCH]  how many runs at once fit GIB, and stop
#
# On the GPU the runs at once are sized from the memory the device reports (nvidia-smi): as many
# as fit, at most the presets' 8, each taking the plan of the protocol's largest run (gpu-e2's
# deepest model, l96h4c256v4096 at B = 16, T = 128, in fp32: build/bench_gpu -plan) and ./train's
# 1 GiB reserve (docs/cuda_memory.md).
# Exit status: 0 done, 1 an experiment failed (its sweep's log says which run), 2 bad arguments.
set -u
cd "$(dirname "$0")/.." || exit 1
TRAIN_BIN=${TRAIN_BIN:-$PWD/train}
EVAL_BIN=${EVAL_BIN:-$PWD/eval}
BENCH_BIN=${BENCH_BIN:-$PWD/build/bench_gpu}
DEVICE=cuda
OUT=
JOBS_FOR=
EXTRA=()
PRECISION=
E1_SEEDS=${E1_SEEDS:-401-405}
E2_SEEDS=${E2_SEEDS:-501 502 503 504}
E3_SEEDS=${E3_SEEDS:-601 602 603 604 605}
E1_GRID=()
[ -z "${E1_LRS:-}" ] || E1_GRID=(--lr "$E1_LRS")
E2_GRID=()
[ -z "${E2_DEPTHS:-}" ] || E2_GRID=(--depth "$E2_DEPTHS")
E3_GRID=()
[ -z "${E3_LRS:-}" ] || E3_GRID=(--lr "$E3_LRS")
PARTS=(e1)
for seed in $E2_SEEDS; do PARTS+=("e2-s$seed"); done
for seed in $E3_SEEDS; do PARTS+=("e3-s$seed"); done
PARTS+=(claims)
CHOSEN=
while [ $# -gt 0 ]; do
  case $1 in
    --prebuilt) [ -d "${2:-}" ] || { echo "gpu_protocol.sh: --prebuilt: no folder '${2:-}'" >&2; exit 2; }
                TRAIN_BIN=$(cd "$2" && pwd)/train; EVAL_BIN=$(cd "$2" && pwd)/eval; BENCH_BIN=$(cd "$2" && pwd)/bench_gpu; shift ;;
    --jobs-for) JOBS_FOR=${2:-}; shift ;;
    --bench) BENCH_BIN=${2:-}; shift ;;
    --device) DEVICE=${2:-}; shift ;;
    --precision) PRECISION=${2:-}; shift
                 case $PRECISION in bf16|fp32) ;; *) echo "gpu_protocol.sh: --precision $PRECISION: bf16 or fp32" >&2; exit 2 ;; esac ;;
    --part) CHOSEN=${2:-}; shift
            [[ " ${PARTS[*]} " == *" $CHOSEN "* ]] || { echo "gpu_protocol.sh: --part $CHOSEN: one of ${PARTS[*]}" >&2; exit 2; } ;;
    --) shift; EXTRA=("$@"); break ;;
    -*) echo "gpu_protocol.sh: unknown argument '$1' (--prebuilt DIR, --device cpu|cuda, --precision P, --part NAME, --jobs-for GIB, OUT, -- FLAGS)" >&2; exit 2 ;;
    *) [ -z "$OUT" ] || { echo "gpu_protocol.sh: one OUT folder, not '$OUT' and '$1'" >&2; exit 2; }; OUT=$1 ;;
  esac
  shift
done
# protocol_jobs GIB: "JOBS PLAN_GIB": how many of the protocol's runs fit at once in GIB of device
# memory (at most 8), and the plan of its largest run.
protocol_jobs() {
  local plan
  plan=$("$BENCH_BIN" -plan -init l96h4c256v4096 -B 16 -T 128 -precision fp32 2>/dev/null |
         sed -n 's/^planned device memory: \([0-9.]*\) GiB$/\1/p')
  [ -n "$plan" ] || return 1
  awk -v gib="$1" -v plan="$plan" 'BEGIN {jobs = int(gib / (plan + 1)); if (jobs > 8) jobs = 8; print jobs, plan}'
}
if [ -n "$JOBS_FOR" ]; then
  [[ $JOBS_FOR =~ ^[0-9]+([.][0-9]*)?$ ]] || { echo "gpu_protocol.sh: --jobs-for: '$JOBS_FOR' is not a number of GiB" >&2; exit 2; }
  read -r jobs plan < <(protocol_jobs "$JOBS_FOR") || { echo "gpu_protocol.sh: no plan from $BENCH_BIN -plan" >&2; exit 1; }
  echo "gpu protocol: $jobs runs at once in $JOBS_FOR GiB (8 wanted), each its largest run's $plan GiB and 1 GiB reserve"
  [ "$jobs" -gt 0 ]
  exit $?
fi
[ -n "$OUT" ] || { echo "gpu_protocol.sh: no OUT folder (scripts/gpu_protocol.sh [--prebuilt DIR] OUT)" >&2; exit 2; }
case $DEVICE in cuda) PRECISIONS=(bf16 fp32) ;; cpu) PRECISIONS=(cpu) ;;
  *) echo "gpu_protocol.sh: --device $DEVICE: cpu or cuda" >&2; exit 2 ;; esac
[ -z "$PRECISION" ] || [ "$DEVICE" = cuda ] || { echo "gpu_protocol.sh: --precision needs --device cuda" >&2; exit 2; }
[ -z "$PRECISION" ] || PRECISIONS=("$PRECISION")
[ -z "$CHOSEN" ] || PARTS=("$CHOSEN")
for bin in "$TRAIN_BIN" "$EVAL_BIN"; do
  [ -x "$bin" ] || { echo "gpu_protocol.sh: no program $bin (make train eval, or --prebuilt DIR)" >&2; exit 2; }
done
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
: >> "$SUMMARY"
STATUS=0

# experiment NAME PRECISION FLAGS...: one sweep, its log in OUT/PRECISION/NAME.log.
experiment() {
  local name=$1 precision=$2 start=$SECONDS
  shift 2
  local dir=$OUT/$precision
  local flags=(--preset "gpu-$name" --device "$DEVICE" --out "$dir/runs/$name" --publish "$dir/$name"
               --train-bin "$TRAIN_BIN" --eval-bin "$EVAL_BIN" "${JOBS[@]}")
  [ "$precision" = cpu ] || flags+=(--precision "$precision")
  if python3 sweep.py "${flags[@]}" "$@" "${EXTRA[@]}" > "$dir/$name.log" 2>&1; then
    echo "$precision $name: done in $((SECONDS - start)) s" | tee -a "$SUMMARY"
  else
    echo "$precision $name: FAILED after $((SECONDS - start)) s (see $dir/$name.log)" | tee -a "$SUMMARY"
    STATUS=1
    return 1
  fi
}

JOBS=()
if [ "$DEVICE" = cuda ]; then
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  read -r jobs plan < <(protocol_jobs "$(awk -v m="${mib:-0}" 'BEGIN {printf "%.1f", m / 1024}')") ||
    { echo "gpu_protocol.sh: no plan from $BENCH_BIN -plan (make build/bench_gpu, or --prebuilt DIR)" >&2; exit 2; }
  [ "$jobs" -gt 0 ] || { echo "gpu_protocol.sh: the device's memory (${mib:-unknown} MiB, nvidia-smi) holds no run of the protocol" >&2; exit 2; }
  JOBS=(--jobs "$jobs")
  echo "gpu protocol: $jobs runs at once in ${mib} MiB" | tee -a "$SUMMARY"
fi

# part NAME PRECISION: one part of the protocol; e2-sSEED and e3-sSEED add that seed to E2, E3.
part() {
  local name=$1 precision=$2
  case $name in
    e1) experiment e1 "$precision" --seeds "${E1_SEEDS// /,}" "${E1_GRID[@]}" ;;
    e2-s*) experiment e2 "$precision" --seeds "${name#e2-s}" "${E2_GRID[@]}" ;;
    e3-s*) experiment e3 "$precision" --seeds "${name#e3-s}" "${E3_GRID[@]}" ;;
    claims)
      if python3 sweep.py --claims --docs "$OUT/$precision" > "$OUT/$precision/claims.log" 2>&1; then
        echo "$precision claims: $OUT/$precision/claims.md" | tee -a "$SUMMARY"
      else
        echo "$precision claims: FAILED (see $OUT/$precision/claims.log)" | tee -a "$SUMMARY"
        STATUS=1
        return 1
      fi ;;
  esac
}

TOTAL=$SECONDS
for precision in "${PRECISIONS[@]}"; do
  mkdir -p "$OUT/$precision"
  for name in "${PARTS[@]}"; do
    part "$name" "$precision" || break
  done
done
echo "gpu_protocol: $((SECONDS - TOTAL)) s in all; tables, reports and claims in $OUT" | tee -a "$SUMMARY"
exit $STATUS
