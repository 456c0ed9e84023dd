// dQ's first writer stores (the Hopper backward with dQ writer warps, D <= 128): the fp32 dQ
// accumulator is not zeroed before the main kernel. Each 16-row group of each column plane of it
// (bwd_dq_layout.cuh) has a claim word in the workspace (bwd::Workspace::dq_claims, zeroed by the
// row preparation instead: 4 bytes per 4 KB of accumulator at D = 128).
//
// A dQ writer claims its chunk's groups (an atomic add of 1) a step before their partial is ready,
// so that the round trip hides under the step. The claim that finds 0 stores its partial by bulk
// copy and, once the copy has completed, publishes the group (adds kClaimPublished, release); every
// later claim adds its partial by bulk reduce-add once the word shows the publication (acquire):
// at once where the claim already saw it, else after waiting. The dQ conversion writes zeros where
// no tile claimed a group.
//
// No wait closes a cycle: a writer waits for another's group only after publishing every group it
// stored, and a group is stored once its claimer's consumers have finished the partial, which
// waits on no other CTA.
#pragma once

#include <cstdint>

#include "flashmask/params.h"
#include "../bwd_workspace.h"
#include "bwd_dq_layout.cuh"

namespace flashmask {
namespace sm90 {

// Added by the publication; far above any count of claims.
constexpr uint32_t kClaimPublished = 1u << 24;

// Claim groups per dQ chunk: its kDqRows rows in groups of kDqClaimRows.
template <class Traits>
constexpr int dq_claim_groups() {
  static_assert(Traits::kDqRows % bwd::kDqClaimRows == 0 &&
                    Traits::kDqColChunks <= bwd::max_dq_claim_planes(Traits::kHeadDim),
                "the workspace's claim grid covers every group of this shape's dQ chunks");
  return Traits::kDqRows / bwd::kDqClaimRows;
}

// The claim word of group `group` of dQ chunk `chunk` of query head head_q's tile at row0.
template <class Traits>
__device__ __forceinline__ uint32_t* dq_claim_word(const BwdParams& p, const bwd::Workspace& ws, int b, int head_q,
                                                   int32_t row0, int chunk, int group) {
  return ws.dq_claims + dq_plane<Traits>(p, b, head_q, chunk) * (ws.seqlen_q_pad / bwd::kDqClaimRows) +
         (row0 + dq_chunk_row0<Traits>(chunk)) / bwd::kDqClaimRows + group;
}

// Returns the word before this claim. Relaxed: an acquire would hold the writer until the round
// trip ends; the bulk reduce-add that a publication this shows allows is issued only once the value
// is back.
__device__ __forceinline__ uint32_t claim_dq_group(uint32_t* word) {
  uint32_t before;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(before) : "l"(word) : "memory");
  return before;
}

// Orders this thread's generic-proxy view of global memory before its later bulk operations.
__device__ __forceinline__ void fence_generic_to_async() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// After a relaxed claim that saw the publication: what it made visible, visible to this thread's
// later bulk operations.
__device__ __forceinline__ void acquire_published_group() {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  fence_generic_to_async();
}

// After bulk_wait_complete() of the store: the group's first partial is visible to every claim
// that sees the publication.
__device__ __forceinline__ void publish_dq_group(uint32_t* word) {
  fence_generic_to_async();
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(word), "r"(kClaimPublished) : "memory");
}

__device__ __forceinline__ void wait_dq_group_published(uint32_t* word) {
  for (;;) {
    uint32_t now;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(now) : "l"(word) : "memory");
    if (now >= kClaimPublished) return;
    __nanosleep(64);
  }
}

}  // namespace sm90
}  // namespace flashmask
