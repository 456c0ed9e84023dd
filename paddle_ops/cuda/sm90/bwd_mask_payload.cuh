// Mask payloads of the sm90 backward: the element mask of each tile the consumers would mask
// (for_each_bwd_tile's masked_elements), evaluated once per mask plan into bits in the order of the
// consumers' S^T accumulators: bit v of word w of consumer thread t (both warpgroups,
// t < kConsumerThreads) says whether value 32 w + v of its S^T is masked. Word w of thread t of
// slot s lies at words[(s * kPayloadWords + w) * kConsumerThreads + t], so that the producer brings
// a tile's payload with its Q stage in one bulk copy and the consumers read it without bank
// conflicts; a partial tile then costs each consumer thread one shared-memory word per 32 values
// and a select per value, where evaluating its keys' column intervals took the bounds of every key
// in registers across all tiles and ~5 integer instructions per value inside the exp2 loop.
//
// The tiles depend on the mask slice and the key block only (not on the query head of a shared
// mask, nor on block_mask, whose dropped tiles keep their numbers: for_each_bwd_tile_of_head), so
// one CTA per (slice, key block) list numbers its tiles, takes that many consecutive slots from the
// plan's counter and writes their payloads. Tiles past the plan's slots (lists far above
// bwd_payload_tiles_per_list() partial tiles on average, or a plan without payloads) get theirs in
// the kernel, from the payload writer warp (bwd_payload_writer.cuh).
#pragma once

#include <stdexcept>
#include <string>

#include <cub/block/block_scan.cuh>
#include <cute/tensor.hpp>

#include "flashmask/mask.h"
#include "../accumulator_view.cuh"
#include "../bwd_tile_range.cuh"
#include "../utils.cuh"
#include "bwd_tiles.cuh"

namespace flashmask {
namespace sm90 {

// The masked rows of each key a consumer thread holds (rows counted from 0; MaskedRows). Keys past
// the key block's end (Sk, or the next document-aligned block's first key) mask every row.
template <int kRows, class TC>
__device__ __forceinline__ void key_masked_rows(MaskedRows (&rows)[kRows], TC const& coord, const BwdParams& p,
                                                int32_t b, int32_t head_q, int32_t key0, int32_t key_end) {
  const int32_t* indices = bwd::mask_slice_or_null(p, b, head_q);
  const int32_t causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kRows; ++i) {
    const int32_t key = key0 + cute::get<0>(coord(i, 0));
    const ColumnBounds bounds = key < key_end ? load_column_bounds(indices, key, p.mask_form, p.seqlen_q)
                                              : ColumnBounds{0, INT32_MAX, 0, 0};
    rows[i] = MaskedRows::of(bounds, key, p.causal, causal_off);
  }
}

// The payload of the tile of rows [row0, row0 + kBlockM) from the masked rows of the thread's keys:
// `coord` the (key, query) view of its S^T coordinates (rowcol_view), `value_of` the (key, query)
// layout of its S^T accumulator (acc_rowcol), whose values are the bits' indices.
template <int kWords, int kRows, class TC, class TV>
__device__ __forceinline__ void payload_of_tile(uint32_t (&bits)[kWords], const MaskedRows (&rows)[kRows],
                                                TC const& coord, TV const& value_of, int32_t row0) {
  CUTLASS_PRAGMA_UNROLL
  for (int w = 0; w < kWords; ++w) bits[w] = 0;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kRows; ++i) {
    const MaskedRows tile_rows = rows[i].relative_to(row0);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < cute::size<1>(coord); ++j) {
      const int v = value_of(i, j);
      bits[v / 32] |= uint32_t(tile_rows.contains(cute::get<1>(coord(i, j)))) << (v % 32);
    }
  }
}

// A consumer thread's S^T as its payload sees it: the (key, query) tile coordinates of its values
// (rowcol_view of the accumulator's partition) and their indices in the accumulator, the bits' order.
template <class Traits>
__device__ __forceinline__ auto st_coord(int tidx) {
  typename Traits::TiledMmaSdP mma;
  return rowcol_view(mma.get_thread_slice(tidx).partition_C(
      cute::make_identity_tensor(cute::Shape<cute::Int<Traits::kWGKeys>, cute::Int<Traits::kBlockM>>{})));
}
template <class Traits>
__device__ __forceinline__ auto st_value_of() {
  typename Traits::TiledMmaSdP mma;
  return acc_rowcol(
      partition_fragment_C(mma, cute::Shape<cute::Int<Traits::kWGKeys>, cute::Int<Traits::kBlockM>>{}).layout());
}

// The payload slot of each tile with masked_elements, in for_each_bwd_tile's order: the list's first
// slot (read once per query head) plus the tile's partial_index, or -1 past the plan's slots. The
// producer and the payload writer warp call it on the same walk, so they agree on every tile.
struct BwdPayloadSlots {
  // A list's first slot where it has none: all were taken before it, or it has no partial tile.
  static constexpr int32_t kNoneLeft = -1, kNoPartialTile = -2;
  int32_t head_q = -1, first = kNoneLeft;

  // The first slot of the (mask slice, key block) list of query head `head_q`, or < 0 (above).
  __device__ __forceinline__ static int32_t first_of(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                     int32_t head_q, const bwd::KeyBlock& kb) {
    return ws.payloads.first_slot[int64_t(ws.slices.index(p, b, head_q)) * ws.key_block_slots() + kb.index];
  }
  __device__ __forceinline__ int32_t of(const BwdParams& p, const bwd::Workspace& ws, int32_t b, int32_t head_q,
                                        const bwd::KeyBlock& kb, int32_t partial_index) {
    if (ws.payloads.first_slot == nullptr) return -1;
    if (head_q != this->head_q) {
      this->head_q = head_q;
      first = first_of(p, ws, b, head_q, kb);
    }
    return first >= 0 && first + partial_index < ws.payloads.capacity ? first + partial_index : -1;
  }
  // Whether every masked tile of the CTA (all query heads of KV head head_k) has a slot: each list
  // has room for every tile of its walk, at least its partial tiles.
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ static bool cover_cta(const BwdParams& p, const bwd::Workspace& ws, int32_t b,
                                                   int32_t head_k, const bwd::KeyBlock& kb) {
    if (ws.payloads.first_slot == nullptr) return false;
    const int32_t group = p.heads_q / p.heads_k;
    for (int32_t head_q = head_k * group; head_q < (head_k + 1) * group; ++head_q) {
      const int32_t tiles = BwdTileWalk<kBlockM, kBlockN>::of(p, ws, b, head_q, kb).tiles;
      const int32_t first = first_of(p, ws, b, head_q, kb);
      if (first == kNoPartialTile) continue;
      if (first < 0 || int64_t(first) + tiles > ws.payloads.capacity) return false;
    }
    return true;
  }
};

// One CTA of kConsumerThreads per (key block slot, mask slice); thread t plays consumer thread t.
// The list's tiles are classified kConsumerThreads at a time (a scan numbers the partial ones in
// order), then every thread writes its words of each partial tile of the chunk.
template <class Traits>
__global__ void __launch_bounds__(Traits::kConsumerThreads)
    bwd_mask_payload_kernel(BwdParams p, bwd::Workspace ws, int32_t* first_slots, uint32_t* words,
                            uint64_t* next_slot) {
  using namespace cute;
  constexpr int kThreads = Traits::kConsumerThreads, kWords = Traits::kPayloadWords;
  using Scan = cub::BlockScan<int32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int32_t chunk_tiles[kThreads];  // the first rows of the chunk's partial tiles, in order
  __shared__ int32_t first;
  const int32_t slice = blockIdx.y, b = ws.slices.batch_of(slice), head_q = ws.slices.first_head_q(p, slice);
  const int64_t list = int64_t(slice) * ws.key_block_slots() + blockIdx.x;
  const bwd::KeyBlock kb = bwd::key_block_of(p, ws, b, blockIdx.x, Traits::kBlockN);
  if (kb.empty()) {  // a document-aligned slot this batch row does not use
    if (threadIdx.x == 0) first_slots[list] = BwdPayloadSlots::kNoPartialTile;
    return;
  }
  const auto walk = BwdTileWalk<Traits::kBlockM, Traits::kBlockN>::of(p, ws, b, head_q, kb);
  auto partial = [&](int32_t t) {
    if (t >= walk.tiles) return false;
    const TileKind kind = walk.kind(p, t);
    return kind != TileKind::kMasked && walk.masked_elements(kind);
  };

  int32_t mine = 0, before = 0, count = 0;
  for (int32_t t = threadIdx.x; t < walk.tiles; t += kThreads) mine += partial(t);
  Scan(scan_storage).ExclusiveSum(mine, before, count);  // count: the list's total
  if (threadIdx.x == 0) {
    first = BwdPayloadSlots::kNoPartialTile;
    if (count > 0) {
      const uint64_t taken = atomicAdd(reinterpret_cast<unsigned long long*>(next_slot),
                                       static_cast<unsigned long long>(count));
      first = taken < uint64_t(ws.payloads.capacity) ? int32_t(taken) : BwdPayloadSlots::kNoneLeft;
    }
    first_slots[list] = first;
  }
  __syncthreads();  // first; scan_storage reusable
  if (first < 0) return;

  const auto coord = st_coord<Traits>(threadIdx.x % 128);
  const auto value_of = st_value_of<Traits>();
  MaskedRows rows[decltype(size<0>(coord))::value];
  key_masked_rows(rows, coord, p, b, head_q, kb.first + threadIdx.x / 128 * Traits::kWGKeys, kb.end);
  for (int32_t chunk = 0, slot0 = first; chunk < walk.tiles && slot0 < ws.payloads.capacity; chunk += kThreads) {
    const int32_t t = chunk + threadIdx.x;
    const bool is_partial = partial(t);
    int32_t index = 0, chunk_count = 0;
    Scan(scan_storage).ExclusiveSum(int32_t(is_partial), index, chunk_count);
    if (is_partial) chunk_tiles[index] = walk.row0(t);
    __syncthreads();
    for (int32_t i = 0; i < chunk_count && slot0 + i < ws.payloads.capacity; ++i) {
      uint32_t bits[kWords];
      payload_of_tile(bits, rows, coord, value_of, chunk_tiles[i]);
      CUTLASS_PRAGMA_UNROLL
      for (int w = 0; w < kWords; ++w) words[(int64_t(slot0 + i) * kWords + w) * kThreads + threadIdx.x] = bits[w];
    }
    slot0 += chunk_count;
    __syncthreads();  // chunk_tiles and scan_storage are reused by the next chunk
  }
}

// The plan's payloads, where it has any, must be laid out for this step shape (the plan key holds
// the shape's rows, so a mismatch is a bug, not a stale plan).
template <class Traits>
void require_payload_layout(const bwd::Workspace& ws, const char* who) {
  if (ws.payloads.first_slot != nullptr &&
      ws.payloads.words_per_tile != Traits::kPayloadWords * Traits::kConsumerThreads)
    throw std::runtime_error(std::string("flashmask ") + who + ": mask payloads laid out for another tile shape");
}

template <class Traits>
void launch_bwd_mask_payloads(const BwdParams& p, const bwd::Workspace& ws, uint64_t* next_slot,
                              cudaStream_t stream) {
  static_assert(Traits::kTilesFromProducer, "payloads ride on the tiles the producer hands over");
  require_payload_layout<Traits>(ws, "build_bwd_mask_payloads");
  const int32_t slots = ws.key_block_slots(), slices = ws.slices.count();
  if (slots == 0 || slices == 0) return;
  FM_CUDA_CHECK(cudaMemsetAsync(next_slot, 0, sizeof(uint64_t), stream));
  bwd_mask_payload_kernel<Traits><<<dim3(unsigned(slots), unsigned(slices)), Traits::kConsumerThreads, 0, stream>>>(
      p, ws, const_cast<int32_t*>(ws.payloads.first_slot), const_cast<uint32_t*>(ws.payloads.words), next_slot);
  FM_CHECK_LAUNCH("sm90::bwd_mask_payload_kernel");
}

}  // namespace sm90
}  // namespace flashmask
