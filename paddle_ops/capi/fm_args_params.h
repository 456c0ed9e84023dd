// fm_args (the C ABI's flat struct) -> FwdParams / BwdParams: the one field-by-field conversion,
// shared by the C ABI (which validates first) and the kernels' development entry points.
// No checks here: callers decide what to validate.
#pragma once

#include "flashmask/params.h"
#include "flashmask_capi.h"

namespace flashmask {

inline TensorView tensor_view_of(const fm_tensor& t) {
  TensorView v;
  v.data = t.data;
  v.batch_stride = t.batch_stride;
  v.row_stride = t.row_stride;
  v.head_stride = t.head_stride;
  return v;
}

inline FwdParams fwd_params_of(const fm_args& a) {
  FwdParams p;
  p.dtype = static_cast<DType>(a.dtype);
  p.batch = a.batch;
  p.seqlen_q = a.seqlen_q;
  p.seqlen_k = a.seqlen_k;
  p.heads_q = a.heads_q;
  p.heads_k = a.heads_k;
  p.head_dim = a.head_dim;
  p.head_dim_v = a.head_dim_v;
  p.softmax_scale = a.softmax_scale;
  p.causal = a.causal != 0;
  p.q = tensor_view_of(a.q);
  p.k = tensor_view_of(a.k);
  p.v = tensor_view_of(a.v);
  p.out = tensor_view_of(a.out);
  p.lse = a.lse;
  p.startend_row_indices = a.startend_row_indices;
  p.mask_heads = a.startend_row_indices ? a.mask_heads : 0;
  p.mask_form.num_cols = a.startend_row_indices ? a.mask_cols : 0;
  p.mask_form.causal = p.causal;
  p.block_mask = a.block_mask;
  p.dropout_p = a.dropout;
  p.dropout_seed = a.dropout_seed;
  p.dropout_offset = a.dropout_offset;
  return p;
}

inline BwdParams bwd_params_of(const fm_args& a) {
  BwdParams p;
  static_cast<FwdParams&>(p) = fwd_params_of(a);
  p.dout = tensor_view_of(a.dout);
  p.dq = tensor_view_of(a.dq);
  p.dk = tensor_view_of(a.dk);
  p.dv = tensor_view_of(a.dv);
  p.deterministic = a.deterministic != 0;
  return p;
}

}  // namespace flashmask
