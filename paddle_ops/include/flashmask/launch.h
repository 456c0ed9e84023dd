// The one launcher interface. The Paddle op, the C ABI and the PyTorch binding are skins over these
// functions; they own memory (outputs and workspace come from the framework's allocator).
// Errors are reported by throwing std::runtime_error whose message names the failing call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashmask/params.h"

typedef struct CUstream_st* cudaStream_t;  // same typedef as cuda_runtime_api.h; no CUDA headers here

namespace flashmask {

// CPU kernels (paddle_ops/cpu): multi-threaded, fp32 accumulation, any head dim.
void run_fwd_cpu(const FwdParams& params);
void run_bwd_cpu(const BwdParams& params);

// CUDA kernels (paddle_ops/cuda): the launcher picks the architecture path and tile shapes.
//
// Mask plans. What the kernels derive from the mask alone (per-key-block bounds, the forward's
// block lists, its partial tiles' mask payloads and its tile order) is computed on the GPU by a few
// small kernels before the attention kernel. A call without a plan runs them into its workspace
// every time. A plan keeps their result in device memory the caller owns: built once per mask and
// problem shape by build_*_plan_cuda, then shared by every later call with that mask (a model's
// layers, the backward of each), as cuDNN's mask plans and FlexAttention's block masks are.
// `key` names everything a plan's layout and contents depend on besides the values of
// startend_row_indices and block_mask (path, tile shapes, sizes, mask form); a call given a plan
// of another key throws. That a plan was built from the mask values of the call is the caller's
// to keep (the bindings key their plan caches on the mask tensor and its version).
struct MaskPlanSize {
  size_t bytes = 0;
  uint64_t key = 0;
};
struct MaskPlan {
  const void* data = nullptr;  // nullptr: no plan, the call preprocesses the mask itself
  uint64_t key = 0;
};
// What a binding allocates for a plan: never zero bytes, so that a plan's pointer is never null (a
// null plan means "no plan": the call would then carve a workspace it was not given).
inline size_t plan_allocation_bytes(const MaskPlanSize& size) { return size.bytes > 256 ? size.bytes : 256; }
MaskPlanSize fwd_plan_size_cuda(const FwdParams& params);
MaskPlanSize bwd_plan_size_cuda(const BwdParams& params);
// `plan`: fwd_plan_size_cuda(params).bytes of device memory (no initialisation needed); the plan is
// ready for calls issued after it on `stream` (other streams must wait for it).
void build_fwd_plan_cuda(const FwdParams& params, void* plan, cudaStream_t stream);
void build_bwd_plan_cuda(const BwdParams& params, void* plan, cudaStream_t stream);

// `workspace` must hold *_workspace_bytes_cuda(params, with_plan) bytes of device memory (no
// initialisation needed), with_plan telling whether the call will be given a plan.
size_t fwd_workspace_bytes_cuda(const FwdParams& params, bool with_plan = false);
size_t bwd_workspace_bytes_cuda(const BwdParams& params, bool with_plan = false);
void run_fwd_cuda(const FwdParams& params, void* workspace, cudaStream_t stream, MaskPlan plan = {});
void run_bwd_cuda(const BwdParams& params, void* workspace, cudaStream_t stream, MaskPlan plan = {});

}  // namespace flashmask
