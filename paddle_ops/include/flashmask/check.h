// The one C++ validation of FwdParams / BwdParams, shared by the C ABI, the Paddle op, the CPU
// kernels and the CUDA launchers, and the one list of what the CUDA kernels support (exported to
// Python by the C ABI's fm_supported_* functions, so no skin keeps its own copy).
//
// Everything here reads sizes and pointers only, never tensor data: bound *values* are validated
// by flashmask_paddle._validate (they cannot make a kernel read out of bounds). Every failure
// throws ArgError (a std::invalid_argument) whose message starts with `where`; the C ABI maps it
// to its "bad argument" code, the Paddle op to a Paddle error.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "flashmask/params.h"

namespace flashmask {

struct ArgError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// What the CUDA kernels take: float16 / bfloat16, and head dims D (q, k) and Dv (v, out) each a
// multiple of 8 (16-byte rows) from 32 to 256. A kernel is instantiated for 64, 128 and 256
// columns (paddle_ops/cuda/*hdim*.cu, sm90/*_sm90.cu) and runs the smallest one that holds both D
// and Dv, with the columns past them zero-filled on load and never stored (on Hopper by the TMA
// itself: sm90/path_sm90.h). The CPU kernels take any positive D, Dv and float32 / float16 /
// bfloat16.
struct HeadDims {
  int32_t qk, v;
};
constexpr int32_t kCudaHeadDimMin = 32, kCudaHeadDimMax = 256, kCudaHeadDimStep = 8;
constexpr int32_t kCudaHeadDimCount = (kCudaHeadDimMax - kCudaHeadDimMin) / kCudaHeadDimStep + 1;
constexpr DType kCudaDTypes[] = {DType::kFloat16, DType::kBFloat16};
constexpr DType kCpuDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

constexpr bool cuda_supports_head_dim(int32_t d) {
  return d >= kCudaHeadDimMin && d <= kCudaHeadDimMax && d % kCudaHeadDimStep == 0;
}
constexpr bool cuda_supports_head_dims(int32_t qk, int32_t v) {
  return cuda_supports_head_dim(qk) && cuda_supports_head_dim(v);
}
// The i-th supported (D, Dv) pair, D major (the C ABI lists them all).
constexpr HeadDims cuda_head_dims_pair(int32_t i) {
  return {kCudaHeadDimMin + kCudaHeadDimStep * (i / kCudaHeadDimCount),
          kCudaHeadDimMin + kCudaHeadDimStep * (i % kCudaHeadDimCount)};
}
// The columns of the CUDA kernel instantiation that runs (D, Dv): 64, 128 or 256.
constexpr int32_t cuda_kernel_head_dim(int32_t qk, int32_t v) {
  const int32_t d = qk > v ? qk : v;
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

namespace detail {
inline void require(bool ok, const char* where, const std::string& what) {
  if (!ok) throw ArgError(std::string(where) + ": " + what);
}
inline void require_data(const void* data, const char* where, const char* name) {
  require(data != nullptr, where, std::string(name) + " is NULL");
}
}  // namespace detail

// Sizes, GQA, the mask layout, block_mask and dropout. `need_data`: also require the input and
// output pointers (false for workspace-size queries, which may come before the tensors exist).
inline void check_params(const FwdParams& p, const char* where, bool need_data = true) {
  using detail::require;
  const int32_t dtype = static_cast<int32_t>(p.dtype);
  require(dtype >= 0 && dtype <= 2, where,
          "dtype must be 0 (float32), 1 (float16) or 2 (bfloat16), got " + std::to_string(dtype));
  require(p.batch > 0 && p.seqlen_q > 0 && p.seqlen_k > 0 && p.heads_q > 0 && p.heads_k > 0 &&
              p.head_dim > 0 && p.head_dim_v > 0,
          where, "batch, seqlen_q, seqlen_k, heads_q, heads_k, head_dim and head_dim_v must be positive");
  require(p.heads_q % p.heads_k == 0, where,
          "heads_q (" + std::to_string(p.heads_q) + ") must be a multiple of heads_k (" +
              std::to_string(p.heads_k) + ")");
  const MaskForm& form = p.mask_form;
  require(form.causal == p.causal, where, "mask_form.causal must equal causal");
  if (form.has_indices()) {
    const int c = form.num_cols;
    require(c == 1 || c == 2 || c == 4, where, "mask columns C must be 1, 2 or 4, got " + std::to_string(c));
    require(p.causal ? c != 4 : c != 1, where,
            "mask columns C in {1, 2} when causal, {2, 4} otherwise; got C=" + std::to_string(c) +
                " with causal=" + (p.causal ? "true" : "false"));
    const int32_t hm = p.mask_heads;
    require(hm == 1 || hm == p.heads_k || hm == p.heads_q, where,
            "mask_heads must be 1, heads_k or heads_q, got " + std::to_string(hm));
  }
  require(p.block_mask == nullptr || form.has_indices(), where,
          "block_mask needs startend_row_indices (it applies on top of them)");
  require(p.dropout_p >= 0.f && p.dropout_p < 1.f, where,
          "dropout must be in [0, 1), got " + std::to_string(p.dropout_p));
  if (!need_data) return;
  detail::require_data(p.q.data, where, "q");
  detail::require_data(p.k.data, where, "k");
  detail::require_data(p.v.data, where, "v");
  detail::require_data(p.out.data, where, "out");
  detail::require_data(p.lse, where, "lse");
  require(!form.has_indices() || p.startend_row_indices != nullptr, where,
          "startend_row_indices is NULL but mask columns C > 0");
}

inline void check_bwd_params(const BwdParams& p, const char* where, bool need_data = true) {
  check_params(p, where, need_data);
  if (!need_data) return;
  detail::require_data(p.dout.data, where, "dout");
  detail::require_data(p.dq.data, where, "dq");
  detail::require_data(p.dk.data, where, "dk");
  detail::require_data(p.dv.data, where, "dv");
}

// What only the CUDA kernels restrict: dtype, (D, Dv), grid limits, dropout.
inline void check_cuda_support(const FwdParams& p, const char* where) {
  using detail::require;
  require(p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16, where,
          "CUDA kernels take float16 or bfloat16, got dtype code " +
              std::to_string(static_cast<int32_t>(p.dtype)));
  require(cuda_supports_head_dims(p.head_dim, p.head_dim_v), where,
          "CUDA kernels take head_dim and head_dim_v each a multiple of " + std::to_string(kCudaHeadDimStep) +
              " from " + std::to_string(kCudaHeadDimMin) + " to " + std::to_string(kCudaHeadDimMax) + ", got (" +
              std::to_string(p.head_dim) + ", " + std::to_string(p.head_dim_v) + "); other head dims run on CPU");
  require(p.batch <= 65535 && p.heads_q <= 65535, where, "batch and heads_q must be at most 65535 on CUDA");
  // The mask preprocessing runs a row of CTAs per mask slice (gridDim.y).
  require(!p.mask_form.has_indices() || int64_t(p.batch) * p.mask_heads <= 65535, where,
          "batch * mask heads (startend_row_indices.shape[0] * shape[1]) must be at most 65535 on CUDA, got " +
              std::to_string(int64_t(p.batch) * p.mask_heads));
}

// The CUDA kernels load and store rows as 16-byte vectors (and by TMA on Hopper): a view's base
// must be 16-byte aligned and its strides multiples of 8 elements (every CUDA dtype is 2 bytes).
inline void check_cuda_view(const TensorView& t, const char* where, const char* name) {
  const uintptr_t misalignment = reinterpret_cast<uintptr_t>(t.data) % 16;
  const bool aligned = misalignment == 0 && t.batch_stride % 8 == 0 && t.row_stride % 8 == 0 && t.head_stride % 8 == 0;
  detail::require(aligned, where,
                  std::string(name) + " must have a 16-byte aligned base and strides that are multiples of 8 "
                                      "elements on CUDA (got base address % 16 = " +
                      std::to_string(misalignment) + ", strides " +
                      std::to_string(t.batch_stride) + ", " + std::to_string(t.row_stride) + ", " +
                      std::to_string(t.head_stride) + ")");
}

}  // namespace flashmask
