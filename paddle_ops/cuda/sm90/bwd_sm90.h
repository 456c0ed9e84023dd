// Entry of the Hopper (sm90a) backward for the launcher (../bwd_launch.cu): when
// bwd_sm90_selected(p) it calls run_bwd_sm90 with the workspace it carved (../bwd_workspace.h)
// instead of the portable kernels. Built only where the *_sm90.cu sources are (FLASHMASK_HAS_SM90).
#pragma once

#include <cuda_runtime.h>

#include <cutlass/numeric_types.h>

#include "flashmask/params.h"
#include "../bwd_workspace.h"

namespace flashmask {

// True when this problem runs on the sm90 backward: compute capability 9.0 with the sm_90a kernels
// in this build, D and Dv CUDA head dims (path_sm90.h), not dropout together with deterministic
// mode (deterministic mode: Hopper dK/dV, then the portable deterministic dQ kernel).
// FLASHMASK_FORCE_PATH=sm80 turns the path off, =sm90 on (where supported).
bool bwd_sm90_selected(const BwdParams& p);
void run_bwd_sm90(const BwdParams& p, const bwd::Workspace& ws, cudaStream_t stream);

namespace sm90 {
// One instantiation per (dtype, head dim), each in its own bwd_hdim*_sm90.cu: block bounds at the
// kernel's key block, the main kernel and the dQ conversion (after the shared row preprocessing).
template <typename Element, int kHeadDim>
void run_bwd_sm90_kernels(const BwdParams& p, const bwd::Workspace& ws, cudaStream_t stream);
template <typename Element, int kHeadDim>
bool bwd_sm90_kernel_built();
}  // namespace sm90

}  // namespace flashmask
