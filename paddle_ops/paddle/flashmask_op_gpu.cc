// GPU side of the Paddle custom op: allocates outputs and workspace with paddle::empty on the
// input's place and calls the one launcher (launch.h) on the tensor's current stream. Inputs arrive
// checked and contiguous from flashmask_op.cc; parameters are built there too (make_*_params).
// Compiled only with -DFLASHMASK_WITH_CUDA (setup_ops.py when paddle has CUDA; CI compile check).
#ifdef FLASHMASK_WITH_CUDA

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "flashmask/launch.h"
#include "flashmask_op.h"

namespace flashmask_op {
namespace {

// Paddle's flashmask_attention has no `deterministic` argument, so the op reads the same switch as
// the PyTorch binding: FLASHMASK_DETERMINISTIC=1 makes dQ bitwise reproducible.
bool deterministic_from_env() {
  const char* v = std::getenv("FLASHMASK_DETERMINISTIC");
  return v != nullptr && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 ||
                          std::strcmp(v, "on") == 0);
}

// Device scratch for the launcher; an empty tensor (and nullptr) when none is needed. The tensor
// must outlive the launch call only: Paddle's allocator orders reuse on the same stream.
paddle::Tensor workspace(size_t bytes, const paddle::Place& place, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return paddle::Tensor();
  paddle::Tensor ws = paddle::empty({static_cast<int64_t>(bytes)}, paddle::DataType::UINT8, place);
  *ptr = ws.data();
  return ws;
}

// Launcher errors are std::runtime_error; re-raise them as Paddle errors naming the op.
template <class F>
void launch(const char* what, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    PD_THROW(std::string(what) + ": " + e.what());
  }
}

}  // namespace

std::vector<paddle::Tensor> flashmask_fwd_gpu(
    const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
    const paddle::optional<paddle::Tensor>& startend_row_indices, bool causal, float softmax_scale) {
  const auto& shape = q.shape();  // [B, Sq, Hq, D]
  paddle::Tensor out = paddle::empty(shape, q.dtype(), q.place());
  paddle::Tensor lse = paddle::empty({shape[0], shape[2], shape[1]}, paddle::DataType::FLOAT32, q.place());
  const flashmask::FwdParams params =
      make_fwd_params(q, k, v, startend_row_indices, out, lse, causal, softmax_scale);
  launch("flashmask_attention forward (CUDA)", [&] {
    void* ws_ptr = nullptr;
    paddle::Tensor ws = workspace(flashmask::fwd_workspace_bytes_cuda(params), q.place(), &ws_ptr);
    flashmask::run_fwd_cuda(params, ws_ptr, q.stream());
  });
  return {out, lse};
}

std::vector<paddle::Tensor> flashmask_bwd_gpu(
    const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
    const paddle::optional<paddle::Tensor>& startend_row_indices, const paddle::Tensor& out,
    const paddle::Tensor& lse, const paddle::Tensor& dout, bool causal, float softmax_scale) {
  paddle::Tensor dq = paddle::empty(q.shape(), q.dtype(), q.place());
  paddle::Tensor dk = paddle::empty(k.shape(), k.dtype(), k.place());
  paddle::Tensor dv = paddle::empty(v.shape(), v.dtype(), v.place());
  flashmask::BwdParams params = make_bwd_params(q, k, v, startend_row_indices, out, lse, dout, dq,
                                                dk, dv, causal, softmax_scale);
  params.deterministic = deterministic_from_env();
  launch("flashmask_attention backward (CUDA)", [&] {
    void* ws_ptr = nullptr;
    paddle::Tensor ws = workspace(flashmask::bwd_workspace_bytes_cuda(params), q.place(), &ws_ptr);
    flashmask::run_bwd_cuda(params, ws_ptr, q.stream());
  });
  return {dq, dk, dv};
}

}  // namespace flashmask_op

#endif  // FLASHMASK_WITH_CUDA
