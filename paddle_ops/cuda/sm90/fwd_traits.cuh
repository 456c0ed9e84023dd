// Compile-time shape of the Hopper (sm90a) forward: tiles, warpgroups, shared-memory layouts, the
// two wgmma tiled MMAs and the TMA copy types. One struct, read by the mainloop, the epilogue and
// the launcher, so that they always agree.
//
// Shapes (fwd_launch_template.cuh picks one per call):
// - 128 x 128, two consumer warpgroups (64 rows each, the wgmma M), one CTA per SM: Q (32 KB at
//   D=128) resident, K and V in kStages-deep TMA rings (2 x 32 KB each): 160 KB, 169 KB with the
//   stages' mask payloads and column bounds. Per consumer thread at D=128: S 64 + O 64 + P 32
//   registers, inside the 240 of setmaxnreg. Dense and causal.
// - 192 x 128 at D=64, three consumer warpgroups, one CTA per SM: Q 24 KB, K and V rings 2 x 16 KB
//   each: 88 KB (99 KB with the mask stages); S 64 + O 32 + P 32 registers of the 160 a consumer
//   thread gets. Dense and causal.
// - 128 x 64 at D=256: Q 64 KB, K and V rings 2 x 2 x 32 KB: 192 KB (197 KB with the mask stages);
//   O 128 + S 32 + P 16 registers.
// - 64 x 64, one consumer warpgroup, two CTAs per SM (84 KB smem at D=128 with the mask stages,
//   32768 registers each): for sparse index masks, whose short block lists leave a lone CTA idle in
//   its prologue/epilogue. Persistent variant (Q double-buffered, 100 KB) for causal index masks.
// - 128 x 128 persistent (D <= 128): Q double-buffered (64 KB at D=128) beside the K and V rings:
//   201 KB with the mask stages, so that the next tile's Q and first K/V loads overlap this tile's
//   last blocks and epilogue.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/builders/sm90_common.inl>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "flashmask/mask.h"
#include "copy.cuh"
#include "fwd_sm90.h"
#include "fwd_tiles.cuh"

namespace flashmask {
namespace sm90 {

using namespace cute;

// kStages: depth of the K and V rings. kPersistent: a grid of (CTAs per SM x SMs) CTAs claims the
// tiles dynamically (fwd_tiles.cuh), with Q double-buffered, so that the next tile's Q and K/V
// loads overlap this tile's softmax and epilogue.
template <typename Element_, int kHeadDim_, int kBlockM_ = 128, int kBlockN_ = 128, int kStages_ = 2,
          bool kPersistent_ = false>
struct FwdTraits {
  using Element = Element_;
  using ElementAccum = float;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kQStages = kPersistent ? 2 : 1;

  // Warpgroup 0 produces (TMA, one thread), warpgroups 1..kConsumerWGs consume (wgmma + softmax).
  static constexpr int kConsumerWGs = kBlockM / 64;
  static constexpr int kWGRows = kBlockM / kConsumerWGs;  // the rows of one consumer warpgroup
  // The rows of O one TMA store writes (fwd_epilogue.cuh) and the consumer threads that join its
  // barrier. Persistent CTAs store per consumer warpgroup, so that the warpgroup that finishes a
  // tile first starts the next one; one-tile CTAs store the whole tile at once, which measured
  // level at D = 128 and 5% faster on D = 64 causal (8K, 436 / 444 against 419 / 416 TFLOP/s).
  static constexpr int kOStoreRows = kPersistent ? kWGRows : kBlockM;
  static constexpr int kOStoreThreads = 128 * (kOStoreRows / kWGRows);
  static constexpr int kConsumerThreads = 128 * kConsumerWGs;
  static constexpr int kThreads = 128 + kConsumerThreads;
  // CTAs per SM and setmaxnreg budgets (per thread, producer / consumer):
  // - 2 WGs, one CTA: 24 / 240 (24 x 128 + 240 x 256 = 64512 <= 65536 registers); persistent
  //   40 / 232 (40 x 128 + 232 x 256 = 64512);
  // - 1 WG, two CTAs: 24 / 232 ((24 + 232) x 128 = 32768 per CTA); persistent 40 / 216 (its
  //   producer's tile loop spilled at 24 and 32);
  // - 3 WGs (192 rows, D = 64), one CTA: 24 / 160 (24 x 128 + 160 x 384 = 64512 <= 65536);
  //   persistent 32 / 160 (= 65536: at 152 ptxas serialised the consumers' wgmmas; the producer's
  //   tile loop spills 3 words at 32).
  static constexpr int kMinBlocksPerSM = kConsumerWGs == 1 ? 2 : 1;
  static constexpr int kProducerRegs = kPersistent ? (kConsumerWGs == 3 ? 32 : 40) : 24;
  static constexpr int kConsumerRegs = kConsumerWGs == 3   ? 160
                                       : kConsumerWGs == 2 ? (kPersistent ? 232 : 240)
                                                           : (kPersistent ? 216 : 232);
  // setmaxnreg only moves registers inside what the CTA got at launch (the __launch_bounds__ cap,
  // 65536 / (threads x CTAs per SM) rounded down to 8, per thread); asking for more makes the
  // consumers' setmaxnreg.inc wait forever (seen: 32 / 240 with 384 threads hung).
  static constexpr int kEntryRegs = (65536 / (kThreads * kMinBlocksPerSM)) / 8 * 8;
  // Independent chains per S row for the softmax's row max and row sum (OnlineSoftmax). Measured
  // on the H200 against one chain, processes alternating: D = 128 +2-3% on causal, index masks
  // level; D = 64 -7% on causal (436 -> 400 TFLOP/s at 8K, the loop's SASS alike but for the
  // chains); D = 256 not measured, so it keeps one.
  static constexpr int kSoftmaxChains = kHeadDim == 128 ? 4 : 1;
  // Where O is rescaled (fwd_consumer.cuh): between the QK and PV issues, under the QK wgmma
  // (FlashAttention-3's place), or after the PV wait. Before the PV issue measured 1.01-1.05x at
  // D = 256 (its 128 FMULs a thread); 0.99x at D = 128 and in the 192-row D = 64 kernels.
  static constexpr bool kRescaleBeforePv = kHeadDim > 128;
  // How far a row's max may lag behind its scores before it moves (OnlineSoftmax::kMaxSlack, log2
  // units); while a warp's rows all keep theirs it skips the O rescale. Under the QK wgmma
  // (D = 256) that measured 1.00-1.07x on every row, H100; after the PV wait (D <= 128) the FMULs
  // hide among the softmax's exp2s, and the branch around them cost up to 5% (32K full 675 -> 640).
  static constexpr int kRowMaxSlack = kRescaleBeforePv ? 8 : 0;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= kEntryRegs * kThreads,
                "setmaxnreg budgets exceed the registers the CTA holds");

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O += P V
  using AtomLayout = Layout<Shape<Int<kConsumerWGs>, _1, _1>>;         // one 64-row atom per WG

  // S = Q K^T: both operands from shared memory (K-major).
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, ElementAccum, TileShapeQK>(), AtomLayout{}));
  // O += P V: P from registers (the S accumulator converted in place), V^T MN-major in smem.
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, ElementAccum, TileShapePV, GMMA::Major::K,
                           GMMA::Major::MN>(),
      AtomLayout{}));

  using SmemAtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                             GMMA::Major::K, Element, Int<kBlockM>, Int<kHeadDim>>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  // The Q ring: stage s is SmemLayoutQ at offset s * cosize(SmemLayoutQ).
  using SmemLayoutQStages = decltype(tile_to_shape(
      SmemAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kQStages>>{}));
  using SmemAtomKV = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                              GMMA::Major::K, Element, Int<kBlockN>, Int<kHeadDim>>());
  using SmemLayoutKV = decltype(tile_to_shape(
      SmemAtomKV{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // The V tile [kBlockN, kHeadDim] seen as V^T [kHeadDim, kBlockN]: same bytes, transposed view.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{},
                                          Step<_2, _1, _3>{})));

  // Global tensors as TMA sees them (copy.cuh): (seqlen, head_dim, heads, batch), head_dim contiguous.
  using GmemTensor = TmaGmemTensor<Element const>;
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutKV{}),
                                       select<1, 2>(TileShapeQK{}), _1{}));
  // Q arrives and the output leaves (through the tile's own Q stage: stmatrix from the
  // accumulators) by the row-tile TMA of copy.cuh, which writes and reads this layout.
  static_assert(std::is_same_v<SmemAtomQ, GMMA::Layout_K_SW128_Atom<Element>> &&
                    kHeadDim % kRowTileChunk == 0,
                "the row-tile TMA (copy.cuh) fills 64-column chunks of a K-major SW128 layout");
  using SmemCopyAtomO = Copy_Atom<SM90_U32x4_STSM_N, Element>;

  // A partial tile's mask payload: a bit per S accumulator value of each consumer thread.
  static constexpr int kPayloadWords = fwd_payload_words(kBlockN);
  static constexpr uint32_t kPayloadBytes = fwd_payload_bytes(kBlockM, kBlockN);
  static_assert(kPayloadWords * 32 >= kBlockM * kBlockN / kConsumerThreads &&
                kPayloadBytes == kPayloadWords * kConsumerThreads * 4);

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;
  using PipelineQ = cutlass::PipelineTmaAsync<kQStages>;
  using PipelineStateQ = cutlass::PipelineState<kQStages>;

  struct SharedStorage {
    // 1024-byte alignment: the 128-byte swizzle pattern repeats every 1024 bytes.
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQStages>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, 1024> v;
    // Normalised bounds of the key columns of each K stage (partial tiles of index masks only).
    cute::array_aligned<ColumnBounds, kBlockN * kStages, 16> columns;
    // Or the tile's mask payload (fwd_mask_payload.cuh), where it has one.
    cute::array_aligned<uint32_t, kPayloadWords * kConsumerThreads * kStages, 16> payload;
    typename Pipeline::SharedStorage pipeline_k;
    typename Pipeline::SharedStorage pipeline_v;
    typename PipelineQ::SharedStorage pipeline_q;
    TileRingStorage tile_ring;  // persistent CTAs' tile hand-off (fwd_tiles.cuh)
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
};

}  // namespace sm90
}  // namespace flashmask
