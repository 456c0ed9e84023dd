// GPU mask preprocessing (see preprocess.cuh): per-key-block bounds, then per-query-block lists.
#include "preprocess.cuh"

#include <stdexcept>
#include <string>

#include <cub/block/block_scan.cuh>

#include "utils.cuh"

namespace flashmask {
namespace {

constexpr int kWarpsPerCta = 4;

__device__ __forceinline__ int32_t warp_min(int32_t v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int32_t warp_max(int32_t v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One warp per (slice, key block): lanes stride over the block's columns, then reduce. Key block
// n_block is columns [n_block * block_n, + block_n), or with `ranges` (key_blocks.cuh) the range
// of slot n_block of the slice's batch row, skipped when empty.
__global__ void __launch_bounds__(32 * kWarpsPerCta) block_bounds_kernel(FwdParams p, MaskSlices slices,
                                                                         int32_t block_n, int32_t num_n_blocks,
                                                                         BlockBounds* bounds, ColumnBounds* columns,
                                                                         const int2* ranges) {
  const int32_t n_block = blockIdx.x * kWarpsPerCta + threadIdx.x / 32;
  const int32_t slice = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (n_block >= num_n_blocks) return;
  const int32_t* indices = p.mask_form.has_indices() ? p.mask_slice_at(slice) : nullptr;
  int32_t col_begin = n_block * block_n;
  int32_t col_end = min(col_begin + block_n, p.seqlen_k);
  if (ranges != nullptr) {
    const int2 range = ranges[(int64_t)(slice / slices.heads) * num_n_blocks + n_block];
    if (range.x >= range.y) return;
    col_begin = range.x;
    col_end = range.y;
  }
  // Each lane starts from a real column of the block (the block is not empty).
  ColumnBounds* slice_columns = columns != nullptr ? columns + (int64_t)slice * p.seqlen_k : nullptr;
  const ColumnBounds first =
      load_column_bounds(indices, min(col_begin + lane, col_end - 1), p.mask_form, p.seqlen_q);
  if (slice_columns != nullptr && col_begin + lane < col_end) slice_columns[col_begin + lane] = first;
  BlockBounds s = BlockBounds::of_column(first);
  for (int32_t j = col_begin + lane + 32; j < col_end; j += 32) {
    const ColumnBounds c = load_column_bounds(indices, j, p.mask_form, p.seqlen_q);
    if (slice_columns != nullptr) slice_columns[j] = c;
    s.include(c);
  }
  BlockBounds r{warp_min(s.lts_min), warp_max(s.lts_max), warp_min(s.lte_min), warp_max(s.lte_max),
                warp_min(s.uts_min), warp_max(s.uts_max), warp_min(s.ute_min), warp_max(s.ute_max)};
  if (lane == 0) bounds[(int64_t)slice * num_n_blocks + n_block] = r;
}

// One warp per (slice, query block): classify 32 key blocks at a time (descending) and compact the
// visible ones with a ballot, partial tiles in a first pass and unmasked ones in a second. The
// blocks are lists' (FwdBlockLists::rows_of / cols_of): fixed, or document ranges.
__global__ void __launch_bounds__(32 * kWarpsPerCta) fwd_block_lists_kernel(FwdParams p, MaskSlices slices,
                                                                            int32_t block_m, int32_t block_n,
                                                                            FwdBlockLists lists,
                                                                            const BlockBounds* bounds,
                                                                            int32_t* entries, int32_t* counts) {
  const int32_t num_m_blocks = lists.num_m_blocks, num_n_blocks = lists.num_n_blocks;
  const int32_t m_block = blockIdx.x * kWarpsPerCta + threadIdx.x / 32;
  const int32_t slice = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (m_block >= num_m_blocks) return;
  const int32_t b = slices.batch_of(slice);
  const int2 rows = lists.rows_of(b, m_block, block_m, p.seqlen_q);
  const int32_t row_begin = rows.x, row_end = rows.y;
  const int32_t causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  const BlockBounds* slice_bounds = bounds + (int64_t)slice * num_n_blocks;
  const int64_t list = (int64_t)slice * num_m_blocks + m_block;
  int32_t* out = entries + list * num_n_blocks;
  int32_t count = 0, num_partial = 0;
  for (int pass = 0; pass < 2 && row_begin < row_end; ++pass) {  // 0: partial tiles, 1: unmasked tiles
    for (int32_t base = num_n_blocks - 1; base >= 0; base -= 32) {
      const int32_t n_block = base - lane;
      bool take = false;
      const int2 cols = n_block >= 0 ? lists.cols_of(b, n_block, block_n, p.seqlen_k) : make_int2(0, 0);
      if (cols.x < cols.y) {
        const int32_t col_begin = cols.x, col_end = cols.y;
        const TileKind kind = !p.block_kept_in_slice(slice, row_begin, col_begin)
                                  ? TileKind::kMasked
                                  : classify_tile(row_begin, row_end, col_begin, col_end,
                                                  slice_bounds[n_block], p.causal, causal_off);
        // A key block shorter than block_n (at Sk, or ending at a document) needs the element mask
        // for the columns past it that its tile loads.
        const bool partial = kind == TileKind::kPartial ||
                             (kind == TileKind::kUnmasked && col_end - col_begin < block_n);
        take = kind != TileKind::kMasked && partial == (pass == 0);
      }
      const unsigned ballot = __ballot_sync(0xffffffffu, take);
      if (take) out[count + __popc(ballot & ((1u << lane) - 1u))] = encode_block_entry(n_block, pass == 0);
      count += __popc(ballot);
    }
    if (pass == 0) num_partial = count;
  }
  if (lane == 0) {
    counts[2 * list] = count;
    counts[2 * list + 1] = num_partial;
  }
}

// __launch_bounds__ keeps ptxas at 64 registers: at 1024 threads more fail the launch.
constexpr int kScanThreads = 1024;

// One CTA: exclusive prefix sum of the partial counts (counts[2 * list + 1]) over every list, in
// chunks of kScanThreads lists, stored capped at `slots`; offsets[num_lists] = the capped total;
// with slot_lists, each of the first `slots` numbers gets its list.
__global__ void __launch_bounds__(kScanThreads) partial_offsets_kernel(const int32_t* counts, int64_t num_lists,
                                                                       int32_t* offsets, int32_t* slot_lists,
                                                                       int32_t slots) {
  // 64-bit sums: a mask may have more than 2^31 partial tiles (256 slices of 256K rows, mostly partial).
  using Scan = cub::BlockScan<int64_t, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  int64_t carried = 0;
  for (int64_t base = 0; base < num_lists; base += kScanThreads) {
    const int64_t list = base + threadIdx.x;
    const int32_t partial = list < num_lists ? counts[2 * list + 1] : 0;
    int64_t before = 0, chunk_total = 0;
    Scan(temp).ExclusiveSum(int64_t(partial), before, chunk_total);
    if (list < num_lists) {
      const int64_t first = carried + before;
      offsets[list] = (int32_t)min(first, (int64_t)slots);
      if (slot_lists != nullptr) {
        for (int32_t i = 0; i < partial && first + i < slots; ++i) slot_lists[first + i] = (int32_t)list;
      }
    }
    carried += chunk_total;
    __syncthreads();  // temp is reused by the next chunk
  }
  if (threadIdx.x == 0) offsets[num_lists] = (int32_t)min(carried, (int64_t)slots);
}

}  // namespace

size_t partial_offsets_bytes(const FwdParams& p, int32_t num_m_blocks) {
  return align_up(sizeof(int32_t) * ((size_t)MaskSlices::of(p).count() * (size_t)num_m_blocks + 1));
}

void launch_partial_offsets(const FwdBlockLists& lists, const FwdParams& p, int32_t* offsets,
                            cudaStream_t stream, int32_t* slot_lists, int32_t slots) {
  const int64_t num_lists = (int64_t)MaskSlices::of(p).count() * lists.num_m_blocks;
  if (num_lists == 0) return;
  partial_offsets_kernel<<<1, kScanThreads, 0, stream>>>(lists.counts, num_lists, offsets, slot_lists, slots);
  FM_CHECK_LAUNCH("partial_offsets_kernel");
}

namespace {
int32_t num_n_blocks_of(const FwdParams& p, int32_t block_n, bool documents) {
  return documents ? document_key_block_slots(p, block_n) : (int32_t)ceil_div(p.seqlen_k, block_n);
}
size_t list_entries_bytes(const FwdParams& p, int32_t block_m, int32_t block_n, bool documents) {
  return align_up(sizeof(int32_t) * (size_t)MaskSlices::of(p).count() *
                  (size_t)fwd_num_m_blocks(p, block_m, documents) * (size_t)num_n_blocks_of(p, block_n, documents));
}
size_t list_counts_bytes(const FwdParams& p, int32_t block_m, bool documents) {
  return align_up(2 * sizeof(int32_t) * (size_t)MaskSlices::of(p).count() *
                  (size_t)fwd_num_m_blocks(p, block_m, documents));
}
}  // namespace

int32_t fwd_num_m_blocks(const FwdParams& p, int32_t block_m, bool documents) {
  // Document blocks are cut from the keys' documents: square masks only (key_blocks.cuh).
  return documents ? document_key_block_slots(p, block_m) : (int32_t)ceil_div(p.seqlen_q, block_m);
}

size_t block_bounds_bytes(const FwdParams& p, int32_t block_n) {
  return align_up(sizeof(BlockBounds) * (size_t)MaskSlices::of(p).count() *
                  (size_t)ceil_div(p.seqlen_k, block_n));
}

size_t column_bounds_bytes(const FwdParams& p) {
  if (!p.mask_form.has_indices()) return 0;
  return align_up(sizeof(ColumnBounds) * (size_t)MaskSlices::of(p).count() * (size_t)p.seqlen_k);
}

size_t fwd_block_lists_workspace_bytes(const FwdParams& p, int32_t block_m, int32_t block_n, bool documents) {
  return block_bounds_bytes(p, block_n) + list_entries_bytes(p, block_m, block_n, documents) +
         list_counts_bytes(p, block_m, documents) + column_bounds_bytes(p);
}

void launch_block_bounds(const FwdParams& p, int32_t block_n, BlockBounds* bounds,
                         cudaStream_t stream, ColumnBounds* columns) {
  const MaskSlices slices = MaskSlices::of(p);
  const int32_t num_n_blocks = (int32_t)ceil_div(p.seqlen_k, block_n);
  if (num_n_blocks == 0) return;
  const dim3 grid((unsigned)ceil_div(num_n_blocks, kWarpsPerCta), (unsigned)slices.count());
  block_bounds_kernel<<<grid, 32 * kWarpsPerCta, 0, stream>>>(p, slices, block_n, num_n_blocks,
                                                               bounds, columns, nullptr);
  FM_CHECK_LAUNCH("block_bounds_kernel");
}

void launch_range_bounds(const FwdParams& p, const int2* ranges, int32_t slots, BlockBounds* bounds,
                         cudaStream_t stream) {
  const MaskSlices slices = MaskSlices::of(p);
  if (slots == 0 || p.seqlen_k == 0) return;
  const dim3 grid((unsigned)ceil_div(slots, kWarpsPerCta), (unsigned)slices.count());
  block_bounds_kernel<<<grid, 32 * kWarpsPerCta, 0, stream>>>(p, slices, /*block_n=*/0, slots, bounds,
                                                               nullptr, ranges);
  FM_CHECK_LAUNCH("block_bounds_kernel (ranges)");
}

FwdBlockLists carve_fwd_block_lists(const FwdParams& p, int32_t block_m, int32_t block_n, const void* base,
                                    const FwdDocumentBlocks* documents) {
  const bool docs = documents != nullptr;
  FwdBlockLists lists;
  lists.num_m_blocks = fwd_num_m_blocks(p, block_m, docs);
  lists.num_n_blocks = num_n_blocks_of(p, block_n, docs);
  if (docs) {
    lists.row_ranges = documents->rows.ranges;
    lists.col_ranges = documents->cols.ranges;
  }
  const char* at = static_cast<const char*>(base) + block_bounds_bytes(p, block_n);
  lists.entries = reinterpret_cast<const int32_t*>(at);
  at += list_entries_bytes(p, block_m, block_n, docs);
  lists.counts = reinterpret_cast<const int32_t*>(at);
  at += list_counts_bytes(p, block_m, docs);
  if (p.mask_form.has_indices()) lists.columns = reinterpret_cast<const ColumnBounds*>(at);
  return lists;
}

FwdBlockLists build_fwd_block_lists(const FwdParams& p, int32_t block_m, int32_t block_n, void* base,
                                    cudaStream_t stream, const FwdDocumentBlocks* documents) {
  // block_kept is asked once per tile: a tile must lie inside one block_mask block.
  if (p.block_mask != nullptr && (kBlockMaskSize % block_m != 0 || kBlockMaskSize % block_n != 0))
    throw std::runtime_error("flashmask build_fwd_block_lists: block_mask needs tiles dividing " +
                             std::to_string(kBlockMaskSize) + ", got " + std::to_string(block_m) + "x" +
                             std::to_string(block_n));
  const FwdBlockLists lists = carve_fwd_block_lists(p, block_m, block_n, base, documents);
  if (lists.num_m_blocks == 0) return lists;
  // The lists live in `base`, which the caller gave as writable memory.
  auto* bounds = static_cast<BlockBounds*>(base);
  auto* entries = const_cast<int32_t*>(lists.entries);
  auto* counts = const_cast<int32_t*>(lists.counts);
  // The fixed blocks' bounds come with the columns' normalised bounds; document blocks have their own.
  launch_block_bounds(p, block_n, bounds, stream, const_cast<ColumnBounds*>(lists.columns));
  const BlockBounds* list_bounds = documents != nullptr ? documents->cols.bounds : bounds;
  const MaskSlices slices = MaskSlices::of(p);
  const dim3 grid((unsigned)ceil_div(lists.num_m_blocks, kWarpsPerCta), (unsigned)slices.count());
  fwd_block_lists_kernel<<<grid, 32 * kWarpsPerCta, 0, stream>>>(p, slices, block_m, block_n, lists, list_bounds,
                                                                  entries, counts);
  FM_CHECK_LAUNCH("fwd_block_lists_kernel");
  return lists;
}

}  // namespace flashmask
