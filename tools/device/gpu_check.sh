#!/usr/bin/env bash
# Build, test, sanitize and benchmark the CUDA kernels on a CUDA machine (run from any directory;
# it works in the repository root). Needs nvcc, cmake, torch with CUDA, and the CuTe headers
# (.third_party/cutlass_include, or the nvidia-cutlass wheel). Steps:
#   1. build libflashmask with CMake (paddle_ops/CMakeLists.txt) into build/flashmask
#   2. pytest tests/gpu (the CUDA kernels through the torch binding vs the fp64 reference)
#   3. compute-sanitizer memcheck and racecheck on tools/device/sanitize_case.py (beside step 2)
#   4. optionally the CUDA fuzz record (python -m flashmask_paddle.fuzz), after the tests
#   5. optionally benchmarks/kernel_bench.py, alone after the rest so nothing disturbs its timings
#
#   bash tools/device/gpu_check.sh                                    # steps 1-3
#   bash tools/device/gpu_check.sh --bench '--seqlens 8192 32768 --head-dims 128 --dtypes bf16'
#
# Options:
#   --bench "ARGS"   also run benchmarks/kernel_bench.py ARGS (JSON + PNG to $OUT); several runs
#                    into one JSON: "ARGS1 ;; ARGS2" (e.g. a core matrix, then a few extra rows)
#   --no-tests       skip pytest          --no-sanitize   skip compute-sanitizer
#   --pytest "ARGS"  extra pytest arguments, split as the shell splits them (e.g. "-k 'causal or 256'")
#   --shard I/N      run every N-th test of tests/gpu from the I-th (FLASHMASK_TEST_SHARD, tests/conftest.py):
#                    N runs, I = 0 .. N-1, cover the suite once, e.g. across calls shorter than the suite
#   --fuzz N         also run N random fuzz cases on the GPU (--jobs FUZZ_JOBS, default 16) into
#                    fuzz_cuda.json
#   --lib PATH       use a libflashmask.so built elsewhere (e.g. by tests/test_cuda_build.py for
#                    sm_80 + sm_90) instead of building
# Environment: ARCHS=90 CUDA archs to build; JOBS=16 build parallelism; PYTEST_WORKERS=N runs the
#   tests in N pytest-xdist processes (default: one process). On one H200 with 16 host cores, 12
#   processes ran 266 of the ~720 tests (dropout, parity, bindings, plans, every form) in 160 s,
#   while 6 processes took ~400 s for 262 of the head-dim and GQA tests;
#   FLASHMASK_COMMIT=<sha> the commit to record where there is no .git;
#   OUT=DIR where the outputs go (default ./gpu_check_out).
# Outputs under $OUT: build.log, tests.log, memcheck.log, racecheck.log, bench.log,
#   kernel_h200.json, kernel_h200.png (with --bench), fuzz.log and fuzz_cuda.json (with --fuzz),
#   and summary.txt (one line per step: name, exit status, seconds, last log line; device, torch
#   and commit at the top).
# Exit status: non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
ARCHS=${ARCHS:-90}
JOBS=${JOBS:-16}
BENCH_ARGS="" ; RUN_TESTS=1 ; RUN_SANITIZE=1 ; PYTEST_ARGS="" ; PREBUILT="" ; FUZZ_CASES=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) BENCH_ARGS="$2"; [ -z "$BENCH_ARGS" ] && BENCH_ARGS=" "; shift 2 ;;
    --no-tests) RUN_TESTS=0; shift ;;
    --no-sanitize) RUN_SANITIZE=0; shift ;;
    --pytest) PYTEST_ARGS="$2"; shift 2 ;;
    --lib) PREBUILT="$2"; shift 2 ;;
    --fuzz) FUZZ_CASES="$2"; shift 2 ;;
    --shard) export FLASHMASK_TEST_SHARD="$2"; shift 2 ;;
    *) echo "unknown option $1 (see the top of $0)"; exit 2 ;;
  esac
done
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SUMMARY="$OUT/summary.txt"; : > "$SUMMARY"
STATUS=0
note() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # step NAME LOG CMD...: runs CMD, logs, records time and status
  local name=$1 log=$2; shift 2
  local t0=$(date +%s)
  "$@" > "$log" 2>&1
  local rc=$?
  note "$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$(tail -n 1 "$log" | cut -c1-150)")"
  [ $rc -ne 0 ] && STATUS=1
  return $rc
}

note "gpu_check $(date -u +%FT%TZ) commit ${FLASHMASK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')} archs=$ARCHS${FLASHMASK_TEST_SHARD:+ test shard $FLASHMASK_TEST_SHARD}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" 2>&1 | tee -a "$SUMMARY"

BUILD=build/flashmask
build() {
  cmake -S paddle_ops -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHMASK_WITH_CUDA=ON \
        -DFLASHMASK_CUDA_ARCHS="$ARCHS" -DPython3_EXECUTABLE="$(command -v python3)" &&
  cmake --build $BUILD -j "$JOBS"
}
if [ -n "$PREBUILT" ]; then
  [ -f "$PREBUILT" ] || { note "--lib $PREBUILT: no such file"; exit 1; }
  export FLASHMASK_LIB=$(readlink -f "$PREBUILT")
  note "prebuilt $FLASHMASK_LIB sha256 $(sha256sum "$FLASHMASK_LIB" | cut -c1-16)"
else
  if ! step build "$OUT/build.log" build; then
    tail -n 40 "$OUT/build.log"; exit 1
  fi
  export FLASHMASK_LIB=$PWD/$BUILD/libflashmask.so
fi

# The sanitizers (small cases, CPU-bound on the reference) run beside pytest to save device time;
# the benchmark runs alone afterwards so that nothing else disturbs its timings.
SAN_PIDS=()
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
            /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
if [ $RUN_SANITIZE = 1 ] && [ -z "$SANITIZER" ]; then note "compute-sanitizer not found"; STATUS=1; RUN_SANITIZE=0; fi
if [ $RUN_SANITIZE = 1 ]; then
  # No caching allocator: every tensor is its own cudaMalloc, so an out-of-bounds access is not
  # hidden inside a larger pool block.
  for tool in memcheck racecheck; do
    extra=""; [ $tool = racecheck ] && extra="--racecheck-report all"
    ( step $tool "$OUT/$tool.log" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
        "$SANITIZER" --tool $tool $extra --error-exitcode 3 --print-limit 20 \
        python3 tools/device/sanitize_case.py ) &
    SAN_PIDS+=($!)
  done
fi

if [ $RUN_TESTS = 1 ]; then
  XDIST=""; [ -n "${PYTEST_WORKERS:-}" ] && XDIST="-n $PYTEST_WORKERS"
  # A kernel that hangs leaves the Python stack of its test in the log after 5 minutes.
  # Split as the shell would, so that a quoted -k expression stays one argument.
  eval "PYTEST_EXTRA=($PYTEST_ARGS)"
  step tests "$OUT/tests.log" python3 -m pytest tests/gpu -x -q -p no:cacheprovider -o faulthandler_timeout=300 \
    $XDIST "${PYTEST_EXTRA[@]}"
  grep -E "passed|failed|error" "$OUT/tests.log" | tail -n 3 >> "$SUMMARY"
fi

for pid in "${SAN_PIDS[@]}"; do wait "$pid" || STATUS=1; done
if [ $RUN_SANITIZE = 1 ]; then
  for tool in memcheck racecheck; do
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize_case: [0-9]+ cases|FAILED" "$OUT/$tool.log" | tail -n 3 >> "$SUMMARY"
  done
fi

if [ "$FUZZ_CASES" -gt 0 ]; then
  step fuzz "$OUT/fuzz.log" python3 -m flashmask_paddle.fuzz --cases "$FUZZ_CASES" --device cuda \
    --jobs "${FUZZ_JOBS:-16}" --json "$OUT/fuzz_cuda.json"
fi

if [ -n "$BENCH_ARGS" ]; then
  rm -f "$OUT/kernel_h200.json"
  bench_all() {
    local rc=0 part
    while IFS= read -r part; do
      [ -z "${part// /}" ] && continue
      python3 benchmarks/kernel_bench.py $part --append \
        --json "$OUT/kernel_h200.json" --png "$OUT/kernel_h200.png" < /dev/null || rc=1
    done < <(echo "$BENCH_ARGS" | sed 's/;;/\n/g')
    return $rc
  }
  step bench "$OUT/bench.log" bench_all
  awk '/^impl /{buf=""; f=1} f{buf=buf $0 "\n"} END{printf "%s", buf}' "$OUT/bench.log" | head -n 150
fi

echo "==== summary"; cat "$SUMMARY"
exit $STATUS
