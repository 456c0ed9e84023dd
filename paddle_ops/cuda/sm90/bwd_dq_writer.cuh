// The dQ writers of the sm90 backward (kDqUnderDk kernels; warp 1 + w of the producer warpgroup
// serves consumer warpgroup w): per visited tile, waits until w has put its fp32 dQ partial into its
// shared buffer (dQFull[w]), adds the buffer to the dQ workspace by one bulk reduce-add, and frees the
// buffer again once the reduce has read it (dQEmpty[w]). The consumers only wait where they would
// otherwise overwrite a buffer still being read, so neither the bulk issue nor its completion sits
// in their step.
#pragma once

#include <cutlass/arch/barrier.h>

#include "bwd_barriers.cuh"
#include "bwd_dq_layout.cuh"
#include "bwd_params.cuh"
#include "bwd_tiles.cuh"
#include "copy.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits>
__device__ __forceinline__ float* dq_buffer(typename Traits::SharedStorage& smem, int wg) {
  return smem.dq.data() + wg * Traits::kDqChunks * Traits::kDqChunkElems;
}

// One writer warp per consumer warpgroup w: bulk groups complete in issue order per thread, so a
// single writer for both warpgroups could free w's buffer only behind the other's reduce, and took
// w's partial only after the other's, which chained the two warpgroups every step.
template <class Traits>
__device__ __forceinline__ void write_dq(const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& smem,
                                         const bwd::KeyBlock& kb, int32_t head_k, int32_t b, int w) {
  constexpr uint32_t kBytes = Traits::kDqChunks * Traits::kDqChunkElems * sizeof(float);
  const bool leader = threadIdx.x % 32 == 0;
  bool first = true;
  for_each_bwd_tile<Traits::kBlockM, Traits::kBlockN>(
      kp.p, kp.ws, b, head_k, kb, [&](int32_t head_q, int32_t row0, bool, int32_t) {
        // The buffer is free once the reduce issued from it one step ago has read it.
        if (leader && !first) cute::tma_store_wait<0>();
        __syncwarp();
        cutlass::arch::NamedBarrier::arrive(kDqHandshakeThreads, kBarrierDqEmpty + w);
        cutlass::arch::NamedBarrier::sync(kDqHandshakeThreads, kBarrierDqFull + w);
        if (leader) {
          bulk_reduce_add_s2g(dq_chunk_in_workspace<Traits>(kp.p, kp.ws, b, head_q, row0, w * Traits::kDqChunks),
                              dq_buffer<Traits>(smem, w), kBytes);
          cute::tma_store_arrive();
        }
        first = false;
      });
  if (leader) cute::tma_store_wait<0>();  // the shared buffer must outlive the last read
}

}  // namespace sm90
}  // namespace flashmask
