// Longest-first order of the sm90 forward's tiles. CTAs take tiles in ascending index (the hardware
// hands out one-tile CTAs that way; persistent CTAs claim them that way), so whatever tile comes
// last decides the tail. Sorting every tile by the length of its key-block list would interleave
// all heads and stream every head's K and V at once, past L2; so the (batch, query head) pairs go in
// sections whose K and V fit a part of L2, one after the other, and the tiles of each section are
// sorted longest first (counting sort by visible key blocks, one CTA per section). H200, bf16
// D = 128, B*S = 32K, one process, fwd TFLOP/s natural -> this order (TMA epilogue on): 32K causal
// document 436 -> 446, document 491 -> 506, share question 430 -> 443; 8K document 347 -> 361, share
// question 285 -> 295, causal document and short documents within 1% (without the TMA epilogue:
// 32K causal document 395 -> 427, 8K 295 -> 316). Included only by fwd_launch_sm90.cu.
#pragma once

#include <algorithm>

#include <cub/block/block_scan.cuh>

#include "../preprocess.cuh"
#include "../utils.cuh"

namespace flashmask {
namespace sm90 {

constexpr int kOrderThreads = 1024;
constexpr int kOrderBins = 4096;  // lists of more key blocks than this share the last bin
constexpr int64_t kOrderSectionBytes = 32ll << 20;  // K + V of a section: about half the H200's L2

// Query heads ((batch, head_q) pairs) per section.
inline int32_t order_section_heads(const FwdParams& p) {
  const int64_t group = p.heads_q / p.heads_k;  // query heads that share one K / V head
  const int64_t kv_bytes = (int64_t)p.seqlen_k * (p.head_dim + p.head_dim_v) * 2;  // K and V, 16-bit elements
  return (int32_t)std::max<int64_t>(1, kOrderSectionBytes * group / std::max<int64_t>(1, kv_bytes));
}

// order[t] = the tile that runs t-th, in the natural numbering of fwd_tile (fwd_tiles.cuh).
__global__ void fwd_tile_order_kernel(FwdParams p, MaskSlices slices, const int32_t* counts,
                                      int32_t num_m_blocks, int32_t section_heads, int32_t* order) {
  using Scan = cub::BlockScan<int32_t, kOrderThreads>;
  constexpr int kBinsPerThread = kOrderBins / kOrderThreads;
  __shared__ int32_t bins[kOrderBins];
  __shared__ typename Scan::TempStorage temp;
  const int32_t heads = p.heads_q * p.batch;
  const int32_t head0 = blockIdx.x * section_heads;
  const int32_t first = head0 * num_m_blocks;
  const int32_t count = (min(head0 + section_heads, heads) - head0) * num_m_blocks;
  auto bin = [&](int32_t t) {  // longest list -> bin 0
    const int32_t hb = t / num_m_blocks, m_block = num_m_blocks - 1 - t % num_m_blocks;
    const int32_t slice = slices.index(p, hb / p.heads_q, hb % p.heads_q);
    const int32_t visible = counts[2 * ((int64_t)slice * num_m_blocks + m_block)];
    return kOrderBins - 1 - min(visible, kOrderBins - 1);
  };
  for (int i = threadIdx.x; i < kOrderBins; i += kOrderThreads) bins[i] = 0;
  __syncthreads();
  for (int32_t i = threadIdx.x; i < count; i += kOrderThreads) atomicAdd(&bins[bin(first + i)], 1);
  __syncthreads();
  int32_t sizes[kBinsPerThread];
  for (int j = 0; j < kBinsPerThread; ++j) sizes[j] = bins[threadIdx.x * kBinsPerThread + j];
  Scan(temp).ExclusiveSum(sizes, sizes);
  __syncthreads();
  for (int j = 0; j < kBinsPerThread; ++j) bins[threadIdx.x * kBinsPerThread + j] = sizes[j];
  __syncthreads();
  // Ties land in any order: the schedule, not the result, depends on it.
  for (int32_t i = threadIdx.x; i < count; i += kOrderThreads) {
    const int32_t t = first + i;
    order[first + atomicAdd(&bins[bin(t)], 1)] = t;
  }
}

inline size_t fwd_tile_order_bytes(const FwdParams& p, int block_m) {
  return align_up(sizeof(int32_t) * (size_t)ceil_div(p.seqlen_q, block_m) * p.heads_q * p.batch);
}

inline void launch_fwd_tile_order(const FwdParams& p, const FwdBlockLists& lists, int32_t* order,
                                  cudaStream_t stream) {
  const int32_t section_heads = order_section_heads(p);
  const int32_t sections = (int32_t)ceil_div((int64_t)p.heads_q * p.batch, section_heads);
  fwd_tile_order_kernel<<<sections, kOrderThreads, 0, stream>>>(p, MaskSlices::of(p), lists.counts,
                                                                 lists.num_m_blocks, section_heads, order);
  FM_CHECK_LAUNCH("sm90::fwd_tile_order_kernel");
}

}  // namespace sm90
}  // namespace flashmask
