// Bulk copies of the sm90 kernels: TMA descriptors over the caller's [B, S, H, D] strides, the
// parameters of the TMA pipelines they feed, 1-D bulk copies of small row vectors that ride on a
// pipeline stage's mbarrier, and the 1-D bulk reduce-add that moves the backward's fp32 dQ from
// shared to global memory.
#pragma once

#include <cute/tensor.hpp>

#include "flashmask/params.h"

namespace flashmask {
namespace sm90 {

// 1-D bulk copy global -> shared completing on `mbar` (16-byte aligned, multiple of 16 bytes).
__device__ __forceinline__ void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                              uint64_t* mbar) {
  const uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem_dst);
  const uint32_t bar = (uint32_t)__cvta_generic_to_shared(mbar);
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(gmem_src), "r"(bytes), "r"(bar)
      : "memory");
}

// 1-D bulk reduce-add shared -> global of fp32 values (16-byte aligned, multiple of 16 bytes), in
// the calling thread's bulk group: cute::tma_store_arrive() commits it, cute::tma_store_wait<0>()
// waits until the shared source has been read.
__device__ __forceinline__ void bulk_reduce_add_s2g(float* gmem_dst, const float* smem_src, uint32_t bytes) {
  const uint32_t src = (uint32_t)__cvta_generic_to_shared(smem_src);
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gmem_dst),
               "r"(src), "r"(bytes)
               : "memory");
}

// `t` as TMA sees it: (seqlen, head_dim, heads, batch), head_dim contiguous. Element may be const.
template <typename Element>
auto tma_view(const TensorView& t, int32_t seqlen, int32_t head_dim, int32_t heads, int32_t batch) {
  using namespace cute;
  return make_tensor(make_gmem_ptr(static_cast<Element*>(t.data)), make_shape(seqlen, head_dim, heads, batch),
                     make_stride(t.row_stride, _1{}, t.head_stride, t.batch_stride));
}

// The type of tma_view<Element>'s tensors: what the kernels' TMA descriptor types are declared over.
template <typename Element>
using TmaGmemTensor = decltype(tma_view<Element>(TensorView{}, 0, 0, 0, 0));

// TMA load of `tile` (rows, head_dim) boxes of `t`; rows past `seqlen` are zero-filled by the hardware.
template <typename Element, class SmemLayout, class Tile>
auto make_tma_load(const TensorView& t, int32_t seqlen, int32_t head_dim, int32_t heads, int32_t batch,
                   SmemLayout smem_layout, Tile tile) {
  return cute::make_tma_copy(cute::SM90_TMA_LOAD{}, tma_view<Element const>(t, seqlen, head_dim, heads, batch),
                             smem_layout, tile, cute::_1{});
}

// TMA store of `tile` boxes into `t`; rows past `seqlen` are clipped by the hardware.
template <typename Element, class SmemLayout, class Tile>
auto make_tma_store(const TensorView& t, int32_t seqlen, int32_t head_dim, int32_t heads, int32_t batch,
                    SmemLayout smem_layout, Tile tile) {
  return cute::make_tma_copy(cute::SM90_TMA_STORE{}, tma_view<Element>(t, seqlen, head_dim, heads, batch),
                             smem_layout, tile, cute::_1{});
}

// Parameters of a TMA pipeline (cutlass PipelineTmaAsync) whose stages each carry `bytes`: thread 0
// issues the loads, `consumers` threads read the stages.
template <class Pipeline>
__device__ __forceinline__ typename Pipeline::Params tma_pipeline_params(uint32_t bytes, bool producer,
                                                                          int consumers) {
  typename Pipeline::Params params;
  params.transaction_bytes = bytes;
  params.role = producer ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  params.is_leader = threadIdx.x == 0;
  params.num_consumers = consumers;
  return params;
}

}  // namespace sm90
}  // namespace flashmask
