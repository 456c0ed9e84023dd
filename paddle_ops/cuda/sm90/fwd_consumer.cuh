// The consumer warpgroups of the sm90 forward: for each tile of this CTA (fwd_tiles.cuh) and each
// key block of its query block's list,
// S = Q K^T (wgmma, both operands in smem), the element mask on partial tiles only, the online
// softmax in fp32, and O += P V with P straight from registers (wgmma RS). The list is ordered
// partial-first (preprocess.cuh), so the mask is compiled into the first loop alone. With dropout
// (kDropout) each P is multiplied by its keep factor after the row sums took it in, before P V.
#pragma once

#include "../dropout_tile.cuh"
#include "../element_mask.cuh"
#include "../online_softmax.cuh"

#include "fwd_epilogue.cuh"
#include "fwd_layout.cuh"
#include "fwd_mask_payload.cuh"
#include "fwd_params.cuh"
#include "fwd_tiles.cuh"
#include "fwd_traits.cuh"

namespace flashmask {
namespace sm90 {

template <class Traits, bool kDropout>
__device__ __forceinline__ void consume_tiles(const FwdKernelParams<Traits>& kp,
                                              typename Traits::SharedStorage& smem,
                                              typename Traits::PipelineQ& pipeline_q,
                                              typename Traits::Pipeline& pipeline_k,
                                              typename Traits::Pipeline& pipeline_v,
                                              TilePipeline& pipeline_tiles) {
  using namespace cute;
  using Element = typename Traits::Element;
  using TileShapeQK = typename Traits::TileShapeQK;
  using TileShapePV = typename Traits::TileShapePV;
  const FwdParams& p = kp.p;
  const int tidx = threadIdx.x - 128;  // 0 .. kConsumerThreads-1

  typename Traits::TiledMmaQK mma_qk;
  typename Traits::TiledMmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(tidx);
  auto thr_pv = mma_pv.get_thread_slice(tidx);

  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQStages{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutVt{});
  Tensor tSrQ = thr_qk.partition_fragment_A(sQ);   // (MMA, MMA_M, MMA_K, Q stage)
  Tensor tSrK = thr_qk.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stage)
  Tensor tOrV = thr_pv.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stage)
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(select<0, 1>(TileShapeQK{})));

  Tensor acc_o = partition_fragment_C(mma_pv, select<0, 1>(TileShapePV{}));
  Tensor acc_s = partition_fragment_C(mma_qk, select<0, 1>(TileShapeQK{}));
  constexpr int kRows = decltype(size<0>(acc_rowcol(acc_o.layout())))::value;
  const int32_t causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  const bool has_columns = kp.lists.columns != nullptr;

  typename Traits::PipelineStateQ read_q;
  typename Traits::PipelineState read;  // stage of K_i, carried across this CTA's tiles
  const int32_t num_tiles = fwd_num_tiles(kp);
  cutlass::PipelineState<2> read_t;
  // A tile's output leaves through its Q stage (fwd_epilogue.cuh). Persistent CTAs return that
  // stage to the Q ring after the epilogue; the thread of each store that issued its TMA copy
  // arrives only once the store has read it, at the next tile's first wgmma wait (by then long
  // done), so that nobody waits for it.
  typename Traits::PipelineStateQ stored_q;
  bool store_pending = false;
  auto release_stored_q = [&]() {
    if (Traits::kPersistent && store_pending && issues_o_store<Traits>(tidx)) {
      cute::tma_store_wait<0>();
      pipeline_q.consumer_release(stored_q);
    }
    store_pending = false;
  };
  for (FwdTileWork work = first_work<Traits>(kp, smem.tile_ring, pipeline_tiles, read_t, num_tiles);
       work.index < num_tiles; work = next_work<Traits>(smem.tile_ring, pipeline_tiles, read_t, num_tiles)) {
    const FwdTile& tile = work.tile;
    const int32_t num_entries = work.num_entries, num_partial = work.num_partial;
    const int32_t* entries = kp.lists.entries + tile.list * kp.lists.num_n_blocks;
    const int32_t row0 = tile.row0;
    clear(acc_o);
    OnlineSoftmax<kRows, Traits::kSoftmaxChains, Traits::kRowMaxSlack> softmax(kp.scale_log2);

    pipeline_q.consumer_wait(read_q);
    const int q_stage = read_q.index();
    auto tSrQ_t = tSrQ(_, _, _, q_stage);
    // Intra-warpgroup overlap (FlashAttention-3): S_i = Q K_i^T and O += P_{i-1} V_{i-1} are
    // issued together; the softmax of S_i runs while the PV wgmma is still in flight, and O is
    // rescaled only after it retires. P_{i-1} lives in its own registers, so S_i can be
    // overwritten meanwhile.
    if (num_entries > 0) {
      typename Traits::PipelineState read_v;  // stage of V_{i-1}
      float correction[kRows];
      // Masks partial tile i (key block n_block), whose payload or column bounds sit in K stage
      // `stage` (read before its release).
      const int32_t first_slot = work.first_slot;
      auto mask_if = [&](int32_t i, int32_t n_block, int stage, auto partial) {
        if constexpr (decltype(partial)::value) {
          if (first_slot + i < kp.payload.capacity) {
            apply_payload_mask<Traits>(
                acc_s, smem.payload.data() + stage * Traits::kPayloadWords * Traits::kConsumerThreads, tidx);
          } else {
            // Columns past the key block are masked too (past Sk their K rows were zero-filled by
            // TMA; past a document block they are the next block's); the bounds of this tile's key
            // columns were staged with its K tile.
            const ColumnBounds* columns = has_columns ? smem.columns.data() + stage * Traits::kBlockN : nullptr;
            const int2 cols = kp.lists.cols_of(tile.b, n_block, Traits::kBlockN, p.seqlen_k);
            mask_partial_tile</*kSelect*/ false>(
                rowcol_view(acc_s), rowcol_view(tScS), cols.x, cols.y, p.causal,
                causal_off, [row0, shift = kp.pack_shift](int32_t tile_row) { return row0 + (tile_row >> shift); },
                [&](int32_t tile_col, bool in_range) {
                  ColumnBounds b{INT32_MAX, INT32_MAX, 0, 0};  // empty intervals
                  if (columns != nullptr && in_range) b = columns[tile_col];
                  return b;
                });
          }
        }
      };
      // First block: S_0, softmax, P_0.
      const int32_t entry0 = entries[0];
      pipeline_k.consumer_wait(read);
      wgmma</*zero*/ true, /*wait*/ 0, /*A regs*/ false>(mma_qk, tSrQ_t, tSrK(_, _, _, read.index()), acc_s);
      release_stored_q();
      if (num_partial > 0) mask_if(0, entry_n_block(entry0), read.index(), cute::true_type{});
      pipeline_k.consumer_release(read);
      softmax.step(rowcol_view(acc_s), correction);
      if constexpr (kDropout)
        apply_tile_dropout(acc_s, tScS, row0, entry_n_block(entry0) * Traits::kBlockN, tile.b, tile.head, p);
      Tensor p_frag = convert_fragment<Element>(acc_s);
      Tensor tOrP = make_tensor(p_frag.data(), acc_as_a_operand(acc_s.layout()));
      read_v = read;
      ++read;
      // Inlined also where dropout makes it long: an out-of-line body keeps S, P and O in local memory.
      auto visit = [&](int32_t i, auto partial) __attribute__((always_inline)) {
        // Loaded before the wgmmas are issued, used after they retire.
        const int32_t n_block = decltype(partial)::value || kDropout ? entry_n_block(entries[i]) : 0;
        pipeline_k.consumer_wait(read);
        wgmma</*zero*/ true, /*wait*/ -1, /*A regs*/ false>(mma_qk, tSrQ_t, tSrK(_, _, _, read.index()), acc_s);
        if constexpr (Traits::kRescaleBeforePv) {
          // O holds the blocks before i-1 at the max before P_{i-1}'s: the previous step's
          // correction brings it there while the QK wgmma runs.
          warpgroup_fence_operand(acc_o);
          decltype(softmax)::rescale(rowcol_view(acc_o), correction);
          warpgroup_fence_operand(acc_o);
        }
        pipeline_v.consumer_wait(read_v);
        wgmma</*zero*/ false, /*wait*/ -1, /*A regs*/ true>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), acc_o);
        warpgroup_wait<1>();  // S_i is ready (the older batch)
        warpgroup_fence_operand(acc_s);
        mask_if(i, n_block, read.index(), partial);
        pipeline_k.consumer_release(read);
        softmax.step(rowcol_view(acc_s), correction);
        if constexpr (kDropout) apply_tile_dropout(acc_s, tScS, row0, n_block * Traits::kBlockN, tile.b, tile.head, p);
        warpgroup_wait<0>();  // O += P_{i-1} V_{i-1} retired: P and O are free
        warpgroup_fence_operand(acc_o);
        pipeline_v.consumer_release(read_v);
        if constexpr (!Traits::kRescaleBeforePv) decltype(softmax)::rescale(rowcol_view(acc_o), correction);
        Tensor next = convert_fragment<Element>(acc_s);
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < size(p_frag); ++e) p_frag(e) = next(e);
        read_v = read;
        ++read;
      };
      int32_t i = 1;
      for (; i < num_partial; ++i) visit(i, cute::true_type{});
      for (; i < num_entries; ++i) visit(i, cute::false_type{});
      // Every QK wgmma has retired: Q's stage is free for this tile's output.
      if constexpr (!Traits::kPersistent) pipeline_q.consumer_release(read_q);
      // Last block's PV.
      if constexpr (Traits::kRescaleBeforePv) decltype(softmax)::rescale(rowcol_view(acc_o), correction);
      pipeline_v.consumer_wait(read_v);
      wgmma</*zero*/ false, /*wait*/ 0, /*A regs*/ true>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), acc_o);
      pipeline_v.consumer_release(read_v);
    } else {
      release_stored_q();
      if constexpr (!Traits::kPersistent) pipeline_q.consumer_release(read_q);
    }

    float lse[kRows];
    softmax.finish(rowcol_view(acc_o), p.softmax_scale, lse);
    // Dropout runs on fixed blocks only (fwd_document_blocks): no tile of it ends early.
    store_output<Traits, /*kMayEndEarly*/ !kDropout>(kp, acc_o, mma_pv, sQ, q_stage, lse, tile.row0, tile.row_end,
                                                      tile.head, tile.b, tidx);
    if constexpr (Traits::kPersistent) {
      if (!issues_o_store<Traits>(tidx)) pipeline_q.consumer_release(read_q);
      stored_q = read_q;
      store_pending = true;
    }
    ++read_q;
  }
  if (Traits::kPersistent && store_pending && issues_o_store<Traits>(tidx)) {
    cute::tma_store_wait<0>();  // the CTA's shared memory must outlive the last store's read
  }
}

}  // namespace sm90
}  // namespace flashmask
