// Epilogue of the sm90 backward: each consumer warpgroup's dK (times softmax_scale) and dV
// accumulators (its keys x its columns), reduced over the GQA group on chip, leave once per CTA,
// without atomics, through shared memory and TMA stores. Against 32-bit stores straight from the
// registers (which sat in the LSU queue: stall_lg on 64 stores per thread, then the exit drain;
// 8% of the warp samples at 8K causal document) the H200 measured, bwd TFLOP/s at 8K, bf16, D=128:
// causal 450 -> 469, sliding window 325 -> 352, causal document 281 -> 289, share question
// 228 -> 237, short documents 166 -> 179; D=64 causal 334 -> 348; D=256 within noise (309 -> 307).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "flashmask/params.h"
#include "bwd_barriers.cuh"
#include "bwd_params.cuh"
#include "../bwd_tile_range.cuh"
#include "fwd_layout.cuh"

namespace flashmask {
namespace sm90 {

// A key block that ends before both kBlockN rows and Sk (a document-aligned block followed by the
// next one's keys, ../key_blocks.cuh) leaves without TMA, which would also write the rows past its
// end: every consumer thread copies 16-byte pieces of its rows from shared memory.
template <class Traits, class SmemTile>
__device__ __forceinline__ void store_block_rows(const TensorView& t, int32_t cols, SmemTile const& s_tile,
                                                 int32_t first_key, int32_t rows, int32_t head_k, int32_t b) {
  using namespace cute;
  using Element = typename Traits::Element;
  constexpr int kVecs = Traits::kHeadDim * int(sizeof(Element)) / 16;  // 16-byte pieces per row
  static_assert(Traits::kConsumerThreads % kVecs == 0, "whole rows per pass");
  Element* rows_ptr = t.at<Element>(b, first_key, head_k);
  Tensor g = make_tensor(make_gmem_ptr(rows_ptr), make_shape(Int<Traits::kBlockN>{}, Int<Traits::kHeadDim>{}),
                         make_stride(t.row_stride, _1{}));
  auto copy_rows = make_tiled_copy(
      Copy_Atom<UniversalCopy<uint128_t>, Element>{},
      Layout<Shape<Int<Traits::kConsumerThreads / kVecs>, Int<kVecs>>, Stride<Int<kVecs>, _1>>{},
      Layout<Shape<_1, Int<16 / int(sizeof(Element))>>>{});
  auto thr = copy_rows.get_thread_slice(threadIdx.x - 128);
  Tensor ts = thr.partition_S(s_tile);
  Tensor tg = thr.partition_D(g);
  Tensor tc = thr.partition_D(make_identity_tensor(make_shape(Int<Traits::kBlockN>{}, Int<Traits::kHeadDim>{})));
  CUTLASS_PRAGMA_UNROLL
  for (int m = 0; m < size<1>(ts); ++m) {
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < size<2>(ts); ++k) {
      // Head dims are multiples of 8 elements (check.h): a piece is wholly in or out.
      if (get<0>(tc(0, m, k)) < rows && get<1>(tc(0, m, k)) < cols) cute::copy(copy_rows, ts(_, m, k), tg(_, m, k));
    }
  }
}

// dK (times softmax_scale) and dV through shared memory: once both warpgroups' wgmmas have retired
// (the other warpgroup's dQ and, at D = 256, its S^T still read this warpgroup's K rows), each
// writes its keys x columns of dK into the K tile and of dV into the V tile by stmatrix, and one
// thread stores both tiles by TMA (keys past Sk clipped), then waits until the TMA has read them
// so that the CTA's shared memory outlives the reads.
template <class Traits, class Acc, class TiledMma>
__device__ __forceinline__ void store_dkdv(const BwdKernelParams<Traits>& kp,
                                           typename Traits::SharedStorage& smem, Acc const& acc_dk,
                                           Acc const& acc_dv, TiledMma const& mma_dkv, int tidx, int key_slice,
                                           int col_slice, const bwd::KeyBlock& kb, int32_t head_k, int32_t b) {
  using namespace cute;
  using Element = typename Traits::Element;
  const BwdParams& p = kp.p;
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutK{});
  const auto wg_tile = Shape<Int<Traits::kWGKeys>, Int<Traits::kWGCols>>{};
  Tensor sdKw = local_tile(sK, wg_tile, make_coord(key_slice, col_slice));
  Tensor sdVw = local_tile(sV, wg_tile, make_coord(key_slice, col_slice));

  Tensor dk = make_tensor_like(acc_dk);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < size(acc_dk); ++i) dk(i) = acc_dk(i) * p.softmax_scale;
  Tensor dk16 = convert_fragment<Element>(dk);
  Tensor dv16 = convert_fragment<Element>(acc_dv);
  auto r2s = make_tiled_copy_C(typename Traits::SmemCopyAtomdKV{}, mma_dkv);
  auto thr_r2s = r2s.get_thread_slice(tidx);
  cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kBarrierDkdvStaged);
  cute::copy(r2s, thr_r2s.retile_S(dk16), thr_r2s.partition_D(sdKw));
  cute::copy(r2s, thr_r2s.retile_S(dv16), thr_r2s.partition_D(sdVw));
  const int32_t rows = kb.end - kb.first;
  if (rows < Traits::kBlockN && kb.end < p.seqlen_k) {
    cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kBarrierDkdvStaged);
    store_block_rows<Traits>(p.dk, p.head_dim, sK, kb.first, rows, head_k, b);
    store_block_rows<Traits>(p.dv, p.head_dim_v, sV, kb.first, rows, head_k, b);
    return;
  }
  cutlass::arch::fence_view_async_shared();  // visible to the TMA (async proxy)
  cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kBarrierDkdvStaged);
  if (threadIdx.x == 128) {
    const auto k_tile = Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDim>>{};
    auto store = [&](auto const& tma, auto const& s_tile, int32_t cols) {  // cols: D or Dv
      Tensor m = tma.get_tma_tensor(make_shape(p.seqlen_k, cols, p.heads_k, p.batch));
      Tensor g = local_tile(domain_offset(make_coord(kb.first, _0{}), m(_, _, head_k, b)), k_tile,
                            make_coord(_0{}, _0{}));
      auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(s_tile), group_modes<0, 2>(g));
      cute::copy(tma, ts, tg);
    };
    store(kp.tma_dk, sK, p.head_dim);
    store(kp.tma_dv, sV, p.head_dim_v);
    cute::tma_store_arrive();
    cute::tma_store_wait<0>();
  }
}

}  // namespace sm90
}  // namespace flashmask
