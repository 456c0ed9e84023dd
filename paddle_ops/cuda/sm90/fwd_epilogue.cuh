// Epilogue of the sm90 forward: the normalised O accumulator to global memory, and the float32 LSE,
// written by the first thread of each quad.
//
// One tile per CTA (kPersistent = false): O goes through the tile's own Q stage in shared memory
// (stmatrix; same shape and swizzle, and free: every QK wgmma of the tile has retired and no
// later Q comes) and leaves by one TMA store, which clips rows past Sq. Persistent CTAs keep their
// Q ring busy with the next tiles, so they store O straight from registers (pairs of adjacent
// columns; rows >= Sq skipped).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/array.h>

#include "flashmask/params.h"
#include "fwd_layout.cuh"
#include "fwd_params.cuh"

namespace flashmask {
namespace sm90 {

// Named barrier of the consumer warpgroups: every thread's part of O is in shared memory.
constexpr uint32_t kBarrierOStored = 1;

// sQ: the Q ring (kBlockM, kHeadDim, kQStages); q_stage: this tile's stage.
template <class Traits, class TO, class TiledMma, class SmemQ, int kRows>
__device__ __forceinline__ void store_output(const FwdKernelParams<Traits>& kp, TO const& acc_o,
                                             TiledMma const& mma_pv, SmemQ const& sQ, int q_stage,
                                             const float (&lse)[kRows], int32_t m_block, int32_t head_q,
                                             int32_t b, int tidx) {
  using namespace cute;
  using Element = typename Traits::Element;
  const FwdParams& p = kp.p;
  Tensor cO = mma_pv.get_thread_slice(tidx).partition_C(
      make_identity_tensor(select<0, 1>(typename Traits::TileShapePV{})));
  Tensor c = make_tensor(cO.data(), acc_rowcol(cO.layout()));
  if constexpr (!Traits::kPersistent) {
    Tensor o16 = convert_fragment<Element>(acc_o);
    auto r2s = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, mma_pv);
    auto thr_r2s = r2s.get_thread_slice(tidx);
    cute::copy(r2s, thr_r2s.retile_S(o16), thr_r2s.partition_D(sQ(_, _, q_stage)));
    cutlass::arch::fence_view_async_shared();  // visible to the TMA (async proxy)
    cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kBarrierOStored);
    if (tidx == 0) {
      Tensor mO = kp.tma_o.get_tma_tensor(make_shape(p.seqlen_q, p.head_dim, p.heads_q, p.batch));
      Tensor gO = local_tile(mO(_, _, head_q, b), select<0, 2>(typename Traits::TileShapeQK{}),
                             make_coord(m_block, _0{}));
      auto [tOgO, tOsO] = tma_partition(kp.tma_o, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                        group_modes<0, 2>(gO));
      cute::copy(kp.tma_o, tOsO(_, q_stage), tOgO);
      cute::tma_store_arrive();
    }
  } else {
    Tensor o = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
    Element* out = static_cast<Element*>(p.out.data) + (int64_t)b * p.out.batch_stride +
                   (int64_t)head_q * p.out.head_stride;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size<0>(o); ++i) {
      const int32_t row = m_block * Traits::kBlockM + get<0>(c(i, 0));
      if (row >= p.seqlen_q) continue;
      Element* out_row = out + (int64_t)row * p.out.row_stride;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < size<1>(o); j += 2) {  // (j, j + 1): adjacent columns
        cutlass::Array<Element, 2> pair;
        pair[0] = Element(o(i, j));
        pair[1] = Element(o(i, j + 1));
        *reinterpret_cast<cutlass::Array<Element, 2>*>(out_row + get<1>(c(i, j))) = pair;
      }
    }
  }
  float* lse_row = p.lse + ((int64_t)b * p.heads_q + head_q) * p.seqlen_q;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kRows; ++i) {
    const int32_t row = m_block * Traits::kBlockM + get<0>(c(i, 0));
    if (row < p.seqlen_q && tidx % 4 == 0) lse_row[row] = lse[i];
  }
  if constexpr (!Traits::kPersistent) {
    if (tidx == 0) cute::tma_store_wait<0>();  // the CTA's shared memory must outlive the store's read
  }
}

}  // namespace sm90
}  // namespace flashmask
