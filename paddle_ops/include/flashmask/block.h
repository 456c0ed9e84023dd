// Tile classification: which (query block, key block) tiles are fully masked, partially masked or
// unmasked. The one rule shared by the CPU kernel and every CUDA kernel.
//
// Per key block we keep the min and max of each of the four normalised bounds (mask.h). A tile
// with rows [row_begin, row_end) and columns [col_begin, col_end) is
//   - fully masked when one interval covers all its rows in every column (lts_max <= row_begin
//     and lte_min >= row_end, or the same for the upper interval), or causal hides all of it;
//   - unmasked when no column's intervals touch its rows and causal hides none of it;
//   - partial otherwise (the conservative answer: the element mask is exact).
// Tiles that run past Sq or Sk are classified by their in-range part; the kernels bound-check
// those edges themselves.
#pragma once

#include <algorithm>
#include <cstdint>

#include "flashmask/mask.h"

namespace flashmask {

enum class TileKind : uint8_t { kMasked = 0, kPartial = 1, kUnmasked = 2 };

// min/max of each bound over the columns of one key block.
struct BlockBounds {
  int32_t lts_min, lts_max, lte_min, lte_max, uts_min, uts_max, ute_min, ute_max;

  FM_HOST_DEVICE static BlockBounds of_column(const ColumnBounds& c) {
    return {c.lts, c.lts, c.lte, c.lte, c.uts, c.uts, c.ute, c.ute};
  }
  FM_HOST_DEVICE void include(const ColumnBounds& c) {
    lts_min = lts_min < c.lts ? lts_min : c.lts;  lts_max = lts_max > c.lts ? lts_max : c.lts;
    lte_min = lte_min < c.lte ? lte_min : c.lte;  lte_max = lte_max > c.lte ? lte_max : c.lte;
    uts_min = uts_min < c.uts ? uts_min : c.uts;  uts_max = uts_max > c.uts ? uts_max : c.uts;
    ute_min = ute_min < c.ute ? ute_min : c.ute;  ute_max = ute_max > c.ute ? ute_max : c.ute;
  }
};

// Summary of columns [col_begin, col_end) (clipped to Sk by the caller) of one mask slice.
FM_HOST_DEVICE BlockBounds summarize_key_block(const int32_t* indices, int32_t col_begin,
                                               int32_t col_end, MaskForm form, int32_t seqlen_q) {
  BlockBounds s = BlockBounds::of_column(load_column_bounds(indices, col_begin, form, seqlen_q));
  for (int32_t j = col_begin + 1; j < col_end; ++j) s.include(load_column_bounds(indices, j, form, seqlen_q));
  return s;
}

FM_HOST_DEVICE TileKind classify_tile(int32_t row_begin, int32_t row_end, int32_t col_begin,
                                      int32_t col_end, const BlockBounds& b, bool causal,
                                      int32_t causal_off) {
  // Causal: row i sees columns j <= i + causal_off.
  const bool causal_hides_all = causal && col_begin > row_end - 1 + causal_off;
  const bool causal_hides_none = !causal || col_end - 1 <= row_begin + causal_off;
  const bool lower_covers = b.lts_max <= row_begin && b.lte_min >= row_end;
  const bool upper_covers = b.uts_max <= row_begin && b.ute_min >= row_end;
  if (causal_hides_all || lower_covers || upper_covers) return TileKind::kMasked;
  const bool lower_clear = b.lts_min >= row_end || b.lte_max <= row_begin || b.lts_min >= b.lte_max;
  const bool upper_clear = b.uts_min >= row_end || b.ute_max <= row_begin || b.uts_min >= b.ute_max;
  return (causal_hides_none && lower_clear && upper_clear) ? TileKind::kUnmasked : TileKind::kPartial;
}

}  // namespace flashmask
