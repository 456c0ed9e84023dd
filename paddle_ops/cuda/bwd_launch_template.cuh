// Launch sequence of the portable backward for one head dim (instantiated in bwd_hdim{64,128,256}.cu),
// after the mask plan (the block bounds, bwd_launch.cu):
//   prepare_rows -> dK/dV kernel (+ atomic dQ) -> convert_dq, or, deterministic,
//   prepare_rows -> dK/dV kernel (no dQ) -> dq_kernel.
// Every launch is checked.
#pragma once

#include <cutlass/numeric_types.h>

#include "bwd_convert_dq.cuh"
#include "bwd_dq_kernel.cuh"
#include "bwd_kernel.cuh"
#include "bwd_preprocess.h"
#include "preprocess.cuh"
#include "utils.cuh"

namespace flashmask {
namespace bwd {

template <typename Kernel>
void set_smem_limit(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024)
    FM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// The deterministic dQ kernel (bwd_dq_kernel.cuh); also run after the Hopper dK/dV kernel.
template <typename Tr>
void launch_deterministic_dq(const BwdParams& p, const Workspace& ws, cudaStream_t stream) {
  auto dq = p.dropout_p > 0.f ? dq_kernel<Tr, true> : dq_kernel<Tr, false>;
  set_smem_limit(dq, Tr::kSmemDq);
  const int m_blocks = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  dq<<<dim3(m_blocks, p.heads_q, p.batch), Tr::kThreads, Tr::kSmemDq, stream>>>(p, ws);
  FM_CHECK_LAUNCH("dq_kernel");
}

template <int kHeadDim, typename Element>
void run_bwd_typed(const BwdParams& p, const Workspace& ws, cudaStream_t stream) {
  using Tr = Traits<kHeadDim, Element>;
  launch_prepare_rows(p, ws, stream);

  auto dkdv = p.dropout_p > 0.f ? dkdv_kernel<Tr, true> : dkdv_kernel<Tr, false>;
  set_smem_limit(dkdv, Tr::kSmemDkdv);
  dkdv<<<key_block_grid(p, ws, /*sm90=*/false), Tr::kThreads, Tr::kSmemDkdv, stream>>>(p, ws);
  FM_CHECK_LAUNCH("dkdv_kernel");

  if (p.deterministic) {
    launch_deterministic_dq<Tr>(p, ws, stream);
  } else {
    const int m_blocks = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
    convert_dq_kernel<Tr><<<dim3(m_blocks, p.heads_q, p.batch), Tr::kThreads, 0, stream>>>(p, ws);
    FM_CHECK_LAUNCH("convert_dq_kernel");
  }
}

template <int kHeadDim>
void run_bwd_hdim(const BwdParams& p, const Workspace& ws, cudaStream_t stream) {
  if (p.dtype == DType::kBFloat16) run_bwd_typed<kHeadDim, cutlass::bfloat16_t>(p, ws, stream);
  else run_bwd_typed<kHeadDim, cutlass::half_t>(p, ws, stream);
}

}  // namespace bwd
}  // namespace flashmask
