// A consumer warpgroup of the sm90 backward: owns 64 keys of the CTA's key block and their dK, dV
// columns (all of them, or its half of the head dim at D = 256: bwd_traits.cuh) and, per visited
// tile, computes S^T and dP^T (SS wgmma), P^T and dS^T in fp32 registers (element mask on partial
// tiles only), accumulates dV and dK with P^T / dS^T straight from registers (RS wgmma), and, once
// the dS it needs is in shared memory, computes its chunks of dQ = dS K and adds them to the fp32
// workspace (one bulk reduce-add from shared memory, or float4 atomics at D = 256). dK, dV leave at
// the end, once per CTA (bwd_epilogue.cuh).
#pragma once

#include <type_traits>

#include <cutlass/arch/barrier.h>

#include "flashmask/mask.h"
#include "../accumulator_view.cuh"
#include "../dropout_tile.cuh"
#include "../utils.cuh"
#include "bwd_barriers.cuh"
#include "bwd_dq_layout.cuh"
#include "bwd_dq_writer.cuh"
#include "bwd_epilogue.cuh"
#include "bwd_mask_payload.cuh"
#include "bwd_params.cuh"
#include "bwd_tiles.cuh"
#include "bwd_traits.cuh"
#include "copy.cuh"
#include "fwd_layout.cuh"

namespace flashmask {
namespace sm90 {

// Where a visited tile's element mask comes from: none (fully visible), its payload in the Q stage
// (D <= 128: from the mask plan, bwd_mask_payload.cuh, or the payload writer warp,
// bwd_payload_writer.cuh), or its keys' column bounds (D = 256, whose warps walk the tiles
// themselves).
enum class TileMask { kNone, kPayload, kBounds };

// kWriteDq = false (deterministic mode): dK and dV only; dQ comes from the portable deterministic
// kernel afterwards.
// Where Traits::kCanWriteDqUnderDk, dK is issued after dQ, so that dQ's trip to shared memory runs
// under the dK wgmma, and the dQ writer warp adds it to the workspace (measured on the H200, 8K
// bf16 D=128: causal +6%, sliding window, causal document, share question +2-3%, document within
// noise, against dQ after dK with the reduce issued by the consumers).
// kDropout (Z = keep / (1 - p), dropout_tile.cuh): dV takes P^T Z, dS^T = P^T (Z dP^T - D).
template <class Traits, bool kWriteDq, bool kDropout>
__device__ __forceinline__ void consume_bwd_tiles(const BwdKernelParams<Traits>& kp,
                                                  typename Traits::SharedStorage& smem,
                                                  typename Traits::Pipeline& pipeline_q,
                                                  typename Traits::Pipeline& pipeline_do, const bwd::KeyBlock& kb,
                                                  int32_t head_k, int32_t b) {
  using namespace cute;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kD = Traits::kHeadDim;
  constexpr int kWGKeys = Traits::kWGKeys, kWGCols = Traits::kWGCols;
  constexpr bool kSplitHeadDim = Traits::kSplitHeadDim;
  constexpr bool kDqUnderDk = kWriteDq && Traits::kCanWriteDqUnderDk;
  constexpr bool kNextStUnderDk = kDqUnderDk && Traits::kNextStUnderDk && !kDropout;
  // The next tile's S^T waits for its Q stage while this tile's stage is still held.
  static_assert(!kNextStUnderDk || Traits::kStages >= 2, "S^T under dK needs two Q stages");
  const BwdParams& p = kp.p;
  const bwd::Workspace& ws = kp.ws;
  // Consumer warpgroup 0 .. kConsumerWGs-1, broadcast from lane 0 so that the compiler knows it is
  // warp-uniform: the shared-memory descriptors and addresses derived from it (this warpgroup's keys,
  // its dS and dQ buffers) stay in uniform registers.
  const int wg = cutlass::canonical_warp_group_idx() - 1;
  const int tidx = threadIdx.x % 128;

  typename Traits::TiledMmaSdP mma_sdp;
  typename Traits::TiledMmadKV mma_dkv;
  typename Traits::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tidx);
  auto thr_dkv = mma_dkv.get_thread_slice(tidx);
  auto thr_dq = mma_dq.get_thread_slice(tidx);

  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutK{});
  Tensor sKt = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutKt{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Traits::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename Traits::SmemLayoutQt{});
  Tensor sdS = make_tensor(make_smem_ptr(smem.ds.data()), typename Traits::SmemLayoutdS{});
  // This warpgroup's keys and dK / dV columns (its dQ chunks: bwd_traits.cuh).
  const int key_slice = kSplitHeadDim ? 0 : wg, col_slice = kSplitHeadDim ? wg : 0;
  Tensor sKw = local_tile(sK, Shape<Int<kWGKeys>, Int<kD>>{}, make_coord(key_slice, _0{}));
  Tensor sVw = local_tile(sV, Shape<Int<kWGKeys>, Int<kD>>{}, make_coord(key_slice, _0{}));
  const auto cols_w = Shape<Int<kWGCols>, Int<kBlockM>, Int<Traits::kStages>>{};
  Tensor sdOtw = local_tile(sdOt, cols_w, make_coord(col_slice, _0{}, _0{}));
  Tensor sQtw = local_tile(sQt, cols_w, make_coord(col_slice, _0{}, _0{}));

  Tensor tSrK = thr_sdp.partition_fragment_A(sKw);
  Tensor tSrV = thr_sdp.partition_fragment_A(sVw);
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);    // (MMA, MMA_N, MMA_K, stage)
  Tensor tSrdO = thr_sdp.partition_fragment_B(sdO);  // (MMA, MMA_N, MMA_K, stage)
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOtw);
  Tensor tdKrQt = thr_dkv.partition_fragment_B(sQtw);
  // (key, query) of each S^T / dP^T accumulator value, tile-local.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<kWGKeys>, Int<kBlockM>>{}));
  Tensor coord = rowcol_view(tScS);
  constexpr int kRows = decltype(size<0>(coord))::value;  // keys held by this thread
  constexpr int kCols = decltype(size<1>(coord))::value;  // queries held by this thread
  // dS^T as (key, query, buffer), this warpgroup's keys: its accumulators leave by stmatrix, 8 x 8
  // blocks whose rows are a key's 8 adjacent queries (16 contiguous bytes of the query-contiguous
  // layout), four blocks per instruction instead of a 32-bit store per query pair.
  Tensor sdSt = make_tensor(sdS.data(), select<1, 0, 2>(sdS.layout()));
  Tensor sdStw = local_tile(sdSt, Shape<Int<kWGKeys>, Int<kBlockM>, Int<Traits::kDsBuffers>>{},
                            make_coord(key_slice, _0{}, _0{}));
  auto r2s_ds = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
  auto thr_r2s_ds = r2s_ds.get_thread_slice(tidx);
  Tensor tdSsdS = thr_r2s_ds.partition_D(sdStw);  // ((values, stmatrix), 1, 1, buffer)
  // The stmatrix destinations as 32-bit shared-memory addresses, computed once: the 128-byte
  // swizzle acts on address bits 4-9 and the buffers lie multiples of 1 KB apart, so buffer b's
  // addresses are buffer 0's plus b strides. Through the swizzled 64-bit pointers each step
  // recomputed every address (about 8 dependent integer instructions per stmatrix).
  static_assert(decltype(size<1>(tdSsdS) * size<2>(tdSsdS))::value == 1, "the stmatrix steps are mode 0's");
  static_assert(kBlockM * kBlockN * sizeof(Element) % 1024 == 0,
                "dS buffers a multiple of 1 KB apart, so the swizzle maps each the same way");
  constexpr int kDsStores = decltype(size<0, 1>(tdSsdS))::value;
  uint32_t ds_addr[kDsStores];
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < kDsStores; ++i) ds_addr[i] = cast_smem_ptr_to_uint(&tdSsdS(make_coord(0, i), 0, 0, 0));
  const uint32_t ds_buffer_bytes = cast_smem_ptr_to_uint(&tdSsdS(make_coord(0, 0), 0, 0, 1)) - ds_addr[0];

  Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kWGKeys>, Int<kWGCols>>{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kWGKeys>, Int<kWGCols>>{});
  clear(acc_dk);
  clear(acc_dv);

  const int32_t key0 = kb.first + key_slice * kWGKeys;  // first key of this warpgroup

  // This warpgroup's dQ chunks leave through shared memory where it has room (kDqViaSmem): stored
  // in the dq_accum layout, then added to the fp32 workspace by the dQ writer warp's bulk
  // reduce-add, so no consumer waits on atomics draining (at 8K causal, D=128, 12.5% of the stall
  // samples sat on the float4 atomics' registers at the top of the next step). Else float4 atomics
  // in the same layout.
  float* sdq = dq_buffer<Traits>(smem, wg);
  // dQ chunk `chunk` = dS[chunk rows, all keys] K[all keys, chunk columns] from dS buffer ds_slot;
  // then waits until at most kWait wgmma batches are in flight (kWait < 0: no wait).
  auto issue_dq = [&](int chunk, int ds_slot, auto& acc_dq, auto kWait) {
    Tensor sdSc = local_tile(sdS, Shape<Int<Traits::kDqRows>, Int<kBlockN>, Int<Traits::kDsBuffers>>{},
                             make_coord(dq_chunk_row0<Traits>(chunk) / Traits::kDqRows, _0{}, _0{}));
    Tensor sKtc = local_tile(sKt, Shape<Int<Traits::kDqCols>, Int<kBlockN>>{},
                             make_coord(dq_chunk_col0<Traits>(chunk) / Traits::kDqCols, _0{}));
    Tensor tdQrdS = thr_dq.partition_fragment_A(sdSc);  // (MMA, MMA_M, MMA_K, buffer)
    wgmma</*zero*/ true, decltype(kWait)::value, /*A regs*/ false>(mma_dq, tdQrdS(_, _, _, ds_slot),
                                                                   thr_dq.partition_fragment_B(sKtc), acc_dq);
  };
  // One dQ chunk into `chunk` (its shared-memory image or its span of the workspace).
  auto add_dq = [&](float* chunk, auto const& acc_dq) {
    static_assert(decltype(size(acc_dq))::value % 4 == 0);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc_dq); i += 4) {
      float4* to = reinterpret_cast<float4*>(chunk + dq_value_offset<Traits>(tidx, i));
      const float4 v = make_float4(acc_dq(i), acc_dq(i + 1), acc_dq(i + 2), acc_dq(i + 3));
      if constexpr (Traits::kDqViaSmem) *to = v;
      else atomicAdd(to, v);
    }
  };

  typename Traits::PipelineState read;
  int ds_buffer = 0;
  bool kv_ready = false;
  // S^T of the tile being visited; with kNextStUnderDk issued during the previous tile.
  Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kWGKeys>, Int<kBlockM>>{});
  auto issue_st = [&](int stage) {
    wgmma</*zero*/ true, /*wait*/ -1, /*A regs*/ false>(mma_sdp, tSrK, tSrQ(_, _, _, stage), acc_s);
  };
  BwdTile next_tile{};  // kNextStUnderDk: the tile after the one being visited
  // One tile; kMask says where its element mask comes from (TileMask: partial tiles and the key
  // blocks shorter than kBlockN have one). Inlined also where dropout makes it long: an out-of-line
  // body keeps the accumulators in local memory.
  auto visit = [&](int32_t head_q, int32_t row0, auto kMask) __attribute__((always_inline)) {
    constexpr TileMask kMaskFrom = decltype(kMask)::value;
    if (!kv_ready) {
      smem.barrier_kv.wait(0);
      kv_ready = true;
    }
    const int stage = read.index();

    // Dropout's keep bits, before S^T and dP^T take their registers (under the wgmmas ptxas spilled
    // 500 bytes).
    [[maybe_unused]] uint32_t keep[dropout_words_for(kWGKeys * kBlockM / 128)];
    if constexpr (kDropout) dropout_keep_bits_transposed(keep, tScS, row0, key0, b, head_q, p);
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kWGKeys>, Int<kBlockM>>{});
    if constexpr (!Traits::kTilesFromProducer) pipeline_q.consumer_wait(read);
    if constexpr (!kNextStUnderDk) issue_st(stage);
    pipeline_do.consumer_wait(read);
    wgmma</*zero*/ true, /*wait*/ -1, /*A regs*/ false>(mma_sdp, tSrV, tSrdO(_, _, _, stage), acc_dp);

    // Which S^T values are masked, one bit each in accumulator order.
    const auto value_of = acc_rowcol(acc_s.layout());
    [[maybe_unused]] uint32_t mask_bits[Traits::kPayloadWords];
    if constexpr (kMaskFrom != TileMask::kNone) {
      if constexpr (kMaskFrom == TileMask::kPayload) {
        const uint32_t* words = smem.payload.data() + stage * (Traits::kPayloadBytes / 4);
        CUTLASS_PRAGMA_UNROLL
        for (int w = 0; w < Traits::kPayloadWords; ++w)
          mask_bits[w] = words[w * Traits::kConsumerThreads + wg * 128 + tidx];
      } else {
        MaskedRows masked_rows[kRows];
        key_masked_rows(masked_rows, coord, p, b, head_q, key0, kb.end);
        payload_of_tile(mask_bits, masked_rows, coord, value_of, row0);
      }
    }

    // The query rows' LSE_log2 and D: into registers while S^T and dP^T are in flight where
    // Traits::kRowVectorsEarly, else read from shared memory after each wait.
    const float* lse_log2 = smem.lse_log2.data() + stage * kBlockM;
    const float* dpsum = smem.dpsum.data() + stage * kBlockM;
    [[maybe_unused]] float early_lse[kCols];
    [[maybe_unused]] float early_d[kCols];
    if constexpr (Traits::kRowVectorsEarly) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) early_lse[j] = lse_log2[get<1>(coord(0, j))];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) early_d[j] = dpsum[get<1>(coord(0, j))];
    }

    // P^T = exp2(S^T * scale_log2 - LSE_log2) while dP^T is still in flight. LSE_log2 is +inf on
    // fully masked and padding rows, so P is exactly 0 there.
    warpgroup_wait<1>();
    warpgroup_fence_operand(acc_s);
    Tensor s = rowcol_view(acc_s);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kCols; ++j) {
      const float lse = Traits::kRowVectorsEarly ? early_lse[j] : lse_log2[get<1>(coord(0, j))];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kRows; ++i) {
        const float prob = exp2_approx(s(i, j) * kp.scale_log2 - lse);
        if constexpr (kMaskFrom != TileMask::kNone) {
          const int v = value_of(i, j);
          s(i, j) = (mask_bits[v / 32] >> (v % 32)) & 1u ? 0.f : prob;
        } else {
          s(i, j) = prob;
        }
      }
    }
    // dS^T = P^T (dP^T - D), in place of dP^T.
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_dp);
    Tensor dp = rowcol_view(acc_dp);
    if constexpr (kDropout) apply_dropout(acc_dp, keep, p.dropout_p);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kCols; ++j) {
      const float d = Traits::kRowVectorsEarly ? early_d[j] : dpsum[get<1>(coord(0, j))];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kRows; ++i) dp(i, j) = s(i, j) * (dp(i, j) - d);
    }
    if constexpr (kDropout) apply_dropout(acc_s, keep, p.dropout_p);

    // dV += P^T dO and dK += dS^T Q, the 16-bit P^T / dS^T as register A operands.
    Tensor p_frag = convert_fragment<Element>(acc_s);
    Tensor ds_frag = convert_fragment<Element>(acc_dp);
    Tensor tdVrP = make_tensor(p_frag.data(), acc_as_a_operand(acc_s.layout()));
    Tensor tdKrdS = make_tensor(ds_frag.data(), acc_as_a_operand(acc_dp.layout()));
    // dS into shared memory by stmatrix, before or after the dV issue (Traits::kDsBeforeDv).
    [[maybe_unused]] const int ds_slot = kSplitHeadDim ? 2 * wg + ds_buffer : ds_buffer;
    auto store_ds = [&] {
      Tensor from = thr_r2s_ds.retile_S(ds_frag);  // ((values, stmatrix), 1, 1)
      const uint32_t buffer = ds_slot * ds_buffer_bytes;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kDsStores; ++i) {
        Tensor words = recast<uint32_t>(from(make_coord(_, i), 0, 0));
        stmatrix_x4(ds_addr[i] + buffer, words(0), words(1), words(2), words(3));
      }
    };
    if constexpr (kWriteDq && Traits::kDsBeforeDv) store_ds();
    wgmma</*zero*/ false, /*wait*/ -1, /*A regs*/ true>(mma_dkv, tdVrP, tdVrdOt(_, _, _, stage), acc_dv);
    if constexpr (!kDqUnderDk) {
      wgmma</*zero*/ false, /*wait*/ -1, /*A regs*/ true>(mma_dkv, tdKrdS, tdKrQt(_, _, _, stage), acc_dk);
    }

    if constexpr (kWriteDq) {
      if constexpr (!Traits::kDsBeforeDv) store_ds();
      // dS visible to the async proxy (wgmma), which reads it after the barrier.
      cutlass::arch::fence_view_async_shared();
      if constexpr (Traits::kDsExchange) cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kBarrierDsReady);
      else cutlass::arch::NamedBarrier::sync(128, kBarrierWarpgroup + wg);
      if constexpr (kDqUnderDk) {
        // dQ = dS K, then dK: once dV and dQ retire, dQ goes to shared memory, from where the dQ
        // writer warp (bwd_dq_writer.cuh) adds it to the workspace, while the dK wgmma still runs.
        Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<Traits::kDqRows>, Int<Traits::kDqCols>>{});
        issue_dq(wg, ds_slot, acc_dq, Int<-1>{});
        wgmma</*zero*/ false, /*wait*/ -1, /*A regs*/ true>(mma_dkv, tdKrdS, tdKrQt(_, _, _, stage), acc_dk);
        warpgroup_wait<1>();
        warpgroup_fence_operand(acc_dq);
        pipeline_do.consumer_release(read);  // dV was this dO stage's last reader
        cutlass::arch::NamedBarrier::sync(kDqHandshakeThreads, kBarrierDqEmpty + wg);
        add_dq(sdq, acc_dq);
        cutlass::arch::fence_view_async_shared();  // visible to the bulk reduce (async proxy)
        cutlass::arch::NamedBarrier::arrive(kDqHandshakeThreads, kBarrierDqFull + wg);
        if constexpr (kNextStUnderDk) {
          // The next tile's S^T, behind dK in the tensor pipe. After the last tile a discarded one on
          // this stage: a conditional issue makes ptxas serialise every wgmma of the loop.
          auto next = read;
          ++next;
          pipeline_q.consumer_wait(next);
          next_tile = smem.tiles[next.index()];
          issue_st(next_tile.is_end() ? stage : next.index());
        }
        warpgroup_wait<kNextStUnderDk ? 1 : 0>();
        warpgroup_fence_operand(acc_dk);
        pipeline_q.consumer_release(read);  // dK was this Q stage's last reader
      } else {
        // D = 256: no shared memory left for dQ, float4 atomics from registers.
        static_assert(!Traits::kDqViaSmem, "one dQ chunk through shared memory always goes under dK");
        // This warpgroup's dQ column chunks; the first wait retires dV, dK too.
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < Traits::kDqChunks; ++c) {
          const int chunk = wg * Traits::kDqChunks + c;
          Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<Traits::kDqRows>, Int<Traits::kDqCols>>{});
          issue_dq(chunk, ds_slot, acc_dq, Int<0>{});
          if (c == 0) {  // that wait retired every wgmma reading this Q / dO stage
            pipeline_q.consumer_release(read);
            pipeline_do.consumer_release(read);
          }
          // Rows past Sq exist in the workspace (padded), so whole chunks are added.
          add_dq(dq_chunk_in_workspace<Traits>(p, ws, b, head_q, row0, chunk), acc_dq);
        }
      }
    } else {
      warpgroup_wait<0>();
      pipeline_q.consumer_release(read);
      pipeline_do.consumer_release(read);
    }
    ++read;
    ds_buffer ^= 1;
  };
  // The mask's source is chosen per tile here, not inside the visit: a branch there, with S^T in
  // flight, made ptxas issue the masked tiles' exp2 only after dP^T had retired (2 of 32 before its
  // wait, against 25-28 here). Every masked tile of a kernel whose producer hands over the tiles has
  // its payload: a bounds test anywhere in this loop made ptxas wait for each CTA's first S^T before
  // its first dP^T (C7517) and lengthened the kernel by ~1000 instructions (bf16, D = 128).
  auto visit_kind = [&](int32_t head_q, int32_t row0, bool masked) __attribute__((always_inline)) {
    using M = TileMask;
    if (!masked) visit(head_q, row0, std::integral_constant<M, M::kNone>{});
    else visit(head_q, row0, std::integral_constant<M, Traits::kTilesFromProducer ? M::kPayload : M::kBounds>{});
  };
  if constexpr (kNextStUnderDk) {
    // As below, with each tile's S^T issued before its visit. The loop sits inside the branch: an
    // S^T accumulator that may enter it unissued makes ptxas serialise the wgmmas.
    pipeline_q.consumer_wait(read);
    next_tile = smem.tiles[read.index()];
    if (!next_tile.is_end()) {
      smem.barrier_kv.wait(0);
      kv_ready = true;
      issue_st(read.index());
      do {
        const BwdTile tile = next_tile;
        visit_kind(tile.head_q, tile.row0, tile.masked_elements);
      } while (!next_tile.is_end());
    }
  } else if constexpr (Traits::kTilesFromProducer) {
    // The producer's tiles (bwd_tiles.cuh), each read from its Q stage once the stage is full.
    for (;;) {
      pipeline_q.consumer_wait(read);
      const BwdTile tile = smem.tiles[read.index()];
      if (tile.is_end()) break;
      visit_kind(tile.head_q, tile.row0, tile.masked_elements);
    }
  } else {
    // No payloads here (the warps walk the tiles themselves): every partial tile evaluates its bounds.
    for_each_bwd_tile<kBlockM, kBlockN>(p, ws, b, head_k, kb, [&](int32_t head_q, int32_t row0, bool masked, int32_t) {
      visit_kind(head_q, row0, masked);
    });
  }

  store_dkdv<Traits>(kp, smem, acc_dk, acc_dv, mma_dkv, tidx, key_slice, col_slice, kb, head_k, b);
}

}  // namespace sm90
}  // namespace flashmask
