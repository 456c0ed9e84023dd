// dQ = softmax_scale * dq_accum cast to the output dtype and strides: the sm90 backward's last step.
// Each kBlockM rows of dq_accum are read as kDqChunksTotal chunks (dq_chunk_in_workspace,
// dq_value_offset: bwd_dq_layout.cuh); a CTA of one warpgroup per chunk replays the dQ TiledMMA's
// partition to find each value's (row, column), stages the cast rows in shared memory and writes
// whole rows with 16-byte stores (zeros for the rows no tile wrote, bwd_dq_claims.cuh). One CTA per
// (kBlockM rows, head_q, batch).
#pragma once

#include <cute/tensor.hpp>

#include "bwd_dq_claims.cuh"
#include "bwd_dq_layout.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits>
__global__ void __launch_bounds__(128 * Traits::kDqChunksTotal) bwd_convert_dq_kernel(const BwdParams p,
                                                                                 const bwd::Workspace ws) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kD = Traits::kHeadDim, kThreads = 128 * Traits::kDqChunksTotal;
  constexpr int kPitch = kD + 8;  // +16 bytes per row: fewer bank conflicts, rows stay 16-byte aligned
  __shared__ __align__(16) Element tile_s[kBlockM * kPitch];
  const int chunk = threadIdx.x / 128, tidx = threadIdx.x % 128;
  const int32_t m0 = blockIdx.x * kBlockM, head_q = blockIdx.y, b = blockIdx.z;
  const float* chunk_values = dq_chunk_in_workspace<Traits>(p, ws, b, head_q, m0, chunk);

  // Where dQ writers claim row groups (bwd_dq_claims.cuh) a group no tile claimed was never
  // written: its dQ is 0. A group is one warp's 16 rows of the chunk (dq_value_offset).
  const bool written =
      !ws.dq_first_store || *dq_claim_word<Traits>(p, ws, b, head_q, m0, chunk, tidx / 32) != 0;

  typename Traits::TiledMmadQ mma;
  Tensor coord = mma.get_thread_slice(tidx).partition_C(
      make_identity_tensor(Shape<Int<Traits::kDqRows>, Int<Traits::kDqCols>>{}));
  CUTE_UNROLL
  for (int i = 0; i < size(coord); i += 4) {
    const float4 f = written ? *reinterpret_cast<const float4*>(chunk_values + dq_value_offset<Traits>(tidx, i))
                             : make_float4(0.f, 0.f, 0.f, 0.f);
    const float v[4] = {f.x, f.y, f.z, f.w};
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) {
      const int r = dq_chunk_row0<Traits>(chunk) + get<0>(coord(i + j));
      const int c = dq_chunk_col0<Traits>(chunk) + get<1>(coord(i + j));
      tile_s[r * kPitch + c] = Element(v[j] * p.softmax_scale);
    }
  }
  __syncthreads();
  Element* dq = p.dq.at<Element>(b, m0, head_q);
  // The 16-byte chunks of dQ's D columns (D is a multiple of 8: flashmask/check.h); the tile's
  // columns past D are zero and dropped.
  const int chunks_per_row = p.head_dim * int(sizeof(Element)) / 16;
  const int rows = min(kBlockM, p.seqlen_q - m0);
  for (int idx = threadIdx.x; idx < rows * chunks_per_row; idx += kThreads) {
    const int r = idx / chunks_per_row, chunk = idx % chunks_per_row;
    *reinterpret_cast<uint4*>(dq + int64_t(r) * p.dq.row_stride + chunk * 8) =
        *reinterpret_cast<const uint4*>(tile_s + r * kPitch + chunk * 8);
  }
#endif
}

}  // namespace sm90
}  // namespace flashmask
