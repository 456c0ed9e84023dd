// Compile-time shape of the Hopper (sm90a) backward: tiles, warpgroups, shared-memory layouts, the
// wgmma tiled MMAs and the TMA copy types, read by the producer, the consumers and the launcher.
//
// One CTA per (key block of kBlockN keys, head_k, batch): a producer warpgroup streams Q and dO
// tiles of kBlockM query rows (bwd::sm90_rows_per_step; with their LSE and D = rowsum(dO * O) rows) through
// kStages-deep TMA rings to two consumer warpgroups. Every GEMM is a 64-row wgmma per warpgroup,
// S and dP are computed transposed (keys as rows, "swapAB"):
//   S^T  = K_w Q^T        (SS)           dP^T = V_w dO^T      (SS)
//   P^T  = exp2(S^T * scale_log2 - LSE)  dS^T = P^T (dP^T - D)  (registers, fp32)
//   dV_w += P^T dO[:, cols_w]   (RS: P^T from registers, dO^T an MN-major view of the dO tile)
//   dK_w += dS^T Q[:, cols_w]   (RS)
//   dQ[dq_rows_w, dq_cols_w] += dS[dq_rows_w, :] K[:, dq_cols_w]   (SS: dS of all kBlockN keys from
//                                                                     shared memory)
// where warpgroup w owns keys_w x cols_w of dK and dV and half of dQ's kBlockM x D tile: its 64 rows
// in 128-row steps (D = 64), else its half of the columns (kDqRows, kDqCols below).
// P and dS never leave registers for dV/dK.
//  - D <= 128: kBlockN = 128 keys, keys_w = [64w, 64w + 64), cols_w = all D. dQ over all 128 keys
//    needs the other warpgroup's dS (kDsExchange): dS is exchanged through shared memory (a barrier
//    of both warpgroups per step) and each step adds kBlockM x D fp32 to the workspace once. Private
//    partials (dQ over the warpgroup's own keys and all columns, no barrier, each added to the
//    workspace) lost 2-6% at D = 128 and, since D = 64 runs 128-row steps, 2-7% there: under the
//    700 W cap their second reduce-add per step cost 3-7% of clock
//    (kernel_h200_bwd_d64_exchange_ab.json). dQ leaves through shared memory by one bulk
//    reduce-add per warpgroup and step.
//    Registers per consumer thread at D=128: dK, dV 64 + 64, S^T and dP^T 32 + 32, a dQ chunk 32;
//    at D=64 (128-row steps): dK, dV 32 + 32, S^T and dP^T 64 + 64, dQ 32.
//  - D = 256 (kSplitHeadDim): dK + dV of 64 keys x 256 would be 256 fp32 registers per thread, so
//    kBlockN = 64 keys shared by both warpgroups and cols_w = dq_cols_w = [128w, 128w + 128). Each
//    computes the whole S^T and dP^T (K = 256) itself: 7 GEMM units per step instead of 5, but no
//    exchange. Shared memory (K, V, two Q and dO stages, 4 dS buffers: 224 KB) leaves no room to
//    stage dQ: float4 atomics.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/builders/sm90_common.inl>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "../bwd_tile_shape.h"
#include "bwd_tiles.cuh"
#include "copy.cuh"

namespace flashmask {
namespace sm90 {

using namespace cute;

// Query rows per step and keys per CTA: ../bwd_tile_shape.h, with the portable backward's and the
// workspace grid both paths share.
template <typename Element_, int kHeadDim_, int kBlockM_ = bwd::sm90_rows_per_step(kHeadDim_), int kStages_ = 2>
struct BwdTraits {
  using Element = Element_;
  using ElementAccum = float;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumerWGs = 2;
  static constexpr bool kSplitHeadDim = kHeadDim > 128;  // warpgroups split D, not the keys (above)
  static constexpr int kWGKeys = 64;                      // the wgmma M of S^T, dP^T, dK, dV
  static constexpr int kBlockM = kBlockM_;  // query rows per step
  static constexpr int kBlockN = kSplitHeadDim ? kWGKeys : kWGKeys * kConsumerWGs;  // keys per CTA
  static_assert(kBlockN == bwd::sm90_keys_per_cta(kHeadDim), "keys per CTA as ../bwd_tile_shape.h has them");
  static constexpr int kWGCols = kSplitHeadDim ? kHeadDim / kConsumerWGs : kHeadDim;  // of dK, dV
  static constexpr bool kDsExchange = !kSplitHeadDim;  // keys_w differ: dQ needs both dS (above)
  // dS goes to shared memory before dV is issued, so its stores drain while the dV wgmma issues and
  // the fence before the dS barrier finds them done (cuDNN-frontend's order): bwd TFLOP/s +2-3% on
  // 32K causal, document and sliding window at D = 128, 8K within noise. At D = 64 (128-row steps)
  // it once lost 4-5% on 8K causal document and share question; since the stmatrix addresses are
  // computed once per CTA it leads on every row (H100, steady state, 8K causal 466 -> 475, causal
  // document 285 -> 290, 32K document 474 -> 483; Nsight Compute: 2.2-2.9% fewer cycles;
  // kernel_h100_bwd_d64_ds_before_dv_ab.json; dropout's 64-row steps not measured). The head-dim
  // split (D = 256, its own dQ path) keeps dS after dV.
  static constexpr bool kDsBeforeDv = !kSplitHeadDim;
  static constexpr bool kDqViaSmem = !kSplitHeadDim;    // else float4 atomics (no smem left)
  // The producer hands the tiles to the consumers (bwd_tiles.cuh) at D <= 128; at D = 256 every warp
  // walks the sequence itself: handing them over there cost 4-7% (H200, bf16, 8K, bwd TFLOP/s:
  // causal 337 -> 313, share question 218 -> 205), for a classification its 7-GEMM steps dwarf.
  static constexpr bool kTilesFromProducer = !kSplitHeadDim;
  static constexpr int kStages = kStages_;
  // dQ over all kBlockN keys, in chunks of kDqRows x kDqCols (the wgmma M x N), kDqChunks per
  // warpgroup: chunk c covers rows (c / kDqColChunks) * kDqRows and columns (c % kDqColChunks) *
  // kDqCols on. 128-row steps (D = 64) split the rows between the warpgroups, each chunk one m64n64
  // GEMM over its 64 rows of dS; split by columns, each warpgroup ran two m64n32 GEMMs over all 128
  // rows, whose operands need 1.5x the shared-memory bandwidth the tensor cores' rate allows
  // (bwd TFLOP/s +3-5% by rows, kernel_h200_bwd_dq_rows_ab.json). 64-row steps split the columns.
  static constexpr int kDqRows = 64;
  static constexpr int kDqCols = cute::min(64, kHeadDim * (kBlockM / kDqRows) / kConsumerWGs);
  static constexpr int kDqColChunks = kHeadDim / kDqCols;
  static constexpr int kDqChunksTotal = kBlockM / kDqRows * kDqColChunks;
  static constexpr int kDqChunks = kDqChunksTotal / kConsumerWGs;
  static constexpr int kDqChunkElems = kDqRows * kDqCols;
  static_assert(kBlockM % kDqRows == 0 && kDqChunks * kConsumerWGs == kDqChunksTotal,
                "dQ chunks split evenly between the warpgroups");
  // One dQ chunk per warpgroup through shared memory (D <= 128): dQ can be issued before dK and
  // leave through the dQ writer warp while dK runs (bwd_consumer.cuh, bwd_dq_writer.cuh).
  static constexpr bool kCanWriteDqUnderDk = kDqViaSmem && kDqChunks == 1;
  // Where dQ goes under dK, the next tile's S^T is issued behind dK too (bwd_consumer.cuh), so the
  // next step finds it retired instead of issuing it once dK has drained (H200, processes
  // alternating, bwd TFLOP/s: 8K causal +2%, document +1-2%, D = 64 causal +4%, few-tile CTAs level;
  // kernel_h200_bwd_next_st_ab.json). Its dP^T as well spilled and lost 2-4%. At D = 64 each step
  // issues its own S^T at its top again: since dS is stored before dV from addresses computed once,
  // that leads there (H100, steady state, 8K bwd TFLOP/s +0.6-1.2% on causal, causal document and
  // document, kernel_h100_bwd_d64_st_at_top_ab.json; Nsight Compute 0.5-0.8% fewer cycles).
  static constexpr bool kNextStUnderDk = kCanWriteDqUnderDk && kTilesFromProducer && kHeadDim != 64;
  // At D = 128 the consumers read their query rows' LSE and D into registers before waiting for
  // S^T and dP^T, taking their shared-memory latency off the path from each wait to the exp2 / FMA
  // (H200, processes alternating, bwd TFLOP/s: 32K document +2-11% in five pairings, 32K causal,
  // prefix-LM causal and share question -0.6 to -1.2%, 8K rows within 1%;
  // kernel_h200_row_vectors_rescale_ab.json, kernel_h200_bwd_lsed_confirm_ab.json). LSE
  // alone lost 1-2% on most rows; at D = 64 the 64 extra registers of its 128-row steps spill
  // (-7.5%); D = 256 was not measured.
  static constexpr bool kRowVectorsEarly = kHeadDim == 128;
  // Warps of the producer warpgroup: 0 the producer thread, 1 .. kConsumerWGs the dQ writers
  // (bwd_dq_writer.cuh), then the payload writer (bwd_payload_writer.cuh).
  static constexpr int kPayloadWriterWarp = 1 + kConsumerWGs;
  static_assert(kPayloadWriterWarp < 4, "the payload writer is a warp of the producer warpgroup");
  static constexpr int kConsumerThreads = 128 * kConsumerWGs;
  static constexpr int kThreads = 128 + kConsumerThreads;
  // One CTA per SM (196 KB of smem at D=128, 199 KB at 64, 226 KB at 256). A 64-key,
  // one-warpgroup variant with two CTAs per SM was slower on every mask measured (H200, bf16,
  // D = 128, bwd TFLOP/s: 8K causal 382 -> 293, causal document 194 -> 172, 32K causal 445 -> 326).
  static constexpr int kMinBlocksPerSM = 1;
  // At D = 64 the producer warpgroup's warps (producer, dQ writers, payload writer) spilled 344 bytes
  // at 24 registers; at 32, 216 bytes, and the consumers' code at 232 is the same as at 240 (H100,
  // bf16 8K: Nsight Compute 1.1-1.2% fewer cycles on causal and document, steady-state bwd TFLOP/s
  // +0.3-1.0%, kernel_h100_bwd_d64_producer_regs_ab.json). At D = 128 ptxas serialises the
  // consumers' wgmmas at 232 (C7512); D = 256 was not tried.
  static constexpr int kProducerRegs = kHeadDim == 64 ? 32 : 24;
  static constexpr int kConsumerRegs = kHeadDim == 64 ? 232 : 240;
  static constexpr int kEntryRegs = (65536 / kThreads) / 8 * 8;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= kEntryRegs * kThreads,
                "setmaxnreg budgets exceed the registers the CTA holds");

  // Per consumer warpgroup.
  using TileShapeSdP = Shape<Int<kWGKeys>, Int<kBlockM>, Int<kHeadDim>>;  // S^T = K_w Q^T
  using TileShapedKV = Shape<Int<kWGKeys>, Int<kWGCols>, Int<kBlockM>>;   // dV_w += P^T dO[:, cols_w]
  using TileShapedQ = Shape<Int<kDqRows>, Int<kDqCols>, Int<kBlockN>>;  // a dQ chunk
  using OneWG = Layout<Shape<_1, _1, _1>>;

  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, ElementAccum, TileShapeSdP>(), OneWG{}));
  using TiledMmadKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, ElementAccum, TileShapedKV, GMMA::Major::K,
                           GMMA::Major::MN>(),
      OneWG{}));
  using TiledMmadQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, ElementAccum, TileShapedQ, GMMA::Major::MN,
                           GMMA::Major::MN>(),
      OneWG{}));

  // K, V: [kBlockN, D] K-major, resident. Q, dO: [kBlockM, D] K-major, kStages ring.
  using SmemAtomK = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                             GMMA::Major::K, Element, Int<kBlockN>, Int<kHeadDim>>());
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // K^T [D, kBlockN]: the same bytes, the B operand (MN-major) of dQ = dS K.
  using SmemLayoutKt = decltype(composition(
      SmemLayoutK{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Step<_2, _1>{})));
  using SmemAtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                             GMMA::Major::K, Element, Int<kBlockM>, Int<kHeadDim>>());
  using SmemLayoutQ = decltype(tile_to_shape(
      SmemAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  // Q^T / dO^T [D, kBlockM, stage]: the B operands (MN-major) of dK and dV.
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{},
                                         Step<_2, _1, _3>{})));
  // dS [kBlockM, kBlockN, buffer]: the A operand of dQ, query-contiguous (MN-major) so that a
  // consumer's dS^T registers (adjacent queries of a key) store by stmatrix; each warpgroup writes
  // its keys' columns. Double-buffered: a warp may write step i+1's dS while another still reads
  // step i's (a pair per warpgroup at D = 256, where the warpgroups' keys coincide).
  static constexpr int kDsBuffers = kSplitHeadDim ? 2 * kConsumerWGs : 2;
  using SmemAtomdS = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                              GMMA::Major::MN, Element, Int<kBlockM>, Int<kBlockN>>());
  using SmemLayoutdS =
      decltype(tile_to_shape(SmemAtomdS{}, Shape<Int<kBlockM>, Int<kBlockN>, Int<kDsBuffers>>{}));

  using GmemTensor = TmaGmemTensor<Element const>;
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutQ{}),
                                      Shape<Int<kBlockM>, Int<kHeadDim>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutK{},
                                      Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{}));
  // dK and dV leave through the K and V tiles' shared memory (free once every wgmma has retired):
  // stmatrix from the accumulators, then one TMA store each, which also clips keys past Sk.
  using TmaStoreK = decltype(make_tma_copy(SM90_TMA_STORE{}, TmaGmemTensor<Element>{}, SmemLayoutK{},
                                           Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{}));
  using SmemCopyAtomdKV = Copy_Atom<SM90_U32x4_STSM_N, Element>;

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kRowVecBytes = kBlockM * sizeof(float);  // LSE or D of one Q tile
  // A partial tile's mask payload (bwd_mask_payload.cuh): one bit per S^T value of each consumer thread.
  static constexpr int kPayloadWords = kWGKeys * kBlockM / 128 / 32;
  static constexpr uint32_t kPayloadBytes = kPayloadWords * kConsumerThreads * sizeof(uint32_t);

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> v;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> dout;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutdS>, 1024> ds;
    // Each warpgroup's dQ partial of one step in the dq_accum tile's layout, bulk-reduced into
    // global memory.
    cute::array_aligned<float, kDqViaSmem ? kDqChunksTotal * kDqChunkElems : 4, 128> dq;
    cute::array_aligned<float, kBlockM * kStages, 16> lse_log2;  // rides on the Q stage
    cute::array_aligned<float, kBlockM * kStages, 16> dpsum;     // rides on the dO stage
    cute::array_aligned<BwdTile, kStages, 16> tiles;             // rides on the Q stage (kTilesFromProducer)
    // The tile's mask payload, where it has one: rides on the Q stage (kTilesFromProducer).
    cute::array_aligned<uint32_t, kTilesFromProducer ? kPayloadBytes / 4 * kStages : 4, 128> payload;
    typename Pipeline::SharedStorage pipeline_q;
    typename Pipeline::SharedStorage pipeline_do;
    cutlass::arch::ClusterTransactionBarrier barrier_kv;
    // Per Q stage: the producer hands a free stage to the payload writer (bwd_payload_writer.cuh).
    cutlass::arch::ClusterBarrier payload_handoff[kStages];
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm90 CTA may take");
};

}  // namespace sm90
}  // namespace flashmask
