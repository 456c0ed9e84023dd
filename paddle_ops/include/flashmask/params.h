// The single parameter struct every FlashMask kernel (CPU, sm80, sm90) and every skin (Paddle op,
// C ABI, PyTorch binding) speaks. Raw pointers and element strides: no framework types here.
#pragma once

#include <cstdint>

#include "flashmask/mask.h"

namespace flashmask {

enum class DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// A [B, S, H, D] tensor view; D is contiguous (stride 1).
struct TensorView {
  void* data = nullptr;
  int64_t batch_stride = 0, row_stride = 0, head_stride = 0;  // in elements
};

struct FwdParams {
  DType dtype = DType::kBFloat16;  // of q, k, v, out (and dout, dq, dk, dv in backward)
  int32_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_k = 0, head_dim = 0;
  float softmax_scale = 1.f;
  bool causal = false;

  TensorView q, k, v;  // q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (read only)
  TensorView out;      // [B, Sq, Hq, D]
  float* lse = nullptr;  // [B, Hq, Sq], contiguous; -inf on fully masked rows

  // Column-wise mask: int32 [B, Hm, Sk, C] contiguous, Hm in {1, Hk, Hq}; nullptr when absent.
  const int32_t* startend_row_indices = nullptr;
  int32_t mask_heads = 0;  // Hm
  MaskForm mask_form{};    // C and causal

  // Which mask head serves query head h: heads broadcast from 1, Hk (per GQA group) or Hq.
  FM_HOST_DEVICE int32_t mask_head_of(int32_t head_q) const {
    if (mask_heads <= 1) return 0;
    if (mask_heads == heads_q) return head_q;
    return head_q / (heads_q / heads_k);
  }
  FM_HOST_DEVICE const int32_t* mask_slice(int32_t b, int32_t head_q) const {
    return startend_row_indices +
           ((int64_t)b * mask_heads + mask_head_of(head_q)) * seqlen_k * mask_form.num_cols;
  }
};

struct BwdParams : FwdParams {
  TensorView dout;          // [B, Sq, Hq, D] (read only)
  TensorView dq, dk, dv;    // dq [B, Sq, Hq, D]; dk/dv [B, Sk, Hk, D], reduced over GQA groups
  bool deterministic = false;  // dQ without atomic races: bitwise identical run to run
};

}  // namespace flashmask
