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

// The query blocks one query head's walk over a key block visits: those in `range` whose tile
// (kind) is not fully masked, with the element mask where it is partially masked or the key block
// is shorter than kBlockN (the one that crosses Sk, document-aligned ones that end at the next
// block).
template <int kBlockM, int kBlockN>
struct BwdTileWalk {
  BlockBounds bounds;
  int2 range;
  int32_t n0, n_end, causal_off;

  __device__ __forceinline__ static BwdTileWalk of(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                   int32_t head_q, const bwd::KeyBlock& kb) {
    BwdTileWalk w;
    w.n0 = kb.first;
    w.n_end = kb.end;
    w.causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
    w.bounds = bwd::key_block_bounds(p, ws, b, head_q, kb);
    w.range = bwd::query_block_range(w.bounds, w.n0, p.seqlen_q, p.causal, w.causal_off, kBlockM);
    return w;
  }
  __device__ __forceinline__ TileKind kind(const BwdParams& p, int32_t m) const {
    return classify_tile(m * kBlockM, min((m + 1) * kBlockM, p.seqlen_q), n0, n_end, bounds, p.causal, causal_off);
  }
  // A visited tile's element mask runs (kind(m) != TileKind::kMasked).
  __device__ __forceinline__ bool masked_elements(TileKind k) const {
    return k == TileKind::kPartial || n_end - n0 < kBlockN;
  }
};

// Calls visit(m_block, masked_elements, partial_index) for each tile of query head `head_q` that is
// not fully masked, block_mask or not (BwdTileWalk); partial_index numbers the tiles with
// masked_elements from 0: the order of the mask slice's payloads (bwd_mask_payload.cuh).
template <int kBlockM, int kBlockN, class Visit>
__device__ __forceinline__ void for_each_bwd_tile_of_head(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                          int32_t head_q, const bwd::KeyBlock& kb, Visit&& visit) {
  const auto walk = BwdTileWalk<kBlockM, kBlockN>::of(p, ws, b, head_q, kb);
  int32_t partial_index = 0;
  for (int32_t m = walk.range.x; m < walk.range.y; ++m) {
    const TileKind kind = walk.kind(p, m);
    if (kind == TileKind::kMasked) continue;
    const bool masked = walk.masked_elements(kind);
    visit(m, masked, partial_index);
    partial_index += masked;
  }
}

// Calls visit(head_q, m_block, masked_elements, partial_index) for each tile the CTA visits: every
// query head of the GQA group, the tiles block_mask drops left out (for_each_bwd_tile_of_head).
template <int kBlockM, int kBlockN, class Visit>
__device__ __forceinline__ void for_each_bwd_tile(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                  int32_t head_k, const bwd::KeyBlock& kb, Visit&& visit) {
  // Document-aligned key blocks never come with a block_mask (key_blocks.cuh).
  static_assert(kBlockMaskSize % kBlockM == 0 && kBlockMaskSize % kBlockN == 0,
                "a tile must lie inside one block_mask block");
  const int32_t group = p.heads_q / p.heads_k;
  for (int32_t head_q = head_k * group; head_q < (head_k + 1) * group; ++head_q) {
    for_each_bwd_tile_of_head<kBlockM, kBlockN>(p, ws, b, head_q, kb, [&](int32_t m, bool masked, int32_t partial_index) {
      if (p.block_kept(b, head_q, m * kBlockM, kb.first)) visit(head_q, m, masked, partial_index);
    });
  }
}

// One visited tile as the producer hands it over, in the shared memory of its Q stage.
struct alignas(16) BwdTile {
  int32_t m_block;  // < 0: the sequence has ended
  int32_t head_q;
  int32_t masked_elements;  // the element mask runs, from the payload in the stage (for_each_bwd_tile's third argument)
  __device__ __forceinline__ bool is_end() const { return m_block < 0; }
};

}  // namespace sm90
}  // namespace flashmask
