// Dropout on the kernels' probability tiles: the keep decision of flashmask/dropout.h (the same
// counter-based Philox stream as the CPU kernels, so all of them drop exactly the same elements)
// for the values an MMA accumulator fragment holds.
//
// `coords` is the fragment's identity partition (tile (row, column) of each value, in the
// accumulator's own order). One Philox call gives the words of four adjacent columns of a row; in
// the sm80 mma.sync and sm90 wgmma accumulators those four values sit in two or four lanes of a
// warp at the same value index, so each lane draws one call in two or four and the lanes
// exchange words by shuffles: one Philox call per four values, the least the stream allows. All 32
// lanes of the warp must call these together.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "flashmask/dropout.h"
#include "flashmask/params.h"

namespace flashmask {

// Selects word w of a Philox output (selects, not an indexed array, which would live in local memory).
__device__ __forceinline__ uint32_t philox_word(const Philox4& words, int w) {
  return w == 0 ? words.x[0] : w == 1 ? words.x[1] : w == 2 ? words.x[2] : words.x[3];
}

// Bit i of keep[i / 32]: whether value i of the fragment (tile origin (row0, col0) of query head
// `head_q`, batch `b`) is kept. Values 2j and 2j + 1 are the column pair (c, c + 1) of one row,
// c even; lane l ^ 1 holds the other pair of the same four columns at the same value index
// (lane l holds columns 2 (l % 4) + {0, 1} of every eight). So for the pairs j and j + 1 the even
// lane draws pair j's four words and the odd lane pair j + 1's, and each passes the other the two
// it needs.
template <int kWords, class Coords>
__device__ __forceinline__ void dropout_keep_bits(uint32_t (&keep)[kWords], Coords const& coords, int row0,
                                                  int col0, int b, int head_q, const FwdParams& p) {
  constexpr int kValues = decltype(cute::size(coords))::value;
  static_assert(kValues % 4 == 0 && kWords * 32 >= kValues, "one bit per fragment value, pairs of pairs");
  const uint32_t threshold = drop_threshold(p.dropout_p);
  const int64_t batch_head = (int64_t)b * p.heads_q + head_q;
  const bool odd = (threadIdx.x & 1) != 0;
  CUTE_UNROLL
  for (int w = 0; w < kWords; ++w) keep[w] = 0u;
  CUTE_UNROLL
  for (int i = 0; i < kValues; i += 4) {
    const auto c = odd ? coords(i + 2) : coords(i);
    const int row = row0 + cute::get<0>(c), col = col0 + cute::get<1>(c);
    const Philox4 words = dropout_words(p.dropout_seed, p.dropout_offset, batch_head, row, col / 4);
    // The even lane's columns are words 0, 1 of each group, the odd lane's words 2, 3.
    const uint32_t give0 = odd ? words.x[0] : words.x[2], give1 = odd ? words.x[1] : words.x[3];
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
    const uint32_t w0 = odd ? got0 : words.x[0], w1 = odd ? got1 : words.x[1];  // pair j
    const uint32_t w2 = odd ? words.x[2] : got0, w3 = odd ? words.x[3] : got1;  // pair j + 1
    const uint32_t bits = (w0 >= threshold ? 1u : 0u) | (w1 >= threshold ? 2u : 0u) | (w2 >= threshold ? 4u : 0u) |
                          (w3 >= threshold ? 8u : 0u);
    keep[i / 32] |= bits << (i % 32);
  }
}

// The same for a fragment of a transposed tile (the sm90 backward's S^T: `coords` are (column,
// row) pairs). There the four columns of a group are four lanes' values at one value index (lanes
// l, l ^ 4, l ^ 8, l ^ 12, column 4 * (l / 16) + (l / 4) % 4 of every eight): for values i .. i + 3
// lane s = (l / 4) % 4 draws value i + s's group, and a 4 x 4 word transpose over three
// shuffles gives each lane its own column's word of all four.
template <int kWords, class Coords>
__device__ __forceinline__ void dropout_keep_bits_transposed(uint32_t (&keep)[kWords], Coords const& coords,
                                                             int row0, int col0, int b, int head_q,
                                                             const FwdParams& p) {
  constexpr int kValues = decltype(cute::size(coords))::value;
  static_assert(kValues % 4 == 0 && kWords * 32 >= kValues, "one bit per fragment value, groups of four");
  const uint32_t threshold = drop_threshold(p.dropout_p);
  const int64_t batch_head = (int64_t)b * p.heads_q + head_q;
  const int s = (threadIdx.x >> 2) & 3;
  CUTE_UNROLL
  for (int w = 0; w < kWords; ++w) keep[w] = 0u;
  CUTE_UNROLL
  for (int i = 0; i < kValues; i += 4) {
    const auto c0 = coords(i), c1 = coords(i + 1), c2 = coords(i + 2), c3 = coords(i + 3);
    // Component by component, spelled out: ptxas spilled more in the D = 128 dropout backward with
    // a select helper (68 -> 98 bytes against this loop) and, on an earlier version of the loop
    // that spilled 80, when the coordinate was selected once (80 -> 84).
    const int col = col0 + (s == 0   ? cute::get<0>(c0)
                            : s == 1 ? cute::get<0>(c1)
                            : s == 2 ? cute::get<0>(c2)
                                     : cute::get<0>(c3));
    const int row = row0 + (s == 0   ? cute::get<1>(c0)
                            : s == 1 ? cute::get<1>(c1)
                            : s == 2 ? cute::get<1>(c2)
                                     : cute::get<1>(c3));
    const Philox4 words = dropout_words(p.dropout_seed, p.dropout_offset, batch_head, row, col / 4);
    uint32_t bits = 0u;
    CUTE_UNROLL
    for (int d = 0; d < 4; ++d) {
      // Lane s ^ d needs word s ^ d of value i + s's group; it holds value i + (s ^ d)'s group,
      // whose word s is this lane's.
      const int t = s ^ d;
      const uint32_t give = philox_word(words, t);
      const uint32_t got = d == 0 ? give : __shfl_xor_sync(0xffffffffu, give, d << 2);
      bits |= (got >= threshold ? 1u : 0u) << t;
    }
    keep[i / 32] |= bits << (i % 32);
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
