#!/bin/bash
# One device call for the Hopper forward (development): correctness of NEW (dev_check.py, sm90
# forced, vs fp64) for each FLASHMASK_SM90_PERSISTENT setting, then forward timings of BASE and of
# NEW's variants on kernel_bench's 8K/32K shapes plus the e2e-shaped 32K row. Each step is its own
# process under its own timeout, so that a hang costs only its own lines. Libraries are CMake builds
# (libflashmask.so) carried in a git-ignored folder:
#   run(command="OUT=$OUT bash paddle_ops/cuda/sm90/dev_device_run.sh", carry=[".device_carry_fwd"])
# NEW / BASE override the paths; BASE= (empty) skips the baseline.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/sm90_out}; mkdir -p "$OUT"
NEW=${NEW-.device_carry_fwd/new/libflashmask.so}
BASE=${BASE-.device_carry_fwd/base/libflashmask.so}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
CHECK=paddle_ops/cuda/sm90/dev_check.py
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step() {  # step NAME TIMEOUT LIB ARGS...
  local name=$1 limit=$2 lib=$3; shift 3
  FLASHMASK_LIB=$PWD/$lib timeout "$limit" python3 $CHECK "$@" > "$OUT/$name.log" 2>&1
  echo "== $name rc=$?"; grep -E "^FAIL|^bench|^e2e|passed|Error|error" "$OUT/$name.log" | tail -n 24
}
step check ${CHECK_S:-50} "$NEW" --persistent ${CHECK_VARIANTS:-default,0,1}
[ -n "$BASE" ] && step bench_base ${BENCH_S:-40} "$BASE" --skip-check --e2e --bench "base:-"
step bench_new ${BENCH_S:-40} "$NEW" --skip-check --e2e --bench \
  "${NEW_VARIANTS:-new:-;persistent0:FLASHMASK_SM90_PERSISTENT=0;persistent1:FLASHMASK_SM90_PERSISTENT=1;sm80:FLASHMASK_FORCE_PATH=sm80}"
