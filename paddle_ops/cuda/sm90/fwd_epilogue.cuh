// Epilogue of the sm90 forward: the normalised O accumulator to global memory, and the float32 LSE,
// written by the first thread of each quad.
//
// O goes through the tile's own Q stage in shared memory (stmatrix; same shape and swizzle, and
// free: every QK wgmma of the tile has retired) and leaves by row-tile TMA stores (copy.cuh), which
// drop positions past Sq. A one-tile CTA stores the whole tile and waits for the store's read before
// it exits. In a persistent CTA each consumer warpgroup stores its own 64 rows behind a barrier of
// its own, and the CTA hands the stage back to its Q ring only once both stores have read it
// (fwd_consumer.cuh), so that no thread waits. One store per tile behind a barrier of both
// warpgroups made the warpgroup that finished first wait for the other at every tile end: H200,
// bf16 D = 128, processes alternating, fwd TFLOP/s one store -> one per warpgroup: 8K causal
// document 410 / 418 -> 427 / 427, share question 338 / 348 -> 354 / 370, 32K share question
// 510 / 521 -> 529 / 534, others level to +2% (benchmarks/results/kernel_h200_fwd_wg_epilogue_ab.json).
// Register stores from persistent CTAs (pairs of adjacent columns, as before) were LSU-bound: H200,
// bf16 D = 128, one process, fwd TFLOP/s registers -> TMA (tile order of fwd_tile_order.cuh on):
// 32K causal document 427 -> 446, document 481 -> 506, share question 434 -> 443, short documents
// 180 -> 197; 8K, 64 rows: causal document 316 -> 333, share question 274 -> 295, short documents
// 198 -> 214.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/array.h>

#include "flashmask/params.h"
#include "fwd_layout.cuh"
#include "fwd_params.cuh"

namespace flashmask {
namespace sm90 {

// Named barriers kBarrierOStored + s: every consumer thread of store s (FwdTraits::kOStoreRows
// rows of the tile) has its part of O in shared memory.
constexpr uint32_t kBarrierOStored = 1;

// Which store consumer thread tidx writes its rows of O with. Where one store takes the whole tile
// both helpers are written so that the compiler sees store 0 and thread 0 (it cannot tell that
// tidx < kConsumerThreads).
template <class Traits>
__device__ __forceinline__ int o_store_of(int tidx) {
  return Traits::kOStoreThreads == Traits::kConsumerThreads ? 0 : tidx / Traits::kOStoreThreads;
}

// The thread that issues its store's TMA copy (and later waits for it).
template <class Traits>
__device__ __forceinline__ bool issues_o_store(int tidx) {
  return Traits::kOStoreThreads == Traits::kConsumerThreads ? tidx == 0 : tidx % Traits::kOStoreThreads == 0;
}

// sQ: the Q ring (kBlockM, kHeadDim, kQStages); q_stage: this tile's stage; [pos0, pos_end): the
// tile's positions (FwdTile); head: the tile's query head, or its GQA group where heads are packed
// (FwdKernelParams::pack_shift). kMayEndEarly: whether a tile may end before its rows do.
template <class Traits, bool kMayEndEarly, class TO, class TiledMma, class SmemQ, int kRows>
__device__ __forceinline__ void store_output(const FwdKernelParams<Traits>& kp, TO const& acc_o,
                                             TiledMma const& mma_pv, SmemQ const& sQ, int q_stage,
                                             const float (&lse)[kRows], int32_t pos0, int32_t pos_end,
                                             int32_t head, int32_t b, int tidx) {
  using namespace cute;
  using Element = typename Traits::Element;
  const FwdParams& p = kp.p;
  Tensor cO = mma_pv.get_thread_slice(tidx).partition_C(
      make_identity_tensor(select<0, 1>(typename Traits::TileShapePV{})));
  Tensor c = rowcol_view(cO);
  Tensor o16 = convert_fragment<Element>(acc_o);
  // Row r of the tile: position pos0 + r / pack of query head head * pack + r % pack.
  const int32_t pack_mask = (1 << kp.pack_shift) - 1;
  // A tile that ends before its rows do (a document block, FwdBlockLists::rows_of) stores from
  // registers, row by row: a row-tile TMA store would also write the next tile's positions. The
  // choice is the whole CTA's (one tile), so the named barrier below is met by all or none.
  const bool clipped = kMayEndEarly && pos_end < min(pos0 + (Traits::kBlockM >> kp.pack_shift), p.seqlen_q);
  if (!clipped) {
    auto r2s = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, mma_pv);
    auto thr_r2s = r2s.get_thread_slice(tidx);
    cute::copy(r2s, thr_r2s.retile_S(o16), thr_r2s.partition_D(sQ(_, _, q_stage)));
    cutlass::arch::fence_view_async_shared();  // visible to the TMA (async proxy)
    const int store = o_store_of<Traits>(tidx);
    cutlass::arch::NamedBarrier::sync(Traits::kOStoreThreads, kBarrierOStored + store);
    if (issues_o_store<Traits>(tidx)) {
      const int first_row = store * Traits::kOStoreRows;
      const Element* rows = raw_pointer_cast(sQ.data()) + q_stage * cosize_v<typename Traits::SmemLayoutQ> +
                            first_row * kRowTileChunk;
      store_row_tile<Traits::kBlockM, Traits::kHeadDim>(&kp.out_rows, rows, pos0 + (first_row >> kp.pack_shift),
                                                        head, b);
      cute::tma_store_arrive();
    }
  } else {
    Tensor o = rowcol_view(o16);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size<0>(o); ++i) {
      const int32_t r = get<0>(c(i, 0));
      const int32_t pos = pos0 + (r >> kp.pack_shift), head_q = (head << kp.pack_shift) + (r & pack_mask);
      if (pos >= pos_end) continue;
      Element* row = p.out.at<Element>(b, pos, head_q);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < size<1>(o); ++j) {
        const int32_t col = get<1>(c(i, j));
        if (col < p.head_dim_v) row[col] = o(i, j);
      }
    }
  }
  const int64_t heads_q = (int64_t)p.heads_q << kp.pack_shift;  // the caller's heads (p: packed_view)
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kRows; ++i) {
    const int32_t r = get<0>(c(i, 0));
    const int32_t pos = pos0 + (r >> kp.pack_shift), head_q = (head << kp.pack_shift) + (r & pack_mask);
    if (pos < pos_end && tidx % 4 == 0) p.lse[(b * heads_q + head_q) * p.seqlen_q + pos] = lse[i];
  }
  if constexpr (!Traits::kPersistent) {
    if (issues_o_store<Traits>(tidx)) cute::tma_store_wait<0>();  // shared memory must outlive the store's read
  }
}

}  // namespace sm90
}  // namespace flashmask
