// Dropout on the kernels' probability tiles: the keep decision of flashmask/dropout.h (the same
// counter-based Philox stream as the CPU kernels, so all of them drop exactly the same elements)
// for the values an MMA accumulator fragment holds (sm80 mma.sync and sm90 wgmma fragments pair
// adjacent columns the same way).
//
// `coords` is the fragment's identity partition (tile (row, column) of each value, in the
// accumulator's own order). Values 2j and 2j + 1 are the column pair (c, c + 1) of one row with c
// even, so they share one Philox call (the four words of columns 4 * (c / 4) .. + 3).
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "flashmask/dropout.h"
#include "flashmask/params.h"

namespace flashmask {

// Bit i of keep[i / 32]: whether value i of the fragment (tile origin (row0, col0) of query head
// `head_q`, batch `b`) is kept.
template <int kWords, class Coords>
__device__ __forceinline__ void dropout_keep_bits(uint32_t (&keep)[kWords], Coords const& coords, int row0,
                                                  int col0, int b, int head_q, const FwdParams& p) {
  constexpr int kValues = decltype(cute::size(coords))::value;
  static_assert(kValues % 2 == 0 && kWords * 32 >= kValues, "one bit per fragment value");
  const uint32_t threshold = drop_threshold(p.dropout_p);
  const int64_t batch_head = (int64_t)b * p.heads_q + head_q;
  CUTE_UNROLL
  for (int w = 0; w < kWords; ++w) keep[w] = 0u;
  CUTE_UNROLL
  for (int i = 0; i < kValues; i += 2) {
    const int row = row0 + cute::get<0>(coords(i)), col = col0 + cute::get<1>(coords(i));
    const Philox4 words = dropout_words(p.dropout_seed, p.dropout_offset, batch_head, row, col / 4);
    const bool upper = (col & 2) != 0;  // col is even: words 0, 1 or 2, 3 (selects, not an indexed array)
    const uint32_t w0 = upper ? words.x[2] : words.x[0], w1 = upper ? words.x[3] : words.x[1];
    const uint32_t pair = (w0 >= threshold ? 1u : 0u) | (w1 >= threshold ? 2u : 0u);
    keep[i / 32] |= pair << (i % 32);
  }
}

// The same for a fragment of a transposed tile (the sm90 backward's S^T: `coords` are (column,
// row) pairs, so a pair of values shares a column, not a row's group of four): one Philox call
// per value.
template <int kWords, class Coords>
__device__ __forceinline__ void dropout_keep_bits_transposed(uint32_t (&keep)[kWords], Coords const& coords,
                                                             int row0, int col0, int b, int head_q,
                                                             const FwdParams& p) {
  constexpr int kValues = decltype(cute::size(coords))::value;
  static_assert(kWords * 32 >= kValues, "one bit per fragment value");
  const uint32_t threshold = drop_threshold(p.dropout_p);
  const int64_t batch_head = (int64_t)b * p.heads_q + head_q;
  CUTE_UNROLL
  for (int w = 0; w < kWords; ++w) keep[w] = 0u;
  CUTE_UNROLL
  for (int i = 0; i < kValues; ++i) {
    const int col = col0 + cute::get<0>(coords(i)), row = row0 + cute::get<1>(coords(i));
    const Philox4 words = dropout_words(p.dropout_seed, p.dropout_offset, batch_head, row, col / 4);
    const int w = col & 3;  // selects, not an indexed array
    const uint32_t word = w == 0 ? words.x[0] : w == 1 ? words.x[1] : w == 2 ? words.x[2] : words.x[3];
    keep[i / 32] |= (word >= threshold ? 1u : 0u) << (i % 32);
  }
}

template <int kWords>
__device__ __forceinline__ bool dropout_kept(const uint32_t (&keep)[kWords], int i) {
  return (keep[i / 32] >> (i % 32)) & 1u;
}

// In place: each value times its keep factor, 1 / (1 - p) if kept, else 0.
template <int kWords, class Frag>
__device__ __forceinline__ void apply_dropout(Frag& frag, const uint32_t (&keep)[kWords], float dropout_p) {
  const float scale = 1.f / (1.f - dropout_p);
  CUTE_UNROLL
  for (int i = 0; i < decltype(cute::size(frag))::value; ++i)
    frag(i) = dropout_kept(keep, i) ? frag(i) * scale : 0.f;
}

// Words of keep bits for a fragment of kValues values.
constexpr int dropout_words_for(int values) { return (values + 31) / 32; }

// dropout_keep_bits and apply_dropout in one, for a fragment whose keep bits serve only it.
template <class Frag, class Coords>
__device__ __forceinline__ void apply_tile_dropout(Frag& frag, Coords const& coords, int row0, int col0, int b,
                                                   int head_q, const FwdParams& p) {
  uint32_t keep[dropout_words_for(decltype(cute::size(frag))::value)];
  dropout_keep_bits(keep, coords, row0, col0, b, head_q, p);
  apply_dropout(frag, keep, p.dropout_p);
}

}  // namespace flashmask
