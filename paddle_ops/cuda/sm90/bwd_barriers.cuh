// The named barriers of the sm90 backward, in one place. Ids are CUTLASS NamedBarrier ids: the
// hardware id is id + ReservedNamedBarrierCount (8), so 0..7 are ours.
#pragma once

#include <cstdint>

namespace flashmask {
namespace sm90 {

// Both consumer warpgroups (256 threads).
constexpr uint32_t kBarrierDkdvStaged = 0;  // the other warpgroup's wgmmas retired / dK, dV staged
constexpr uint32_t kBarrierDsReady = 1;     // dS of both warpgroups is in shared memory (D <= 128)
// One consumer warpgroup (128 threads): its stores to shared memory (its dS, its dQ) are done.
constexpr uint32_t kBarrierWarpgroup = 2;   // + w
// A consumer warpgroup and its dQ writer warp (128 + 32 threads).
constexpr uint32_t kBarrierDqEmpty = 4;     // + w: w may write its dQ buffer
constexpr uint32_t kBarrierDqFull = 6;      // + w: w's dQ buffer holds this step's partial
constexpr int kDqHandshakeThreads = 128 + 32;
static_assert(kBarrierDqFull + 1 < 8, "CUTLASS leaves 8 named barriers to the kernel");

}  // namespace sm90
}  // namespace flashmask
