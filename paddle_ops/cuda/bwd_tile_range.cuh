// Which query blocks a backward key block must visit, shared by the portable dK/dV kernels and the
// Hopper backward (sm90/bwd_tiles.cuh): the key block's BlockBounds, its mask slice, and the query
// block range clipped by causality and by intervals that cover whole row ranges.
#pragma once

#include "flashmask/block.h"
#include "flashmask/params.h"
#include "bwd_workspace.h"

namespace flashmask {
namespace bwd {

// BlockBounds of key block `n_block` as seen by query head `head_q` of batch `b`.
__device__ __forceinline__ BlockBounds key_block_bounds(const BwdParams& p, const Workspace& ws, int b,
                                                        int head_q, int n_block) {
  return ws.bounds[int64_t(ws.slices.index(p, b, head_q)) * ws.n_blocks + n_block];
}

// The keys [first, end) of one CTA of the Hopper backward: key block `index` of its batch row, at
// multiples of block_n or, with the plan's document-aligned blocks (key_blocks.cuh), the range of
// slot `index` (empty for the slots a row does not use).
struct KeyBlock {
  int32_t index, first, end;
  __device__ __forceinline__ bool empty() const { return first >= end; }
};

__device__ __forceinline__ KeyBlock key_block_of(const BwdParams& p, const Workspace& ws, int b, int index,
                                                 int block_n) {
  if (ws.key_blocks.ranges != nullptr) {
    const int2 range = ws.key_blocks.ranges[int64_t(b) * ws.key_blocks.slots + index];
    return {index, range.x, range.y};
  }
  return {index, index * block_n, min((index + 1) * block_n, p.seqlen_k)};
}

__device__ __forceinline__ BlockBounds key_block_bounds(const BwdParams& p, const Workspace& ws, int b,
                                                        int head_q, const KeyBlock& kb) {
  if (ws.key_blocks.ranges != nullptr)
    return ws.key_blocks.bounds[int64_t(ws.slices.index(p, b, head_q)) * ws.key_blocks.slots + kb.index];
  return key_block_bounds(p, ws, b, head_q, kb.index);
}

// This head's [Sk, C] slice of startend_row_indices, or nullptr when the call has none.
__device__ __forceinline__ const int32_t* mask_slice_or_null(const BwdParams& p, int b, int head_q) {
  return p.mask_form.has_indices() ? p.mask_slice(b, head_q) : nullptr;
}

// The CTAs of the key-block kernels (the portable dK/dV kernel and the Hopper backward). Under
// causal and global-token masks the first key blocks see the most query blocks. Head-major order
// started the last heads' long CTAs near the end of the launch and left them running alone (the 32K
// global + sliding window backward spent ~2 ms in that tail); fully key-block-major order starts
// every head's long CTAs in the first wave but streams every head's Q and dO at once, past L2.
// So the (head_k, batch) slices go in a few groups, one after the other, key block major inside
// each: grid (slices per group, key blocks, groups), the last group padded with idle CTAs.
struct KeyBlockCta {
  int32_t n_block, head_k, b;
  bool valid;  // false in the last group's padding: the CTA returns at once
};

// grid (slices per group, key blocks, groups) of the portable or (sm90) the Hopper kernels; defined
// in bwd_launch.cu, the one host file that decides it (FLASHMASK_BWD_SLICE_GROUPS=N overrides the
// group count, for tuning).
dim3 key_block_grid(const BwdParams& p, const Workspace& ws, bool sm90);

__device__ __forceinline__ KeyBlockCta key_block_cta(const BwdParams& p) {
  const int32_t slice = int32_t(blockIdx.z * gridDim.x + blockIdx.x);
  return {int32_t(blockIdx.y), slice % p.heads_k, slice / p.heads_k, slice < p.heads_k * p.batch};
}

// The query rows [row_begin, row_end) that can see key block [n0, n_end): clipped by causality and
// by intervals that cover whole row ranges of every column of the block (empty: row_begin >=
// row_end). Tiles inside the range may still be fully masked (e.g. other documents); classify_tile
// skips those.
__device__ __forceinline__ int2 query_row_range(const BlockBounds& bb, int n0, int seqlen_q, bool causal,
                                                int causal_off) {
  int row_begin = 0, row_end = seqlen_q;
  if (causal) row_begin = max(row_begin, n0 - causal_off);
  if (bb.uts_max <= 0) row_begin = max(row_begin, bb.ute_min);  // rows < ute masked in every column
  if (bb.lte_min >= seqlen_q) row_end = min(row_end, bb.lts_max);  // rows >= lts masked in every column
  return make_int2(row_begin, row_end);
}

// The query blocks [m_begin, m_end) of block_m rows, at multiples of block_m, that hold those rows.
__device__ __forceinline__ int2 query_block_range(const BlockBounds& bb, int n0, int seqlen_q, bool causal,
                                                  int causal_off, int block_m) {
  const int2 rows = query_row_range(bb, n0, seqlen_q, causal, causal_off);
  if (rows.x >= rows.y) return make_int2(0, 0);
  return make_int2(rows.x / block_m, (rows.y + block_m - 1) / block_m);
}

}  // namespace bwd
}  // namespace flashmask
