// The Paddle custom op's device split. flashmask_op.cc registers the op, checks inputs, serves CPU
// tensors and builds the kernel parameters; the GPU entry points below are implemented in
// flashmask_op_gpu.cc (compiled only with -DFLASHMASK_WITH_CUDA).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "flashmask/params.h"
#include "paddle/extension.h"

namespace flashmask_op {

// The op's inputs and attributes beyond q, k, v and the scalars (contiguous where tensors).
struct Extras {
  paddle::optional<paddle::Tensor> startend_row_indices;  // int32 [B, Hm, Sk, C]
  paddle::optional<paddle::Tensor> block_mask;             // int32 [B, Hm, ceil(Sq/128), ceil(Sk/128)]
  paddle::optional<paddle::Tensor> seed_offset;            // int64 [2] on CPU; needed when dropout > 0
  float dropout = 0.f;
  bool deterministic = false;  // backward: dQ bitwise reproducible (FLAGS_cudnn_deterministic)
  // Mask plans (launch.h) built for this call's problem and mask by the `flashmask_attn_plan` op:
  // uint8 on q's GPU; absent: the call preprocesses the mask itself.
  paddle::optional<paddle::Tensor> fwd_plan;
  paddle::optional<paddle::Tensor> bwd_plan;
};

// The problem's parameters without output pointers (what a mask plan is built from).
flashmask::FwdParams make_problem_params(const paddle::Tensor& q, const paddle::Tensor& k,
                                         const paddle::Tensor& v, const Extras& extras, bool causal,
                                         float softmax_scale);

// Parameters over tensors that check_tensors has accepted, made contiguous:
// q [B, Sq, Hq, D], k [B, Sk, Hk, D], v [B, Sk, Hk, Dv], `out` [B, Sq, Hq, Dv], `lse` float32
// [B, Hq, Sq]. Raw pointers only; no allocation.
flashmask::FwdParams make_fwd_params(const paddle::Tensor& q, const paddle::Tensor& k,
                                     const paddle::Tensor& v, const Extras& extras,
                                     const paddle::Tensor& out, const paddle::Tensor& lse,
                                     bool causal, float softmax_scale);
// Adds dout (like q) and the gradients dq (like q), dk/dv (like k) to the forward parameters.
flashmask::BwdParams make_bwd_params(const paddle::Tensor& q, const paddle::Tensor& k,
                                     const paddle::Tensor& v, const Extras& extras,
                                     const paddle::Tensor& out, const paddle::Tensor& lse,
                                     const paddle::Tensor& dout, const paddle::Tensor& dq,
                                     const paddle::Tensor& dk, const paddle::Tensor& dv,
                                     bool causal, float softmax_scale);

// Runs a launcher call, re-raising its std::runtime_error as a Paddle error prefixed by `what`.
template <class F>
void run_launcher(const char* what, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    PD_THROW(std::string(what) + ": " + e.what());
  }
}

#ifdef FLASHMASK_WITH_CUDA
// GPU forward. Inputs as for make_fwd_params (all on one GPU, contiguous, already validated).
// Returns {out (dtype of q, shape of q), lse (float32 [B, Hq, Sq])}, allocated on q's place and
// computed on the current stream via flashmask::run_fwd_cuda.
std::vector<paddle::Tensor> flashmask_fwd_gpu(const paddle::Tensor& q, const paddle::Tensor& k,
                                              const paddle::Tensor& v, const Extras& extras,
                                              bool causal, float softmax_scale);
// GPU backward. `out`/`lse` are the forward outputs, `dout` the gradient of out (contiguous).
// Returns {dq, dk, dv} (shapes/dtypes of q, k, v; dk/dv summed over GQA groups) via run_bwd_cuda.
std::vector<paddle::Tensor> flashmask_bwd_gpu(const paddle::Tensor& q, const paddle::Tensor& k,
                                              const paddle::Tensor& v, const Extras& extras,
                                              const paddle::Tensor& out, const paddle::Tensor& lse,
                                              const paddle::Tensor& dout, bool causal,
                                              float softmax_scale);
// The forward's (`backward` false) or the backward's mask plan of this problem and mask, built on
// the current stream into a new uint8 tensor on q's place.
paddle::Tensor flashmask_plan_gpu(const paddle::Tensor& q, const paddle::Tensor& k,
                                  const paddle::Tensor& v, const Extras& extras, bool causal,
                                  bool backward);
#endif

}  // namespace flashmask_op
