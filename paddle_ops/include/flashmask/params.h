// The single parameter struct every FlashMask kernel (CPU, sm80, sm90) and every skin (Paddle op,
// C ABI, PyTorch binding) speaks. Raw pointers and element strides: no framework types here.
#pragma once

#include <cstdint>

#include "flashmask/mask.h"

namespace flashmask {

enum class DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Rows and columns of one block_mask entry (Paddle's block_mask granularity).
constexpr int32_t kBlockMaskSize = 128;

// A [B, S, H, D] tensor view; D is contiguous (stride 1).
struct TensorView {
  void* data = nullptr;
  int64_t batch_stride = 0, row_stride = 0, head_stride = 0;  // in elements

  // Element (b, row, head, 0) as a T* (T the element type, const T for the read-only views).
  template <class T>
  FM_HOST_DEVICE T* at(int64_t b, int64_t row, int64_t head) const {
    return static_cast<T*>(data) + b * batch_stride + row * row_stride + head * head_stride;
  }
};

struct FwdParams {
  DType dtype = DType::kBFloat16;  // of q, k, v, out (and dout, dq, dk, dv in backward)
  int32_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_k = 0;
  int32_t head_dim = 0;    // D of q and k
  int32_t head_dim_v = 0;  // Dv of v and out (MLA-style Dv != D is allowed where check.h says so)
  float softmax_scale = 1.f;
  bool causal = false;

  TensorView q, k, v;  // q [B, Sq, Hq, D], k [B, Sk, Hk, D], v [B, Sk, Hk, Dv] (read only)
  TensorView out;      // [B, Sq, Hq, Dv]
  float* lse = nullptr;  // [B, Hq, Sq], contiguous; -inf on fully masked rows

  // Column-wise mask: int32 [B, Hm, Sk, C] contiguous, Hm in {1, Hk, Hq}; nullptr when absent.
  const int32_t* startend_row_indices = nullptr;
  int32_t mask_heads = 0;  // Hm
  MaskForm mask_form{};    // C and causal

  // Optional block mask on top of the column bounds: int32 [B, Hm, ceil(Sq/128), ceil(Sk/128)]
  // contiguous (the heads of startend_row_indices), 1 keeps a 128x128 block, 0 masks it.
  const int32_t* block_mask = nullptr;

  // Dropout on the attention probabilities (training): each (b, hq, row, col) is kept or dropped
  // by dropout.h from (seed, offset); kept ones are scaled by 1 / (1 - dropout_p).
  float dropout_p = 0.f;
  uint64_t dropout_seed = 0, dropout_offset = 0;

  // Which mask head serves query head h: heads broadcast from 1, Hk (per GQA group) or Hq.
  FM_HOST_DEVICE int32_t mask_head_of(int32_t head_q) const {
    if (mask_heads <= 1) return 0;
    if (mask_heads == heads_q) return head_q;
    return head_q / (heads_q / heads_k);
  }
  // The [Sk, C] column bounds of mask slice `slice` = b * Hm + mask head.
  FM_HOST_DEVICE const int32_t* mask_slice_at(int64_t slice) const {
    return startend_row_indices + slice * seqlen_k * mask_form.num_cols;
  }
  // mask_slice_at(b * Hm + mask_head_of(head_q)), spelled out: calling it changes the Hopper
  // backward kernels' instruction schedule.
  FM_HOST_DEVICE const int32_t* mask_slice(int32_t b, int32_t head_q) const {
    return startend_row_indices +
           ((int64_t)b * mask_heads + mask_head_of(head_q)) * seqlen_k * mask_form.num_cols;
  }
  // Whether block_mask keeps the 128x128 block holding (row, col) of mask slice b * Hm + mask head.
  // Kernels ask it once per tile, so their tiles must lie inside one block (tile sizes dividing
  // kBlockMaskSize, asserted where the tiles are defined).
  FM_HOST_DEVICE bool block_kept_in_slice(int64_t slice, int32_t row, int32_t col) const {
    if (block_mask == nullptr) return true;
    const int64_t nbq = (seqlen_q + kBlockMaskSize - 1) / kBlockMaskSize;
    const int64_t nbk = (seqlen_k + kBlockMaskSize - 1) / kBlockMaskSize;
    return block_mask[(slice * nbq + row / kBlockMaskSize) * nbk + col / kBlockMaskSize] != 0;
  }
  FM_HOST_DEVICE bool block_kept(int32_t b, int32_t head_q, int32_t row, int32_t col) const {
    return block_kept_in_slice((int64_t)b * mask_heads + mask_head_of(head_q), row, col);
  }
};

struct BwdParams : FwdParams {
  TensorView dout;          // [B, Sq, Hq, D] (read only)
  TensorView dq, dk, dv;    // dq [B, Sq, Hq, D]; dk/dv [B, Sk, Hk, D], reduced over GQA groups
  bool deterministic = false;  // dQ without atomic races: bitwise identical run to run
};

}  // namespace flashmask
