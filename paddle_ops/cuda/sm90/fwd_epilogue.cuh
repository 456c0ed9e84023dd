// Epilogue of the sm90 forward: the normalised O accumulator straight from registers to global
// memory (pairs of adjacent columns per store; rows >= Sq skipped, so ragged edges need nothing
// else) and the float32 LSE, written by the first thread of each quad.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>

#include "flashmask/params.h"
#include "fwd_layout.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits, class TO, class ThrMma, int kRows>
__device__ __forceinline__ void store_output(const FwdParams& p, TO const& acc_o,
                                             ThrMma const& thr_pv, const float (&lse)[kRows],
                                             int32_t m_block, int32_t head_q, int32_t b, int tidx) {
  using namespace cute;
  using Element = typename Traits::Element;
  Tensor cO = thr_pv.partition_C(make_identity_tensor(select<0, 1>(typename Traits::TileShapePV{})));
  Tensor o = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
  Tensor c = make_tensor(cO.data(), acc_rowcol(cO.layout()));
  Element* out = static_cast<Element*>(p.out.data) + (int64_t)b * p.out.batch_stride +
                 (int64_t)head_q * p.out.head_stride;
  float* lse_row = p.lse + ((int64_t)b * p.heads_q + head_q) * p.seqlen_q;
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
    if (tidx % 4 == 0) lse_row[row] = lse[i];
  }
}

}  // namespace sm90
}  // namespace flashmask
