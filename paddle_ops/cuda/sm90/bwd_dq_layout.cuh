// The fp32 dQ accumulator of the sm90 backward, in one place: which query block and column slice a
// consumer warpgroup adds to, and where each of its dQ values lies in that block's tile. Read by the
// consumers (their dQ partials), the dQ writer warps (bwd_dq_writer.cuh) and the conversion to dQ
// (bwd_convert_dq.cuh).
#pragma once

#include <cstdint>

#include "flashmask/params.h"
#include "../bwd_workspace.h"

namespace flashmask {
namespace sm90 {

// Where value i of consumer thread tidx's accumulator of dQ chunk `chunk` lies in the
// accumulator tile of its query block (and in its shared-memory image): each chunk is a contiguous
// span, in thread order (4 consecutive floats per thread), so a warp's float4 stores cover 512
// contiguous bytes and a warpgroup's chunk is one bulk reduce.
template <class Traits>
__device__ __forceinline__ int dq_accum_offset(int chunk, int tidx, int i) {
  return chunk * Traits::kDqChunkElems + ((i / 4) * 128 + tidx) * 4 + i % 4;
}

// The accumulator tile of query block m of head head_q, from consumer warpgroup `wg`'s chunks on.
template <class Traits>
__device__ __forceinline__ float* dq_workspace_tile(const BwdParams& p, const bwd::Workspace& ws, int b,
                                                    int head_q, int m, int wg) {
  return ws.dq_accum + ((int64_t(b) * p.heads_q + head_q) * ws.seqlen_q_pad + int64_t(m) * Traits::kBlockM) *
                           Traits::kHeadDim +
         wg * Traits::kDqChunks * Traits::kDqChunkElems;
}

// The first row and column of dQ chunk `chunk` in its query block's kBlockM x D tile. Where a tile
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

}  // namespace sm90
}  // namespace flashmask
