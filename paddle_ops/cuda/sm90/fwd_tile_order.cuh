// Longest-first order of the sm90 forward's tiles. CTAs take tiles in ascending index (the hardware
// hands out one-tile CTAs that way; persistent CTAs claim them that way), so whatever tile comes
// last decides the tail. Sorting every tile by the length of its key-block list would interleave
// all heads and stream every head's K and V at once, past L2; so the (batch, query head) pairs go in
// sections whose K and V fit a part of L2, one after the other, and the tiles of each section are
// sorted longest first (counting sort by visible key blocks, one CTA per section). H200, bf16
// D = 128, B*S = 32K, one process, fwd TFLOP/s natural -> this order (TMA epilogue on): 32K causal
// document 436 -> 446, document 491 -> 506, share question 430 -> 443; 8K document 347 -> 361, share
// question 285 -> 295, causal document and short documents within 1% (without the TMA epilogue:
// 32K causal document 395 -> 427, 8K 295 -> 316). Rows whose one K / V head outgrows a section keep
// their own order instead (order_keeps_locality). Included only by fwd_launch_sm90.cu.
#pragma once

#include <algorithm>

#include <cub/block/block_scan.cuh>

#include "../preprocess.cuh"
#include "../utils.cuh"

namespace flashmask {
namespace sm90 {

constexpr int kOrderThreads = 1024;
constexpr int kLocalOrderThreads = 256;
constexpr int kOrderBins = 4096;  // lists of more key blocks than this share the last bin
constexpr int64_t kOrderSectionBytes = 32ll << 20;  // K + V of a section: about half the H200's L2

// Whether the tiles run in this longest-first order: under index masks, and under causal masks whose
// query heads are not packed. Causal rows in the natural order (each head's last query blocks
// first, one head after another) start the last head's longest tile ~97% of the way through: at 8K
// rows, 128-row tiles and B x H = 64 a simulated schedule ends 2.9% past a perfect balance, sorted
// 0.1%. Packed GQA rows have group-times more tiles per K / V head and no such tail; sorting them
// only spread them over a section's K / V heads (8K causal, 16:4: 605 -> 595 TFLOP/s).
inline bool fwd_sorts_tiles(const FwdParams& p, int pack_shift) {
  return p.mask_form.has_indices() || (p.causal && pack_shift == 0);
}

// K and V of one key / value head, 16-bit elements.
inline int64_t order_kv_head_bytes(const FwdParams& p) {
  return (int64_t)p.seqlen_k * (p.head_dim + p.head_dim_v) * 2;
}

// Query heads ((batch, head_q) pairs) per section, at most all of them (tiny rows with many heads
// would otherwise ask for more sections' worth than an int32 holds).
inline int32_t order_section_heads(const FwdParams& p) {
  const int64_t group = p.heads_q / p.heads_k;  // query heads that share one K / V head
  const int64_t heads = (int64_t)p.heads_q * p.batch;
  return (int32_t)std::clamp<int64_t>(kOrderSectionBytes * group / std::max<int64_t>(1, order_kv_head_bytes(p)), 1,
                                      heads);
}

// Rows whose one key / value head outgrows a section (Sk > 64K at D = 128) have tiles enough that
// the tail does not matter, and a longest-first order there sets the ends of many long documents
// running at once, each streaming its own document's K and V (up to 32 MB per 64K-token document)
// past L2. They keep the locality of the row instead: per (batch, key / value head), query blocks
// from the last to the first (longest first under causal masks), the query heads that share the
// K / V head next to each other.
inline bool order_keeps_locality(const FwdParams& p) { return order_kv_head_bytes(p) > kOrderSectionBytes; }

__global__ void __launch_bounds__(kLocalOrderThreads) fwd_tile_order_local_kernel(FwdParams p, int32_t num_m_blocks,
                                                                                  int32_t* order) {
  const int32_t group = p.heads_q / p.heads_k;
  const int64_t tiles = (int64_t)num_m_blocks * p.heads_q * p.batch;
  for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < tiles; u += (int64_t)gridDim.x * blockDim.x) {
    const int64_t per_kv_head = (int64_t)group * num_m_blocks;
    const int64_t kv_head = u / per_kv_head;  // b * heads_k + head_k
    const int32_t r = (int32_t)(u % per_kv_head);
    const int32_t step = r / group, head_q = (int32_t)(kv_head % p.heads_k) * group + r % group;
    const int64_t b = kv_head / p.heads_k;
    order[u] = (int32_t)((b * p.heads_q + head_q) * num_m_blocks + step);  // fwd_tile's numbering
  }
}

// order[t] = the tile that runs t-th, in the natural numbering of fwd_tile (fwd_tiles.cuh).
__global__ void __launch_bounds__(kOrderThreads) fwd_tile_order_kernel(FwdParams p, MaskSlices slices,
                                                                       const int32_t* counts, int32_t num_m_blocks,
                                                                       int32_t section_heads, int32_t* order) {
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

inline size_t fwd_tile_order_bytes(const FwdParams& p, int32_t num_m_blocks) {
  return align_up(sizeof(int32_t) * (size_t)num_m_blocks * p.heads_q * p.batch);
}

inline void launch_fwd_tile_order(const FwdParams& p, const FwdBlockLists& lists, int32_t* order,
                                  cudaStream_t stream) {
  if (order_keeps_locality(p)) {
    const int64_t tiles = (int64_t)lists.num_m_blocks * p.heads_q * p.batch;
    const int blocks = (int)std::min<int64_t>(ceil_div(tiles, (int64_t)kLocalOrderThreads), 4096);
    fwd_tile_order_local_kernel<<<blocks, kLocalOrderThreads, 0, stream>>>(p, lists.num_m_blocks, order);
    FM_CHECK_LAUNCH("sm90::fwd_tile_order_local_kernel");
    return;
  }
  const int32_t section_heads = order_section_heads(p);
  const int32_t sections = (int32_t)ceil_div((int64_t)p.heads_q * p.batch, section_heads);
  fwd_tile_order_kernel<<<sections, kOrderThreads, 0, stream>>>(p, MaskSlices::of(p), lists.counts,
                                                                 lists.num_m_blocks, section_heads, order);
  FM_CHECK_LAUNCH("sm90::fwd_tile_order_kernel");
}

}  // namespace sm90
}  // namespace flashmask
