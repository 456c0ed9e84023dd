// The payload writer of the sm90 backward (kTilesFromProducer kernels; warp kPayloadWriterWarp of the
// producer warpgroup): the masked tiles that the mask plan has no payload slot for (lists with more
// partial tiles than the pool's share, or a plan built without payloads: bwd_mask_payload.cuh) get
// theirs here, evaluated from the keys' column bounds into the tile's Q stage, so that the consumers
// read every masked tile's mask from a payload and their loop holds no second way of masking.
//
// Where the plan's slots cover every list of the CTA (the common case) the warp has nothing to do;
// else it walks the CTA's tiles as the producer does and, for each such tile, waits until the
// producer hands it the tile's stage (free of the consumers), writes the payload (lane l plays
// consumer threads l, l + 32, ...) and the tile record and makes the stage's one arrival, expecting
// the Q and LSE bytes of the copies that the producer issues without arriving. Those copies may
// complete first: the mbarrier's tx-count goes negative until the arrival, and the phase cannot
// complete before it.
//
// The hand-off barrier, not the stage's empty barrier, because a parity wait is exact only within
// one phase: the consumers may release the producer's tiles before this warp reaches them (it starts
// late, behind cover_cta's loads), and a wait on an already released stage would pass only at its
// next release, which needs this warp's next arrival. A stage's hand-off is at most one phase ahead
// of this warp: the producer hands the stage over again only after the consumers have released this
// warp's previous tile on it, which needed this warp's arrival.
#pragma once

#include <cutlass/arch/barrier.h>

#include "bwd_mask_payload.cuh"
#include "bwd_params.cuh"
#include "bwd_tiles.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits>
__device__ __forceinline__ void write_missing_payloads(const BwdKernelParams<Traits>& kp,
                                                       typename Traits::SharedStorage& smem,
                                                       typename Traits::Pipeline& pipeline_q, const bwd::KeyBlock& kb,
                                                       int32_t head_k, int32_t b) {
  static_assert(Traits::kTilesFromProducer, "payloads ride on the tiles the producer hands over");
  constexpr int kThreads = Traits::kConsumerThreads, kWords = Traits::kPayloadWords;
  constexpr int kRows = decltype(cute::size<0>(st_coord<Traits>(0)))::value;
  const BwdParams& p = kp.p;
  const bwd::Workspace& ws = kp.ws;
  // Nothing to write where the plan's slots cover the CTA (the common case): no walk then.
  if (BwdPayloadSlots::cover_cta<Traits::kBlockM, Traits::kBlockN>(p, ws, b, head_k, kb)) return;
  const int lane = threadIdx.x % 32;
  auto stage = cutlass::make_producer_start_state<typename Traits::Pipeline>();
  uint32_t handoff_phases = 0;  // bit s: the phase of stage s's hand-off this warp waits for next
  BwdPayloadSlots payload_slots;
  for_each_bwd_tile<Traits::kBlockM, Traits::kBlockN>(
      p, ws, b, head_k, kb, [&](int32_t head_q, int32_t row0, bool masked, int32_t partial_index) {
        if (masked && payload_slots.of(p, ws, b, head_q, kb, partial_index) < 0) {
          const int s = stage.index();
          smem.payload_handoff[s].wait((handoff_phases >> s) & 1u);
          handoff_phases ^= 1u << s;
          uint4* words = reinterpret_cast<uint4*>(smem.payload.data() + s * (Traits::kPayloadBytes / 4));
          CUTLASS_PRAGMA_NO_UNROLL  // rare tiles: small code at the warpgroup's 24 registers
          for (int t0 = 0; t0 < kThreads; t0 += 32) {
            const int t = t0 + lane;
            const auto coord = st_coord<Traits>(t % 128);
            MaskedRows rows[kRows];
            key_masked_rows(rows, coord, p, b, head_q, kb.first + t / 128 * Traits::kWGKeys, kb.end);
            uint32_t bits[kWords];
            payload_of_tile(bits, rows, coord, st_value_of<Traits>(), row0);
            // Lane 0 stores every word: the consumers' reads are ordered after the stores by lane 0's
            // arrival below, which compute-sanitizer's racecheck follows for the arriving thread's own
            // stores only (other lanes' stores, ordered by __syncwarp, it reports as races).
            CUTLASS_PRAGMA_UNROLL
            for (int w = 0; w < kWords; ++w) {
              CUTLASS_PRAGMA_UNROLL
              for (int l = 0; l < 32; l += 4) {
                const uint4 four{__shfl_sync(~0u, bits[w], l), __shfl_sync(~0u, bits[w], l + 1),
                                 __shfl_sync(~0u, bits[w], l + 2), __shfl_sync(~0u, bits[w], l + 3)};
                if (lane == 0) words[(w * kThreads + t0 + l) / 4] = four;
              }
            }
          }
          if (lane == 0) {
            smem.tiles[s] = BwdTile{row0, head_q, true};
            // A later tile's payload may reach this stage by bulk copy (async proxy), after these stores.
            cutlass::arch::fence_view_async_shared();
            cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(pipeline_q.producer_get_barrier(stage),
                                                                           Traits::kQBytes + Traits::kRowVecBytes);
          }
        }
        ++stage;
      });
}

}  // namespace sm90
}  // namespace flashmask
