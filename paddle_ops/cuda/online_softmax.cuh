// The online softmax of the forward kernels (portable and Hopper): fp32, exp2 with the scale folded
// into one FFMA, on (row, col) views of a thread's scores and output (accumulator_view.cuh).
// Scores are raw logits; a step turns them into unnormalised probabilities
// p = 2^(s * scale_log2 - m * scale_log2) against the running row max m. Row sums stay per thread
// until finish(). A row with nothing visible keeps max -inf and sum 0 and ends with output 0 and
// LSE -inf, never NaN.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>

#include "utils.cuh"

namespace flashmask {

// kRows: the rows this thread holds; kChains: independent max / sum chains per row, so that an
// element need not wait for the previous one's result (a power of two, combined pairwise).
// kMaxSlack (log2 units): a row keeps its running max until a block's max exceeds it by more than
// this, so that most steps move no row's max and a warp whose rows all kept theirs skips the output
// rescale; probabilities stay below 2^kMaxSlack (16-bit P keeps its relative precision at any
// scale) and the LSE is exact either way. 0: the max moves with every block, the rescale always
// runs.
template <int kRows, int kChains = 1, int kMaxSlack = 0>
struct OnlineSoftmax {
  static_assert(kMaxSlack >= 0 && kMaxSlack <= 8,
                "probabilities grow to 2^kMaxSlack: keep them far inside fp16's range");
  static_assert(kChains > 0 && (kChains & (kChains - 1)) == 0, "combine() pairs the chains: a power of two");
  float row_max[kRows];
  float row_sum[kRows];
  float scale_log2;

  __device__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) { row_max[i] = -INFINITY; row_sum[i] = 0.f; }
  }

  // Scores -> probabilities in place. `correction[i]` = 2^((m_old - m_new) * scale_log2), the
  // factor by which row i of the output must be rescaled (rescale(); the Hopper kernel applies it
  // only once no wgmma is writing the output any more).
  template <class TS>
  __device__ __forceinline__ void step(TS&& s, float (&correction)[kRows]) {
    static_assert(decltype(cute::size<0>(s))::value == kRows);
    constexpr int kCols = decltype(cute::size<1>(s))::value;
    static_assert(kCols % kChains == 0);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) {
      float m[kChains];
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kChains; ++c) m[c] = row_max[i];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) m[j % kChains] = fmaxf(m[j % kChains], s(i, j));
      const float m_block = quad_max(combine(m, [](float a, float b) { return fmaxf(a, b); }));
      // NaN <= slack fails: a row with nothing visible yet (-inf - -inf) keeps its -inf.
      const bool keep = kMaxSlack > 0 && !((m_block - row_max[i]) * scale_log2 > float(kMaxSlack));
      const float m_new = keep ? row_max[i] : m_block;
      // Nothing visible yet: subtract 0, so that exp2(-inf) gives 0, not NaN.
      const float m_scaled = m_new == -INFINITY ? 0.f : m_new * scale_log2;
      // A kept max's correction is exactly 1, which rescale() tests (exp2 of m * scale_log2 minus
      // itself could see a contracted FFMA's rounding error).
      correction[i] = keep || m_new == -INFINITY ? 1.f : exp2_approx(row_max[i] * scale_log2 - m_scaled);
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

  // With a slack, a warp none of whose rows moved its max leaves its output alone (every
  // correction is exactly 1); the vote keeps the branch warp-uniform.
  template <class TO>
  __device__ __forceinline__ static void rescale(TO&& o, const float (&correction)[kRows]) {
    if constexpr (kMaxSlack > 0) {
      bool moved = false;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kRows; ++i) moved |= correction[i] != 1.f;
      if (!__any_sync(0xffffffffu, moved)) return;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < cute::size<1>(o); ++j) o(i, j) *= correction[i];
    }
  }

  // Normalises the output and gives each row's LSE (natural log).
  template <class TO>
  __device__ __forceinline__ void finish(TO&& o, float softmax_scale, float (&lse)[kRows]) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const float sum = quad_sum(row_sum[i]);
      const bool empty = sum == 0.f || sum != sum;
      const float inv = empty ? 0.f : 1.f / sum;
      lse[i] = empty ? -INFINITY : row_max[i] * softmax_scale + logf(sum);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < cute::size<1>(o); ++j) o(i, j) *= inv;
    }
  }

 private:
  template <class Op>
  __device__ __forceinline__ static float combine(float (&v)[kChains], Op op) {
    CUTLASS_PRAGMA_UNROLL
    for (int stride = kChains / 2; stride > 0; stride /= 2) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < stride; ++c) v[c] = op(v[c], v[c + stride]);
    }
    return v[0];
  }
};

}  // namespace flashmask
