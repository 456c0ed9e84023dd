// The portable (sm80+) FlashMask forward kernel, FlashAttention-2 style, written with CuTe.
//
// One CTA per (query block, batch, query head). It walks only the key blocks on its compacted list
// (preprocess.cuh), so fully masked tiles cost nothing; the element mask (mask.h) runs only on
// tiles flagged partial and on the tile that crosses Sk. K and V are loaded with cp.async so that
// V's load overlaps S = Q K^T and the next K's load overlaps the softmax and O += P V.
// Scores stay fp32; the online softmax (online_softmax.cuh) and the element mask (element_mask.cuh)
// are the Hopper forward's too.
// Fully masked rows end with a zero row sum: out 0 and LSE -inf, never NaN.
//
// Included only by the per-head-dim instantiation files (fwd_hdim*.cu) to keep compile units lean.
#pragma once

#include <cmath>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include "flashmask/mask.h"
#include "flashmask/params.h"
#include "accumulator_view.cuh"
#include "dropout_tile.cuh"
#include "element_mask.cuh"
#include "fwd_launch.h"
#include "online_softmax.cuh"
#include "preprocess.cuh"
#include "tile_size.h"
#include "utils.cuh"

namespace flashmask {
namespace fwd {

using namespace cute;

template <typename Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_, kNThreads = 32 * kNWarps_;
  static_assert(kHeadDim % 64 == 0, "smem rows are built from 64-element swizzled atoms");
  static_assert(kBlockM == 16 * kNWarps || kBlockM == 32 * kNWarps, "warps split the query rows");
  // 16 rows per warp at D <= 128 needs ~100 accumulator registers: cap at 168 so that three CTAs
  // share an SM (the compiler's choice, 194, allowed two).
  static constexpr int kMinBlocksPerSm = (kBlockM == 16 * kNWarps && kHeadDim <= 128) ? 3 : 1;

  using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                     MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                     MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;
  using TiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kNWarps>, _1, _1>>,
                            Tile<Int<16 * kNWarps>, _16, _16>>;

  // 8 x 64 atoms with a 128-byte XOR swizzle: conflict-free for ldmatrix and 16-byte cp.async.
  using SmemLayoutAtom =
      decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // V seen as (D, N) for O += P V, read with transposing ldmatrix.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutVtNoSwizzle = decltype(get_nonswizzle_portion(SmemLayoutVt{}));

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using SmemCopyAtomO = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<32>, Element>;

  // 16-byte global accesses, 8 threads per 64-element row segment.
  static constexpr int kGmemThreadsPerRow = 64 / 8;
  using GmemLayoutAtom = Layout<Shape<Int<kNThreads / kGmemThreadsPerRow>, Int<kGmemThreadsPerRow>>,
                                Stride<Int<kGmemThreadsPerRow>, _1>>;
  using GmemTiledCopyQKV = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{}, GmemLayoutAtom{},
      Layout<Shape<_1, _8>>{}));
  using GmemTiledCopyO = decltype(make_tiled_copy(
      Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<128>, Element>{}, GmemLayoutAtom{},
      Layout<Shape<_1, _8>>{}));

  static constexpr int kSmemQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr int kSmemKVBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr int kSmemBoundsBytes = kBlockN * sizeof(ColumnBounds);  // of a partial tile
  static constexpr int kSmemBytes = kSmemQBytes + 2 * kSmemKVBytes + kSmemBoundsBytes;  // O reuses Q
};

// ---- layout helpers ------------------------------------------------------------------------------

// MMA accumulator ((2,2), MMA_M, MMA_N) -> A operand of m16n8k16 ((2,2,2), MMA_M, MMA_N / 2):
// the probabilities P feed the second GEMM straight from registers.
template <class Layout>
__device__ __forceinline__ auto acc_as_a_operand(Layout const& acc) {
  auto l = logical_divide(acc, Shape<Underscore, Underscore, _2>{});
  return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));
}

template <typename To, class Engine, class Layout>
__device__ __forceinline__ auto convert_to(Tensor<Engine, Layout> const& t) {
  using From = typename Engine::value_type;
  constexpr int N = decltype(size(t))::value;
  Tensor out = make_tensor<To>(t.layout());
  cutlass::NumericArrayConverter<To, From, N> convert;
  *reinterpret_cast<cutlass::Array<To, N>*>(out.data()) =
      convert(*reinterpret_cast<const cutlass::Array<From, N>*>(t.data()));
  return out;
}

// ---- copies --------------------------------------------------------------------------------------

// Global -> shared. With kCheckRows, only the rows below `rows_left` are read and the rows past the
// sequence end are zero-filled, so that no garbage (possibly NaN) enters the GEMMs; without it the
// caller guarantees a full tile. Columns at or past `cols` (D or Dv, where the kernel's kHeadDim
// columns are more: cuda_kernel_head_dim) are zero-filled too.
template <bool kCheckRows, class TiledCopy, class Src, class Dst, class Ident>
__device__ __forceinline__ void copy_rows(TiledCopy const& tiled_copy, Src const& src, Dst& dst,
                                          Ident const& ident, int rows_left, int cols) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(src); ++m) {
    const bool row_in = !kCheckRows || get<0>(ident(0, m, 0)) < rows_left;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(src); ++k) {
      if (row_in && get<1>(ident(0, m, k)) < cols) cute::copy(tiled_copy, src(_, m, k), dst(_, m, k));
      else cute::clear(dst(_, m, k));
    }
  }
}

// acc += A B with both operands in shared memory, loading k-slice i+1 while multiplying slice i.
template <class Acc, class RA, class RB, class SA, class SB, class Mma, class CopyA, class CopyB,
          class ThrCopyA, class ThrCopyB>
__device__ __forceinline__ void gemm_smem(Acc& acc, RA& rA, RB& rB, SA const& sA, SB const& sB,
                                          Mma const& mma, CopyA const& copy_a,
                                          CopyB const& copy_b, ThrCopyA const& thr_a,
                                          ThrCopyB const& thr_b) {
  Tensor rA_view = thr_a.retile_D(rA);
  Tensor rB_view = thr_b.retile_D(rB);
  cute::copy(copy_a, sA(_, _, _0{}), rA_view(_, _, _0{}));
  cute::copy(copy_b, sB(_, _, _0{}), rB_view(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < size<2>(rA); ++i) {
    if (i + 1 < size<2>(rA)) {
      cute::copy(copy_a, sA(_, _, i + 1), rA_view(_, _, i + 1));
      cute::copy(copy_b, sB(_, _, i + 1), rB_view(_, _, i + 1));
    }
    cute::gemm(mma, rA(_, _, i), rB(_, _, i), acc);
  }
}

// acc += A B with A already in registers and B in shared memory.
template <class Acc, class RA, class RB, class SB, class Mma, class CopyB, class ThrCopyB>
__device__ __forceinline__ void gemm_reg_smem(Acc& acc, RA const& rA, RB& rB, SB const& sB,
                                              Mma const& mma, CopyB const& copy_b,
                                              ThrCopyB const& thr_b) {
  Tensor rB_view = thr_b.retile_D(rB);
  cute::copy(copy_b, sB(_, _, _0{}), rB_view(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < size<2>(rA); ++i) {
    if (i + 1 < size<2>(rA)) cute::copy(copy_b, sB(_, _, i + 1), rB_view(_, _, i + 1));
    cute::gemm(mma, rA(_, _, i), rB(_, _, i), acc);
  }
}

// ---- the element mask's column bounds -----------------------------------------------------------

// Stages the normalised bounds of key block n_block's columns (< Sk) in shared memory with 16-byte
// cp.async, in the same group as that block's K, so that the element mask reads them from smem.
template <int kBlockN, int kNThreads>
__device__ __forceinline__ void load_tile_bounds(ColumnBounds* s_bounds, const ColumnBounds* columns,
                                                 int n_block, int seqlen_k, int tid) {
  const int n_cols = min(kBlockN, seqlen_k - n_block * kBlockN);
  const ColumnBounds* src = columns + (int64_t)n_block * kBlockN;
  for (int c = tid; c < n_cols; c += kNThreads)
    SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>::copy(*reinterpret_cast<const cute::uint128_t*>(src + c),
                                                     *reinterpret_cast<cute::uint128_t*>(s_bounds + c));
}

// ---- the kernel ----------------------------------------------------------------------------------

// kDropout: a separate instantiation, so that the dropout code (a Philox call per four values)
// adds no register pressure to calls without it (compiled into one kernel with a runtime branch,
// ptxas spill loads of the D = 128 kernels grew from 184 / 484 to 352 / 1016 bytes).
template <class Traits, bool kDropout>
__global__ void __launch_bounds__(Traits::kNThreads, Traits::kMinBlocksPerSm)
    fwd_kernel(const FwdParams p, const FwdBlockLists lists, const MaskSlices slices) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  extern __shared__ __align__(128) char smem[];

  const int tid = threadIdx.x;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // last query blocks (most work if causal) first
  const int b = blockIdx.y, head = blockIdx.z;
  const int row0 = m_block * kBlockM;
  const int head_k = head / (p.heads_q / p.heads_k);
  const int64_t list = (int64_t)slices.index(p, b, head) * lists.num_m_blocks + m_block;
  const int32_t causal_off = causal_offset(p.seqlen_q, p.seqlen_k);

  // Global views: [S, D] of this (batch, head), D contiguous.
  auto q_ptr = p.q.at<const Element>(b, 0, head);
  auto k_ptr = p.k.at<const Element>(b, 0, head_k);
  auto v_ptr = p.v.at<const Element>(b, 0, head_k);
  auto o_ptr = p.out.at<Element>(b, 0, head);
  Tensor mQ = make_tensor(make_gmem_ptr(q_ptr), make_shape(p.seqlen_q, Int<kHeadDim>{}),
                          make_stride(p.q.row_stride, _1{}));
  Tensor mK = make_tensor(make_gmem_ptr(k_ptr), make_shape(p.seqlen_k, Int<kHeadDim>{}),
                          make_stride(p.k.row_stride, _1{}));
  Tensor mV = make_tensor(make_gmem_ptr(v_ptr), make_shape(p.seqlen_k, Int<kHeadDim>{}),
                          make_stride(p.v.row_stride, _1{}));
  Tensor mO = make_tensor(make_gmem_ptr(o_ptr), make_shape(p.seqlen_q, Int<kHeadDim>{}),
                          make_stride(p.out.row_stride, _1{}));
  Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
  Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
  Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));  // (N, D, n)
  Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));

  Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});
  Tensor sVtNoSwizzle = make_tensor(sV.data().get(), typename Traits::SmemLayoutVtNoSwizzle{});
  Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutQ{});
  auto* s_bounds = reinterpret_cast<ColumnBounds*>(smem + Traits::kSmemQBytes + 2 * Traits::kSmemKVBytes);
  const ColumnBounds* columns =
      lists.columns != nullptr ? lists.columns + (int64_t)slices.index(p, b, head) * p.seqlen_k : nullptr;
  const ColumnBounds* tile_bounds = columns != nullptr ? s_bounds : nullptr;

  typename Traits::GmemTiledCopyQKV gmem_copy;
  auto gmem_thr = gmem_copy.get_thread_slice(tid);
  Tensor tQgQ = gmem_thr.partition_S(gQ);
  Tensor tQsQ = gmem_thr.partition_D(sQ);
  Tensor tKgK = gmem_thr.partition_S(gK);  // (CPY, CPY_N, CPY_D, n)
  Tensor tKsK = gmem_thr.partition_D(sK);
  Tensor tVgV = gmem_thr.partition_S(gV);
  Tensor tVsV = gmem_thr.partition_D(sV);
  Tensor tQcQ = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  Tensor tKVcKV = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

  // Q's load is issued before the list is read, so the two latencies overlap (the epilogue waits
  // for it even when the list is empty: sO aliases sQ).
  copy_rows<true>(gmem_copy, tQgQ, tQsQ, tQcQ, p.seqlen_q - row0, p.head_dim);
  const int count = lists.counts[2 * list];
  const int num_partial = lists.counts[2 * list + 1];
  const int32_t* entries = lists.entries + list * lists.num_n_blocks;

  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(tid);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);
  Tensor tSrK = thr_mma.partition_fragment_B(sK);
  Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle);
  Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  clear(acc_o);

  auto smem_copy_q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_q = smem_copy_q.get_thread_slice(tid);
  Tensor tSsQ = smem_thr_q.partition_S(sQ);
  auto smem_copy_k = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_k = smem_copy_k.get_thread_slice(tid);
  Tensor tSsK = smem_thr_k.partition_S(sK);
  auto smem_copy_v = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma);
  auto smem_thr_v = smem_copy_v.get_thread_slice(tid);
  Tensor tOsVt = smem_thr_v.partition_S(sVt);

  // (row, col) of every score this thread holds, in tile coordinates.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor score_coords = rowcol_view(tScS);

  constexpr int kRows = decltype(size<0>(acc_rowcol(acc_o.layout())))::value;
  OnlineSoftmax<kRows> softmax(p.softmax_scale * float(M_LOG2E));

  // Loads K (and, for a partial tile with indices, its column bounds) of list entry `entry`.
  // Only partial entries can cross Sk (preprocess.cuh), and they precede the unmasked ones, so a
  // load issued from the unmasked loop needs no row checks.
  auto load_k = [&](int32_t entry, auto may_be_partial) {
    const int n_block = entry_n_block(entry);
    if constexpr (decltype(may_be_partial)::value) {
      copy_rows<true>(gmem_copy, tKgK(_, _, _, n_block), tKsK, tKVcKV, p.seqlen_k - n_block * kBlockN,
                      p.head_dim);
      if (entry_is_partial(entry) && columns != nullptr)
        load_tile_bounds<kBlockN, Traits::kNThreads>(s_bounds, columns, n_block, p.seqlen_k, tid);
    } else {
      copy_rows<false>(gmem_copy, tKgK(_, _, _, n_block), tKsK, tKVcKV, 0, p.head_dim);
    }
  };

  // One key block: S = Q K^T, element mask if kPartial, online softmax, O += P V. The next entry
  // is read one iteration ahead so its load latency hides behind the GEMM.
  int32_t entry = count > 0 ? entries[0] : 0;
  auto step = [&](int i, auto partial_tag) __attribute__((always_inline)) {
    constexpr bool kPartial = decltype(partial_tag)::value;
    const int n_block = entry_n_block(entry);
    const int32_t next_entry = i + 1 < count ? entries[i + 1] : 0;
    Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    cp_async_wait<0>();  // K(n_block) landed
    __syncthreads();     // ... for every thread, and everyone is done with the previous V
    copy_rows<kPartial>(gmem_copy, tVgV(_, _, _, n_block), tVsV, tKVcKV, p.seqlen_k - n_block * kBlockN,
                        p.head_dim_v);
    cp_async_fence();

    gemm_smem(acc_s, tSrQ, tSrK, tSsQ, tSsK, tiled_mma, smem_copy_q, smem_copy_k, smem_thr_q,
              smem_thr_k);
    Tensor scores = rowcol_view(acc_s);
    if constexpr (kPartial) {
      auto row_of = [&](int tile_row) { return row0 + tile_row; };
      const int col0 = n_block * kBlockN;
      if (tile_bounds != nullptr) {
        // A column past Sk has a stale smem record: read anyway, the mask ignores it.
        mask_partial_tile</*kSelect*/ true>(scores, score_coords, col0, p.seqlen_k, p.causal, causal_off,
                                            row_of, [&](int tile_col, bool) {
                                              const int4 v = reinterpret_cast<const int4*>(tile_bounds)[tile_col];
                                              return ColumnBounds{v.x, v.y, v.z, v.w};
                                            });
      } else {  // no indices: load_column_bounds' defaults (causal / Sk edge only)
        mask_partial_tile</*kSelect*/ true>(scores, score_coords, col0, p.seqlen_k, p.causal, causal_off,
                                            row_of, [&](int, bool) { return ColumnBounds{p.seqlen_q, p.seqlen_q, 0, 0}; });
      }
    }

    cp_async_wait<0>();  // V(n_block) landed
    __syncthreads();     // ... for every thread, and everyone is done with K(n_block) and its bounds
    if (i + 1 < count) {
      load_k(next_entry, partial_tag);
      cp_async_fence();
    }

    float correction[kRows];
    softmax.step(scores, correction);
    softmax.rescale(rowcol_view(acc_o), correction);
    if constexpr (kDropout) {  // after the row sums, which normalise with every weight
      apply_tile_dropout(acc_s, tScS, row0, n_block * kBlockN, b, head, p);
    }
    Tensor probs = convert_to<Element>(acc_s);
    Tensor tOrP = make_tensor(probs.data(), acc_as_a_operand(probs.layout()));
    gemm_reg_smem(acc_o, tOrP, tOrVt, tOsVt, tiled_mma, smem_copy_v, smem_thr_v);
    entry = next_entry;
  };

  if (count > 0) load_k(entry, std::true_type{});
  cp_async_fence();  // Q and the first K: one group
  // Partial tiles come first in the list (preprocess.cuh): the unmasked loop has no mask code.
  int i = 0;
  for (; i < num_partial; ++i) step(i, std::true_type{});
  for (; i < count; ++i) step(i, std::false_type{});

  // Epilogue: normalise; rows that saw nothing (sum 0) give out 0 and LSE -inf.
  float lse[kRows];
  softmax.finish(rowcol_view(acc_o), p.softmax_scale, lse);

  cp_async_wait<0>();  // only pending when the list was empty (Q)
  Tensor out = convert_to<Element>(acc_o);
  auto smem_copy_o = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, tiled_mma);
  auto smem_thr_o = smem_copy_o.get_thread_slice(tid);
  Tensor taccOrO = smem_thr_o.retile_S(out);
  Tensor taccOsO = smem_thr_o.partition_D(sO);
  __syncthreads();  // sO aliases sQ: every warp has finished its last Q K^T
  cute::copy(smem_copy_o, taccOrO, taccOsO);

  // LSE: the quad leader (column 0 of the tile) owns each row.
  Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  Tensor out_coords = rowcol_view(tOcO);
  if (get<1>(out_coords(0, 0)) == 0) {
    float* lse_row = p.lse + ((int64_t)b * p.heads_q + head) * p.seqlen_q;
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const int row = row0 + get<0>(out_coords(mi, 0));
      if (row < p.seqlen_q) lse_row[row] = lse[mi];
    }
  }

  __syncthreads();
  typename Traits::GmemTiledCopyO gmem_copy_o;
  auto gmem_thr_o = gmem_copy_o.get_thread_slice(tid);
  Tensor tOsO = gmem_thr_o.partition_S(sO);
  Tensor tOgO = gmem_thr_o.partition_D(gO);
  Tensor tOrO = make_tensor<Element>(shape(tOgO));
  cute::copy(gmem_copy_o, tOsO, tOrO);
  Tensor tOcOg = gmem_thr_o.partition_D(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  CUTE_UNROLL
  for (int m = 0; m < size<1>(tOgO); ++m) {
    if (row0 + get<0>(tOcOg(0, m, 0)) < p.seqlen_q) {
      CUTE_UNROLL
      for (int k = 0; k < size<2>(tOgO); ++k)
        if (get<1>(tOcOg(0, m, k)) < p.head_dim_v) cute::copy(gmem_copy_o, tOrO(_, m, k), tOgO(_, m, k));
    }
  }
}

}  // namespace fwd

// Launches fwd_kernel<Traits, dropout or not> on lists built with Traits' block_m x block_n.
template <class Traits>
void launch_fwd_kernel(const FwdParams& p, const FwdBlockLists& lists, cudaStream_t stream) {
  if (lists.num_m_blocks == 0 || p.batch == 0 || p.heads_q == 0) return;
  auto kernel = p.dropout_p > 0.f ? &fwd::fwd_kernel<Traits, true> : &fwd::fwd_kernel<Traits, false>;
  constexpr int smem_bytes = Traits::kSmemBytes;
  if (smem_bytes > 48 * 1024) {
    FM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  }
  const dim3 grid(lists.num_m_blocks, p.batch, p.heads_q);
  kernel<<<grid, Traits::kNThreads, smem_bytes, stream>>>(p, lists, MaskSlices::of(p));
  FM_CHECK_LAUNCH("fwd_kernel");
}

// Traits of the tile fwd_tile_size(kHeadDim, kHasIndices).
template <typename Element, int kHeadDim, bool kHasIndices>
using FwdTraitsFor = fwd::FwdTraits<Element, kHeadDim, fwd_tile_size(kHeadDim, kHasIndices).block_m,
                                    fwd_tile_size(kHeadDim, kHasIndices).block_n,
                                    fwd_tile_size(kHeadDim, kHasIndices).warps>;

// The lists must have been built with fwd_tile_size(kHeadDim, p.mask_form.has_indices()).
template <typename Element, int kHeadDim>
void run_fwd_hdim(const FwdParams& p, const FwdBlockLists& lists, cudaStream_t stream) {
  if constexpr (fwd_tile_size(kHeadDim, false) == fwd_tile_size(kHeadDim, true)) {
    launch_fwd_kernel<FwdTraitsFor<Element, kHeadDim, false>>(p, lists, stream);
  } else if (p.mask_form.has_indices()) {
    launch_fwd_kernel<FwdTraitsFor<Element, kHeadDim, true>>(p, lists, stream);
  } else {
    launch_fwd_kernel<FwdTraitsFor<Element, kHeadDim, false>>(p, lists, stream);
  }
}

}  // namespace flashmask
