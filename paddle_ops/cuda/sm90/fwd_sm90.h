// Entry of the Hopper (sm90a) forward for the launcher (fwd_launch.cu). The launcher calls
// fwd_sm90_selected() and, when true, builds its mask plans with build_fwd_sm90_plan() and runs
// run_fwd_sm90() instead of the portable kernel. Built only where CMake compiles the *_sm90.cu
// sources (FLASHMASK_HAS_SM90=1).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include <cutlass/numeric_types.h>

#include "flashmask/launch.h"
#include "flashmask/params.h"
#include "../preprocess.cuh"

namespace flashmask {

// True when this problem runs on the sm90 path: the current device has compute capability 9.0,
// the sm_90a kernels are in this build, D and Dv are CUDA head dims (path_sm90.h) and Sk > 0
// (other cases take the portable kernel). FLASHMASK_FORCE_PATH=sm80 turns the path off, =sm90
// turns it on.
bool fwd_sm90_selected(const FwdParams& p);

namespace sm90 {
// A call's workspace beside its plan: one int32 counting the persistent CTAs' tile claims (zeroed
// before each such launch), padded to 256 bytes.
constexpr size_t kFwdScratchBytes = 256;

// Tile rows per CTA: 128 (two consumer warpgroups) for dense and causal attention and, at
// head_dim 128, for index masks over at least kLongRows query rows (persistent CTAs); else 64 (one
// warpgroup, two CTAs per SM) for index masks, whose block lists are short (fwd_traits.cuh);
// always 128 at head_dim 256. At head_dim 64: 192 (three consumer warpgroups) without indices, but
// for causal attention over fewer than kTallCausalRows query rows, and for bidirectional index
// masks over at least kLongRows; 128 for causal index masks over at least kLongCausalIndexRows.
// FLASHMASK_SM90_BLOCK_M=64|128 overrides below 256, =192 at 64 columns without a block mask
// (measurements in fwd_launch_sm90.cu).
constexpr int kLongRows = 8192;
constexpr int kTallCausalRows = 6144;
constexpr int kLongCausalIndexRows = 16384;
// The sm90 forward kernel of a call: its tile rows and whether its CTAs are persistent
// (fwd_tiles.cuh), with the FLASHMASK_SM90_BLOCK_M and FLASHMASK_SM90_PERSISTENT overrides (read
// per call). One decision for the plan and the launch.
struct FwdShape {
  int block_m;
  bool persistent;
};
FwdShape fwd_shape(const FwdParams& p);

// GQA heads packed into the tile rows: 2^shift query heads that share a K/V head fill one tile,
// row r = (position r >> shift, head r % 2^shift of the group), so that their K/V blocks are loaded
// once for all of them and a tile spans block_m >> shift positions (fewer masked elements on the
// diagonal and at document edges); FlashAttention's pack_gqa. Where the heads share one mask
// slice (mask heads 1 or Hk), without dropout or a block mask, the group a power of two of at most
// block_m / 8, D <= 128 and Sk <= 64K at D = 128 (fwd_launch_sm90.cu), but not for causal
// attention without indices unless FLASHMASK_SM90_PACK_GQA=1; else 0. FLASHMASK_SM90_PACK_GQA=0
// turns it off (read per call).
int fwd_pack_shift(const FwdParams& p, int block_m);

// Whether the forward's query tiles and key blocks restart at the documents of a square index mask
// (preprocess.cuh's FwdDocumentBlocks) instead of sitting at multiples of the tile size: by default
// on bidirectional masks at kernel head dims 64 and 128; FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS=1 on
// every square index mask, =0 never (read per call).
bool fwd_document_blocks(const FwdParams& p);

// The problem as packed tiles see it: heads_q counts the groups (= heads_k when packed).
inline FwdParams packed_view(const FwdParams& p, int pack_shift) {
  FwdParams v = p;
  v.heads_q = p.heads_q >> pack_shift;
  return v;
}
// Key tile: block_m up to 128, or 64 at head_dim 256, where a 128-key K/V ring would not fit
// beside Q in shared memory (Q 64 KB + K, V 2 x 2 x 32 KB) and S + O would not fit the registers.
constexpr int fwd_block_n(int block_m, int head_dim) {
  return head_dim > 128 ? 64 : (block_m < 128 ? block_m : 128);
}
// Bytes of one partial tile's mask payload (fwd_mask_payload.cuh): a bit per S accumulator value
// (block_n / 2 per consumer thread: 64 rows per warpgroup), in 32-bit words, for the
// block_m / 64 * 128 consumer threads.
constexpr int fwd_payload_words(int block_n) { return (block_n / 2 + 31) / 32; }
constexpr int fwd_payload_bytes(int block_m, int block_n) {
  return fwd_payload_words(block_n) * (block_m / 64 * 128) * 4;
}
// The partial tiles' mask payloads (fwd_mask_payload.cuh): tile `slot` = partial_offsets[list] + i
// (the list's i-th partial entry) has one when slot < capacity; slot_lists[slot] is that list.
struct FwdMaskPayload {
  uint32_t* words = nullptr;
  const int32_t* partial_offsets = nullptr;  // one per list, then the total
  const int32_t* slot_lists = nullptr;
  int32_t capacity = 0;
};
// Payload slots per query-block list, pooled over all lists of a call: 4. Partial tiles per query
// block: 1-3 for causal, sliding-window and document masks (the diagonal, document edges), more
// only on the few query blocks that straddle two documents. FLASHMASK_SM90_PAYLOAD_TILES=N
// overrides (0: every partial tile evaluates column intervals; read at every launch).
int payload_tiles_per_list();
// One instantiation per (dtype, head dim), each in its own fwd_hdim*_sm90.cu; lists built on
// packed_view(p, pack_shift) with (block_m >> pack_shift, fwd_block_n(block_m)).
// launch_fwd_mask_payload writes the payloads of a plan (their bit order is that of the
// block_m-row kernel's S accumulators); run_fwd_sm90_kernel launches the attention kernel,
// `tile_counter` (one int32 of scratch) counting persistent CTAs' tile claims.
template <typename Element, int kHeadDim>
void launch_fwd_mask_payload(const FwdParams& p, const FwdBlockLists& lists, int block_m, int pack_shift,
                             const FwdMaskPayload& payload, cudaStream_t stream);
template <typename Element, int kHeadDim>
void run_fwd_sm90_kernel(const FwdParams& p, const FwdBlockLists& lists, FwdShape shape, int pack_shift,
                         int32_t* tile_counter, const FwdMaskPayload& payload, const int32_t* tile_order,
                         cudaStream_t stream);
template <typename Element, int kHeadDim>
bool fwd_sm90_kernel_built();
}  // namespace sm90

// The mask plan of the sm90 forward at `block_m` query rows (sm90::fwd_shape): the block lists,
// the partial tiles' numbering and mask payloads, the tile order (fwd_launch_sm90.cu).
MaskPlanSize fwd_sm90_plan_size(const FwdParams& p, int block_m);
void build_fwd_sm90_plan(const FwdParams& p, int block_m, void* plan, cudaStream_t stream);
// `scratch`: sm90::kFwdScratchBytes of device memory beside the plan.
void run_fwd_sm90(const FwdParams& p, sm90::FwdShape shape, const void* plan, void* scratch, cudaStream_t stream);

}  // namespace flashmask
