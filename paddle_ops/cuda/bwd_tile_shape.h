// Tile shapes of the backward, both paths, and the workspace grid they share: pure functions of the
// head dim, so that the launchers, the workspace layout (bwd_workspace.h), the mask plan and the
// kernel traits can never disagree.
#pragma once

#include <cstdint>

namespace flashmask {
namespace bwd {

// Portable (sm80+) backward.
struct TileShape {
  int block_m;   // query rows per tile (the inner loop of the dK/dV kernel)
  int block_n;   // key columns per CTA
  int q_stages;  // shared-memory stages of Q and dO (2: prefetch the next query tile)
};

// 8 warps everywhere; each shape fits sm80's 163 KB of shared memory (K, V, 2 stages of Q and dO,
// P, dS, row vectors, column bounds). Measured on the H200 (bf16, 8K, causal):
//   D=64:  128x128 (163 KB, exactly sm80's limit): 224 TFLOP/s vs 208 for 64x128;
//   D=128: 64x128 (163 KB): 283 TFLOP/s; 64x64 gave 200 (and lost on document masks too);
//   D=256: 64x64 with one Q/dO stage (144 KB): 234 TFLOP/s.
constexpr TileShape tile_shape(int head_dim) {
  return head_dim == 64 ? TileShape{128, 128, 2} : head_dim == 128 ? TileShape{64, 128, 2} : TileShape{64, 64, 1};
}

// Hopper (sm90a) backward (sm90/bwd_traits.cuh): query rows per step, 128 at D = 64, where a 64-row
// step's GEMMs are too small to cover its fixed cost (64-row steps: bwd TFLOP/s 0.91-1.00x on 8K
// rows of every mask, kernel_h100_bwd_d64_rows64_ab.json), 64 above (S^T, dP^T, dK, dV would not
// fit 240 registers at 128). The dropout kernel takes 64 at every D: at D = 64 its keep bits
// spilled 294 bytes at 128 rows, and causal document ran 115 -> 107 TFLOP/s (H200, bf16, 8K,
// p = 0.1). Keys per CTA: two consumer warpgroups of 64 keys each, or at D = 256, where they split
// the head dim, 64 keys shared.
constexpr int sm90_rows_per_step(int head_dim, bool dropout = false) {
  return !dropout && head_dim == 64 ? 128 : 64;
}
constexpr int sm90_keys_per_cta(int head_dim) { return head_dim > 128 ? 64 : 128; }
// The rows the Hopper backward's query tiles may start at when they follow each key block's first
// visible row (PlanLayout::row_align): multiples of 16, the rows of one wgmma warp in the dQ
// accumulator's layout (sm90/bwd_dq_layout.cuh), which makes a chunk from any such row one
// contiguous bulk reduce; the LSE and D rows' bulk copies then start 64-byte aligned.
constexpr int kSm90RowAlign = 16;

// The grid the workspace is laid out on, whichever path runs (the path is chosen per call, after
// the workspace and the plan are sized): rows padded to a multiple of every path's query tile, so
// that row vectors and the dQ accumulator are read and written in whole tiles without edge checks;
// block bounds summarised at the one key block both paths use.
struct WorkspaceGrid {
  int row_multiple;
  int block_n;
};

constexpr WorkspaceGrid workspace_grid(int head_dim) {
  const TileShape portable = tile_shape(head_dim);
  const int sm90_rows = sm90_rows_per_step(head_dim);
  return {portable.block_m > sm90_rows ? portable.block_m : sm90_rows, portable.block_n};
}

constexpr bool workspace_grid_serves_every_path(int head_dim) {
  const WorkspaceGrid g = workspace_grid(head_dim);
  return g.row_multiple % tile_shape(head_dim).block_m == 0 && g.row_multiple % sm90_rows_per_step(head_dim) == 0 &&
         g.row_multiple % sm90_rows_per_step(head_dim, /*dropout=*/true) == 0 && sm90_keys_per_cta(head_dim) == g.block_n;
}
static_assert(workspace_grid_serves_every_path(64) && workspace_grid_serves_every_path(128) &&
                  workspace_grid_serves_every_path(256),
              "every backward path must read the workspace on its own tiles");

}  // namespace bwd
}  // namespace flashmask
