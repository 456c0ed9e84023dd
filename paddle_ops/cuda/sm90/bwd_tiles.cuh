// The tiles one backward CTA visits: for its key block, every (query head of the GQA group, kBlockM
// query rows) tile that is not fully masked, in a fixed order. At D <= 128 (kTilesFromProducer) the
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

// The tiles one query head's walk over a key block visits: kBlockM rows each, from the first row
// the key block can see (bwd::query_row_range) rounded down to the workspace's row_align, one after
// the other to the last such row, save those fully masked (kind); with the element mask where a
// tile is partially masked or the key block is shorter than kBlockN (the one that crosses Sk,
// document-aligned ones that end at the next block). Tiles anchored at the key block's rows instead
// of at multiples of kBlockM visit fewer rows of other documents: a key block of a document sees
// its document's rows from the document's start (bidirectional) or its own first key (causal).
// row_align = 0 gives the fixed tiles, at multiples of kBlockM (with a block_mask, whose blocks a
// tile must not straddle: bwd::PlanLayout). Dropout's keep bits follow the absolute row and key.
template <int kBlockM, int kBlockN>
struct BwdTileWalk {
  BlockBounds bounds;
  int32_t first_row, tiles;  // tile t covers rows [first_row + t * kBlockM, + kBlockM)
  int32_t n0, n_end, causal_off;

  __device__ __forceinline__ static BwdTileWalk of(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                   int32_t head_q, const bwd::KeyBlock& kb) {
    BwdTileWalk w;
    w.n0 = kb.first;
    w.n_end = kb.end;
    w.causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
    w.bounds = bwd::key_block_bounds(p, ws, b, head_q, kb);
    const int2 rows = bwd::query_row_range(w.bounds, w.n0, p.seqlen_q, p.causal, w.causal_off);
    const int32_t align = ws.row_align > 0 ? ws.row_align : kBlockM;
    w.first_row = rows.x / align * align;
    w.tiles = rows.x < rows.y ? (rows.y - w.first_row + kBlockM - 1) / kBlockM : 0;
    return w;
  }
  __device__ __forceinline__ int32_t row0(int32_t t) const { return first_row + t * kBlockM; }
  __device__ __forceinline__ TileKind kind(const BwdParams& p, int32_t t) const {
    return classify_tile(row0(t), min(row0(t) + kBlockM, p.seqlen_q), n0, n_end, bounds, p.causal, causal_off);
  }
  // A visited tile's element mask runs (kind(t) != TileKind::kMasked).
  __device__ __forceinline__ bool masked_elements(TileKind k) const {
    return k == TileKind::kPartial || n_end - n0 < kBlockN;
  }
};

// Calls visit(row0, masked_elements, partial_index) for each tile of query head `head_q` that is
// not fully masked, block_mask or not (BwdTileWalk: row0 its first row); partial_index numbers the
// tiles with masked_elements from 0: the order of the mask slice's payloads (bwd_mask_payload.cuh).
template <int kBlockM, int kBlockN, class Visit>
__device__ __forceinline__ void for_each_bwd_tile_of_head(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                          int32_t head_q, const bwd::KeyBlock& kb, Visit&& visit) {
  const auto walk = BwdTileWalk<kBlockM, kBlockN>::of(p, ws, b, head_q, kb);
  int32_t partial_index = 0;
  for (int32_t t = 0; t < walk.tiles; ++t) {
    const TileKind kind = walk.kind(p, t);
    if (kind == TileKind::kMasked) continue;
    const bool masked = walk.masked_elements(kind);
    visit(walk.row0(t), masked, partial_index);
    partial_index += masked;
  }
}

// Calls visit(head_q, row0, masked_elements, partial_index) for each tile the CTA visits: every
// query head of the GQA group, the tiles block_mask drops left out (for_each_bwd_tile_of_head).
template <int kBlockM, int kBlockN, class Visit>
__device__ __forceinline__ void for_each_bwd_tile(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                  int32_t head_k, const bwd::KeyBlock& kb, Visit&& visit) {
  // Document-aligned key blocks never come with a block_mask (key_blocks.cuh), and with a block_mask
  // the tiles are fixed (row_align = 0).
  static_assert(kBlockMaskSize % kBlockM == 0 && kBlockMaskSize % kBlockN == 0,
                "a tile must lie inside one block_mask block");
  const int32_t group = p.heads_q / p.heads_k;
  for (int32_t head_q = head_k * group; head_q < (head_k + 1) * group; ++head_q) {
    for_each_bwd_tile_of_head<kBlockM, kBlockN>(p, ws, b, head_q, kb,
                                                [&](int32_t row0, bool masked, int32_t partial_index) {
      if (p.block_kept(b, head_q, row0, kb.first)) visit(head_q, row0, masked, partial_index);
    });
  }
}

// One visited tile as the producer hands it over, in the shared memory of its Q stage.
struct alignas(16) BwdTile {
  int32_t row0;  // the tile's first query row; < 0: the sequence has ended
  int32_t head_q;
  int32_t masked_elements;  // the element mask runs, from the payload in the stage (for_each_bwd_tile's third argument)
  __device__ __forceinline__ bool is_end() const { return row0 < 0; }
};

}  // namespace sm90
}  // namespace flashmask
