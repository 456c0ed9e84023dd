// Epilogue of the sm90 backward: each consumer warpgroup's dK (times softmax_scale) and dV
// accumulators (its keys x its columns), reduced over the GQA group on chip, straight from
// registers to global memory (pairs of adjacent columns per store; keys >= Sk skipped). Written
// once, without atomics.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>

#include "flashmask/params.h"
#include "fwd_layout.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits, class Acc, class ThrMma>
__device__ __forceinline__ void store_key_rows(const TensorView& dst, Acc const& acc, ThrMma const& thr_mma,
                                               float scale, int32_t key0, int32_t col0, int32_t seqlen_k,
                                               int32_t head_k, int32_t b) {
  using namespace cute;
  using Element = typename Traits::Element;
  Tensor cAcc = thr_mma.partition_C(make_identity_tensor(Shape<Int<Traits::kWGKeys>, Int<Traits::kWGCols>>{}));
  Tensor v = make_tensor(acc.data(), acc_rowcol(acc.layout()));
  Tensor c = make_tensor(cAcc.data(), acc_rowcol(cAcc.layout()));
  Element* base = static_cast<Element*>(dst.data) + (int64_t)b * dst.batch_stride + (int64_t)head_k * dst.head_stride;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < size<0>(v); ++i) {
    const int32_t key = key0 + get<0>(c(i, 0));
    if (key >= seqlen_k) continue;
    Element* row = base + (int64_t)key * dst.row_stride + col0;
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < size<1>(v); j += 2) {  // (j, j + 1): adjacent columns
      cutlass::Array<Element, 2> pair;
      pair[0] = Element(v(i, j) * scale);
      pair[1] = Element(v(i, j + 1) * scale);
      *reinterpret_cast<cutlass::Array<Element, 2>*>(row + get<1>(c(i, j))) = pair;
    }
  }
}

template <class Traits, class Acc, class ThrMma>
__device__ __forceinline__ void store_dkdv(const BwdParams& p, Acc const& acc_dk, Acc const& acc_dv,
                                           ThrMma const& thr_dkv, int32_t key0, int32_t col0, int32_t head_k,
                                           int32_t b) {
  store_key_rows<Traits>(p.dk, acc_dk, thr_dkv, p.softmax_scale, key0, col0, p.seqlen_k, head_k, b);
  store_key_rows<Traits>(p.dv, acc_dv, thr_dkv, 1.f, key0, col0, p.seqlen_k, head_k, b);
}

}  // namespace sm90
}  // namespace flashmask
