#!/bin/bash
# Development build of the forward with the Hopper path: build/sm90_dev/libfmfwd_sm90.so exposes
# tests_dev/fwd_entry.cu's fmfwd_* entry (run_fwd_cuda, so the dispatcher is exercised), for
# tests_dev/fwd_check.py. Portable sources for sm_90, *_sm90.cu for sm_90a alone (as CMake does).
# Not the product build (that is CMake's libflashmask). JOBS=N parallel TUs (default 2).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUTD=${OUTD:-build/sm90_dev}
mkdir -p $OUTD
JOBS=${JOBS:-2}
COMMON="-std=c++17 --expt-relaxed-constexpr -O3 -Xcompiler -fPIC -DNDEBUG -DFLASHMASK_WITH_CUDA=1 -DFLASHMASK_HAS_SM90=1 -I paddle_ops/include -I paddle_ops -I paddle_ops/cuda -I .third_party/cutlass_include"
SM90="-gencode arch=compute_90a,code=sm_90a"
PORT="-gencode arch=compute_90,code=sm_90"
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done; }
newer_than_deps() {  # obj newer than src and every header under paddle_ops/cuda (coarse but safe)
  local src=$1 obj=$2
  [ -f "$obj" ] || return 1
  [ "$obj" -nt "$src" ] || return 1
  [ -z "$(find paddle_ops/cuda paddle_ops/include -name '*.cuh' -newer "$obj" -o -name '*.h' -newer "$obj" | head -1)" ]
}
compile() {  # compile SRC FLAGS
  local src=$1 flags=$2 obj=$OUTD/$(basename ${1%.cu}).o
  newer_than_deps "$src" "$obj" && return 0
  nvcc $COMMON $flags -Xptxas -v -c "$src" -o "$obj" > $OUTD/$(basename ${1%.cu}).log 2>&1 || { cat $OUTD/$(basename ${1%.cu}).log; return 1; }
}
pids=""
for s in paddle_ops/cuda/sm90/fwd_hdim128_bf16_sm90.cu paddle_ops/cuda/sm90/fwd_hdim128_fp16_sm90.cu \
         paddle_ops/cuda/sm90/fwd_hdim64_bf16_sm90.cu paddle_ops/cuda/sm90/fwd_hdim64_fp16_sm90.cu \
         paddle_ops/cuda/sm90/fwd_launch_sm90.cu paddle_ops/cuda/sm90/path_sm90.cu; do
  throttle; compile $s "$SM90" & pids="$pids $!"
done
for s in preprocess fwd_launch fwd_hdim64 fwd_hdim128 fwd_hdim256; do
  throttle; compile paddle_ops/cuda/$s.cu "$PORT" & pids="$pids $!"
done
throttle; compile paddle_ops/cuda/tests_dev/fwd_entry.cu "$PORT" & pids="$pids $!"
for p in $pids; do wait $p; done
nvcc -shared -o $OUTD/libfmfwd_sm90.so $OUTD/*.o -lcudart
echo built $OUTD/libfmfwd_sm90.so
