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

// 8 warps everywhere. D=256 keeps a single Q/dO stage and 64-wide key blocks so the tile set fits
// the 163 KB shared-memory limit of sm80 (K, V, Q, dO, P, dS: 144 KB).
constexpr TileShape tile_shape(int head_dim) {
  return head_dim <= 128 ? TileShape{64, 128, 2} : TileShape{64, 64, 1};
}

constexpr bool supported_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

}  // namespace bwd
}  // namespace flashmask
