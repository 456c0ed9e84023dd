// Mask payloads of the sm90 forward: the element mask of each partial tile, evaluated once per call
// (per mask slice, so every query head of the slice shares it) into bits laid out in the order of
// the consumers' S accumulators: bit v of word w of thread t says whether accumulator value
// 32 w + v of consumer thread t is masked. A partial tile then costs each consumer thread a
// kPayloadWords-word shared-memory read and one select per value, where evaluating the column
// intervals cost a 16-byte bound load per column and the interval tests per value
// (../element_mask.cuh), inside the softmax's critical path.
//
// The partial tiles of all lists are numbered by launch_partial_offsets (../preprocess.cuh);
// tile number `slot` < capacity has its payload at words[slot * kPayloadWords * kConsumerThreads],
// word w of thread t at [w * kConsumerThreads + t], so that one bulk copy brings a tile's payload
// into shared memory and the consumers' reads do not conflict. Tiles past the capacity (masks with
// far more partial tiles than payload_tiles_per_list() per query block) keep the column-interval path.
#pragma once

#include <algorithm>

#include <cute/tensor.hpp>

#include "flashmask/mask.h"
#include "../preprocess.cuh"
#include "../utils.cuh"
#include "fwd_layout.cuh"
#include "fwd_params.cuh"

namespace flashmask {
namespace sm90 {

// CTAs of kConsumerThreads threads take the payload slots in turn (slot_lists names each slot's
// list): per tile the kBlockN columns' bounds are staged in shared memory with one load per
// column, then thread t packs the bits of its accumulator values. One CTA per list, walking its
// tiles and loading a column's bounds per value, took 0.79 ms of a 3.2 ms forward at 32K document
// (H200): the query blocks that straddle two documents have every key block of both partial.
template <class Traits>
__global__ void __launch_bounds__(Traits::kConsumerThreads)
    mask_payload_kernel(FwdParams p, MaskSlices slices, FwdBlockLists lists, FwdMaskPayload payload,
                        int64_t num_lists, int32_t pack_shift) {
  using namespace cute;
  __shared__ ColumnBounds tile_columns[Traits::kBlockN];
  const int32_t num_slots = min(payload.partial_offsets[num_lists], payload.capacity);
  const int tidx = threadIdx.x;
  typename Traits::TiledMmaQK mma_qk;
  Tensor coords = mma_qk.get_thread_slice(tidx).partition_C(
      make_identity_tensor(select<0, 1>(typename Traits::TileShapeQK{})));
  const int32_t causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  for (int32_t slot = blockIdx.x; slot < num_slots; slot += gridDim.x) {
    const int64_t list = payload.slot_lists[slot];
    const int32_t i = slot - payload.partial_offsets[list];  // the list's i-th partial entry
    const int32_t slice = (int32_t)(list / lists.num_m_blocks), m_block = (int32_t)(list % lists.num_m_blocks);
    const int32_t b = slices.batch_of(slice);
    const int2 cols = lists.cols_of(b, entry_n_block(lists.entries[list * lists.num_n_blocks + i]), Traits::kBlockN,
                                    p.seqlen_k);
    const int32_t col0 = cols.x, col_end = cols.y;  // columns past the block are masked
    const int32_t row0 = lists.rows_of(b, m_block, Traits::kBlockM >> pack_shift, p.seqlen_q).x;
    __syncthreads();  // the previous tile's reads of tile_columns are done
    for (int c = tidx; c < Traits::kBlockN; c += Traits::kConsumerThreads) {
      ColumnBounds bounds{INT32_MAX, INT32_MAX, 0, 0};  // empty intervals
      if (lists.columns != nullptr && col0 + c < col_end) bounds = lists.columns[(int64_t)slice * p.seqlen_k + col0 + c];
      tile_columns[c] = bounds;
    }
    __syncthreads();
    uint32_t* out = payload.words + (int64_t)slot * Traits::kPayloadWords * Traits::kConsumerThreads;
    CUTLASS_PRAGMA_UNROLL
    for (int w = 0; w < Traits::kPayloadWords; ++w) {
      uint32_t bits = 0;
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < 32 && 32 * w + v < size(coords); ++v) {
        const int32_t r = get<0>(coords(32 * w + v)), c = get<1>(coords(32 * w + v));
        const int32_t row = row0 + (r >> pack_shift), col = col0 + c;
        if (col >= col_end || is_masked(row, col, tile_columns[c], p.causal, causal_off)) bits |= 1u << v;
      }
      out[w * Traits::kConsumerThreads + tidx] = bits;
    }
  }
}

template <class Traits>
void launch_mask_payload(const FwdParams& p, const FwdBlockLists& lists, const FwdMaskPayload& payload,
                         int32_t pack_shift, cudaStream_t stream) {
  const int64_t num_lists = (int64_t)MaskSlices::of(p).count() * lists.num_m_blocks;
  if (num_lists == 0 || payload.capacity == 0) return;
  // Enough CTAs to fill the GPU (eight per SM on 132 SMs); more would mostly find no slot.
  constexpr int32_t kMaxCtas = 1056;
  const unsigned grid = (unsigned)std::min<int32_t>(payload.capacity, kMaxCtas);
  mask_payload_kernel<Traits><<<grid, Traits::kConsumerThreads, 0, stream>>>(p, MaskSlices::of(p), lists, payload,
                                                                                  num_lists, pack_shift);
  FM_CHECK_LAUNCH("sm90::mask_payload_kernel");
}

// Sets the masked values of a partial tile's S accumulator to -inf from its payload in shared
// memory (`words`: the tile's kPayloadWords x kConsumerThreads words).
template <class Traits, class TS>
__device__ __forceinline__ void apply_payload_mask(TS& scores, const uint32_t* words, int tidx) {
  CUTLASS_PRAGMA_UNROLL
  for (int w = 0; w < Traits::kPayloadWords; ++w) {
    const uint32_t bits = words[w * Traits::kConsumerThreads + tidx];
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < 32 && 32 * w + v < cute::size(scores); ++v) {
      if ((bits >> v) & 1u) scores(32 * w + v) = -INFINITY;
    }
  }
}

}  // namespace sm90
}  // namespace flashmask
