// The work units of the sm90 forward and who runs them. One tile = (query block, query head,
// batch), numbered so that each head's longest lists come first (causal: the last query blocks);
// where fwd_sorts_tiles says so (index masks, causal rows without packed GQA heads) they run in the
// longest-first order of fwd_tile_order.cuh instead.
// - One tile per CTA (grid = tiles): CTA t runs tile t; the hardware hands out CTAs as SMs free up.
// - Persistent (Traits::kPersistent; grid = CTAs per SM x SMs): CTA c runs tile c, then claims
//   gridDim.x + atomicAdd(tile_counter, 1) until it gets one >= the tile count, so that CTAs whose
//   tiles have short lists take more of them (a static stride c, c + gridDim.x, ... ran 10-20%
//   behind one tile per CTA on document masks; dynamic claims 0-7%). The producer thread claims
//   each tile and publishes its work (FwdTileWork; finally an out-of-range index) through a 2-slot
//   shared-memory ring guarded by mbarriers, so that it can run ahead of the consumers, which read
//   it there.
#pragma once

#include <cutlass/pipeline/pipeline.hpp>

#include "fwd_params.cuh"

namespace flashmask {
namespace sm90 {

// Tile row r holds position row0 + (r >> pack_shift), of query head (head << pack_shift) + r %
// 2^pack_shift; rows at row_end and past it are computed but not stored (document blocks end
// wherever their document does; fixed blocks at Sq, where the O store drops them anyway).
struct FwdTile {
  int32_t m_block;
  int32_t head;  // query head, or GQA group where its heads share the tile (FwdKernelParams::pack_shift)
  int32_t b;
  int32_t slice;  // mask slice of (b, head)
  int32_t row0, row_end;  // [first, end) of its positions (FwdBlockLists::rows_of)
  int64_t list;   // index of this tile's block list (preprocess.cuh)
};

// What a tile's consumers need to start it. Persistent CTAs get it from the producer thread, which
// reads it from global memory for its own loads anyway, so that a consumer's tile start waits on
// shared memory only (reading the tile order, the list's counts and its payload slot themselves put
// two dependent global loads before each tile's first wgmma, with both warpgroups idle).
struct FwdTileWork {
  int32_t index;  // the tile's number; >= the tile count: no more tiles
  int32_t num_entries, num_partial;  // its list's visible and partial key blocks
  int32_t first_slot;                // its first partial tile's payload slot (fwd_mask_payload.cuh)
  FwdTile tile;

  __device__ __forceinline__ static FwdTileWork none(int32_t index) {
    FwdTileWork w{};
    w.index = index;
    return w;
  }
};

using TilePipeline = cutlass::PipelineAsync<2>;
struct TileRingStorage {
  FwdTileWork work[2];
  TilePipeline::SharedStorage pipeline;
};

template <class Traits>
__device__ __forceinline__ int32_t fwd_num_tiles(const FwdKernelParams<Traits>& kp) {
  return kp.lists.num_m_blocks * kp.p.heads_q * kp.p.batch;  // < 2^31: checked at launch
}

template <class Traits>
__device__ __forceinline__ FwdTile fwd_tile(const FwdKernelParams<Traits>& kp, int32_t t) {
  if (kp.tile_order != nullptr) t = kp.tile_order[t];
  const int32_t num_m = kp.lists.num_m_blocks;
  FwdTile tile;
  tile.m_block = num_m - 1 - t % num_m;
  t /= num_m;
  tile.head = t % kp.p.heads_q;
  tile.b = t / kp.p.heads_q;
  tile.slice = kp.slices.index(kp.p, tile.b, tile.head);
  tile.list = (int64_t)tile.slice * num_m + tile.m_block;
  const int2 rows = kp.lists.rows_of(tile.b, tile.m_block, Traits::kBlockM >> kp.pack_shift, kp.p.seqlen_q);
  tile.row0 = rows.x;
  tile.row_end = rows.y;
  return tile;
}

template <class Traits>
__device__ __forceinline__ FwdTileWork fwd_tile_work(const FwdKernelParams<Traits>& kp, int32_t t) {
  FwdTileWork w;
  w.index = t;
  w.tile = fwd_tile(kp, t);
  const int2 counts = reinterpret_cast<const int2*>(kp.lists.counts)[w.tile.list];  // (visible, partial)
  w.num_entries = counts.x;
  w.num_partial = counts.y;
  w.first_slot = kp.payload.partial_offsets[w.tile.list];
  return w;
}

// Tile sequences as plain loops (no lambdas: a tile body that ptxas compiled out of line made it
// inject wgmma waits and spill):
//   producer: for (t = blockIdx.x; t < num_tiles; t = next) { next = claim_next_tile(...);
//             w = fwd_tile_work(kp, t); publish_work(..., w); ...; }  publish_work(..., none(t));
//   consumers: for (w = first_work(...); w.index < num_tiles; w = next_work(...)) { ... }

// Producer thread: makes a tile's work known to the consumers (persistent CTAs).
template <class Traits>
__device__ __forceinline__ void publish_work(TileRingStorage& ring, TilePipeline& pipeline,
                                             cutlass::PipelineState<2>& write, const FwdTileWork& w) {
  if constexpr (Traits::kPersistent) {
    pipeline.producer_acquire(write);
    ring.work[write.index()] = w;
    pipeline.producer_commit(write);  // mbarrier arrive: releases the store above
    ++write;
  }
}

// Producer thread: the tile after this one (issued before this tile's loads, used after them).
template <class Traits>
__device__ __forceinline__ int32_t claim_next_tile(const FwdKernelParams<Traits>& kp, int32_t num_tiles) {
  if constexpr (Traits::kPersistent) return (int32_t)gridDim.x + atomicAdd(kp.tile_counter, 1);
  else return num_tiles;
}

// Consumer threads: the next tile's work the producer published (the first one too).
template <class Traits>
__device__ __forceinline__ FwdTileWork next_work(TileRingStorage& ring, TilePipeline& pipeline,
                                                 cutlass::PipelineState<2>& read, int32_t num_tiles) {
  if constexpr (Traits::kPersistent) {
    pipeline.consumer_wait(read);
    const FwdTileWork w = ring.work[read.index()];
    pipeline.consumer_release(read);
    ++read;
    return w;
  } else {
    return FwdTileWork::none(num_tiles);
  }
}
template <class Traits>
__device__ __forceinline__ FwdTileWork first_work(const FwdKernelParams<Traits>& kp, TileRingStorage& ring,
                                                  TilePipeline& pipeline, cutlass::PipelineState<2>& read,
                                                  int32_t num_tiles) {
  if constexpr (Traits::kPersistent) return next_work<Traits>(ring, pipeline, read, num_tiles);
  else return fwd_tile_work(kp, (int32_t)blockIdx.x);  // grid = tiles: every CTA has one
}

}  // namespace sm90
}  // namespace flashmask
