// Development-only C entry for the backward (tests_dev/bwd_check.py): fm_args -> BwdParams ->
// run_bwd_cuda, without the rest of the library. Not part of sources_cuda.txt.
#include <string>

#include "flashmask/launch.h"
#include "../../capi/flashmask_capi.h"

namespace {
thread_local std::string g_error;

flashmask::TensorView view(const fm_tensor& t) {
  flashmask::TensorView v;
  v.data = t.data;
  v.batch_stride = t.batch_stride;
  v.row_stride = t.row_stride;
  v.head_stride = t.head_stride;
  return v;
}

flashmask::BwdParams params_of(const fm_args* a) {
  flashmask::BwdParams p;
  p.dtype = static_cast<flashmask::DType>(a->dtype);
  p.batch = a->batch; p.seqlen_q = a->seqlen_q; p.seqlen_k = a->seqlen_k;
  p.heads_q = a->heads_q; p.heads_k = a->heads_k; p.head_dim = a->head_dim;
  p.softmax_scale = a->softmax_scale;
  p.causal = a->causal != 0;
  p.q = view(a->q); p.k = view(a->k); p.v = view(a->v); p.out = view(a->out);
  p.lse = a->lse;
  p.startend_row_indices = a->startend_row_indices;
  p.mask_heads = a->startend_row_indices ? a->mask_heads : 0;
  p.mask_form.num_cols = a->startend_row_indices ? a->mask_cols : 0;
  p.mask_form.causal = p.causal;
  p.dout = view(a->dout); p.dq = view(a->dq); p.dk = view(a->dk); p.dv = view(a->dv);
  p.deterministic = a->deterministic != 0;
  return p;
}
}  // namespace

extern "C" const char* fmdev_error() { return g_error.c_str(); }

extern "C" int fmdev_bwd_workspace_bytes(const fm_args* a, size_t* bytes) {
  try { *bytes = flashmask::bwd_workspace_bytes_cuda(params_of(a)); return 0; }
  catch (const std::exception& e) { g_error = e.what(); return 1; }
}

extern "C" int fmdev_bwd(const fm_args* a, void* workspace, void* stream) {
  try { flashmask::run_bwd_cuda(params_of(a), workspace, static_cast<cudaStream_t>(stream)); return 0; }
  catch (const std::exception& e) { g_error = e.what(); return 1; }
}
