// Mask preprocessing on the GPU, shared by the forward and the backward kernels.
//
// 1. launch_block_bounds: for every mask slice (batch, mask head) and every key block of
//    `block_n` columns, the BlockBounds (min/max of the four normalised bounds, block.h).
//    Backward (cuda-bwd) reuses it as is, with its own block_n: read bounds[slice * num_n_blocks +
//    n_block] with MaskSlices::of(params).index(params, b, head_q) and classify tiles with
//    block.h's classify_tile; the memory it needs is block_bounds_bytes(params, block_n).
// 2. build_fwd_block_lists (after 1.): for every (slice, query block of `block_m` rows), the
//    compacted list of the key blocks that are not fully masked: first the partial ones (the
//    element mask must run: partially masked tiles and the tile that crosses Sk), then the
//    unmasked ones, each group in descending key-block order; each entry is
//    `n_block << 1 | partial`. The forward kernel visits exactly these blocks, with the element
//    mask compiled only into its loop over the partial prefix.
//
// Without startend_row_indices (plain causal or full attention) there is one implicit slice whose
// bounds are the empty intervals, so causal still skips the tiles above the diagonal.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "flashmask/block.h"
#include "flashmask/params.h"
#include "key_blocks.cuh"

namespace flashmask {

// The distinct masks of a problem: [batches, heads] slices of startend_row_indices.
struct MaskSlices {
  int32_t batches = 1;  // B when indices are given, else 1
  int32_t heads = 1;    // Hm when indices are given, else 1

  static MaskSlices of(const FwdParams& p) {
    MaskSlices s;
    if (p.mask_form.has_indices()) {
      s.batches = p.batch;
      s.heads = p.mask_heads;
    }
    return s;
  }
  FM_HOST_DEVICE int32_t count() const { return batches * heads; }
  // The slice that masks query head `head_q` of batch `b`.
  FM_HOST_DEVICE int32_t index(const FwdParams& p, int32_t b, int32_t head_q) const {
    return batches == 1 && heads == 1 ? 0 : b * heads + p.mask_head_of(head_q);
  }
  // A (batch, query head) that `slice` masks, the first such head: for work done once per slice.
  FM_HOST_DEVICE int32_t batch_of(int32_t slice) const { return slice / heads; }
  FM_HOST_DEVICE int32_t first_head_q(const FwdParams& p, int32_t slice) const {
    const int32_t mask_head = slice % heads;
    if (p.mask_heads <= 1) return 0;
    return p.mask_heads == p.heads_q ? mask_head : mask_head * (p.heads_q / p.heads_k);
  }
};

// One entry of a forward block list.
FM_HOST_DEVICE int32_t encode_block_entry(int32_t n_block, bool partial) {
  return (n_block << 1) | (partial ? 1 : 0);
}
FM_HOST_DEVICE int32_t entry_n_block(int32_t entry) { return entry >> 1; }
FM_HOST_DEVICE bool entry_is_partial(int32_t entry) { return (entry & 1) != 0; }

// Where the forward kernel finds its lists and the normalised column bounds (nullptr without
// indices; columns[slice * Sk + col]): entries[list * num_n_blocks + i] for
// i < counts[2 * list], the first counts[2 * list + 1] of them partial, where
// list = slice * num_m_blocks + m_block. Query block m_block and key block n_block are fixed
// blocks of block_m rows and block_n keys, or with document blocks (FwdDocumentBlocks) the ranges
// of slot m_block / n_block of the batch row (an empty range: no such block in that row).
struct FwdBlockLists {
  const int32_t* entries = nullptr;
  const int32_t* counts = nullptr;  // (visible, partial) per list
  const ColumnBounds* columns = nullptr;
  int32_t num_m_blocks = 0, num_n_blocks = 0;
  const int2* row_ranges = nullptr;  // [batch][num_m_blocks] [first, end) positions, or nullptr
  const int2* col_ranges = nullptr;  // [batch][num_n_blocks] [first, end) keys, or nullptr

  // [first, end) of the positions of query block m_block of batch row b.
  FM_HOST_DEVICE int2 rows_of(int32_t b, int32_t m_block, int32_t block_m, int32_t seqlen_q) const {
    return range_of(row_ranges, num_m_blocks, b, m_block, block_m, seqlen_q);
  }
  // [first, end) of the keys of key block n_block of batch row b.
  FM_HOST_DEVICE int2 cols_of(int32_t b, int32_t n_block, int32_t block_n, int32_t seqlen_k) const {
    return range_of(col_ranges, num_n_blocks, b, n_block, block_n, seqlen_k);
  }

  // Block i of batch row b: its slot of `ranges` ([batch][blocks]), or the fixed block of `block`
  // positions clipped at `length`.
  FM_HOST_DEVICE static int2 range_of(const int2* ranges, int32_t blocks, int32_t b, int32_t i, int32_t block,
                                      int32_t length) {
    if (ranges != nullptr) return ranges[(int64_t)b * blocks + i];
    const int32_t first = i * block;
    return make_int2(first, first + block < length ? first + block : length);
  }
};

// Document-aligned query and key blocks of a forward's lists (key_blocks.cuh): both restart at the
// documents of square masks, so that no tile straddles two documents' diagonals. Restarting the
// query blocks alone loses where the diagonal then cuts fixed key blocks in two
// (benchmarks/tile_efficiency.py).
struct FwdDocumentBlocks {
  KeyBlocks rows;  // query blocks: ranges of positions at the lists' block_m (bounds only where they are cols)
  KeyBlocks cols;  // key blocks: ranges of keys at block_n and their bounds
};

// Bytes of the BlockBounds of every (slice, key block); a multiple of 256.
size_t block_bounds_bytes(const FwdParams& p, int32_t block_n);

// Writes bounds[slice * num_n_blocks + n_block]; `bounds` holds block_bounds_bytes(p, block_n).
// With `columns` (column_bounds_bytes(p) bytes), also writes every column's normalised bounds
// (mask.h's load_column_bounds) to columns[slice * Sk + col], so that element masks read one
// 16-byte record per column whatever the mask form.
void launch_block_bounds(const FwdParams& p, int32_t block_n, BlockBounds* bounds, cudaStream_t stream,
                         ColumnBounds* columns = nullptr);
size_t column_bounds_bytes(const FwdParams& p);  // 0 without startend_row_indices

// The same bounds over arbitrary key blocks: bounds[slice * slots + i] for the columns
// ranges[b * slots + i] of the slice's batch row b (key_blocks.cuh); empty ranges are skipped.
void launch_range_bounds(const FwdParams& p, const int2* ranges, int32_t slots, BlockBounds* bounds,
                         cudaStream_t stream);

// Query blocks per batch row: fixed blocks of block_m rows, or the document blocks' slots.
int32_t fwd_num_m_blocks(const FwdParams& p, int32_t block_m, bool documents = false);

// Workspace of the forward preprocessing: bounds, list entries, counts, normalised column bounds.
size_t fwd_block_lists_workspace_bytes(const FwdParams& p, int32_t block_m, int32_t block_n,
                                       bool documents = false);

// Where the lists lie in `base` (fwd_block_lists_workspace_bytes bytes, the bounds first); no launch.
FwdBlockLists carve_fwd_block_lists(const FwdParams& p, int32_t block_m, int32_t block_n, const void* base,
                                    const FwdDocumentBlocks* documents = nullptr);

// Launches both preprocessing kernels on `stream`, writing the lists carved from `base`; they are
// ready for kernels launched after it on the same stream. With `documents` (built before, on the
// same stream) the lists run over its ranges.
FwdBlockLists build_fwd_block_lists(const FwdParams& p, int32_t block_m, int32_t block_n, void* base,
                                    cudaStream_t stream, const FwdDocumentBlocks* documents = nullptr);

// Numbers the partial tiles of all lists consecutively, up to `slots`: offsets[list] = the partial
// tiles of the lists before it (exclusive prefix sum of the lists' partial counts), capped at
// `slots`, so that per-tile data (the Hopper forward's mask payloads) can be packed without a slot
// for every possible tile, and offsets[number of lists] = their total, capped the same way (no
// offset wraps, however many partial tiles a mask has). With `slot_lists`, slot_lists[n] = the list
// of partial tile n for n < min(total, slots), so that per-tile work can be spread over tiles, not
// lists. One CTA, after build_fwd_block_lists on the same stream; offsets holds
// partial_offsets_bytes(p, num_m_blocks).
size_t partial_offsets_bytes(const FwdParams& p, int32_t num_m_blocks);
void launch_partial_offsets(const FwdBlockLists& lists, const FwdParams& p, int32_t* offsets, cudaStream_t stream,
                            int32_t* slot_lists, int32_t slots);

}  // namespace flashmask
