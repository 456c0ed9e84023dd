#!/bin/bash
# One device call for the Hopper forward (development): SASS summary of the sm90 kernels, the
# correctness cases with the sm90 path forced for each library in LIBS, and (BENCH=1) timings of
# both paths (sm80 once, with the first library).
#   run(command="BENCH=1 LIBS='build/sm90_dev/libfmfwd_sm90.so' bash paddle_ops/cuda/sm90/dev_device_run.sh",
#       carry=["build/sm90_dev"])
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/sm90_out}; mkdir -p "$OUT"
LIBS=${LIBS:-build/sm90_dev/libfmfwd_sm90.so}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHMASK_LOG_PATH=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
n=0
for LIB in $LIBS; do
  n=$((n + 1)); d=$(dirname "$LIB")
  for o in $d/fwd_hdim128_bf16_sm90.o; do
    [ -f "$o" ] || continue
    cuobjdump --dump-sass "$o" > "$OUT/sass$n.txt" 2>&1
    echo "$o: $(grep -oE 'HGMMA\.[0-9A-Za-z]+|USETMAXREG[.A-Z0-9]*|UTMALDG[.0-9A-Z]*|STL|LDL|BAR\.[A-Z]+' "$OUT/sass$n.txt" | sort | uniq -c | tr -s ' \n' ' ')"
  done
  for BM in ${BLOCK_MS:-default}; do
    [ "$BM" = default ] && unset FLASHMASK_SM90_BLOCK_M || export FLASHMASK_SM90_BLOCK_M=$BM
    log="$OUT/sm90_${n}_$BM.log"
    FLASHMASK_FORCE_PATH=sm90 timeout 200 python3 paddle_ops/cuda/sm90/dev_check.py "$LIB" ${BENCH:+--bench} > "$log" 2>&1
    echo "== $LIB block_m=$BM sm90 rc=$? ok-lines $(grep -c '^ok ' "$log")"
    grep -vE "^ok " "$log" | sort | uniq | tail -n 40
  done
  unset FLASHMASK_SM90_BLOCK_M
done
if [ -n "${BENCH:-}" ]; then
  LIB=${LIBS%% *}
  FLASHMASK_FORCE_PATH=sm80 timeout 120 python3 paddle_ops/cuda/tests_dev/fwd_check.py "$LIB" --bench > "$OUT/sm80.log" 2>&1
  echo "== sm80 rc=$?"; grep -E "TFLOP|passed|path" "$OUT/sm80.log"
fi
