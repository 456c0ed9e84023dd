// GPU side of the Paddle custom ops: allocates outputs, workspace and mask plans with paddle::empty
// on the input's place and calls the one launcher (launch.h) on the tensor's current stream. Inputs
// arrive checked (and, for the attention ops, contiguous) from flashmask_op.cc; parameters are
// built there too (make_*_params).
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

int64_t plan_tensor_bytes(const flashmask::MaskPlanSize& size) {
  return static_cast<int64_t>(flashmask::plan_allocation_bytes(size));
}

// The call's view of a plan from flashmask_attn_plan. The key is the one this call's parameters
// give: the Python cache (flashmask_paddle/_plans.py) keys plans by everything those parameters
// derive from, and a plan of another size is refused here.
flashmask::MaskPlan plan_of(const paddle::Tensor& t, const flashmask::MaskPlanSize& size) {
  PD_CHECK(t.numel() == plan_tensor_bytes(size), "the mask plan has ", t.numel(), " bytes, this call's plan needs ",
           plan_tensor_bytes(size), " (a plan of another problem)");
  flashmask::MaskPlan plan;
  plan.data = t.data();
  plan.key = size.key;
  return plan;
}

// One direction's launcher run with the call's plan, if any, and a workspace sized for it.
template <class Params, class PlanSize, class WorkspaceBytes, class Run>
void run_with_plan(const Params& params, const paddle::optional<paddle::Tensor>& plan_tensor, const paddle::Tensor& q,
                   PlanSize plan_size, WorkspaceBytes workspace_bytes, Run run) {
  const flashmask::MaskPlan plan = plan_tensor ? plan_of(*plan_tensor, plan_size(params)) : flashmask::MaskPlan{};
  void* ws_ptr = nullptr;
  paddle::Tensor ws = workspace(workspace_bytes(params, plan.data != nullptr), q.place(), &ws_ptr);
  run(params, ws_ptr, q.stream(), plan);
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
    run_with_plan(params, x.fwd_plan, q, flashmask::fwd_plan_size_cuda, flashmask::fwd_workspace_bytes_cuda,
                  flashmask::run_fwd_cuda);
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
    run_with_plan(params, x.bwd_plan, q, flashmask::bwd_plan_size_cuda, flashmask::bwd_workspace_bytes_cuda,
                  flashmask::run_bwd_cuda);
  });
  return {dq, dk, dv};
}

paddle::Tensor flashmask_plan_gpu(const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
                                  const Extras& x, bool causal, bool backward) {
  paddle::Tensor plan;
  run_launcher("flashmask_attn_plan (CUDA)", [&] {
    // A plan depends on neither the scale nor any data pointer (launch.h): only the problem.
    flashmask::BwdParams params;
    static_cast<flashmask::FwdParams&>(params) = make_problem_params(q, k, v, x, causal, /*softmax_scale=*/1.f);
    params.deterministic = x.deterministic;
    const flashmask::MaskPlanSize size =
        backward ? flashmask::bwd_plan_size_cuda(params) : flashmask::fwd_plan_size_cuda(params);
    plan = paddle::empty({plan_tensor_bytes(size)}, paddle::DataType::UINT8, q.place());
    if (backward) flashmask::build_bwd_plan_cuda(params, plan.data(), q.stream());
    else flashmask::build_fwd_plan_cuda(params, plan.data(), q.stream());
  });
  return plan;
}

}  // namespace flashmask_op

#endif  // FLASHMASK_WITH_CUDA
