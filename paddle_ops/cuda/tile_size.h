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

// Why these shapes: 4 warps x 128 rows keeps the 16-row-per-warp accumulators of D <= 128 in
// registers (acc_o 128 floats/thread at D=128) and 64 KB of smem (Q 32 KB + K 16 KB + V 16 KB),
// so 2-3 CTAs share an SM on A100/H100/H200; a 64-wide key block is also the granularity at which
// fully masked tiles are skipped. D=256 halves the query rows: acc_o stays at 128 floats/thread and
// smem at 96 KB (two CTAs per SM on H100/H200).
constexpr FwdTileSize fwd_tile_size(int32_t head_dim) {
  return head_dim <= 128 ? FwdTileSize{128, 64, 4} : FwdTileSize{64, 64, 4};
}

}  // namespace flashmask
