// The element mask of a partial tile, shared by the portable and the Hopper forward: on (row, col)
// views (accumulator_view.cuh) of a thread's scores and of their tile coordinates, every score whose
// (row, key) mask.h's is_masked hides, or whose key is past Sk, becomes -inf.
// The Hopper forward takes this path only for the partial tiles its precomputed mask payloads
// (sm90/fwd_mask_payload.cuh) do not cover.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "flashmask/mask.h"

namespace flashmask {

// row_of(tile row) -> the row's query position; bounds_of(tile column, in_range) -> that key
// column's normalised bounds (a column past Sk may return anything: it is masked regardless).
// kSelect picks the form ptxas schedules best for the caller, measured in the SASS: the Hopper
// forward takes each row's position out of the column loop and sets masked scores by a branch (with
// a select ptxas recomputed the position per column: +350 instructions per kernel); the portable
// forward keeps its branch-free select (the branch form cost it up to 15% on index masks).
template <bool kSelect, class TS, class TC, class RowOf, class BoundsOf>
__device__ __forceinline__ void mask_partial_tile(TS&& scores, TC const& coords, int32_t col0,
                                                  int32_t seqlen_k, bool causal, int32_t causal_off,
                                                  RowOf row_of, BoundsOf bounds_of) {
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < cute::size<1>(scores); ++j) {
    const int32_t tile_col = cute::get<1>(coords(0, j));
    const int32_t col = col0 + tile_col;
    const bool in_range = col < seqlen_k;
    const ColumnBounds bounds = bounds_of(tile_col, in_range);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size<0>(scores); ++i) {
      if constexpr (kSelect) {
        const bool masked =
            !in_range | is_masked(row_of(cute::get<0>(coords(i, j))), col, bounds, causal, causal_off);
        scores(i, j) = masked ? -INFINITY : scores(i, j);
      } else {
        const int32_t row = row_of(cute::get<0>(coords(i, 0)));
        if (!in_range || is_masked(row, col, bounds, causal, causal_off)) scores(i, j) = -INFINITY;
      }
    }
  }
}

}  // namespace flashmask
