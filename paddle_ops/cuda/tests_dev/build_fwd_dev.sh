#!/bin/bash
# Builds build/fwd_dev/libfmfwd_dev.so (forward + preprocess + tests_dev/fwd_entry.cu and its tile
# variants) for the archs in $ARCHS (default 90). Development only; the product library is CMake's.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUTD=build/fwd_dev
mkdir -p $OUTD
ARCHS=${ARCHS:-90}
GENCODE=""
for a in $ARCHS; do GENCODE="$GENCODE -gencode arch=compute_$a,code=sm_$a"; done
FLAGS="-std=c++17 --expt-relaxed-constexpr -O3 -Xcompiler -fPIC $GENCODE -I paddle_ops/include -I paddle_ops/cuda -I .third_party/cutlass_include ${EXTRA_FLAGS:-}"
JOBS=${JOBS:-16}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done; }
compile() {  # compile SRC OBJ [defines...]; at most $JOBS at a time
  local src=$1 obj=$2; shift 2
  [ "$obj" -nt "$src" ] && [ "$obj" -nt paddle_ops/cuda/fwd_kernel.cuh ] && return 0
  nvcc $FLAGS "$@" -c "$src" -o "$obj"
}
pids=""
for s in preprocess fwd_launch fwd_hdim64 fwd_hdim128 fwd_hdim256; do
  throttle; compile paddle_ops/cuda/$s.cu $OUTD/$s.o & pids="$pids $!"
done
throttle; compile paddle_ops/cuda/tests_dev/fwd_entry.cu $OUTD/fwd_entry.o & pids="$pids $!"
for v in ${VARIANTS:-1 2 3}; do
  throttle; compile paddle_ops/cuda/tests_dev/fwd_entry.cu $OUTD/fwd_variant$v.o -DFM_FWD_VARIANT=$v & pids="$pids $!"
done
for p in $pids; do wait $p; done
nvcc -shared $GENCODE -o $OUTD/libfmfwd_dev.so $OUTD/*.o
echo built $OUTD/libfmfwd_dev.so
