// dQ = softmax_scale * dq_accum, cast to the output dtype and strides (atomic mode's last step).
// dq_accum tiles are in MMA-thread order (bwd_workspace.h): each thread reads its own values with
// wide coalesced loads, replays the dQ TiledMMA's partition to find their (row, column), scatters
// the cast pairs into a shared tile, and the CTA then writes whole rows with 16-byte stores.
// One CTA per (query block, head_q, batch).
#pragma once

#include "bwd_tile_math.cuh"
#include "bwd_traits.cuh"
#include "bwd_workspace.h"

namespace flashmask {
namespace bwd {

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads) convert_dq_kernel(const BwdParams p, const Workspace ws) {
  using Element = typename Tr::Element;
  constexpr int kBlockM = Tr::kBlockM, kD = Tr::kHeadDim, kThreads = Tr::kThreads;
  constexpr int kPitch = kD + 8;  // +16 bytes per row: fewer bank conflicts, rows stay 16-byte aligned
  __shared__ __align__(16) Element tile_s[kBlockM * kPitch];
  const int tid = threadIdx.x;
  const int m0 = blockIdx.x * kBlockM, hq = blockIdx.y, b = blockIdx.z;
  const float* tile = ws.dq_accum + ((int64_t(b) * p.heads_q + hq) * ws.seqlen_q_pad + m0) * kD;

  typename Tr::MmadQ mma;
  Tensor coord = mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kD>>{}));
  constexpr int kValues = decltype(size(coord))::value;
  static_assert(kValues % 4 == 0);
  // Values 2j and 2j+1 of a thread are adjacent columns of one row (the MMA's column pair); values
  // 4j..4j+3 are contiguous in dq_accum on sm90 (float4) and strided by kThreads before.
  CUTE_UNROLL
  for (int i = 0; i < kValues; i += 4) {
    float v[4];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const float4 f = *reinterpret_cast<const float4*>(tile + dq_accum_index<kThreads>(i, tid));
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
#else
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) v[j] = tile[dq_accum_index<kThreads>(i + j, tid)];
#endif
    CUTE_UNROLL
    for (int j = 0; j < 4; j += 2) {
      const int r = get<0>(coord(i + j)), c = get<1>(coord(i + j));
      tile_s[r * kPitch + c] = Element(v[j] * p.softmax_scale);
      tile_s[r * kPitch + c + 1] = Element(v[j + 1] * p.softmax_scale);
    }
  }
  __syncthreads();
  Element* dq = p.dq.at<Element>(b, m0, hq);
  // dQ's D columns (kD or fewer: the kernel's columns past D hold zeros and are not stored).
  const int chunks_per_row = p.head_dim * int(sizeof(Element)) / 16;
  const int rows = min(kBlockM, p.seqlen_q - m0);
  for (int idx = tid; idx < rows * chunks_per_row; idx += kThreads) {
    const int r = idx / chunks_per_row, chunk = idx % chunks_per_row;
    *reinterpret_cast<uint4*>(dq + int64_t(r) * p.dq.row_stride + chunk * 8) =
        *reinterpret_cast<const uint4*>(tile_s + r * kPitch + chunk * 8);
  }
}

}  // namespace bwd
}  // namespace flashmask
