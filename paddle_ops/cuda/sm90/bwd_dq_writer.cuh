// The dQ writers of the sm90 backward (kDqUnderDk kernels; warp 1 + w of the producer warpgroup
// serves consumer warpgroup w): per visited tile, waits until w has put its fp32 dQ partial into its
// shared buffer (dQFull[w]), adds the buffer to the dQ workspace by one bulk reduce-add, and frees the
// buffer again once the reduce has read it (dQEmpty[w]); where a row group's first partial is its
// own, it stores instead of adding (bwd_dq_claims.cuh). The consumers only wait where they would
// otherwise overwrite a buffer still being read, so neither the bulk issue nor its completion sits
// in their step.
#pragma once

#include <cutlass/arch/barrier.h>

#include "bwd_barriers.cuh"
#include "bwd_dq_claims.cuh"
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
// w's partial only after the other's, which chained the two warpgroups every step. Where the
// workspace has dQ claims (bwd_dq_claims.cuh) lane g of the writer owns claim group g of the chunk:
// its claim, its bulk store or reduce-add, its publication; else lane 0 adds the whole chunk.
template <class Traits>
__device__ __forceinline__ void write_dq(const BwdKernelParams<Traits>& kp, typename Traits::SharedStorage& smem,
                                         const bwd::KeyBlock& kb, int32_t head_k, int32_t b, int w) {
  constexpr uint32_t kBytes = Traits::kDqChunks * Traits::kDqChunkElems * sizeof(float);
  constexpr int kGroups = dq_claim_groups<Traits>();
  constexpr int kGroupElems = Traits::kDqChunkElems / kGroups;
  static_assert(Traits::kDqChunks == 1, "one chunk per warpgroup and step");
  const int lane = threadIdx.x % 32;
  const bool claims = kp.ws.dq_first_store;
  const bool owner = claims ? lane < kGroups : lane == 0;
  uint32_t* stored = nullptr;  // this lane's group stored one step ago, published once complete
  auto publish_stored = [&]() {
    if (stored != nullptr) {
      bulk_wait_complete();
      publish_dq_group(stored);
      stored = nullptr;
    }
  };
  bool first = true;
  for_each_bwd_tile<Traits::kBlockM, Traits::kBlockN>(
      kp.p, kp.ws, b, head_k, kb, [&](int32_t head_q, int32_t row0, bool, int32_t) {
        uint32_t* word = nullptr;
        uint32_t claim = kClaimPublished;  // without claims every add may go at once
        if (claims && owner) {
          word = dq_claim_word<Traits>(kp.p, kp.ws, b, head_q, row0, w, lane);
          claim = claim_dq_group(word);
        }
        // The buffer is free once the bulk operations issued from it one step ago have read it.
        if (owner && !first) cute::tma_store_wait<0>();
        __syncwarp();
        cutlass::arch::NamedBarrier::arrive(kDqHandshakeThreads, kBarrierDqEmpty + w);
        publish_stored();
        cutlass::arch::NamedBarrier::sync(kDqHandshakeThreads, kBarrierDqFull + w);
        float* dst = dq_chunk_in_workspace<Traits>(kp.p, kp.ws, b, head_q, row0, w);
        const float* src = dq_buffer<Traits>(smem, w);
        // Every group already published (or no claims), the usual case: one reduce-add of the chunk,
        // as without claims, and no fence. The reduce is issued only once the claims' values are
        // back, after their publishers' stores completed; an acquire fence before it held the writer
        // long enough to cost 2-7% on most rows (kernel_h100_bwd_dq_first_store_ab.json).
        constexpr unsigned kEveryGroup = (1u << kGroups) - 1;
        if (__ballot_sync(0xffffffffu, owner && claim >= kClaimPublished) == (claims ? kEveryGroup : 1u)) {
          if (lane == 0) bulk_reduce_add_s2g(dst, src, kBytes);
        } else {
          // Some group is this writer's to store or not yet published: each owner lane its own.
          dst += lane * kGroupElems;
          src += lane * kGroupElems;
          if (owner && claim == 0) {
            bulk_copy_s2g(dst, src, kGroupElems * sizeof(float));
            stored = word;
          }
          const bool unpublished = owner && claim != 0 && claim < kClaimPublished;
          if (__any_sync(0xffffffffu, unpublished)) {
            // Publish what this warp stored before waiting for another writer's group.
            if (stored != nullptr) cute::tma_store_arrive();
            publish_stored();
            if (unpublished) wait_dq_group_published(word);
          }
          if (owner && claim != 0) {
            if (!unpublished) acquire_published_group();
            else fence_generic_to_async();
            bulk_reduce_add_s2g(dst, src, kGroupElems * sizeof(float));
          }
        }
        if (owner) cute::tma_store_arrive();
        first = false;
      });
  // The shared buffer must outlive the last read; a stored group is published once complete.
  if (owner) cute::tma_store_wait<0>();
  publish_stored();
}

}  // namespace sm90
}  // namespace flashmask
