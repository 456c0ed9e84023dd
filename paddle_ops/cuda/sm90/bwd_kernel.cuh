// The sm90a FlashMask backward kernel: one CTA per (key block, head_k, batch) (key blocks at
// multiples of kBlockN or document-aligned: bwd_tile_range.cuh's KeyBlock), one producer
// warpgroup (TMA) and one or two consumer warpgroups (wgmma), register budgets moved with setmaxnreg.
// The CTA visits only the tiles of its key block that are not fully masked (bwd_tiles.cuh).
// kWriteDq = false (deterministic mode) leaves dQ to the portable deterministic kernel. Where the
// shape allows (Traits::kCanWriteDqUnderDk), warps 1 and 2 of the producer warpgroup write dQ
// (bwd_dq_writer.cuh); where the producer hands over the tiles, warp 3 writes the mask payloads the
// plan has no slot for (bwd_payload_writer.cuh).
#pragma once

#include "bwd_consumer.cuh"
#include "copy.cuh"
#include "bwd_params.cuh"
#include "bwd_payload_writer.cuh"
#include "bwd_producer.cuh"
#include "bwd_traits.cuh"

namespace flashmask {
namespace sm90 {

// kDropout: its own instantiation (non-deterministic only), so that calls without dropout keep the
// code they had.
template <class Traits, bool kWriteDq, bool kDropout = false>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSM)
    bwd_kernel(CUTE_GRID_CONSTANT BwdKernelParams<Traits> const kp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Pipeline = typename Traits::Pipeline;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const int warp_group = threadIdx.x / 128;
  const bwd::KeyBlockCta cta = bwd::key_block_cta(kp.p);  // first key blocks first (bwd_tile_range.cuh)
  if (!cta.valid) return;
  const int32_t head_k = cta.head_k, b = cta.b;
  const bwd::KeyBlock kb = bwd::key_block_of(kp.p, kp.ws, b, cta.n_block, Traits::kBlockN);
  if (kb.empty()) return;  // a document-aligned slot this batch row does not use

  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(kp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_dk.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_dv.get_tma_descriptor());
    smem.barrier_kv.init(1);
    if constexpr (Traits::kTilesFromProducer) {
      for (int s = 0; s < Traits::kStages; ++s) smem.payload_handoff[s].init(1);
    }
  }
  // Q and dO tiles are the same size.
  const auto pp = tma_pipeline_params<Pipeline>(Traits::kQBytes, warp_group == 0, Traits::kConsumerThreads);
  Pipeline pipeline_q(smem.pipeline_q, pp, cute::Shape<cute::_1, cute::_1, cute::_1>{});
  Pipeline pipeline_do(smem.pipeline_do, pp, cute::Shape<cute::_1, cute::_1, cute::_1>{});
  __syncthreads();  // barrier initialisation visible to every thread

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x == 0) produce_bwd_tiles<Traits>(kp, smem, pipeline_q, pipeline_do, kb, head_k, b);
    const int warp = threadIdx.x / 32;
    if constexpr (kWriteDq && Traits::kCanWriteDqUnderDk) {
      if (warp >= 1 && warp <= Traits::kConsumerWGs) write_dq<Traits>(kp, smem, kb, head_k, b, warp - 1);
    }
    if constexpr (Traits::kTilesFromProducer) {
      if (warp == Traits::kPayloadWriterWarp) write_missing_payloads<Traits>(kp, smem, pipeline_q, kb, head_k, b);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    consume_bwd_tiles<Traits, kWriteDq, kDropout>(kp, smem, pipeline_q, pipeline_do, kb, head_k, b);
  }
#endif
}

}  // namespace sm90
}  // namespace flashmask
