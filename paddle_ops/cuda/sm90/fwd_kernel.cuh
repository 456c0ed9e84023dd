// The sm90a FlashMask forward kernel (FlashAttention-3 layout): one CTA per (query block, head,
// batch), 1 producer warpgroup + kConsumerWGs consumer warpgroups, register budgets moved between
// them with setmaxnreg. The CTA visits only the key blocks on its query block's list.
#pragma once

#include "fwd_consumer.cuh"
#include "fwd_params.cuh"
#include "fwd_producer.cuh"
#include "fwd_traits.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSM)
    fwd_kernel(CUTE_GRID_CONSTANT FwdKernelParams<Traits> const kp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Pipeline = typename Traits::Pipeline;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const int warp_group = threadIdx.x / 128;
  // Longest query blocks (causal: the last ones) first.
  const int32_t m_block = gridDim.x - 1 - blockIdx.x;
  const int32_t head_q = blockIdx.y, b = blockIdx.z;

  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(kp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
    smem.barrier_q.init(1);
  }
  typename Pipeline::Params pp;
  pp.transaction_bytes = Traits::kKVBytes;
  pp.role = warp_group == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = Traits::kConsumerThreads;
  Pipeline pipeline_k(smem.pipeline_k, pp, cute::Shape<cute::_1, cute::_1, cute::_1>{});
  Pipeline pipeline_v(smem.pipeline_v, pp, cute::Shape<cute::_1, cute::_1, cute::_1>{});
  __syncthreads();  // barrier initialisation visible to every thread

  const int32_t slice = kp.slices.index(kp.p, b, head_q);
  const int64_t list = (int64_t)slice * kp.lists.num_m_blocks + m_block;
  const int32_t* entries = kp.lists.entries + list * kp.lists.num_n_blocks;
  const int32_t num_entries = kp.lists.counts[2 * list];
  const int32_t num_partial = kp.lists.counts[2 * list + 1];

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x == 0) {
      produce_tiles<Traits>(kp, smem, pipeline_k, pipeline_v, m_block, head_q, b, slice, entries,
                            num_entries);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    consume_tiles<Traits>(kp, smem, pipeline_k, pipeline_v, m_block, head_q, b, slice, entries,
                          num_entries, num_partial);
  }
#endif
}

}  // namespace sm90
}  // namespace flashmask
