// The producer of the sm90 backward: one thread walks the CTA's tiles and issues every load. K and V
// of the CTA's key block once (their own transaction barrier, at the first visible tile), then for
// each tile the tile itself (BwdTile) and its mask payload where the plan has one (D <= 128), Q with
// its LSE row vector and dO with its D row vector into the kStages-deep rings, finally an
// end-of-sequence tile; the consumers release a stage once the wgmmas that read it have retired.
#pragma once

#include "bwd_mask_payload.cuh"
#include "bwd_params.cuh"
#include "bwd_tiles.cuh"
#include "bwd_traits.cuh"
#include "copy.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits>
__device__ __forceinline__ void produce_bwd_tiles(const BwdKernelParams<Traits>& kp,
                                                  typename Traits::SharedStorage& smem,
                                                  typename Traits::Pipeline& pipeline_q,
                                                  typename Traits::Pipeline& pipeline_do, const bwd::KeyBlock& kb,
                                                  int32_t head_k, int32_t b) {
  using namespace cute;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kD = Traits::kHeadDim;
  using BarrierType = typename Traits::Pipeline::ProducerBarrierType;
  const BwdParams& p = kp.p;
  const bwd::Workspace& ws = kp.ws;

  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutK{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Traits::SmemLayoutQ{});
  Tensor mQ = kp.tma_q.get_tma_tensor(make_shape(p.seqlen_q, p.head_dim, p.heads_q, p.batch));
  Tensor mdO = kp.tma_do.get_tma_tensor(make_shape(p.seqlen_q, p.head_dim_v, p.heads_q, p.batch));
  Tensor mK = kp.tma_k.get_tma_tensor(make_shape(p.seqlen_k, p.head_dim, p.heads_k, p.batch));
  Tensor mV = kp.tma_v.get_tma_tensor(make_shape(p.seqlen_k, p.head_dim_v, p.heads_k, p.batch));
  // The block's kBlockN rows from its first key: rows past its end are masked by the consumers (and
  // zero-filled past Sk by TMA).
  const auto block_rows = make_coord(kb.first, _0{});
  Tensor gK = local_tile(domain_offset(block_rows, mK(_, _, head_k, b)), Shape<Int<kBlockN>, Int<kD>>{}, make_coord(_0{}, _0{}));
  Tensor gV = local_tile(domain_offset(block_rows, mV(_, _, head_k, b)), Shape<Int<kBlockN>, Int<kD>>{}, make_coord(_0{}, _0{}));
  // (global, shared) TMA partitions of K and V (tuples: lambdas cannot capture structured bindings in C++17)
  auto tK = tma_partition(kp.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto tV = tma_partition(kp.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));

  bool kv_issued = false;
  auto write = cutlass::make_producer_start_state<typename Traits::Pipeline>();
  // Until the consumers have released the stage; the arrive is separate (below, or the payload
  // writer's).
  auto wait_until_free = [&] {
    while (pipeline_q.producer_try_acquire(write) != cutlass::BarrierStatus::WaitDone) {
    }
  };
  BwdPayloadSlots payload_slots;
  for_each_bwd_tile<kBlockM, kBlockN>(p, ws, b, head_k, kb, [&](int32_t head_q, int32_t row0, bool masked,
                                                                int32_t partial_index) {
    if (!kv_issued) {  // only CTAs with a visible tile load K and V (no load may outlive the CTA)
      smem.barrier_kv.arrive_and_expect_tx(2 * Traits::kKBytes);
      copy(kp.tma_k.with(reinterpret_cast<BarrierType&>(smem.barrier_kv), 0), get<0>(tK), get<1>(tK));
      copy(kp.tma_v.with(reinterpret_cast<BarrierType&>(smem.barrier_kv), 0), get<0>(tV), get<1>(tV));
      kv_issued = true;
    }
    // The tile's kBlockM rows from row0 (zero-filled past Sq by TMA).
    const auto tile_rows = make_coord(row0, _0{});
    Tensor gQ = local_tile(domain_offset(tile_rows, mQ(_, _, head_q, b)), Shape<Int<kBlockM>, Int<kD>>{},
                           make_coord(_0{}, _0{}));
    Tensor gdO = local_tile(domain_offset(tile_rows, mdO(_, _, head_q, b)), Shape<Int<kBlockM>, Int<kD>>{},
                            make_coord(_0{}, _0{}));
    auto [tQgQ, tQsQ] = tma_partition(kp.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    auto [tdOgdO, tdOsdO] =
        tma_partition(kp.tma_do, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));
    // Row vectors are padded past the last tile's rows (bwd_workspace.h): always kBlockM floats, from
    // a row0 at a multiple of 16 (16-byte aligned copies).
    const int64_t row = (int64_t(b) * p.heads_q + head_q) * ws.seqlen_q_pad + row0;
    const int stage = write.index();

    if constexpr (Traits::kTilesFromProducer) {
      // The tile rides on its Q stage: written once the stage is free, before the arrive that the
      // consumers' wait acquires. A masked tile without a payload slot is the payload writer's
      // (bwd_payload_writer.cuh): the free stage is handed to it, and it writes the tile and its
      // payload there and makes the stage's arrival, expecting the bytes of the copies below.
      const int32_t payload_slot = masked ? payload_slots.of(p, ws, b, head_q, kb, partial_index) : -1;
      wait_until_free();
      if (masked && payload_slot < 0) {
        smem.payload_handoff[stage].arrive();
      } else {
        smem.tiles[stage] = BwdTile{row0, head_q, masked};
        pipeline_q.producer_acquire(write, {cutlass::BarrierStatus::WaitDone});  // expects the Q bytes
        pipeline_q.producer_expect_transaction(write, Traits::kRowVecBytes);
        if (payload_slot >= 0) {
          pipeline_q.producer_expect_transaction(write, Traits::kPayloadBytes);
          bulk_copy_g2s(smem.payload.data() + stage * (Traits::kPayloadBytes / 4),
                        ws.payloads.words + int64_t(payload_slot) * (Traits::kPayloadBytes / 4), Traits::kPayloadBytes,
                        pipeline_q.producer_get_barrier(write));
        }
      }
    } else {
      pipeline_q.producer_acquire(write);
      pipeline_q.producer_expect_transaction(write, Traits::kRowVecBytes);
    }
    bulk_copy_g2s(smem.lse_log2.data() + stage * kBlockM, ws.lse_log2 + row, Traits::kRowVecBytes,
                  pipeline_q.producer_get_barrier(write));
    copy(kp.tma_q.with(*pipeline_q.producer_get_barrier(write), 0), tQgQ, tQsQ(_, stage));

    pipeline_do.producer_acquire(write);
    pipeline_do.producer_expect_transaction(write, Traits::kRowVecBytes);
    bulk_copy_g2s(smem.dpsum.data() + stage * kBlockM, ws.dpsum + row, Traits::kRowVecBytes,
                  pipeline_do.producer_get_barrier(write));
    copy(kp.tma_do.with(*pipeline_do.producer_get_barrier(write), 0), tdOgdO, tdOsdO(_, stage));
    ++write;
  });
  if constexpr (Traits::kTilesFromProducer) {
    // The end of the sequence: a stage with no bytes to wait for, so a plain arrive completes it.
    wait_until_free();
    smem.tiles[write.index()] = BwdTile{-1, 0, 0};
    cutlass::arch::ClusterBarrier::arrive(pipeline_q.producer_get_barrier(write));
  }
}

}  // namespace sm90
}  // namespace flashmask
