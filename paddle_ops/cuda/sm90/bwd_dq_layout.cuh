// The fp32 dQ accumulator of the sm90 backward, in one place: where a consumer warpgroup's dQ chunk
// of a tile lies in the workspace, and where each of its values lies in the chunk (and in the
// chunk's shared-memory image). Read by the consumers (their dQ partials), the dQ writer warps
// (bwd_dq_writer.cuh) and the conversion to dQ (bwd_convert_dq.cuh).
//
// Per (batch, query head) the accumulator is kDqColChunks planes of seqlen_q_pad rows x kDqCols
// columns, a plane per column range of the dQ chunks. A plane is stored in groups of 16 rows, one
// wgmma warp's rows of a chunk (warp w of the m64 accumulator holds rows 16 w .. 16 w + 15), in the
// order of that warp's values: 4 consecutive floats per lane, so that a warp's float4 stores cover
// 512 contiguous bytes. A chunk's 64 rows from any multiple of 16 are then one contiguous span,
// added by one bulk reduce wherever its tile starts (the tiles start at multiples of 16 rows:
// bwd_tiles.cuh), and its shared-memory image is that span.
#pragma once

#include <cstdint>

#include "flashmask/params.h"
#include "../bwd_tile_shape.h"
#include "../bwd_workspace.h"

namespace flashmask {
namespace sm90 {

// Where value i of consumer thread tidx's accumulator of a dQ chunk lies in the chunk.
template <class Traits>
__device__ __forceinline__ int dq_value_offset(int tidx, int i) {
  // A group of rows is one warp's of the m64 accumulator: the tiles' row alignment must be that.
  static_assert(Traits::kDqRows / 4 == bwd::kSm90RowAlign, "dQ row groups and tile row alignment disagree");
  constexpr int kWarpValues = Traits::kDqChunkElems / 4;  // a warp's 16 rows of the chunk
  return (tidx / 32) * kWarpValues + ((i / 4) * 32 + tidx % 32) * 4 + i % 4;
}

// The first row and column of dQ chunk `chunk` in its tile's kBlockM x D. Where a tile
// has one row (column) of chunks the answer is 0 by construction: said so, so that it folds to a
// constant for the consumers' run-time warpgroup index instead of a division ptxas must keep.
template <class Traits>
__host__ __device__ constexpr int dq_chunk_row0(int chunk) {
  return Traits::kBlockM == Traits::kDqRows ? 0 : chunk / Traits::kDqColChunks * Traits::kDqRows;
}
template <class Traits>
__host__ __device__ constexpr int dq_chunk_col0(int chunk) {
  return Traits::kDqColChunks == 1 ? 0 : chunk % Traits::kDqColChunks * Traits::kDqCols;
}

// The plane of the workspace, over every (batch, query head), that dQ chunk `chunk` of query head
// head_q lies in; the claim words of bwd_dq_claims.cuh are laid out by the same planes.
template <class Traits>
__device__ __forceinline__ int64_t dq_plane(const BwdParams& p, int b, int head_q, int chunk) {
  return (int64_t(b) * p.heads_q + head_q) * Traits::kDqColChunks + dq_chunk_col0<Traits>(chunk) / Traits::kDqCols;
}

// The first value of dQ chunk `chunk` of the tile whose rows start at row0 (a multiple of 16) of
// query head head_q, in the workspace.
template <class Traits>
__device__ __forceinline__ float* dq_chunk_in_workspace(const BwdParams& p, const bwd::Workspace& ws, int b,
                                                        int head_q, int32_t row0, int chunk) {
  const int64_t plane = dq_plane<Traits>(p, b, head_q, chunk);
  return ws.dq_accum + (plane * ws.seqlen_q_pad + row0 + dq_chunk_row0<Traits>(chunk)) * Traits::kDqCols;
}

}  // namespace sm90
}  // namespace flashmask
