#!/bin/bash
# Builds build/bwd_dev/libfmbwd_dev.so (the backward + preprocess + tests_dev/bwd_entry.cu) for
# the archs in $ARCHS (default 90). Development only; the product library is built by CMake.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUTD=build/bwd_dev
mkdir -p $OUTD
ARCHS=${ARCHS:-90}
GENCODE=""
for a in $ARCHS; do GENCODE="$GENCODE -gencode arch=compute_$a,code=sm_$a"; done
FLAGS="${NVCC_EXTRA:-} -std=c++17 --expt-relaxed-constexpr -O3 -Xcompiler -fPIC $GENCODE -I paddle_ops/include -I paddle_ops/cuda -I .third_party/cutlass_include"
SRCS="paddle_ops/cuda/bwd_hdim64.cu paddle_ops/cuda/bwd_hdim128.cu paddle_ops/cuda/bwd_hdim256.cu paddle_ops/cuda/bwd_preprocess.cu paddle_ops/cuda/bwd_launch.cu paddle_ops/cuda/preprocess.cu paddle_ops/cuda/tests_dev/bwd_entry.cu"
pids=""
for s in $SRCS; do
  o=$OUTD/$(basename $s .cu).o
  nvcc $FLAGS -c $s -o $o &
  pids="$pids $!"
  if [ "${JOBS:-8}" = 1 ]; then wait $!; fi
done
for p in $pids; do wait $p; done
nvcc -shared $GENCODE -o $OUTD/libfmbwd_dev.so $OUTD/*.o
echo built $OUTD/libfmbwd_dev.so
