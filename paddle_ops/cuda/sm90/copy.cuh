// Bulk copies of the sm90 kernels: TMA descriptors over the caller's [B, S, H, D] strides, the
// parameters of the TMA pipelines they feed, 1-D bulk copies of small row vectors that ride on a
// pipeline stage's mbarrier, and the 1-D bulk reduce-add that moves the backward's fp32 dQ from
// shared to global memory.
#pragma once

#include <stdexcept>
#include <string>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/cuda_host_adapter.hpp>

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

// 1-D bulk copy shared -> global (16-byte aligned, multiple of 16 bytes), in the calling thread's
// bulk group, as bulk_reduce_add_s2g.
__device__ __forceinline__ void bulk_copy_s2g(void* gmem_dst, const void* smem_src, uint32_t bytes) {
  const uint32_t src = (uint32_t)__cvta_generic_to_shared(smem_src);
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem_dst), "r"(src), "r"(bytes)
               : "memory");
}

// Waits until the calling thread's bulk groups have completed, their writes to global memory
// included (cute::tma_store_wait waits for their reads of shared memory only).
__device__ __forceinline__ void bulk_wait_complete() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// stmatrix of four 8 x 8 16-bit blocks (one register each) to a 32-bit shared-memory address.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3));
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

// The forward's query-row tiles (Q loads, O stores) as TMA sees them: kBlockM rows x the head dim,
// the rows being `pack` query heads that share a K/V head (the fastest) x kBlockM / pack positions,
// so that one tile serves a whole GQA group (pack = 1: one head's kBlockM positions). A 5-D map
// (column, head in the group, position, group, batch) over the caller's [B, S, H, D] strides,
// written into shared memory in 64-column (128-byte) chunks with the 128-byte swizzle, chunk c at
// c * kBlockM * 64 elements: the K-major SW128 layout of the tile (fwd_traits.cuh asserts that
// layout). Positions past `seqlen` are zero-filled on loads and dropped on stores.
constexpr int kRowTileChunk = 64;

template <typename Element>
cute::TmaDescriptor make_row_tile_map(const TensorView& t, int32_t seqlen, int32_t head_dim, int32_t heads,
                                      int32_t batch, int32_t pack, int32_t block_m) {
  static_assert(sizeof(Element) == 2, "16-bit elements");
  constexpr cuuint64_t kBytes = sizeof(Element);
  const CUtensorMapDataType type = std::is_same_v<std::remove_cv_t<Element>, cutlass::half_t>
                                       ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t dims[5] = {(cuuint64_t)head_dim, (cuuint64_t)pack, (cuuint64_t)seqlen, (cuuint64_t)(heads / pack),
                              (cuuint64_t)batch};
  const cuuint64_t strides[4] = {(cuuint64_t)t.head_stride * kBytes, (cuuint64_t)t.row_stride * kBytes,
                                 (cuuint64_t)(t.head_stride * pack) * kBytes, (cuuint64_t)t.batch_stride * kBytes};
  const cuuint32_t box[5] = {kRowTileChunk, (cuuint32_t)pack, (cuuint32_t)(block_m / pack), 1, 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  cute::TmaDescriptor desc{};
  const CUresult result = CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)(
      &desc, type, 5, t.data, dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw std::runtime_error("flashmask sm90: cuTensorMapEncodeTiled failed (" + std::to_string((int)result) +
                             ") for a query-row tile map: the tensor needs 16-byte aligned data and strides");
  }
  return desc;
}

// Loads the row tile (position pos0, GQA group `group` or head when pack = 1, batch b) into `smem`,
// completing on `mbar`.
template <int kBlockM, int kHeadDim, typename Element>
__device__ __forceinline__ void load_row_tile(const cute::TmaDescriptor* map, uint64_t* mbar, Element* smem,
                                              int32_t pos0, int32_t group, int32_t b) {
  CUTLASS_PRAGMA_UNROLL
  for (int c = 0; c < kHeadDim / kRowTileChunk; ++c) {
    cute::SM90_TMA_LOAD_5D::copy(map, mbar, static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                 smem + c * kBlockM * kRowTileChunk, c * kRowTileChunk, 0, pos0, group, b);
  }
}

// Stores the map's box of rows from `smem` (its first row inside a tile of kStageRows rows laid out
// as load_row_tile writes them) at position pos0 (the calling thread's bulk group:
// tma_store_arrive commits it).
template <int kStageRows, int kHeadDim, typename Element>
__device__ __forceinline__ void store_row_tile(const cute::TmaDescriptor* map, const Element* smem, int32_t pos0,
                                               int32_t group, int32_t b) {
  CUTLASS_PRAGMA_UNROLL
  for (int c = 0; c < kHeadDim / kRowTileChunk; ++c) {
    cute::SM90_TMA_STORE_5D::copy(map, smem + c * kStageRows * kRowTileChunk, c * kRowTileChunk, 0, pos0, group, b);
  }
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
