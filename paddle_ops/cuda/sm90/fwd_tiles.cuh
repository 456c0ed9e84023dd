// The work units of the sm90 forward and who runs them. One tile = (query block, query head,
// batch), numbered so that each head's longest lists come first (causal: the last query blocks);
// under index masks they run in the longest-first order of fwd_tile_order.cuh instead.
// - One tile per CTA (grid = tiles): CTA t runs tile t; the hardware hands out CTAs as SMs free up.
// - Persistent (Traits::kPersistent; grid = CTAs per SM x SMs): CTA c runs tile c, then claims
//   gridDim.x + atomicAdd(tile_counter, 1) until it gets one >= the tile count, so that CTAs whose
//   tiles have short lists take more of them (a static stride c, c + gridDim.x, ... ran 10-20%
//   behind one tile per CTA on document masks; dynamic claims 0-7%). The producer thread claims
//   and publishes each tile index (finally the out-of-range one) through a 2-slot shared-memory
//   ring guarded by mbarriers, so that it can run ahead of the consumers, which read it there.
#pragma once

#include <cutlass/pipeline/pipeline.hpp>

#include "fwd_params.cuh"

namespace flashmask {
namespace sm90 {

struct FwdTile {
  int32_t m_block, head_q, b;
  int32_t slice;  // mask slice of (b, head_q)
  int64_t list;   // index of this tile's block list (preprocess.cuh)
};

using TilePipeline = cutlass::PipelineAsync<2>;
struct TileRingStorage {
  int32_t tiles[2];
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
  tile.head_q = t % kp.p.heads_q;
  tile.b = t / kp.p.heads_q;
  tile.slice = kp.slices.index(kp.p, tile.b, tile.head_q);
  tile.list = (int64_t)tile.slice * num_m + tile.m_block;
  return tile;
}

// Tile sequences as plain loops (no lambdas: a tile body that ptxas compiled out of line made it
// inject wgmma waits and spill):
//   producer: for (t = blockIdx.x; publish_tile(..., t) < num_tiles; t = next) { next =
//             claim_next_tile(...); ...; }
//   consumers: for (t = first_tile(...); t < num_tiles; t = next_tile(...)) { ... }

// Producer thread: makes tile t known to the consumers (persistent CTAs); returns t.
template <class Traits>
__device__ __forceinline__ int32_t publish_tile(TileRingStorage& ring, TilePipeline& pipeline,
                                                cutlass::PipelineState<2>& write, int32_t t) {
  if constexpr (Traits::kPersistent) {
    pipeline.producer_acquire(write);
    ring.tiles[write.index()] = t;
    pipeline.producer_commit(write);  // mbarrier arrive: releases the store above
    ++write;
  }
  return t;
}

// Producer thread: the tile after this one (issued before this tile's loads, used after them).
template <class Traits>
__device__ __forceinline__ int32_t claim_next_tile(const FwdKernelParams<Traits>& kp, int32_t num_tiles) {
  if constexpr (Traits::kPersistent) return (int32_t)gridDim.x + atomicAdd(kp.tile_counter, 1);
  else return num_tiles;
}

// Consumer threads: the next tile the producer published (the first one too).
template <class Traits>
__device__ __forceinline__ int32_t next_tile(TileRingStorage& ring, TilePipeline& pipeline,
                                             cutlass::PipelineState<2>& read, int32_t num_tiles) {
  if constexpr (Traits::kPersistent) {
    pipeline.consumer_wait(read);
    const int32_t t = ring.tiles[read.index()];
    pipeline.consumer_release(read);
    ++read;
    return t;
  } else {
    return num_tiles;
  }
}
template <class Traits>
__device__ __forceinline__ int32_t first_tile(TileRingStorage& ring, TilePipeline& pipeline,
                                              cutlass::PipelineState<2>& read, int32_t num_tiles) {
  if constexpr (Traits::kPersistent) return next_tile<Traits>(ring, pipeline, read, num_tiles);
  else return (int32_t)blockIdx.x;
}

}  // namespace sm90
}  // namespace flashmask
