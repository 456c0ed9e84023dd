// Document-aligned key blocks of the Hopper backward. A CTA of the backward owns one key block and
// visits every query tile that sees it. With key blocks at multiples of block_n, a block that
// straddles two packed documents visits the query tiles of both; restarting the blocks at every
// document start visits only its own document's (benchmarks/tile_efficiency.py counts the
// difference: 4-8% of the visited tile area on 8K rows of packed documents).
//
// Documents are found on the mask itself: key j starts a document where the square mask is block
// diagonal, i.e. no column before j sees a row >= j and no column from j on sees a row < j, for
// every mask head of the batch row. Blocks restart only at documents at least block_n keys long
// (shorter ones join the block before them), so each restart adds at most one block and the count
// stays below twice the fixed one; the plan has slots for the fixed count plus a quarter, and a
// batch row that would need more keeps the fixed blocks. Any partition of the keys into blocks of at
// most block_n is correct: alignment only changes which tiles are visited.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "flashmask/block.h"
#include "flashmask/params.h"

namespace flashmask {

// The key blocks of each batch row: ranges[b * slots + i] = (first key, end key) of block i, empty
// (first == end) for the unused slots; bounds[slice * slots + i] = the BlockBounds of that block's
// columns in mask slice `slice` (preprocess.cuh's MaskSlices). ranges == nullptr: fixed blocks.
struct KeyBlocks {
  const int2* ranges = nullptr;
  const BlockBounds* bounds = nullptr;
  int32_t slots = 0;
};

// Whether the backward of `p` runs on document-aligned key blocks: index masks on square problems
// without a block_mask (its blocks sit at multiples of 128) or dropout (its random bits are laid
// out per fixed block), at kernel head dim 128 (where they were measured ahead) and, where the
// query tiles follow each key block's rows (`rows_anchored`: sm90/bwd_tiles.cuh), at 64;
// FLASHMASK_BWD_DOCUMENT_BLOCKS=1 takes them at every head dim, =0 never.
bool document_key_blocks_apply(const BwdParams& p, bool rows_anchored);

// Slots per batch row for fixed blocks of block_n keys: their count plus a quarter.
int32_t document_key_block_slots(const FwdParams& p, int32_t block_n);

// Bytes of the ranges, the bounds and the builder's scratch; a multiple of 256.
size_t document_key_blocks_bytes(const FwdParams& p, int32_t block_n);

// Where the key blocks lie in `base` (document_key_blocks_bytes bytes); no launch.
KeyBlocks carve_document_key_blocks(const FwdParams& p, int32_t block_n, const void* base);

// Finds the documents of every batch row and writes the key blocks carved from `base`, with their
// bounds unless `with_bounds` is false (blocks used as query tiles need none), on `stream` (no host
// synchronisation).
KeyBlocks build_document_key_blocks(const FwdParams& p, int32_t block_n, void* base, cudaStream_t stream,
                                    bool with_bounds = true);

}  // namespace flashmask
