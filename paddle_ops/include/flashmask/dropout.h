// Dropout's keep decision: counter-based (Philox4x32-10, Salmon et al., SC'11), so the backward
// regenerates exactly the forward's mask from (seed, offset) instead of storing it, and any kernel
// (CPU or CUDA, any tiling) computes the same decision for the same element.
//
// Element (b, hq, row, col) of the [B, Hq, Sq, Sk] probability matrix uses
//   key     = (lo32(seed), hi32(seed))
//   counter = (col / 4, row, lo32(offset + b * Hq + hq), hi32(offset + b * Hq + hq))
// and output word col % 4; it is kept iff that word >= drop_threshold(p) = floor(p * 2^32).
// A call consumes the B * Hq counters offset .. offset + B*Hq - 1 of its seed, so callers that
// advance the offset by at least B * Hq per call never reuse a stream.
#pragma once

#include <cstdint>

#include "flashmask/mask.h"  // FM_HOST_DEVICE

namespace flashmask {

struct Philox4 {
  uint32_t x[4];
};

FM_HOST_DEVICE void mul_hi_lo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

FM_HOST_DEVICE Philox4 philox4x32_10(Philox4 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  uint32_t* c = counter.x;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kM0, c[0], &hi0, &lo0);
    mul_hi_lo(kM1, c[2], &hi1, &lo1);
    const uint32_t c1 = c[1], c3 = c[3];
    c[0] = hi1 ^ c1 ^ key0;
    c[1] = lo1;
    c[2] = hi0 ^ c3 ^ key1;
    c[3] = lo0;
    key0 += kW0;
    key1 += kW1;
  }
  return counter;
}

// Words below this are dropped: floor(p * 2^32) for 0 <= p < 1.
FM_HOST_DEVICE uint32_t drop_threshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
}

// The four random words for columns [col4 * 4, col4 * 4 + 4) of one (b, hq, row).
FM_HOST_DEVICE Philox4 dropout_words(uint64_t seed, uint64_t offset, int64_t batch_head,
                                     int32_t row, int32_t col4) {
  const uint64_t stream = offset + static_cast<uint64_t>(batch_head);
  const Philox4 counter{{static_cast<uint32_t>(col4), static_cast<uint32_t>(row),
                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

}  // namespace flashmask
