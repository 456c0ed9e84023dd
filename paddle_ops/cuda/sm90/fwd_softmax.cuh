// Online softmax (fp32, exp2 with the scale folded in) and the element mask of partial tiles, on
// the wgmma accumulator of one consumer thread: kRows rows (r, r + 8) whose columns are spread
// over the 4 threads of a quad, so row reductions are two shuffles.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>

#include "flashmask/mask.h"
#include "../utils.cuh"
#include "fwd_layout.cuh"

namespace flashmask {
namespace sm90 {

using namespace cute;

// Sets the masked elements of a partial tile to -inf. `coords` is the identity tensor partitioned
// like `scores` (tile-local (row, col)); tile row r is position row0 + (r >> row_shift) (GQA heads
// packed into the rows: fwd_params.cuh), column c key col0 + c. Columns >= Sk are
// masked too (their K rows were zero-filled by TMA). `columns` (nullptr without indices) holds the
// normalised bounds of this tile's key columns (shared memory, staged with the K tile).
template <class TS, class TC>
__device__ __forceinline__ void apply_element_mask(TS& scores, TC const& coords, int32_t row0,
                                                   int32_t row_shift, int32_t col0, int32_t seqlen_k,
                                                   const ColumnBounds* columns, bool causal,
                                                   int32_t causal_off) {
  Tensor s = make_tensor(scores.data(), acc_rowcol(scores.layout()));
  Tensor c = make_tensor(coords.data(), acc_rowcol(coords.layout()));
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < size<1>(s); ++j) {
    const int32_t c_local = get<1>(c(0, j));
    const int32_t col = col0 + c_local;
    ColumnBounds b{INT32_MAX, INT32_MAX, 0, 0};  // empty intervals
    const bool in_range = col < seqlen_k;
    if (columns != nullptr && in_range) b = columns[c_local];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size<0>(s); ++i) {
      const int32_t row = row0 + (get<0>(c(i, 0)) >> row_shift);
      if (!in_range || is_masked(row, col, b, causal, causal_off)) s(i, j) = -INFINITY;
    }
  }
}

// Running max / sum of kRows rows. Scores are raw (unscaled) logits; p = 2^(s * scale_log2 - m').
template <int kRows, int kChains>
struct OnlineSoftmax {
  static_assert(kChains > 0 && (kChains & (kChains - 1)) == 0, "combine() pairs the chains: a power of two");
  float row_max[kRows];
  float row_sum[kRows];  // this thread's partial sums; reduced over the quad at the end
  float scale_log2;

  __device__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) { row_max[i] = -INFINITY; row_sum[i] = 0.f; }
  }

  // Turns `scores` into unnormalised probabilities in place; `correction[i]` is the factor
  // 2^((m_old - m_new) * scale_log2) by which row i of the O accumulator must be rescaled (the
  // caller applies it with rescale() once no wgmma is writing O any more).
  template <class TS>
  __device__ __forceinline__ void step(TS& scores, float (&correction)[kRows]) {
    Tensor s = make_tensor(scores.data(), acc_rowcol(scores.layout()));
    static_assert(decltype(size<0>(s))::value == kRows);
    constexpr int kCols = decltype(size<1>(s))::value;
    static_assert(kCols % kChains == 0);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) {
      // kChains independent max and sum chains per row, so that a step need not wait for the
      // previous one's result (FwdTraits::kSoftmaxChains says where that measured faster).
      float m[kChains];
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kChains; ++c) m[c] = row_max[i];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) m[j % kChains] = fmaxf(m[j % kChains], s(i, j));
      const float m_new = quad_max(combine(m, [](float a, float b) { return fmaxf(a, b); }));
      // A row with nothing visible yet keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
      const float m_scaled = m_new == -INFINITY ? 0.f : m_new * scale_log2;
      correction[i] = m_new == -INFINITY ? 1.f : exp2_approx(row_max[i] * scale_log2 - m_scaled);
      row_max[i] = m_new;
      float sum[kChains] = {};
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) {
        s(i, j) = exp2_approx(s(i, j) * scale_log2 - m_scaled);
        sum[j % kChains] += s(i, j);
      }
      row_sum[i] = row_sum[i] * correction[i] + combine(sum, [](float a, float b) { return a + b; });
    }
  }

  // Pairwise tree over the chains.
  template <class Op>
  __device__ __forceinline__ static float combine(float (&v)[kChains], Op op) {
    CUTLASS_PRAGMA_UNROLL
    for (int stride = kChains / 2; stride > 0; stride /= 2) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < stride; ++c) v[c] = op(v[c], v[c + stride]);
    }
    return v[0];
  }

  template <class TO>
  __device__ __forceinline__ static void rescale(TO& acc_o, const float (&correction)[kRows]) {
    Tensor o = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < size<1>(o); ++j) o(i, j) *= correction[i];
    }
  }

  // Normalises acc_o and returns each row's LSE (natural log, -inf for rows with nothing visible,
  // whose output becomes exactly 0).
  template <class TO>
  __device__ __forceinline__ void finish(TO& acc_o, float softmax_scale, float (&lse)[kRows]) {
    Tensor o = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const float sum = quad_sum(row_sum[i]);
      const bool empty = sum == 0.f || sum != sum;
      const float inv = empty ? 0.f : 1.f / sum;
      lse[i] = empty ? -INFINITY : row_max[i] * softmax_scale + logf(sum);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < size<1>(o); ++j) o(i, j) *= inv;
    }
  }
};

}  // namespace sm90
}  // namespace flashmask
