// GPU side of the Paddle custom op: allocates outputs and workspace with paddle::empty on the
// input's place and calls the one launcher (launch.h) on the tensor's current stream. Inputs arrive
// checked and contiguous from flashmask_op.cc; parameters are built there too (make_*_params).
// Compiled only with -DFLASHMASK_WITH_CUDA (setup_ops.py when paddle has CUDA; CI compile check).
#ifdef FLASHMASK_WITH_CUDA

#include <exception>
#include <string>
#include <vector>

#include "flashmask/launch.h"
#include "flashmask_op.h"

namespace flashmask_op {
namespace {

// Device scratch for the launcher; an empty tensor (and nullptr) when none is needed. The tensor
// must outlive the launch call only: Paddle's allocator orders reuse on the same stream.
paddle::Tensor workspace(size_t bytes, const paddle::Place& place, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return paddle::Tensor();
  paddle::Tensor ws = paddle::empty({static_cast<int64_t>(bytes)}, paddle::DataType::UINT8, place);
  *ptr = ws.data();
  return ws;
}

}  // namespace

std::vector<paddle::Tensor> flashmask_fwd_gpu(const paddle::Tensor& q, const paddle::Tensor& k,
                                              const paddle::Tensor& v, const Extras& x, bool causal,
                                              float softmax_scale) {
  const auto& shape = q.shape();  // [B, Sq, Hq, D]
  paddle::Tensor out = paddle::empty({shape[0], shape[1], shape[2], v.shape()[3]}, q.dtype(), q.place());
  paddle::Tensor lse = paddle::empty({shape[0], shape[2], shape[1]}, paddle::DataType::FLOAT32, q.place());
  if (q.numel() == 0 || k.numel() == 0) return {out, lse};
  const flashmask::FwdParams params = make_fwd_params(q, k, v, x, out, lse, causal, softmax_scale);
  run_launcher("flashmask_attention forward (CUDA)", [&] {
    void* ws_ptr = nullptr;
    paddle::Tensor ws = workspace(flashmask::fwd_workspace_bytes_cuda(params), q.place(), &ws_ptr);
    flashmask::run_fwd_cuda(params, ws_ptr, q.stream());
  });
  return {out, lse};
}

std::vector<paddle::Tensor> flashmask_bwd_gpu(const paddle::Tensor& q, const paddle::Tensor& k,
                                              const paddle::Tensor& v, const Extras& x,
                                              const paddle::Tensor& out, const paddle::Tensor& lse,
                                              const paddle::Tensor& dout, bool causal,
                                              float softmax_scale) {
  paddle::Tensor dq = paddle::empty(q.shape(), q.dtype(), q.place());
  paddle::Tensor dk = paddle::empty(k.shape(), k.dtype(), k.place());
  paddle::Tensor dv = paddle::empty(v.shape(), v.dtype(), v.place());
  if (q.numel() == 0 || k.numel() == 0) return {dq, dk, dv};
  const flashmask::BwdParams params =
      make_bwd_params(q, k, v, x, out, lse, dout, dq, dk, dv, causal, softmax_scale);
  run_launcher("flashmask_attention backward (CUDA)", [&] {
    void* ws_ptr = nullptr;
    paddle::Tensor ws = workspace(flashmask::bwd_workspace_bytes_cuda(params), q.place(), &ws_ptr);
    flashmask::run_bwd_cuda(params, ws_ptr, q.stream());
  });
  return {dq, dk, dv};
}

}  // namespace flashmask_op

#endif  // FLASHMASK_WITH_CUDA
