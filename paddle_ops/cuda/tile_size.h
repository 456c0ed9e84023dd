// Tile shapes of the portable (sm80+) forward kernel: one pure function of the problem, so the
// workspace size, the mask preprocessing and the kernel instantiation always agree.
#pragma once

#include <cstdint>

namespace flashmask {

struct FwdTileSize {
  int32_t block_m;  // query rows per CTA
  int32_t block_n;  // key columns per iteration
  int32_t warps;    // warps per CTA, all split along the query rows (16 x k rows per warp)
};

// Why these shapes (measured on the H200, bf16): 4 warps x 128 rows keeps the 16-row-per-warp
// accumulators of D <= 128 in registers (acc_o 128 floats/thread at D=128) and 64 KB of smem
// (Q 32 KB + K 16 KB + V 16 KB), so two CTAs share an SM; each K/V tile then serves 128 query rows,
// which is what dense and causal attention need (D=128 8K causal: 357 TFLOP/s vs 300 with 64 rows).
// Masks given by startend_row_indices are sparse: the per-query-block lists are short and many
// tiles are partial, so 64-row CTAs (lower latency per CTA, 3-4 CTAs per SM, denser visited
// tiles; 16 rows per warp fit in 168 registers, so 3 CTAs per SM) win there at D=128 (8K causal
// document 216 vs 172 TFLOP/s, 32K 269 vs 263). D=256 uses 64 x 64 always:
// acc_o stays at 128 floats/thread and smem at 96 KB (two CTAs per SM).
constexpr FwdTileSize fwd_tile_size(int32_t head_dim, bool has_indices) {
  if (head_dim > 128) return FwdTileSize{64, 64, 4};
  if (head_dim > 64 && has_indices) return FwdTileSize{64, 64, 4};
  return FwdTileSize{128, 64, 4};
}

constexpr bool operator==(const FwdTileSize& a, const FwdTileSize& b) {
  return a.block_m == b.block_m && a.block_n == b.block_n && a.warps == b.warps;
}

}  // namespace flashmask
