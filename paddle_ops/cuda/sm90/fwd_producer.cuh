// The producer warp of the sm90 forward: one thread issues every TMA load. For each tile of this
// CTA (fwd_tiles.cuh): Q into its kQStages-deep ring, then K and V of each key block on the query
// block's list, in list order and each K one key block ahead of its V, into the kStages-deep rings;
// the consumers release a stage once their wgmma has read it, so a persistent CTA's next tile loads
// while this one finishes.
#pragma once

#include "copy.cuh"
#include "fwd_params.cuh"
#include "fwd_tiles.cuh"
#include "fwd_traits.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits>
__device__ __forceinline__ void produce_tiles(const FwdKernelParams<Traits>& kp,
                                              typename Traits::SharedStorage& smem,
                                              typename Traits::PipelineQ& pipeline_q,
                                              typename Traits::Pipeline& pipeline_k,
                                              typename Traits::Pipeline& pipeline_v,
                                              TilePipeline& pipeline_tiles) {
  using namespace cute;
  using TileShapeQK = typename Traits::TileShapeQK;
  const FwdParams& p = kp.p;

  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutKV{});
  Tensor mK = kp.tma_k.get_tma_tensor(make_shape(p.seqlen_k, p.head_dim, p.heads_k, p.batch));
  Tensor mV = kp.tma_v.get_tma_tensor(make_shape(p.seqlen_k, p.head_dim_v, p.heads_k, p.batch));

  auto write_q = cutlass::make_producer_start_state<typename Traits::PipelineQ>();
  // K and V of one key block share a stage index; K runs one key block ahead.
  auto write_k = cutlass::make_producer_start_state<typename Traits::Pipeline>();
  auto write_v = write_k;
  const int32_t num_tiles = fwd_num_tiles(kp);
  auto write_t = cutlass::make_producer_start_state<TilePipeline>();
  int32_t t = blockIdx.x;
  for (int32_t next; t < num_tiles; t = next) {
    next = claim_next_tile<Traits>(kp, num_tiles);
    const FwdTileWork work = fwd_tile_work(kp, t);
    publish_work<Traits>(smem.tile_ring, pipeline_tiles, write_t, work);
    const FwdTile& tile = work.tile;
    const int32_t head_k = tile.head / (p.heads_q / p.heads_k);
    Tensor gK = local_tile(mK(_, _, head_k, tile.b), select<1, 2>(TileShapeQK{}), make_coord(_, _0{}));
    Tensor gV = local_tile(mV(_, _, head_k, tile.b), select<1, 2>(TileShapeQK{}), make_coord(_, _0{}));
    auto [tKgK, tKsK] = tma_partition(kp.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                      group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(kp.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                      group_modes<0, 2>(gV));
    // K or V of key block n_block into stage write.index(): fixed blocks by their index, document
    // blocks (FwdBlockLists::col_ranges) from their first key: block 0's coordinates moved by it
    // along the key's basis in the TMA's coordinates (the key mode's stride in `m`: the TMA orders
    // its coordinates by the shared layout, head dim first, so the key is not basis 0).
    auto load_kv = [&](auto const& tma, auto const& m, auto const& tg, auto const& ts, auto& pipeline,
                       auto const& write, int32_t n_block) {
      auto* barrier = pipeline.producer_get_barrier(write);
      if (kp.lists.col_ranges == nullptr) {
        copy(tma.with(*barrier, 0), tg(_, n_block), ts(_, write.index()));
        return;
      }
      const int32_t col0 = kp.lists.cols_of(tile.b, n_block, Traits::kBlockN, p.seqlen_k).x;
      auto first = tg(_, 0);
      copy(tma.with(*barrier, 0), make_tensor(first.data() + col0 * stride<0>(m), first.layout()), ts(_, write.index()));
    };

    // Q first, before the list is read (every tile's consumers wait for and release their Q, also
    // on an empty list, so no load outlives the CTA).
    pipeline_q.producer_acquire(write_q);
    typename Traits::Element* q_stage = smem.q.data() + write_q.index() * cosize_v<typename Traits::SmemLayoutQ>;
    load_row_tile<Traits::kBlockM, Traits::kHeadDim>(&kp.q_rows, pipeline_q.producer_get_barrier(write_q), q_stage,
                                                     tile.row0, tile.head, tile.b);
    ++write_q;

    const int32_t* entries = kp.lists.entries + tile.list * kp.lists.num_n_blocks;
    const ColumnBounds* columns =
        kp.lists.columns != nullptr ? kp.lists.columns + (int64_t)tile.slice * p.seqlen_k : nullptr;
    const int32_t first_slot = work.first_slot;
    // K_i, then V_{i-1}: the order the consumers wait in (S_i is issued before P_{i-1} V_{i-1}). A
    // K stage frees at the S wait, a V stage only at the PV wait after the softmax, so K_i queued
    // behind V_{i-1} would wait for V's stage instead of its own.
    int32_t v_block = 0;  // key block of V_{i-1}
    for (int32_t i = 0; i <= work.num_entries; ++i) {
      int32_t n_block = 0;
      if (i < work.num_entries) {
        const int32_t entry = entries[i];
        n_block = entry_n_block(entry);
        pipeline_k.producer_acquire(write_k);  // arrives, expecting the K bytes (not yet issued)
        // A partial tile's mask rides on the K stage's barrier: its payload where it has one, else
        // its key columns' bounds. Expected before any copy is issued, so the phase cannot complete
        // early. (Partial entries come first, so i numbers the list's partial tiles.)
        if (entry_is_partial(entry) && first_slot + i < kp.payload.capacity) {
          pipeline_k.producer_expect_transaction(write_k, Traits::kPayloadBytes);
          bulk_copy_g2s(smem.payload.data() + write_k.index() * Traits::kPayloadWords * Traits::kConsumerThreads,
                        kp.payload.words + (int64_t)(first_slot + i) * Traits::kPayloadWords * Traits::kConsumerThreads,
                        Traits::kPayloadBytes, pipeline_k.producer_get_barrier(write_k));
        } else if (columns != nullptr && entry_is_partial(entry)) {
          const int2 cols = kp.lists.cols_of(tile.b, n_block, Traits::kBlockN, p.seqlen_k);
          const uint32_t bytes = (uint32_t)(cols.y - cols.x) * sizeof(ColumnBounds);
          pipeline_k.producer_expect_transaction(write_k, bytes);
          bulk_copy_g2s(smem.columns.data() + write_k.index() * Traits::kBlockN, columns + cols.x, bytes,
                        pipeline_k.producer_get_barrier(write_k));
        }
        load_kv(kp.tma_k, mK, tKgK, tKsK, pipeline_k, write_k, n_block);
        ++write_k;
      }
      if (i > 0) {
        pipeline_v.producer_acquire(write_v);
        load_kv(kp.tma_v, mV, tVgV, tVsV, pipeline_v, write_v, v_block);
        ++write_v;
      }
      v_block = n_block;
    }
  }
  publish_work<Traits>(smem.tile_ring, pipeline_tiles, write_t, FwdTileWork::none(t));  // no more tiles
}

}  // namespace sm90
}  // namespace flashmask
