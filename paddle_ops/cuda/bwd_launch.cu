// flashmask::bwd_workspace_bytes_cuda / run_bwd_cuda: validation, workspace carving and the head-dim
// switch of the portable (sm80+) backward. Kernels: bwd_kernel.cuh (dK/dV, atomic dQ),
// bwd_dq_kernel.cuh (deterministic dQ), bwd_preprocess.cu (D, LSE, block bounds, dQ cast).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "flashmask/launch.h"
#include "utils.cuh"
#include "bwd_workspace.h"
#if FLASHMASK_HAS_SM90
#include "sm90/bwd_sm90.h"  // Hopper path (sm90a), chosen per call by bwd_sm90_selected
#endif

namespace flashmask {
namespace bwd {
template <int kHeadDim>
void run_bwd_hdim(const BwdParams& p, const Workspace& ws, cudaStream_t stream);

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("flashmask run_bwd_cuda: " + what);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// 16-byte vector loads/stores need 16-byte aligned rows: base pointer and every stride a multiple of
// 8 elements (D is contiguous by contract).
void require_vector_rows(const TensorView& t, const char* name) {
  const bool ok = t.data != nullptr && aligned16(t.data) && t.batch_stride % 8 == 0 && t.row_stride % 8 == 0 &&
                  t.head_stride % 8 == 0;
  require(ok, std::string(name) + " must be non-null with a 16-byte aligned base and strides that are "
                                  "multiples of 8 elements");
}

void validate(const BwdParams& p) {
  require(p.dtype == DType::kBFloat16 || p.dtype == DType::kFloat16,
          "dtype must be float16 or bfloat16, got code " + std::to_string(int(p.dtype)));
  require(supported_head_dim(p.head_dim), "head_dim must be 64, 128 or 256, got " + std::to_string(p.head_dim));
  require(p.batch > 0 && p.seqlen_q > 0 && p.seqlen_k > 0 && p.heads_q > 0 && p.heads_k > 0,
          "batch, seqlen_q, seqlen_k, heads_q and heads_k must be positive");
  require(p.heads_q % p.heads_k == 0, "heads_q (" + std::to_string(p.heads_q) + ") must be a multiple of heads_k (" +
                                          std::to_string(p.heads_k) + ")");
  if (p.mask_form.has_indices()) {
    const int c = p.mask_form.num_cols;
    require(c == 1 || c == 2 || c == 4, "mask columns C must be 1, 2 or 4, got " + std::to_string(c));
    require(p.mask_form.causal == p.causal, "mask_form.causal must equal causal");
    require(p.mask_heads == 1 || p.mask_heads == p.heads_k || p.mask_heads == p.heads_q,
            "mask heads must be 1, heads_k or heads_q, got " + std::to_string(p.mask_heads));
  }
}

// Pointers and strides: only when running (the workspace size may be asked before tensors exist).
void validate_tensors(const BwdParams& p) {
  require(p.lse != nullptr, "lse (the forward's softmax LSE) must be given");
  require(!p.mask_form.has_indices() || p.startend_row_indices != nullptr,
          "startend_row_indices must be given when mask columns C > 0");
  const TensorView* views[] = {&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv};
  const char* names[] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};
  for (int i = 0; i < 8; ++i) require_vector_rows(*views[i], names[i]);
}

}  // namespace
}  // namespace bwd

size_t bwd_workspace_bytes_cuda(const BwdParams& params) {
  bwd::validate(params);
  return bwd::carve_workspace(params, nullptr, nullptr);
}

void run_bwd_cuda(const BwdParams& params, void* workspace, cudaStream_t stream) {
  bwd::validate(params);
  bwd::validate_tensors(params);
  bwd::require(workspace != nullptr, "workspace must hold bwd_workspace_bytes_cuda(params) bytes");
  bwd::Workspace ws;
  bwd::carve_workspace(params, workspace, &ws);
#if FLASHMASK_HAS_SM90
  if (bwd_sm90_selected(params)) return run_bwd_sm90(params, ws, stream);
#endif
  switch (params.head_dim) {
    case 64: bwd::run_bwd_hdim<64>(params, ws, stream); break;
    case 128: bwd::run_bwd_hdim<128>(params, ws, stream); break;
    default: bwd::run_bwd_hdim<256>(params, ws, stream); break;
  }
}

}  // namespace flashmask
