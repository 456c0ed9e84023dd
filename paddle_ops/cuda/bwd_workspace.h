// Device workspace of the backward, carved from the one buffer the skin allocates
// (bwd_workspace_bytes_cuda). Every region starts 256-byte aligned. Rows are padded to a multiple of
// every path's query tile and the block bounds are at the key block both paths use
// (workspace_grid, bwd_tile_shape.h), so the kernels read LSE/D and add into dQ without edge checks.
//
//   lse_log2  float [B, Hq, Sq_pad]  LSE * log2(e); +inf on fully masked rows and padding (-> P = 0).
//             Sq_pad is one row multiple past Sq rounded up to it: the Hopper backward's tiles start
//             at any multiple of 16 rows below Sq (PlanLayout::row_align) and end inside it
//   dpsum     float [B, Hq, Sq_pad]  D = rowsum(dO * O); 0 on padding
//   plan      the backward's mask plan, here unless the call brings its own (PlanLayout below):
//             bounds, BlockBounds [slices, n_blocks] per key block min/max of the four column
//             bounds (preprocess.cuh's launch_block_bounds, shared with the forward) at the grid's
//             block_n; then, where the Hopper backward runs on document-aligned key blocks, those
//             blocks and their bounds (key_blocks.cuh); then, where the Hopper backward runs on
//             tiles the producer hands over, the partial tiles' mask payloads (MaskPayloads below)
//   dq_accum  float [B, Hq, Sq_pad, Dk]  fp32 dQ over the kernel's Dk columns (cuda_kernel_head_dim;
//             atomic mode only, absent when deterministic). Each (b, head) slice is stored in the
//             MMA-thread order of its path's tiles, not row-major (the portable path: dq_accum_index
//             in bwd_tile_math.cuh; the Hopper path: sm90/bwd_dq_layout.cuh), so every warp's adds
//             cover one contiguous span; each path's dQ conversion maps it back.
//   dq_claims uint32 [B, Hq, Dk / 32, Sq_pad / 16]  (atomic mode only) where the Hopper backward's dQ
//             writers store the first partial of each 16-row group of dq_accum instead of adding
//             it (dq_first_store; sm90/bwd_dq_claims.cuh): one claim word per group and plane of
//             the accumulator's columns, zeroed by the row preparation in place of dq_accum.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "flashmask/block.h"
#include "flashmask/check.h"
#include "flashmask/params.h"
#include "bwd_tile_shape.h"
#include "key_blocks.cuh"
#include "preprocess.cuh"

namespace flashmask {
namespace bwd {

// The Hopper backward's mask payloads (sm90/bwd_mask_payload.cuh): the partial tiles of the list of
// (mask slice, key block) `list` = slice * key_block_slots() + key block take consecutive slots
// from first_slot[list] (< 0: it has none, sm90::BwdPayloadSlots), slot s has words_per_tile words at
// words[s * words_per_tile].
struct MaskPayloads {
  const int32_t* first_slot = nullptr;  // nullptr: no payloads in the plan (the kernel writes them all)
  const uint32_t* words = nullptr;
  int32_t capacity = 0;
  int32_t words_per_tile = 0;
};

struct Workspace {
  float* lse_log2 = nullptr;
  float* dpsum = nullptr;
  const BlockBounds* bounds = nullptr;  // bounds[slices.index(p, b, head_q) * n_blocks + n_block]
  KeyBlocks key_blocks;                 // the Hopper backward's CTAs, where document-aligned
  MaskSlices slices;
  float* dq_accum = nullptr;      // nullptr in deterministic mode
  uint32_t* dq_claims = nullptr;  // beside dq_accum
  // Set by the Hopper launcher where its dQ writers claim groups (sm90/bwd_dq_claims.cuh): the row
  // preparation zeroes the first dq_claim_planes planes of dq_claims and leaves dq_accum as it is.
  bool dq_first_store = false;
  int32_t dq_claim_planes = 0;
  int32_t seqlen_q_pad = 0;       // Sq rounded up to workspace_grid's row multiple, plus one (carve_workspace)
  int32_t n_blocks = 0;           // ceil(Sk / block_n)
  int32_t row_align = 0;          // PlanLayout::row_align
  MaskPayloads payloads;

  // The key blocks of one batch row the Hopper backward's CTAs take (bwd_tile_range.cuh's KeyBlock).
  FM_HOST_DEVICE int32_t key_block_slots() const { return key_blocks.ranges != nullptr ? key_blocks.slots : n_blocks; }
};

inline size_t align256(size_t bytes) { return (bytes + 255) & ~size_t(255); }

// dq_claims' grid: a word per kDqClaimRows rows (the Hopper tiles' row alignment, a multiple of
// which every path's row padding is) and plane of at least 32 of the accumulator's columns.
constexpr int kDqClaimRows = kSm90RowAlign;
constexpr int max_dq_claim_planes(int kernel_dim) { return (kernel_dim + 31) / 32; }

// What the backward's mask plan holds: the bounds of the fixed key blocks of block_n keys (read by
// every path), with document_blocks the Hopper backward's document-aligned key blocks, and with
// payload_tiles_per_list > 0 its mask payloads: that many slots per (mask slice, key block) list,
// pooled over the lists, of payload_tile_rows x block_n bits each. row_align > 0: the Hopper
// backward's tiles start at the first row each key block sees, rounded down to a multiple of
// row_align (sm90/bwd_tiles.cuh), instead of at multiples of its rows per step (0); the payloads are
// those tiles'.
struct PlanLayout {
  int32_t block_n = 0;
  bool document_blocks = false;
  int32_t payload_tiles_per_list = 0;
  int32_t payload_tile_rows = 0;
  int32_t row_align = 0;

  int32_t n_blocks(const BwdParams& p) const { return int32_t((p.seqlen_k + block_n - 1) / block_n); }
  int32_t key_block_slots(const BwdParams& p) const {
    return document_blocks ? document_key_block_slots(p, block_n) : n_blocks(p);
  }
  int64_t payload_lists(const BwdParams& p) const { return int64_t(MaskSlices::of(p).count()) * key_block_slots(p); }
  int32_t payload_capacity(const BwdParams& p) const {
    return int32_t(std::min<int64_t>(payload_lists(p) * payload_tiles_per_list, INT32_MAX / 2));
  }
  int32_t payload_words_per_tile() const { return payload_tile_rows * block_n / 32; }
  // The slot counter the payload builder allocates from (64 bits: the lists' requests may sum past
  // 2^31 where the pool is far too small), the lists' first slots, the words.
  size_t payload_bytes(const BwdParams& p) const {
    if (payload_tiles_per_list == 0) return 0;
    return align256(sizeof(uint64_t)) + align256(sizeof(int32_t) * payload_lists(p)) +
           align256(sizeof(uint32_t) * size_t(payload_capacity(p)) * payload_words_per_tile());
  }
  size_t bytes(const BwdParams& p) const {
    return align256(block_bounds_bytes(p, block_n)) + (document_blocks ? document_key_blocks_bytes(p, block_n) : 0) +
           payload_bytes(p);
  }
  // Points the workspace's plan fields into `base` (bytes(p) bytes), with the grid they are indexed
  // by (n_blocks, slices); returns the payload builder's slot counter (nullptr without payloads).
  uint64_t* carve(const BwdParams& p, const void* base, Workspace* ws) const {
    const char* at = static_cast<const char*>(base);
    ws->n_blocks = n_blocks(p);
    ws->slices = MaskSlices::of(p);
    ws->row_align = row_align;
    ws->bounds = reinterpret_cast<const BlockBounds*>(at);
    at += align256(block_bounds_bytes(p, block_n));
    if (document_blocks) {
      ws->key_blocks = carve_document_key_blocks(p, block_n, at);
      at += document_key_blocks_bytes(p, block_n);
    }
    if (payload_tiles_per_list == 0) return nullptr;
    uint64_t* next_slot = reinterpret_cast<uint64_t*>(const_cast<char*>(at));
    at += align256(sizeof(uint64_t));
    ws->payloads.first_slot = reinterpret_cast<const int32_t*>(at);
    at += align256(sizeof(int32_t) * payload_lists(p));
    ws->payloads.words = reinterpret_cast<const uint32_t*>(at);
    ws->payloads.capacity = payload_capacity(p);
    ws->payloads.words_per_tile = payload_words_per_tile();
    return next_slot;
  }
};

// Lays the regions out from `base` (nullptr: only count). Returns the total byte count. With
// `plan_in_call` the plan is left out (it comes with the call, launch.h; PlanLayout::carve).
inline size_t carve_workspace(const BwdParams& p, const PlanLayout& plan, void* base, Workspace* ws,
                              bool plan_in_call = false) {
  const int32_t kernel_dim = cuda_kernel_head_dim(p.head_dim, p.head_dim_v);
  const WorkspaceGrid g = workspace_grid(kernel_dim);
  // Tiles from any row below Sq reach at most one tile of rows past it (lse_log2 above); padded
  // whatever the path and row_align, so that a size asked before the path is chosen holds.
  const int64_t sq_pad =
      (int64_t(p.seqlen_q) + g.row_multiple - 1) / g.row_multiple * g.row_multiple + g.row_multiple;
  const int64_t rows = int64_t(p.batch) * p.heads_q * sq_pad;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    size_t at = off;
    off += align256(bytes);
    return base ? static_cast<char*>(base) + at : nullptr;
  };
  Workspace w;
  w.seqlen_q_pad = static_cast<int32_t>(sq_pad);
  w.row_align = plan.row_align;
  w.lse_log2 = reinterpret_cast<float*>(take(rows * sizeof(float)));
  w.dpsum = reinterpret_cast<float*>(take(rows * sizeof(float)));
  if (!plan_in_call) {
    void* at = take(plan.bytes(p));
    if (at != nullptr) plan.carve(p, at, &w);
  }
  if (!p.deterministic) {
    w.dq_accum = reinterpret_cast<float*>(take(rows * kernel_dim * sizeof(float)));
    const int64_t claim_words = rows / kDqClaimRows * max_dq_claim_planes(kernel_dim);
    w.dq_claims = reinterpret_cast<uint32_t*>(take(claim_words * sizeof(uint32_t)));
  }
  if (ws) *ws = w;
  return off;
}

}  // namespace bwd
}  // namespace flashmask
