// Column-wise FlashMask semantics: the one place that says which (row, column) pairs are masked.
//
// A key column j carries at most two masked row intervals, normalised here to four bounds:
//   lower interval [lts, lte)  and  upper interval [uts, ute).
// The user-facing `startend_row_indices[b, h, j, :]` has C in {1, 2, 4} columns whose meaning
// depends on `causal` (docs/MASKS_AND_API.md). `load_column_bounds` maps every form onto the four bounds,
// using the empty intervals [Sq, Sq) and [0, 0) for the ones a form does not carry, so kernels
// never branch on the form inside their loops.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FM_HOST_DEVICE inline
#endif

namespace flashmask {

// Which bound columns `startend_row_indices` carries. Encoded as (causal, C); validated by the
// Python API before any kernel runs.
struct MaskForm {
  int32_t num_cols = 0;  // C in {1, 2, 4}; 0 means "no startend_row_indices"
  bool causal = false;

  FM_HOST_DEVICE bool has_indices() const { return num_cols > 0; }
  // Index of each bound inside the C columns, or -1 when the form does not carry it.
  FM_HOST_DEVICE int lts_col() const { return num_cols > 0 ? 0 : -1; }
  FM_HOST_DEVICE int lte_col() const { return (num_cols == 4 || (causal && num_cols == 2)) ? 1 : -1; }
  FM_HOST_DEVICE int uts_col() const { return num_cols == 4 ? 2 : -1; }
  FM_HOST_DEVICE int ute_col() const {
    return num_cols == 4 ? 3 : ((!causal && num_cols == 2) ? 1 : -1);
  }
};

// The masked rows of one key column: [lts, lte) and [uts, ute).
struct ColumnBounds {
  int32_t lts, lte, uts, ute;
};

// Reads column `col` of one (batch, mask-head) slice of startend_row_indices, laid out [Sk, C].
// Missing lower bounds default to Sq (lts: nothing masked; lte: masked to the end), missing upper
// bounds to 0, which makes absent intervals empty.
FM_HOST_DEVICE ColumnBounds load_column_bounds(const int32_t* indices, int64_t col, MaskForm form,
                                               int32_t seqlen_q) {
  ColumnBounds b{seqlen_q, seqlen_q, 0, 0};
  if (!form.has_indices()) return b;
  const int32_t* c = indices + col * form.num_cols;
  b.lts = c[0];
  const int lte = form.lte_col(), uts = form.uts_col(), ute = form.ute_col();
  if (lte >= 0) b.lte = c[lte];
  if (uts >= 0) b.uts = c[uts];
  if (ute >= 0) b.ute = c[ute];
  return b;
}

// Bottom-right aligned causal masking (FlashAttention >= 2.1): query row i sees key j iff
// j <= i + (Sk - Sq).
FM_HOST_DEVICE int32_t causal_offset(int32_t seqlen_q, int32_t seqlen_k) { return seqlen_k - seqlen_q; }

// Bitwise, not short-circuit: on the GPU this keeps the per-element test free of branches (the
// `||` form compiled to a branch per value in the sm90 backward's partial tiles).
FM_HOST_DEVICE bool is_masked(int32_t row, int32_t col, const ColumnBounds& b, bool causal,
                              int32_t causal_off) {
  const bool above_diagonal = causal & (col > row + causal_off);
  const bool in_lower = (row >= b.lts) & (row < b.lte);
  const bool in_upper = (row >= b.uts) & (row < b.ute);
  return above_diagonal | in_lower | in_upper;
}

// is_masked for one fixed column, as at most two masked row intervals [first, first + len): the
// lower interval, and the upper one or, in the causal forms (which carry no upper interval: causal
// with C = 4 is rejected by the API), the rows above the diagonal, [0, col - causal_off). A test is
// one subtraction and one unsigned compare per interval, and `relative_to(row0)` moves the
// subtractions out of a tile's loop over rows: where a thread tests many rows of a few columns
// (the sm90 backward's S^T) that halves the integer work of is_masked. Rows are >= 0.
struct MaskedRows {
  int32_t first0;
  uint32_t len0;
  int32_t first1;
  uint32_t len1;

  FM_HOST_DEVICE static MaskedRows of(const ColumnBounds& b, int32_t col, bool causal, int32_t causal_off) {
    const int32_t upper_first = causal ? 0 : b.uts;
    const int32_t upper_end = causal ? col - causal_off : b.ute;
    return {b.lts, b.lte > b.lts ? uint32_t(b.lte - b.lts) : 0u, upper_first,
            upper_end > upper_first ? uint32_t(upper_end - upper_first) : 0u};
  }
  // The same intervals for rows counted from row0.
  FM_HOST_DEVICE MaskedRows relative_to(int32_t row0) const {
    return {int32_t(uint32_t(first0) - uint32_t(row0)), len0, int32_t(uint32_t(first1) - uint32_t(row0)), len1};
  }
  FM_HOST_DEVICE bool contains(int32_t row) const { return in_first(row) | in_second(row); }
  // The first visible row at or after `row` (past the column's rows when none is).
  FM_HOST_DEVICE int32_t visible_from(int32_t row) const {
    for (int round = 0; round < 2; ++round) {  // two intervals: two skips reach a visible row
      row = in_first(row) ? first0 + int32_t(len0) : in_second(row) ? first1 + int32_t(len1) : row;
    }
    return row;
  }
  // One past the last visible row before `end` (0 when none is).
  FM_HOST_DEVICE int32_t visible_until(int32_t end) const {
    for (int round = 0; round < 2; ++round) {
      if (end > 0) end = in_first(end - 1) ? first0 : in_second(end - 1) ? first1 : end;
    }
    return end;
  }

 private:
  FM_HOST_DEVICE bool in_first(int32_t row) const { return uint32_t(row) - uint32_t(first0) < len0; }
  FM_HOST_DEVICE bool in_second(int32_t row) const { return uint32_t(row) - uint32_t(first1) < len1; }
};

}  // namespace flashmask
