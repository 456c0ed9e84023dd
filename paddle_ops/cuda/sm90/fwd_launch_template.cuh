// Host side of one (dtype, head dim) instantiation of the sm90 forward: TMA descriptors from the
// caller's strides, then the launch. Included only by the fwd_hdim*_sm90.cu files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../utils.cuh"
#include "copy.cuh"
#include "fwd_kernel.cuh"
#include "fwd_mask_payload.cuh"
#include "fwd_sm90.h"

namespace flashmask {
namespace sm90 {

// CTAs of `kernel` that the current device holds at once (SMs x CTAs per SM), cached per
// (kernel, device): the persistent grid.
template <class Kernel>
int64_t resident_ctas(Kernel kernel, int threads, int smem_bytes) {
  constexpr int kMaxDevices = 64;
  static int cache[kMaxDevices] = {};
  int dev = 0;
  FM_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < kMaxDevices && cache[dev] > 0) return cache[dev];
  int sms = 0, per_sm = 0;
  FM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  FM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
  const int ctas = std::max(1, sms * per_sm);
  if (dev >= 0 && dev < kMaxDevices) cache[dev] = ctas;
  return ctas;
}

// p: the caller's problem; the tiles see packed_view(p, pack_shift) (fwd_sm90.h), on which `lists`
// were built.
template <typename Element, int kHeadDim, int kBlockM, bool kPersistent = false, bool kDropout = false>
void launch_fwd(const FwdParams& p, int pack_shift, const FwdBlockLists& lists, int32_t* tile_counter,
                const FwdMaskPayload& payload, const int32_t* tile_order, cudaStream_t stream) {
  using namespace cute;
  using Traits = FwdTraits<Element, kHeadDim, kBlockM, fwd_block_n(kBlockM, kHeadDim), 2, kPersistent>;
  using TileShapeQK = typename Traits::TileShapeQK;
  const FwdParams tiles = packed_view(p, pack_shift);
  const int32_t pack = 1 << pack_shift;
  FwdKernelParams<Traits> kp{
      make_row_tile_map<Element>(p.q, p.seqlen_q, p.head_dim, p.heads_q, p.batch, pack, kBlockM),
      make_row_tile_map<Element>(p.out, p.seqlen_q, p.head_dim_v, p.heads_q, p.batch, pack, Traits::kOStoreRows),
      make_tma_load<Element>(p.k, p.seqlen_k, p.head_dim, p.heads_k, p.batch, take<0, 2>(typename Traits::SmemLayoutKV{}),
                               select<1, 2>(TileShapeQK{})),
      make_tma_load<Element>(p.v, p.seqlen_k, p.head_dim_v, p.heads_k, p.batch, take<0, 2>(typename Traits::SmemLayoutKV{}),
                               select<1, 2>(TileShapeQK{})),
      tiles,
      pack_shift,
      lists,
      MaskSlices::of(tiles),
      p.softmax_scale * 1.4426950408889634f,
      tile_counter,
      payload,
      tile_order};
  auto kernel = fwd_kernel<Traits, kDropout>;
  FM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     Traits::kSmemBytes));
  // All of the unified L1/shared array as shared memory, so that kMinBlocksPerSM CTAs fit.
  FM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     (int)cudaSharedmemCarveoutMaxShared));
  const int64_t num_tiles = (int64_t)lists.num_m_blocks * tiles.heads_q * tiles.batch;
  if (num_tiles > INT32_MAX) {
    throw std::runtime_error("flashmask run_fwd_sm90: query blocks x heads x batch = " +
                             std::to_string(num_tiles) + " tiles, more than 2^31 - 1");
  }
  int64_t grid = num_tiles;
  if constexpr (Traits::kPersistent) {
    grid = std::min<int64_t>(grid, resident_ctas(kernel, Traits::kThreads, Traits::kSmemBytes));
    FM_CUDA_CHECK(cudaMemsetAsync(tile_counter, 0, sizeof(int32_t), stream));
  }
  kernel<<<(unsigned)grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(kp);
  FM_CHECK_LAUNCH("sm90::fwd_kernel");
}

template <typename Element, int kHeadDim>
void launch_fwd_mask_payload(const FwdParams& p, const FwdBlockLists& lists, int block_m, int pack_shift,
                             const FwdMaskPayload& payload, cudaStream_t stream) {
  const FwdParams tiles = packed_view(p, pack_shift);
  // The bits follow the S accumulators of the tiled MMA, which only the tile shape decides: every
  // kernel of block_m rows (persistent or not, with dropout or not) reads the same payload.
  if constexpr (kHeadDim == 64) {
    if (block_m == 192) {
      launch_mask_payload<FwdTraits<Element, kHeadDim, 192, fwd_block_n(192, kHeadDim)>>(tiles, lists, payload,
                                                                                     pack_shift, stream);
      return;
    }
  }
  if constexpr (kHeadDim <= 128) {
    if (block_m == 64) {
      launch_mask_payload<FwdTraits<Element, kHeadDim, 64, fwd_block_n(64, kHeadDim)>>(tiles, lists, payload,
                                                                                   pack_shift, stream);
      return;
    }
  }
  if (block_m != 128) {
    throw std::runtime_error("flashmask build_fwd_sm90_plan: block_m must be 128, 64 below head_dim 256, or 192 at "
                             "head_dim 64; got " + std::to_string(block_m));
  }
  launch_mask_payload<FwdTraits<Element, kHeadDim, 128, fwd_block_n(128, kHeadDim)>>(tiles, lists, payload,
                                                                                     pack_shift, stream);
}

template <typename Element, int kHeadDim>
void run_fwd_sm90_kernel(const FwdParams& p, const FwdBlockLists& lists, FwdShape shape, int pack_shift,
                         int32_t* tile_counter, const FwdMaskPayload& payload, const int32_t* tile_order,
                         cudaStream_t stream) {
  const int block_m = shape.block_m;
  const bool persistent = shape.persistent;
  // Dropout: one shape, 128 rows and one tile per CTA (fwd_shape picks it).
  if (p.dropout_p > 0.f) {
    if (block_m != 128 || pack_shift != 0)
      throw std::runtime_error("flashmask run_fwd_sm90: dropout runs the 128-row kernel, one query head per tile");
    launch_fwd<Element, kHeadDim, 128, false, true>(p, pack_shift, lists, tile_counter, payload, tile_order, stream);
    return;
  }
  // 192 rows: head_dim 64, one tile per CTA or persistent (fwd_shape()).
  if constexpr (kHeadDim == 64) {
    if (block_m == 192) {
      persistent ? launch_fwd<Element, kHeadDim, 192, true>(p, pack_shift, lists, tile_counter, payload, tile_order, stream)
                 : launch_fwd<Element, kHeadDim, 192>(p, pack_shift, lists, tile_counter, payload, tile_order, stream);
      return;
    }
  }
  // At head_dim 256 the 128-row kernel has no room for a second Q stage, and there is no 64-row
  // shape (fwd_shape() never asks): Q, K and V would not leave room for a second CTA on the SM,
  // which is what that shape is for.
  if constexpr (kHeadDim <= 128) {
    if (block_m == 64) {
      persistent ? launch_fwd<Element, kHeadDim, 64, true>(p, pack_shift, lists, tile_counter, payload, tile_order, stream)
                 : launch_fwd<Element, kHeadDim, 64>(p, pack_shift, lists, tile_counter, payload, tile_order, stream);
      return;
    }
    if (block_m == 128 && persistent) {
      launch_fwd<Element, kHeadDim, 128, true>(p, pack_shift, lists, tile_counter, payload, tile_order, stream);
      return;
    }
  }
  if (block_m == 128) {
    launch_fwd<Element, kHeadDim, 128>(p, pack_shift, lists, tile_counter, payload, tile_order, stream);
    return;
  }
  throw std::runtime_error("flashmask run_fwd_sm90: block_m must be 128, 64 below head_dim 256, or 192 at head_dim 64; "
                           "got " + std::to_string(block_m) + (persistent ? " persistent" : ""));
}

// Whether this build carries sm_90a machine code for the kernel on the current device (a build
// for other archs only would run an empty body).
template <typename Element, int kHeadDim>
bool fwd_sm90_kernel_built() {
  cudaFuncAttributes attr{};
  using Traits = FwdTraits<Element, kHeadDim, 128, fwd_block_n(128, kHeadDim)>;  // always instantiated
  if (cudaFuncGetAttributes(&attr, fwd_kernel<Traits>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90;
}

#define FM_SM90_FWD_INSTANTIATE(T, D)                                                               \
  template void launch_fwd_mask_payload<T, D>(const FwdParams&, const FwdBlockLists&, int, int,      \
                                              const FwdMaskPayload&, cudaStream_t);                  \
  template void run_fwd_sm90_kernel<T, D>(const FwdParams&, const FwdBlockLists&, FwdShape, int, int32_t*, \
                                          const FwdMaskPayload&, const int32_t*, cudaStream_t);    \
  template bool fwd_sm90_kernel_built<T, D>();

}  // namespace sm90
}  // namespace flashmask
