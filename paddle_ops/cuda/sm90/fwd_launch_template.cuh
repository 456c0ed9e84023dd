// Host side of one (dtype, head dim) instantiation of the sm90 forward: TMA descriptors from the
// caller's strides, then the launch. Included only by the fwd_hdim*_sm90.cu files.
#pragma once

#include "../utils.cuh"
#include "fwd_kernel.cuh"
#include "fwd_sm90.h"

namespace flashmask {
namespace sm90 {

template <class Traits, class SmemLayout, class Tile>
auto make_tma_load(const TensorView& t, int32_t seqlen, int32_t heads, const FwdParams& p,
                   SmemLayout smem_layout, Tile tile) {
  using namespace cute;
  using Element = typename Traits::Element;
  Tensor g = make_tensor(make_gmem_ptr(static_cast<Element const*>(t.data)),
                         make_shape(seqlen, p.head_dim, heads, p.batch),
                         make_stride(t.row_stride, _1{}, t.head_stride, t.batch_stride));
  return make_tma_copy(SM90_TMA_LOAD{}, g, smem_layout, tile, _1{});
}

template <typename Element, int kHeadDim, int kBlockM>
void launch_fwd(const FwdParams& p, const FwdBlockLists& lists, cudaStream_t stream) {
  using namespace cute;
  using Traits = FwdTraits<Element, kHeadDim, kBlockM, fwd_block_n(kBlockM)>;
  using TileShapeQK = typename Traits::TileShapeQK;
  FwdKernelParams<Traits> kp{
      make_tma_load<Traits>(p.q, p.seqlen_q, p.heads_q, p, typename Traits::SmemLayoutQ{},
                               select<0, 2>(TileShapeQK{})),
      make_tma_load<Traits>(p.k, p.seqlen_k, p.heads_k, p, take<0, 2>(typename Traits::SmemLayoutKV{}),
                               select<1, 2>(TileShapeQK{})),
      make_tma_load<Traits>(p.v, p.seqlen_k, p.heads_k, p, take<0, 2>(typename Traits::SmemLayoutKV{}),
                               select<1, 2>(TileShapeQK{})),
      p,
      lists,
      MaskSlices::of(p),
      p.softmax_scale * 1.4426950408889634f};
  auto kernel = fwd_kernel<Traits>;
  FM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     Traits::kSmemBytes));
  // All of the unified L1/shared array as shared memory, so that kMinBlocksPerSM CTAs fit.
  FM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     (int)cudaSharedmemCarveoutMaxShared));
  const dim3 grid((unsigned)lists.num_m_blocks, (unsigned)p.heads_q, (unsigned)p.batch);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(kp);
  FM_CHECK_LAUNCH("sm90::fwd_kernel");
}

template <typename Element, int kHeadDim>
void run_fwd_sm90_kernel(const FwdParams& p, const FwdBlockLists& lists, int block_m,
                         cudaStream_t stream) {
  if (block_m == 128) {
    launch_fwd<Element, kHeadDim, 128>(p, lists, stream);
  } else if (block_m == 64) {
    launch_fwd<Element, kHeadDim, 64>(p, lists, stream);
  } else {
    throw std::runtime_error("flashmask run_fwd_sm90: block_m must be 64 or 128");
  }
}

// Whether this build carries sm_90a machine code for the kernel on the current device (a build
// for other archs only would run an empty body).
template <typename Element, int kHeadDim>
bool fwd_sm90_kernel_built() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, fwd_kernel<FwdTraits<Element, kHeadDim>>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90;
}

#define FM_SM90_FWD_INSTANTIATE(T, D)                                                               \
  template void run_fwd_sm90_kernel<T, D>(const FwdParams&, const FwdBlockLists&, int, cudaStream_t); \
  template bool fwd_sm90_kernel_built<T, D>();

}  // namespace sm90
}  // namespace flashmask
