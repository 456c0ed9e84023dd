// The one launcher interface. The Paddle op, the C ABI and the PyTorch binding are skins over these
// functions; they own memory (outputs and workspace come from the framework's allocator).
// Errors are reported by throwing std::runtime_error whose message names the failing call.
#pragma once

#include <cstddef>

#include "flashmask/params.h"

typedef struct CUstream_st* cudaStream_t;  // same typedef as cuda_runtime_api.h; no CUDA headers here

namespace flashmask {

// CPU kernels (paddle_ops/cpu): multi-threaded, fp32 accumulation, any head dim.
void run_fwd_cpu(const FwdParams& params);
void run_bwd_cpu(const BwdParams& params);

// CUDA kernels (paddle_ops/cuda): the launcher picks the architecture path and tile shapes.
// `workspace` must hold *_workspace_bytes(params) bytes of device memory (no initialisation needed).
size_t fwd_workspace_bytes_cuda(const FwdParams& params);
size_t bwd_workspace_bytes_cuda(const BwdParams& params);
void run_fwd_cuda(const FwdParams& params, void* workspace, cudaStream_t stream);
void run_bwd_cuda(const BwdParams& params, void* workspace, cudaStream_t stream);

}  // namespace flashmask
