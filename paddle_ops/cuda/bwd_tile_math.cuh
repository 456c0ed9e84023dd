// Device building blocks shared by the dK/dV kernel (bwd_kernel.cuh) and the deterministic dQ kernel
// (bwd_dq_kernel.cuh): tile loads and stores, the shared-memory GEMM, and the one place that turns
// S and dP into P and dS (with the element mask on partial tiles, and dropout's keep factors).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

#include <cmath>

#include "flashmask/block.h"
#include "flashmask/mask.h"
#include "flashmask/params.h"
#include "accumulator_view.cuh"
#include "bwd_tile_range.cuh"
#include "bwd_traits.cuh"
#include "bwd_workspace.h"
#include "dropout_tile.cuh"
#include "utils.cuh"

namespace flashmask {
namespace bwd {

using namespace cute;

constexpr float kLog2e = 1.4426950408889634f;

// acc += A * B^T with A [M, K] and B [N, K] in shared memory (any swizzled or transposed view).
// ldmatrix of slice k+1 is issued before the MMAs of slice k.
template <typename CopyA, typename CopyB, typename TiledMma, typename Acc, typename SA, typename SB>
__device__ __forceinline__ void gemm_ss(Acc& acc, const SA& sA, const SB& sB, const TiledMma& mma, int tid) {
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor rA = thr_mma.partition_fragment_A(make_tensor(sA.data(), get_nonswizzle_portion(sA.layout())));
  Tensor rB = thr_mma.partition_fragment_B(make_tensor(sB.data(), get_nonswizzle_portion(sB.layout())));
  auto copy_a = make_tiled_copy_A(CopyA{}, mma);
  auto copy_b = make_tiled_copy_B(CopyB{}, mma);
  auto thr_a = copy_a.get_thread_slice(tid);
  auto thr_b = copy_b.get_thread_slice(tid);
  Tensor tsA = thr_a.partition_S(sA);
  Tensor tsB = thr_b.partition_S(sB);
  Tensor trA = thr_a.retile_D(rA);
  Tensor trB = thr_b.retile_D(rB);
  cute::copy(copy_a, tsA(_, _, _0{}), trA(_, _, _0{}));
  cute::copy(copy_b, tsB(_, _, _0{}), trB(_, _, _0{}));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(rA); ++k) {
    if (k + 1 < size<2>(rA)) {
      cute::copy(copy_a, tsA(_, _, k + 1), trA(_, _, k + 1));
      cute::copy(copy_b, tsB(_, _, k + 1), trB(_, _, k + 1));
    }
    cute::gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

// Global -> shared [rows, kD] tile by cp.async, 16 bytes per thread: rows below `valid_rows` and,
// of those, the columns below `valid_cols` (D or Dv when the kernel's kD columns are more:
// cuda_kernel_head_dim) are read; the rest is zero-filled, so that the GEMMs see zeros, never
// garbage or another row's data.
template <typename Tr, typename GTensor, typename STensor>
__device__ __forceinline__ void load_rows_async(const GTensor& g, STensor& s, int valid_rows, int valid_cols,
                                                int tid) {
  typename Tr::GmemLoad tiled;
  auto thr = tiled.get_thread_slice(tid);
  Tensor src = thr.partition_S(g);
  Tensor dst = thr.partition_D(s);
  Tensor coord = thr.partition_S(make_identity_tensor(shape(g)));
  const bool all_cols = valid_cols >= int(size<1>(g));
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m) {
    if (get<0>(coord(0, m, 0)) >= valid_rows) {
      cute::clear(dst(_, m, _));
    } else if (all_cols) {
      cute::copy(tiled, src(_, m, _), dst(_, m, _));
    } else {
      CUTE_UNROLL
      for (int k = 0; k < size<2>(dst); ++k) {
        if (get<1>(coord(0, m, k)) < valid_cols) cute::copy(tiled, src(_, m, k), dst(_, m, k));
        else cute::clear(dst(_, m, k));
      }
    }
  }
}

// Store the first `valid_rows` rows and `valid_cols` columns of a shared [rows, kD] tile to global
// memory, 16 bytes per thread.
template <typename Tr, typename STensor, typename GTensor>
__device__ __forceinline__ void store_rows(const STensor& s, GTensor& g, int valid_rows, int valid_cols, int tid) {
  typename Tr::GmemStore tiled;
  auto thr = tiled.get_thread_slice(tid);
  Tensor src = thr.partition_S(s);
  Tensor dst = thr.partition_D(g);
  Tensor coord = thr.partition_D(make_identity_tensor(shape(g)));
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m) {
    if (get<0>(coord(0, m, 0)) >= valid_rows) continue;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(dst); ++k)
      if (get<1>(coord(0, m, k)) < valid_cols) cute::copy(tiled, src(_, m, k), dst(_, m, k));
  }
}

// Cast an fp32 accumulator to Element (packed cvt, two values per instruction) and write it into a
// shared tile.
template <typename Tr, typename TiledMma, typename Acc, typename STensor>
__device__ __forceinline__ void store_acc(const Acc& acc, STensor& s, const TiledMma& mma, int tid) {
  using Element = typename Tr::Element;
  constexpr int N = decltype(size(acc))::value;
  cutlass::NumericArrayConverter<Element, float, N> convert;
  auto packed = convert(*reinterpret_cast<const cutlass::Array<float, N>*>(acc.data()));
  Tensor r = make_tensor(make_rmem_ptr<Element>(&packed), acc.layout());
  auto tiled = make_tiled_copy_C(typename Tr::StoreAcc{}, mma);
  auto thr = tiled.get_thread_slice(tid);
  cute::copy(tiled, thr.retile_S(r), thr.partition_D(s));
}

// Row vectors of one query tile into shared memory (plain loads; read after the next barrier).
template <typename Tr>
__device__ __forceinline__ void load_row_vectors(const float* lse_log2, const float* dpsum, float* s_lse,
                                                 float* s_dpsum, int tid) {
  if (tid < Tr::kBlockM) {
    s_lse[tid] = lse_log2[tid];
    s_dpsum[tid] = dpsum[tid];
  }
}

// Column bounds of key columns [n0, n0 + kBlockN) of one mask slice; columns past Sk (and calls
// without startend_row_indices) get the empty intervals, so the element mask is uniform code.
template <typename Tr>
__device__ __forceinline__ void load_columns(const BwdParams& p, const int32_t* slice, int n0,
                                             ColumnBounds* s_col, int tid) {
  for (int j = tid; j < Tr::kBlockN; j += Tr::kThreads) {
    const int col = n0 + j;
    s_col[j] = (slice != nullptr && col < p.seqlen_k)
                   ? load_column_bounds(slice, col, p.mask_form, p.seqlen_q)
                   : ColumnBounds{p.seqlen_q, p.seqlen_q, 0, 0};
  }
}

// Where value i of thread `tid` of the dQ TiledMMA lives inside a dq_accum tile (bwd_workspace.h):
// consecutive threads at consecutive addresses, so a warp's atomics cover one contiguous span. sm90+
// adds 4 values per instruction (float4 atomicAdd), so there each thread owns 4 consecutive floats.
template <int kThreads>
__device__ __forceinline__ int dq_accum_index(int i, int tid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return ((i / 4) * kThreads + tid) * 4 + i % 4;
#else
  return i * kThreads + tid;
#endif
}

// tile[dq_accum_index(i, tid)] += acc(i) for every value of this thread.
template <int kThreads, typename Acc>
__device__ __forceinline__ void dq_accum_add(float* tile, const Acc& acc, int tid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(decltype(size(acc))::value % 4 == 0);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 4)
    atomicAdd(reinterpret_cast<float4*>(tile + dq_accum_index<kThreads>(i, tid)),
              make_float4(acc(i), acc(i + 1), acc(i + 2), acc(i + 3)));
#else
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) atomicAdd(tile + dq_accum_index<kThreads>(i, tid), acc(i));
#endif
}

// In place: acc_s (S) becomes P = exp2(S * scale_log2 - lse_log2). kMask (partial tile or last key
// block) applies the element mask; masked and padding elements get P = 0 (and hence dS = 0).
template <typename Tr, bool kMask, typename Acc>
__device__ __forceinline__ void compute_p_impl(Acc& acc_s, const float* s_lse, const ColumnBounds* s_col, int m0,
                                               int n0, int seqlen_k, bool causal, int causal_off, float scale_log2,
                                               int tid) {
  typename Tr::MmaSdP mma;
  Tensor coord_acc = mma.get_thread_slice(tid).partition_C(
      make_identity_tensor(Shape<Int<Tr::kBlockM>, Int<Tr::kBlockN>>{}));
  Tensor coord = rowcol_view(coord_acc);
  Tensor s = rowcol_view(acc_s);
  CUTE_UNROLL
  for (int mi = 0; mi < size<0>(s); ++mi) {
    const int r = get<0>(coord(mi, 0));
    const float lse = s_lse[r];
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(s); ++ni) {
      float p = exp2_approx(s(mi, ni) * scale_log2 - lse);
      if constexpr (kMask) {
        const int c = get<1>(coord(mi, ni));
        if (n0 + c >= seqlen_k || is_masked(m0 + r, n0 + c, s_col[c], causal, causal_off)) p = 0.f;
      }
      s(mi, ni) = p;
    }
  }
}

template <typename Tr, typename Acc>
__device__ __forceinline__ void compute_p(Acc& acc_s, const float* s_lse, const ColumnBounds* s_col, bool need_mask,
                                          int m0, int n0, int seqlen_k, bool causal, int causal_off, float scale_log2,
                                          int tid) {
  if (need_mask) compute_p_impl<Tr, true>(acc_s, s_lse, s_col, m0, n0, seqlen_k, causal, causal_off, scale_log2, tid);
  else compute_p_impl<Tr, false>(acc_s, s_lse, s_col, m0, n0, seqlen_k, causal, causal_off, scale_log2, tid);
}

// In place: acc_dp (dP) becomes dS = P * (dP - D), D read once per row.
template <typename Tr, typename Acc>
__device__ __forceinline__ void compute_ds(const Acc& acc_p, Acc& acc_dp, const float* s_dpsum, int tid) {
  typename Tr::MmaSdP mma;
  Tensor coord_acc = mma.get_thread_slice(tid).partition_C(
      make_identity_tensor(Shape<Int<Tr::kBlockM>, Int<Tr::kBlockN>>{}));
  Tensor coord = rowcol_view(coord_acc);
  Tensor p = rowcol_view(acc_p);
  Tensor dp = rowcol_view(acc_dp);
  CUTE_UNROLL
  for (int mi = 0; mi < size<0>(dp); ++mi) {
    const float dpsum = s_dpsum[get<0>(coord(mi, 0))];
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(dp); ++ni) dp(mi, ni) = p(mi, ni) * (dp(mi, ni) - dpsum);
  }
}

// Dropout's keep bits (dropout_tile.cuh) of this thread's values of tile (m0, n0) of query head hq.
template <typename Tr, int kWords>
__device__ __forceinline__ void tile_keep_bits(uint32_t (&keep)[kWords], const BwdParams& p, int b, int hq, int m0,
                                               int n0, int tid) {
  typename Tr::MmaSdP mma;
  Tensor coord = mma.get_thread_slice(tid).partition_C(
      make_identity_tensor(Shape<Int<Tr::kBlockM>, Int<Tr::kBlockN>>{}));
  dropout_keep_bits(keep, coord, m0, n0, b, hq, p);
}

template <typename Acc>
__device__ __forceinline__ void scale_acc(Acc& acc, float scale) {
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) acc(i) *= scale;
}

}  // namespace bwd
}  // namespace flashmask
