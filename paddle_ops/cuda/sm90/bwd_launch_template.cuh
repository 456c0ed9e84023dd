// Host side of one (dtype, head dim) instantiation of the sm90 backward: TMA descriptors from the
// caller's strides, the main kernel and the dQ conversion (every launch checked). Included only by
// the bwd_hdim*_sm90.cu files.
#pragma once

#include <type_traits>

#include "../bwd_launch_template.cuh"
#include "../bwd_preprocess.h"
#include "../utils.cuh"
#include "flashmask/env.h"
#include "bwd_convert_dq.cuh"
#include "bwd_kernel.cuh"
#include "bwd_mask_payload.cuh"
#include "bwd_sm90.h"
#include "../preprocess.cuh"
#include "copy.cuh"

namespace flashmask {
namespace sm90 {

// The main kernel (kWriteDq: with its dQ part; kDropout: the dropout instantiation) of one traits
// shape, then, where it wrote dQ partials, their conversion in the same shape's accumulator layout.
template <class Traits, bool kWriteDq, bool kDropout>
void run_bwd_sm90_shape(const BwdParams& p, const bwd::Workspace& ws, cudaStream_t stream) {
  using namespace cute;
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  // Row vectors and the dQ accumulator are read and written in whole kBlockM-row tiles; the
  // workspace pads its rows to the workspace grid (../bwd_tile_shape.h, checked by run_bwd_sm90).
  static_assert(bwd::workspace_grid(kHeadDim).row_multiple % Traits::kBlockM == 0,
                "the workspace's row padding must be a multiple of this shape's query tile");
  const auto q_layout = take<0, 2>(typename Traits::SmemLayoutQ{});
  const auto q_tile = Shape<Int<Traits::kBlockM>, Int<kHeadDim>>{};
  const auto k_tile = Shape<Int<Traits::kBlockN>, Int<kHeadDim>>{};
  BwdKernelParams<Traits> kp{
      make_tma_load<Element>(p.q, p.seqlen_q, p.head_dim, p.heads_q, p.batch, q_layout, q_tile),
      make_tma_load<Element>(p.dout, p.seqlen_q, p.head_dim_v, p.heads_q, p.batch, q_layout, q_tile),
      make_tma_load<Element>(p.k, p.seqlen_k, p.head_dim, p.heads_k, p.batch, typename Traits::SmemLayoutK{}, k_tile),
      make_tma_load<Element>(p.v, p.seqlen_k, p.head_dim_v, p.heads_k, p.batch, typename Traits::SmemLayoutK{}, k_tile),
      make_tma_store<Element>(p.dk, p.seqlen_k, p.head_dim, p.heads_k, p.batch, typename Traits::SmemLayoutK{}, k_tile),
      make_tma_store<Element>(p.dv, p.seqlen_k, p.head_dim_v, p.heads_k, p.batch, typename Traits::SmemLayoutK{}, k_tile),
      p,
      ws,
      p.softmax_scale * 1.4426950408889634f};
  if constexpr (Traits::kTilesFromProducer) require_payload_layout<Traits>(ws, "sm90 backward");
  auto kernel = bwd_kernel<Traits, kWriteDq, kDropout>;
  FM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  kernel<<<bwd::key_block_grid(p, ws, /*sm90=*/true), Traits::kThreads, Traits::kSmemBytes, stream>>>(kp);
  FM_CHECK_LAUNCH("sm90::bwd_kernel");
  if constexpr (kWriteDq) {
    const int m_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    bwd_convert_dq_kernel<Traits><<<dim3(m_blocks, p.heads_q, p.batch), 128 * Traits::kDqChunksTotal, 0, stream>>>(p, ws);
    FM_CHECK_LAUNCH("sm90::bwd_convert_dq_kernel");
  }
}

// Calls f(StepShape<Traits>{}, kDropout) with the traits of the step a call runs: dropout takes its
// own row count (../bwd_tile_shape.h). The mask payloads are built in the same shape.
template <class Traits>
struct StepShape {
  using type = Traits;
};
template <typename Element, int kHeadDim, class F>
void with_step_shape(const BwdParams& p, F&& f) {
  if (p.dropout_p > 0.f) {
    f(StepShape<BwdTraits<Element, kHeadDim, bwd::sm90_rows_per_step(kHeadDim, /*dropout=*/true)>>{}, std::true_type{});
  } else {
    f(StepShape<BwdTraits<Element, kHeadDim>>{}, std::false_type{});
  }
}

// The workspace as a shape with dQ writers uses it: they store each row group's first partial
// instead of adding it to a zeroed accumulator (bwd_dq_claims.cuh), unless
// FLASHMASK_BWD_DQ_FIRST_STORE=0.
template <class Traits>
bwd::Workspace with_dq_claims(const bwd::Workspace& ws) {
  bwd::Workspace w = ws;
  w.dq_first_store = Traits::kCanWriteDqUnderDk && ws.dq_claims != nullptr &&
                     env_switch("FLASHMASK_BWD_DQ_FIRST_STORE") != EnvSwitch::kOff;
  w.dq_claim_planes = w.dq_first_store ? Traits::kDqColChunks : 0;
  return w;
}

template <typename Element, int kHeadDim>
void run_bwd_sm90_kernels(const BwdParams& p, const bwd::Workspace& ws, cudaStream_t stream) {
  using Traits = BwdTraits<Element, kHeadDim>;
  if (ws.n_blocks != (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN)
    throw std::runtime_error("flashmask run_bwd_sm90: workspace block bounds not at the kernel's key block");
  // Deterministic: dK/dV here (no atomics anywhere), dQ by the portable kernel that walks each query
  // block's key blocks in ascending order.
  if (p.deterministic) {
    bwd::launch_prepare_rows(p, ws, stream);
    run_bwd_sm90_shape<Traits, false, false>(p, ws, stream);
    bwd::launch_deterministic_dq<bwd::Traits<kHeadDim, Element>>(p, ws, stream);
    return;
  }
  // Dropout is non-deterministic only here (bwd_sm90_selected leaves deterministic dropout to the
  // portable kernels).
  with_step_shape<Element, kHeadDim>(p, [&](auto shape, auto dropout) {
    using StepTraits = typename decltype(shape)::type;
    const bwd::Workspace w = with_dq_claims<StepTraits>(ws);
    bwd::launch_prepare_rows(p, w, stream);
    run_bwd_sm90_shape<StepTraits, true, decltype(dropout)::value>(p, w, stream);
  });
}

template <typename Element, int kHeadDim>
void build_bwd_mask_payloads_for(const BwdParams& p, const bwd::Workspace& ws, uint64_t* next_slot,
                                 cudaStream_t stream) {
  if constexpr (BwdTraits<Element, kHeadDim>::kTilesFromProducer) {
    with_step_shape<Element, kHeadDim>(p, [&](auto shape, auto) {
      launch_bwd_mask_payloads<typename decltype(shape)::type>(p, ws, next_slot, stream);
    });
  } else {
    throw std::runtime_error("flashmask build_bwd_mask_payloads: no payloads at this head dim");
  }
}

// Whether this build carries sm_90a machine code for the kernel on the current device.
template <typename Element, int kHeadDim>
bool bwd_sm90_kernel_built() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, bwd_kernel<BwdTraits<Element, kHeadDim>, true>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90;
}

#define FM_SM90_BWD_INSTANTIATE(T, D)                                                                  \
  template void run_bwd_sm90_kernels<T, D>(const BwdParams&, const bwd::Workspace&, cudaStream_t); \
  template bool bwd_sm90_kernel_built<T, D>();                                                      \
  template void build_bwd_mask_payloads_for<T, D>(const BwdParams&, const bwd::Workspace&, uint64_t*, cudaStream_t);

}  // namespace sm90
}  // namespace flashmask
