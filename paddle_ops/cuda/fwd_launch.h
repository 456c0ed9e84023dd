// Entry from the forward launcher (fwd_launch.cu) into the kernel instantiations (fwd_hdim*.cu),
// so that only those files compile the kernel template.
#pragma once

#include <cuda_runtime.h>

#include <cutlass/numeric_types.h>

#include "flashmask/params.h"
#include "preprocess.cuh"

namespace flashmask {

// Launches the forward kernel for one (dtype, head dim) on lists built with
// fwd_tile_size(kHeadDim, p.mask_form.has_indices()).
template <typename Element, int kHeadDim>
void run_fwd_hdim(const FwdParams& p, const FwdBlockLists& lists, cudaStream_t stream);

#define FM_FWD_INSTANTIATIONS(PREFIX, D)                                                        \
  PREFIX template void run_fwd_hdim<cutlass::half_t, D>(const FwdParams&, const FwdBlockLists&, \
                                                        cudaStream_t);                          \
  PREFIX template void run_fwd_hdim<cutlass::bfloat16_t, D>(const FwdParams&,                   \
                                                            const FwdBlockLists&, cudaStream_t);
FM_FWD_INSTANTIATIONS(extern, 64)
FM_FWD_INSTANTIATIONS(extern, 128)
FM_FWD_INSTANTIATIONS(extern, 256)

}  // namespace flashmask
