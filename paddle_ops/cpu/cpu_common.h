// Shared pieces of the CPU FlashMask kernels (forward and backward): tile sizes, element
// conversion, a vectorisable exp, packing of the inputs into fp32 panels, and the per-key-block
// mask summaries that drive tile classification (block.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashmask/block.h"
#include "flashmask/check.h"
#include "flashmask/dropout.h"
#include "flashmask/mask.h"
#include "flashmask/params.h"
#include "microkernels.h"

namespace flashmask {
namespace cpu {

// 64x64 tiles: a 64-float score row is four AVX-512 (eight AVX2) registers, and a key panel of
// 64 columns x D fits in L1/L2 for every supported head dim. Both divide kBlockMaskSize, so a tile
// lies inside one block_mask block and block_mask classifies whole tiles.
constexpr int kBlockM = 64;  // query rows per tile
constexpr int kBlockN = 64;  // key columns per tile
static_assert(kBlockMaskSize % kBlockM == 0 && kBlockMaskSize % kBlockN == 0,
              "a CPU tile must lie inside one block_mask block");

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int num_blocks(int n, int block) { return (n + block - 1) / block; }

// ---------------------------------------------------------------------------------------------
// Element conversion. Own bit manipulations so the kernel needs no framework half types.
inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                         // below 2^-14: subnormal half
    const float units = bits_to_float(x) * 16777216.0f;  // in units of 2^-24, exact
    return sign | static_cast<uint16_t>(std::lrint(units));
  }
  return sign | static_cast<uint16_t>((x - 0x38000000u + 0xfffu + ((x >> 13) & 1u)) >> 13);
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {  // round to nearest even
  const uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Reads n elements of `dtype` at `src` into fp32.
inline void load_row(const void* src, DType dtype, int n, float* dst) {
  switch (dtype) {
    case DType::kFloat32: std::memcpy(dst, src, sizeof(float) * n); break;
    case DType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = half_to_float(s[i]);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      break;
    }
  }
}

// Writes n fp32 values to `dst` as `dtype`.
inline void store_row(const float* src, DType dtype, int n, void* dst) {
  switch (dtype) {
    case DType::kFloat32: std::memcpy(dst, src, sizeof(float) * n); break;
    case DType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_half(src[i]);
      break;
    }
    case DType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      break;
    }
  }
}

inline size_t dtype_size(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// Address of element (b, s, h, 0) of a [B, S, H, D] view.
inline const void* row_ptr(const TensorView& t, DType dtype, int64_t b, int64_t s, int64_t h) {
  return static_cast<const char*>(t.data) +
         (b * t.batch_stride + s * t.row_stride + h * t.head_stride) * dtype_size(dtype);
}
inline void* row_ptr_mut(const TensorView& t, DType dtype, int64_t b, int64_t s, int64_t h) {
  return const_cast<void*>(row_ptr(t, dtype, b, s, h));
}

// ---------------------------------------------------------------------------------------------
// exp(x) for x <= 0 (scores minus a running max or the LSE), written so GCC vectorises the
// loops that call it without -ffast-math (which would break our -inf handling). Range
// reduction x = n ln2 + r, degree-6 polynomial for 2^f on [-0.5, 0.5]: relative error ~2e-7.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;  // exp(-87) ~ 1.6e-38: still a normal float
  const float t = x * 1.4426950408889634f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest (|t| < 2^22)
  const float f = t - n;
  float p = 1.5403530393381606e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  return p * bits_to_float(static_cast<uint32_t>(e) << 23);
}

// ---------------------------------------------------------------------------------------------
// Per-(batch, mask head, key block) bound summaries, computed once per call and shared by every
// query head that reads that mask head.
class KeyBlockPlan {
 public:
  explicit KeyBlockPlan(const FwdParams& p)
      : p_(p),
        nkb_(num_blocks(p.seqlen_k, kBlockN)),
        mask_heads_(p.startend_row_indices ? p.mask_heads : 1),
        causal_off_(causal_offset(p.seqlen_q, p.seqlen_k)),
        summaries_(static_cast<size_t>(p.batch) * mask_heads_ * nkb_) {
    const int64_t total = static_cast<int64_t>(p.batch) * mask_heads_ * nkb_;
#pragma omp parallel for schedule(static) if (total * kBlockN > (1 << 16))
    for (int64_t t = 0; t < total; ++t) {
      const int kb = static_cast<int>(t % nkb_);
      const int64_t bm = t / nkb_;
      const int32_t* slice = indices_of(static_cast<int>(bm / mask_heads_), static_cast<int>(bm % mask_heads_));
      const int col_end = std::min(p.seqlen_k, (kb + 1) * kBlockN);
      summaries_[t] = summarize_key_block(slice, kb * kBlockN, col_end, p.mask_form, p.seqlen_q);
    }
  }

  int num_key_blocks() const { return nkb_; }

  // The mask slice [Sk, C] that query head `hq` of batch `b` reads (nullptr without a mask).
  const int32_t* slice(int b, int hq) const {
    return p_.startend_row_indices ? indices_of(b, p_.mask_head_of(hq)) : nullptr;
  }

  TileKind classify(int b, int hq, int qb, int kb) const {
    const int mh = p_.startend_row_indices ? p_.mask_head_of(hq) : 0;
    const BlockBounds& s = summaries_[(static_cast<size_t>(b) * mask_heads_ + mh) * nkb_ + kb];
    const int row_begin = qb * kBlockM, row_end = std::min(p_.seqlen_q, row_begin + kBlockM);
    const int col_begin = kb * kBlockN, col_end = std::min(p_.seqlen_k, col_begin + kBlockN);
    if (!p_.block_kept(b, hq, row_begin, col_begin)) return TileKind::kMasked;
    return classify_tile(row_begin, row_end, col_begin, col_end, s, p_.causal, causal_off_);
  }

  // Sets the masked entries of a partial tile's scores (rows x kBlockN, row-major) to -inf.
  // Each column's masked rows (mask.h's MaskedRows, is_masked as intervals) are staged as separate
  // arrays so the per-row loop over columns is branch-free and vectorises.
  void mask_partial_tile(int b, int hq, int qb, int kb, int rows, int cols, float* scores) const {
    const int32_t* sl = slice(b, hq);
    int32_t first0[kBlockN], first1[kBlockN];
    uint32_t len0[kBlockN], len1[kBlockN];
    const int col0 = kb * kBlockN, row0 = qb * kBlockM;
    for (int j = 0; j < cols; ++j) {
      const MaskedRows m = MaskedRows::of(load_column_bounds(sl, col0 + j, p_.mask_form, p_.seqlen_q), col0 + j,
                                          p_.causal, causal_off_);
      first0[j] = m.first0, len0[j] = m.len0, first1[j] = m.first1, len1[j] = m.len1;
    }
    for (int i = 0; i < rows; ++i) {
      float* s = scores + i * kBlockN;
      const int32_t row = row0 + i;
#pragma omp simd
      for (int j = 0; j < cols; ++j) {
        const MaskedRows m{first0[j], len0[j], first1[j], len1[j]};
        s[j] = m.contains(row) ? kNegInf : s[j];
      }
    }
  }

 private:
  const int32_t* indices_of(int b, int mh) const {
    if (!p_.startend_row_indices) return nullptr;
    return p_.mask_slice_at(static_cast<int64_t>(b) * p_.mask_heads + mh);
  }

  const FwdParams& p_;
  int nkb_, mask_heads_;
  int32_t causal_off_;
  std::vector<BlockBounds> summaries_;
};

// ---------------------------------------------------------------------------------------------
// fp32 panels of one [B, S, H, D] input, one per (batch, head): row-major [S_pad, D] and/or
// transposed [D, S_pad] (S_pad = S rounded up to kBlockN, zero filled) so the tile products run
// over contiguous, vectorisable rows.
struct Panels {
  int heads = 0, rows_pad = 0, dim = 0;
  std::vector<float> data;
  size_t offset(int b, int h) const { return (static_cast<size_t>(b) * heads + h) * rows_pad * dim; }
  const float* at(int b, int h) const { return data.data() + offset(b, h); }
  float* at(int b, int h) { return data.data() + offset(b, h); }
};

inline Panels pack_panels(const TensorView& t, DType dtype, int batch, int rows, int heads, int dim,
                          bool transpose) {
  Panels out;
  out.heads = heads;
  out.rows_pad = num_blocks(rows, kBlockN) * kBlockN;
  out.dim = dim;
  out.data.assign(static_cast<size_t>(batch) * heads * out.rows_pad * dim, 0.f);
  const bool big = static_cast<int64_t>(batch) * heads * rows * dim > (1 << 18);  // else not worth a fork
#pragma omp parallel if (big)
  {
    std::vector<float> row(dim);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h) {
        float* panel = out.at(b, h);
        for (int s = 0; s < rows; ++s) {
          if (transpose) {
            load_row(row_ptr(t, dtype, b, s, h), dtype, dim, row.data());
            for (int d = 0; d < dim; ++d) panel[static_cast<size_t>(d) * out.rows_pad + s] = row[d];
          } else {
            load_row(row_ptr(t, dtype, b, s, h), dtype, dim, panel + static_cast<size_t>(s) * dim);
          }
        }
      }
  }
  return out;
}

// Dropout of one row of a tile: vals[j] (column col0 + j, j < cols) *= 1 / (1 - p) when
// dropout.h keeps the element, else 0. col0 is a multiple of 4 (tiles start at multiples of 64).
inline void apply_dropout_row(const FwdParams& p, int b, int hq, int row, int col0, int cols, float* vals) {
  const uint32_t threshold = drop_threshold(p.dropout_p);
  const float scale = 1.f / (1.f - p.dropout_p);
  const int64_t batch_head = static_cast<int64_t>(b) * p.heads_q + hq;
  for (int j = 0; j < cols; j += 4) {
    const Philox4 r = dropout_words(p.dropout_seed, p.dropout_offset, batch_head, row, (col0 + j) / 4);
    for (int t = 0; t < 4 && j + t < cols; ++t) vals[j + t] *= r.x[t] >= threshold ? scale : 0.f;
  }
}

}  // namespace cpu
}  // namespace flashmask
