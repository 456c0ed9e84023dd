// Document-aligned key blocks (key_blocks.cuh): one CTA per batch row scans the keys three times,
// in chunks: the prefix maximum of the rows each column sees (pass 1) and the suffix minimum (pass 2)
// find the document starts, pass 2 also each start's distance to the next one (which documents are
// long enough to restart a block), and pass 3 cuts the keys into blocks from the restarts.
#include "key_blocks.cuh"

#include <cub/block/block_scan.cuh>

#include "flashmask/check.h"
#include "flashmask/env.h"
#include "flashmask/mask.h"
#include "preprocess.cuh"
#include "utils.cuh"

namespace flashmask {
namespace {

constexpr int kThreads = 512;
constexpr int kItems = 4;  // columns per thread and chunk
constexpr int kChunk = kThreads * kItems;

// [first, end) of the rows that column `col` of batch row `b` shows to any mask head; (Sq, 0) when
// it shows none. A column hides at most two row intervals (MaskedRows, the causal diagonal being one).
__device__ int2 visible_row_hull(const FwdParams& p, int32_t b, int32_t col) {
  int32_t first = p.seqlen_q, end = 0;
  const int32_t causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  for (int32_t h = 0; h < p.mask_heads; ++h) {
    const int32_t* slice = p.mask_slice_at(int64_t(b) * p.mask_heads + h);
    const MaskedRows hidden = MaskedRows::of(load_column_bounds(slice, col, p.mask_form, p.seqlen_q), col, p.causal,
                                             causal_off);
    const int32_t lo = hidden.visible_from(0), hi = hidden.visible_until(p.seqlen_q);
    if (lo < hi) {
      first = min(first, lo);
      end = max(end, hi);
    }
  }
  return make_int2(first, end);
}

struct Min {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return min(a, b); }
};
struct Max {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return max(a, b); }
};

__global__ void __launch_bounds__(kThreads) document_key_blocks_kernel(FwdParams p, int32_t block_n, int32_t slots,
                                                                       int2* ranges, uint8_t* flags) {
  using Scan = cub::BlockScan<int32_t, kThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int32_t b = blockIdx.x, sk = p.seqlen_k;
  uint8_t* row_flags = flags + int64_t(b) * sk;
  int2* row_ranges = ranges + int64_t(b) * slots;

  // Pass 1: no column before `col` shows a row >= col.
  int32_t before_max = 0;
  for (int32_t c0 = 0; c0 < sk; c0 += kChunk) {
    int32_t ends[kItems], prior[kItems], chunk_max;
    for (int i = 0; i < kItems; ++i) {
      const int32_t col = c0 + threadIdx.x * kItems + i;
      ends[i] = col < sk ? visible_row_hull(p, b, col).y : 0;
    }
    Scan(temp).ExclusiveScan(ends, prior, 0, Max{}, chunk_max);
    for (int i = 0; i < kItems; ++i) {
      const int32_t col = c0 + threadIdx.x * kItems + i;
      if (col < sk) row_flags[col] = max(prior[i], before_max) <= col;
    }
    before_max = max(before_max, chunk_max);
    __syncthreads();  // temp is reused
  }

  // Pass 2, from the last key down: no column from `col` on shows a row < col (a document starts),
  // and the next start is at least block_n keys away (the document restarts a block).
  int32_t after_min = p.seqlen_q, next_start = sk;
  for (int32_t c0 = (sk - 1) / kChunk * kChunk; c0 >= 0; c0 -= kChunk) {
    int32_t firsts[kItems], from_here[kItems], starts[kItems], later[kItems], chunk_min, chunk_next;
    int32_t cols[kItems];
    for (int i = 0; i < kItems; ++i) {
      cols[i] = c0 + kChunk - 1 - (threadIdx.x * kItems + i);  // descending
      firsts[i] = cols[i] < sk ? visible_row_hull(p, b, cols[i]).x : p.seqlen_q;
    }
    Scan(temp).InclusiveScan(firsts, from_here, Min{}, chunk_min);
    __syncthreads();
    for (int i = 0; i < kItems; ++i) {
      const bool start = cols[i] < sk && (cols[i] == 0 || (row_flags[cols[i]] && min(from_here[i], after_min) >= cols[i]));
      starts[i] = start ? cols[i] : sk;
    }
    Scan(temp).ExclusiveScan(starts, later, sk, Min{}, chunk_next);
    for (int i = 0; i < kItems; ++i) {
      if (cols[i] >= sk) continue;
      const bool restart = cols[i] == 0 || (starts[i] < sk && min(later[i], next_start) - cols[i] >= block_n);
      row_flags[cols[i]] = restart;
    }
    after_min = min(after_min, chunk_min);
    next_start = min(next_start, chunk_next);
    __syncthreads();
  }

  // Pass 3: a block starts at every restart and every block_n keys after it.
  int32_t last_restart = 0, count = 0;
  for (int32_t c0 = 0; c0 < sk; c0 += kChunk) {
    int32_t restarts[kItems], latest[kItems], opens[kItems], index[kItems], chunk_last, chunk_count;
    for (int i = 0; i < kItems; ++i) {
      const int32_t col = c0 + threadIdx.x * kItems + i;
      restarts[i] = col < sk && row_flags[col] ? col : 0;
    }
    Scan(temp).InclusiveScan(restarts, latest, Max{}, chunk_last);
    __syncthreads();
    for (int i = 0; i < kItems; ++i) {
      const int32_t col = c0 + threadIdx.x * kItems + i;
      opens[i] = col < sk && (col - max(latest[i], last_restart)) % block_n == 0;
    }
    Scan(temp).ExclusiveSum(opens, index, chunk_count);
    for (int i = 0; i < kItems; ++i) {
      const int32_t col = c0 + threadIdx.x * kItems + i;
      if (opens[i] && count + index[i] < slots) row_ranges[count + index[i]].x = col;
    }
    last_restart = max(last_restart, chunk_last);
    count += chunk_count;
    __syncthreads();
  }

  // Each block ends where the next begins; a row needing more blocks than slots keeps fixed ones.
  int32_t* words = reinterpret_cast<int32_t*>(row_ranges);
  if (count > slots) {
    for (int32_t i = threadIdx.x; i < slots; i += kThreads) {
      const int32_t first = min(i * block_n, sk);
      row_ranges[i] = make_int2(first, min(first + block_n, sk));
    }
    return;
  }
  for (int32_t i = threadIdx.x; i < count; i += kThreads) words[2 * i + 1] = i + 1 < count ? words[2 * (i + 1)] : sk;
  for (int32_t i = count + threadIdx.x; i < slots; i += kThreads) row_ranges[i] = make_int2(0, 0);
}

size_t ranges_bytes(const FwdParams& p, int32_t block_n) {
  return align_up(sizeof(int2) * size_t(p.batch) * size_t(document_key_block_slots(p, block_n)));
}
size_t bounds_bytes(const FwdParams& p, int32_t block_n) {
  return align_up(sizeof(BlockBounds) * size_t(MaskSlices::of(p).count()) *
                  size_t(document_key_block_slots(p, block_n)));
}
size_t flags_bytes(const FwdParams& p) { return align_up(size_t(p.batch) * size_t(p.seqlen_k)); }

}  // namespace

bool document_key_blocks_apply(const BwdParams& p, bool rows_anchored) {
  if (!p.mask_form.has_indices() || p.seqlen_q != p.seqlen_k || p.block_mask != nullptr || p.dropout_p > 0.f)
    return false;
  const EnvSwitch forced = env_switch("FLASHMASK_BWD_DOCUMENT_BLOCKS");
  if (forced != EnvSwitch::kUnset) return forced == EnvSwitch::kOn;
  // Measured ahead at D = 128 (H200, 8K rows of documents). At D = 64, whose 128-row query tiles at
  // multiples of 128 the shifted key blocks cut less evenly, causal documents ran 1-2% slower: the
  // visited tile area grows there (kernel_bench's 8K causal documents, visible share 0.796 ->
  // 0.790), and shrinks once the tiles follow the key blocks' rows (0.829; document 0.880 -> 0.907).
  const int kernel_dim = cuda_kernel_head_dim(p.head_dim, p.head_dim_v);
  return kernel_dim == 128 || (kernel_dim == 64 && rows_anchored);
}

int32_t document_key_block_slots(const FwdParams& p, int32_t block_n) {
  const int32_t fixed = int32_t(ceil_div(p.seqlen_k, block_n));
  return fixed + (fixed + 3) / 4;
}

size_t document_key_blocks_bytes(const FwdParams& p, int32_t block_n) {
  return ranges_bytes(p, block_n) + bounds_bytes(p, block_n) + flags_bytes(p);
}

KeyBlocks carve_document_key_blocks(const FwdParams& p, int32_t block_n, const void* base) {
  const char* at = static_cast<const char*>(base);
  KeyBlocks k;
  k.slots = document_key_block_slots(p, block_n);
  k.ranges = reinterpret_cast<const int2*>(at);
  k.bounds = reinterpret_cast<const BlockBounds*>(at + ranges_bytes(p, block_n));
  return k;
}

KeyBlocks build_document_key_blocks(const FwdParams& p, int32_t block_n, void* base, cudaStream_t stream,
                                    bool with_bounds) {
  const KeyBlocks k = carve_document_key_blocks(p, block_n, base);
  if (p.seqlen_k == 0 || p.batch == 0) return k;
  uint8_t* flags = static_cast<uint8_t*>(base) + ranges_bytes(p, block_n) + bounds_bytes(p, block_n);
  document_key_blocks_kernel<<<unsigned(p.batch), kThreads, 0, stream>>>(p, block_n, k.slots,
                                                                          const_cast<int2*>(k.ranges), flags);
  FM_CHECK_LAUNCH("document_key_blocks_kernel");
  if (with_bounds) launch_range_bounds(p, k.ranges, k.slots, const_cast<BlockBounds*>(k.bounds), stream);
  return k;
}

}  // namespace flashmask
