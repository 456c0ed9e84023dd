// The tiles one backward CTA visits: for its key block, every (query head of the GQA group, query
// block) whose tile is not fully masked, in a fixed order. At D <= 128 (kTilesFromProducer) the
// producer thread walks the sequence and hands each tile to the consumer warpgroups on the Q stage
// that carries its Q (BwdTile), so the tile classification runs once per CTA instead of once per
// consumer warp (~70 instructions per warp and tile at D = 128); at D = 256 every warp walks it.
// The dQ writer warps (bwd_dq_writer.cuh) walk it too: handing them the destinations through shared
// memory would order a consumer's plain store before the writer's load only by a named-barrier
// arrive, which compute-sanitizer's racecheck does not accept.
#pragma once

#include "flashmask/block.h"
#include "flashmask/params.h"
#include "../bwd_tile_range.cuh"

namespace flashmask {
namespace sm90 {

// Calls visit(head_q, m_block, masked_elements) for each tile; masked_elements is true where the
// element mask must run (partially masked tiles and key blocks shorter than kBlockN: the one that
// crosses Sk, document-aligned ones that end at the next block).
template <int kBlockM, int kBlockN, class Visit>
__device__ __forceinline__ void for_each_bwd_tile(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                  int32_t head_k, const bwd::KeyBlock& kb, Visit&& visit) {
  // Document-aligned key blocks never come with a block_mask (key_blocks.cuh).
  static_assert(kBlockMaskSize % kBlockM == 0 && kBlockMaskSize % kBlockN == 0,
                "a tile must lie inside one block_mask block");
  const int32_t n0 = kb.first, n_end = kb.end;
  const int32_t group = p.heads_q / p.heads_k;
  const int32_t causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  for (int32_t head_q = head_k * group; head_q < (head_k + 1) * group; ++head_q) {
    const BlockBounds bb = bwd::key_block_bounds(p, ws, b, head_q, kb);
    const int2 range = bwd::query_block_range(bb, n0, p.seqlen_q, p.causal, causal_off, kBlockM);
    for (int32_t m = range.x; m < range.y; ++m) {
      if (!p.block_kept(b, head_q, m * kBlockM, n0)) continue;
      const TileKind kind = classify_tile(m * kBlockM, min((m + 1) * kBlockM, p.seqlen_q), n0, n_end, bb,
                                          p.causal, causal_off);
      if (kind == TileKind::kMasked) continue;
      visit(head_q, m, kind == TileKind::kPartial || n_end - n0 < kBlockN);
    }
  }
}

// One visited tile as the producer hands it over, in the shared memory of its Q stage.
struct alignas(16) BwdTile {
  int32_t m_block;  // < 0: the sequence has ended
  int32_t head_q;
  int32_t masked_elements;  // the element mask must run (for_each_bwd_tile's third argument)
  int32_t unused;
  __device__ __forceinline__ bool is_end() const { return m_block < 0; }
};

}  // namespace sm90
}  // namespace flashmask
