// The sm90a FlashMask forward kernel (FlashAttention-3 layout): 1 producer warpgroup +
// kConsumerWGs consumer warpgroups, register budgets moved between them with setmaxnreg. A CTA
// runs one tile (query block, head, batch) or, persistent, the tiles it claims one after another
// (fwd_tiles.cuh), visiting only the key blocks on each query block's list.
#pragma once

#include "copy.cuh"
#include "fwd_consumer.cuh"
#include "fwd_params.cuh"
#include "fwd_producer.cuh"
#include "fwd_traits.cuh"

namespace flashmask {
namespace sm90 {

// kDropout: its own instantiation (as on the portable kernels), so that calls without dropout keep
// the code they had.
template <class Traits, bool kDropout = false>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSM)
    fwd_kernel(CUTE_GRID_CONSTANT FwdKernelParams<Traits> const kp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Pipeline = typename Traits::Pipeline;
  using PipelineQ = typename Traits::PipelineQ;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const bool producer = threadIdx.x < 128;  // warpgroup 0

  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(&kp.q_rows);
    cute::prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(&kp.out_rows);
  }
  const auto pp = tma_pipeline_params<Pipeline>(Traits::kKVBytes, producer, Traits::kConsumerThreads);
  Pipeline pipeline_k(smem.pipeline_k, pp, cute::Shape<cute::_1, cute::_1, cute::_1>{});
  Pipeline pipeline_v(smem.pipeline_v, pp, cute::Shape<cute::_1, cute::_1, cute::_1>{});
  const auto pq = tma_pipeline_params<PipelineQ>(Traits::kQBytes, producer, Traits::kConsumerThreads);
  PipelineQ pipeline_q(smem.pipeline_q, pq, cute::Shape<cute::_1, cute::_1, cute::_1>{});
  TilePipeline::Params pt;
  pt.role = producer ? TilePipeline::ThreadCategory::Producer : TilePipeline::ThreadCategory::Consumer;
  pt.producer_arv_count = 1;
  pt.consumer_arv_count = Traits::kConsumerThreads;
  TilePipeline pipeline_tiles(smem.tile_ring.pipeline, pt);
  __syncthreads();  // barrier initialisation visible to every thread

  if (producer) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x == 0) produce_tiles<Traits>(kp, smem, pipeline_q, pipeline_k, pipeline_v, pipeline_tiles);
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    consume_tiles<Traits, kDropout>(kp, smem, pipeline_q, pipeline_k, pipeline_v, pipeline_tiles);
  }
#endif
}

}  // namespace sm90
}  // namespace flashmask
