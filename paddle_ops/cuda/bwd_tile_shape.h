// Tile shapes of the portable (sm80+) backward: one pure function of the head dim, so the launcher,
// the workspace layout and the kernel traits can never disagree.
#pragma once

#include <cstdint>

namespace flashmask {
namespace bwd {

struct TileShape {
  int block_m;   // query rows per tile (the inner loop of the dK/dV kernel)
  int block_n;   // key columns per CTA; also the key-block size of the BlockBounds summary
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

}  // namespace bwd
}  // namespace flashmask
