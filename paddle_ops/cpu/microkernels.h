// Register-blocked fp32 tile products for the CPU kernels, written with GCC/Clang vector
// extensions so the accumulators live in registers (plain loops over local arrays spill).
//   tile_scores:        S[R x 64]  = scale * A[R x D] . Bt[D x 64]   (QK^T and dO V^T)
//   accumulate_product: C[R x D]  += P[R x n] . B[n x D]             (PV, dS K, P^T dO, dS^T Q)
// R rows are processed together so every loaded vector of B feeds R FMAs.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

namespace flashmask {
namespace cpu {

// Vector width follows the ISA the file is compiled for (setup_ops.py uses -march=native; the CMake
// library builds for the baseline ISA); rows per block keep the accumulators within the registers.
#if defined(__AVX512F__)
constexpr int kVecWidth = 16;
constexpr int kRowBlock = 4;
#elif defined(__AVX__)
constexpr int kVecWidth = 8;
constexpr int kRowBlock = 2;
#else
constexpr int kVecWidth = 4;
constexpr int kRowBlock = 1;
#endif
typedef float vfloat __attribute__((vector_size(kVecWidth * sizeof(float))));

inline vfloat vload(const float* p) { vfloat v; std::memcpy(&v, p, sizeof(v)); return v; }
inline void vstore(float* p, vfloat v) { std::memcpy(p, &v, sizeof(v)); }
inline vfloat vbroadcast(float x) { return vfloat{} + x; }

// S[r][0..N) = scale * sum_d a[r*lda + d] * bt[d*ldb + j], N = NV * kVecWidth columns.
template <int R, int NV>
inline void scores_rows(const float* a, int lda, int dim, const float* bt, int ldb, float scale,
                        float* s, int lds) {
  vfloat acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = vfloat{};
  for (int d = 0; d < dim; ++d) {
    vfloat b[NV];
    for (int c = 0; c < NV; ++c) b[c] = vload(bt + static_cast<size_t>(d) * ldb + c * kVecWidth);
    for (int r = 0; r < R; ++r) {
      const vfloat x = vbroadcast(a[static_cast<size_t>(r) * lda + d]);
      for (int c = 0; c < NV; ++c) acc[r][c] += x * b[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) vstore(s + r * lds + c * kVecWidth, acc[r][c] * scale);
}

// C[r][d0 .. d0 + NV*W) += sum_t p[r*ldp + t] * b[t*ldb + d], for t < n.
template <int R, int NV>
inline void product_rows(const float* p, int ldp, int n, const float* b, int ldb, float* c, int ldc) {
  vfloat acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = vload(c + static_cast<size_t>(r) * ldc + v * kVecWidth);
  for (int t = 0; t < n; ++t) {
    vfloat bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = vload(b + static_cast<size_t>(t) * ldb + v * kVecWidth);
    for (int r = 0; r < R; ++r) {
      const vfloat x = vbroadcast(p[r * ldp + t]);
      for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) vstore(c + static_cast<size_t>(r) * ldc + v * kVecWidth, acc[r][v]);
}

// Scalar tail of product_rows for the last dim % kVecWidth columns.
inline void product_tail(const float* p, int ldp, int rows, int n, const float* b, int ldb, float* c,
                         int ldc, int d0, int dim) {
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < n; ++t) {
      const float x = p[r * ldp + t];
      for (int d = d0; d < dim; ++d) c[static_cast<size_t>(r) * ldc + d] += x * b[static_cast<size_t>(t) * ldb + d];
    }
}

// S [rows x kCols] = scale * A [rows x dim] . Bt [dim x kCols] (Bt row stride ldb).
template <int kCols>
inline void tile_scores(const float* a, int rows, int dim, const float* bt, int ldb, float scale, float* s) {
  static_assert(kCols % kVecWidth == 0, "tile width must be a multiple of the vector width");
  constexpr int NV = kCols / kVecWidth;
  int r = 0;
  for (; r + kRowBlock <= rows; r += kRowBlock)
    scores_rows<kRowBlock, NV>(a + static_cast<size_t>(r) * dim, dim, dim, bt, ldb, scale, s + r * kCols, kCols);
  for (; r < rows; ++r)
    scores_rows<1, NV>(a + static_cast<size_t>(r) * dim, dim, dim, bt, ldb, scale, s + r * kCols, kCols);
}

// C [rows x dim] += P [rows x n] (row stride ldp) . B [n x dim] (row stride dim).
inline void accumulate_product(const float* p, int ldp, int rows, int n, const float* b, int dim, float* c) {
  constexpr int W = kVecWidth;
  int r = 0;
  auto block = [&](auto rows_tag, int r0) {
    constexpr int R = decltype(rows_tag)::value;
    int d = 0;
    for (; d + 2 * W <= dim; d += 2 * W)
      product_rows<R, 2>(p + r0 * ldp, ldp, n, b + d, dim, c + static_cast<size_t>(r0) * dim + d, dim);
    for (; d + W <= dim; d += W)
      product_rows<R, 1>(p + r0 * ldp, ldp, n, b + d, dim, c + static_cast<size_t>(r0) * dim + d, dim);
    if (d < dim) product_tail(p + r0 * ldp, ldp, R, n, b, dim, c + static_cast<size_t>(r0) * dim, dim, d, dim);
  };
  for (; r + kRowBlock <= rows; r += kRowBlock) block(std::integral_constant<int, kRowBlock>{}, r);
  for (; r < rows; ++r) block(std::integral_constant<int, 1>{}, r);
}

// dst [cols x rows] = src [rows x cols]^T (src row stride lds, dst row stride ldd).
inline void transpose_tile(const float* src, int lds, int rows, int cols, float* dst, int ldd) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

}  // namespace cpu
}  // namespace flashmask
