// The dK/dV kernel of the portable (sm80+) backward, FlashAttention-2 style: one CTA per
// (key block, head_k, batch) keeps K, V and the dK, dV accumulators on chip and walks the query
// heads of its GQA group and, per head, only the query blocks whose tile is not fully masked.
// Per tile: S = Q K^T, P = exp(S * scale - LSE), dP = dO V^T, dS = P * (dP - D),
// dV += P^T dO, dK += dS^T Q and (unless deterministic) dQ += dS K by fp32 atomics into the
// workspace. dK/dV are reduced over the group on chip and written once, without atomics.
#pragma once

#include "bwd_tile_math.cuh"
#include "bwd_workspace.h"

namespace flashmask {
namespace bwd {

// kDropout: its own instantiation (as the forward's), so that calls without dropout keep the
// register budget they had (compiled in with a runtime branch, this kernel spilled 52 bytes at D = 128).
template <typename Tr, bool kDropout>
__global__ void __launch_bounds__(Tr::kThreads, 1) dkdv_kernel(const BwdParams p, const Workspace ws) {
  using Element = typename Tr::Element;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kD = Tr::kHeadDim;
  static_assert(kBlockMaskSize % kBlockM == 0 && kBlockMaskSize % kBlockN == 0,
                "a tile must lie inside one block_mask block (block_kept is asked once per tile)");
  extern __shared__ __align__(128) char smem_raw[];
  const int tid = threadIdx.x;
  const KeyBlockCta cta = key_block_cta(p);
  if (!cta.valid) return;
  const int n_block = cta.n_block, hk = cta.head_k, b = cta.b;
  const int n0 = n_block * kBlockN;
  const int n_valid = min(kBlockN, p.seqlen_k - n0);
  const int group = p.heads_q / p.heads_k;
  const int causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  const float scale_log2 = p.softmax_scale * kLog2e;

  // Shared memory: K, V | Q stages | dO stages | P | dS | LSE, D rows | column bounds.
  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Element* sK_ptr = smem;
  Element* sV_ptr = sK_ptr + Tr::kKElems;
  Element* sQ_ptr = sV_ptr + Tr::kKElems;
  Element* sdO_ptr = sQ_ptr + Tr::kQStages * Tr::kQElems;
  Element* sP_ptr = sdO_ptr + Tr::kQStages * Tr::kQElems;
  Element* sdS_ptr = sP_ptr + Tr::kPElems;
  float* s_lse = reinterpret_cast<float*>(sdS_ptr + Tr::kPElems);
  float* s_dpsum = s_lse + kBlockM;
  ColumnBounds* s_col = reinterpret_cast<ColumnBounds*>(s_dpsum + kBlockM);

  Tensor sK = make_tensor(make_smem_ptr(sK_ptr), typename Tr::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(sV_ptr), typename Tr::SmemLayoutK{});
  Tensor sKt = make_tensor(make_smem_ptr(sK_ptr), typename Tr::SmemLayoutKt{});
  Tensor sP = make_tensor(make_smem_ptr(sP_ptr), typename Tr::SmemLayoutP{});
  Tensor sdS = make_tensor(make_smem_ptr(sdS_ptr), typename Tr::SmemLayoutP{});
  Tensor sPt = make_tensor(make_smem_ptr(sP_ptr), typename Tr::SmemLayoutPt{});
  Tensor sdSt = make_tensor(make_smem_ptr(sdS_ptr), typename Tr::SmemLayoutPt{});

  // K and V of this key block (rows past Sk zero-filled).
  const Element* k_ptr = p.k.at<const Element>(b, n0, hk);
  const Element* v_ptr = p.v.at<const Element>(b, n0, hk);
  {
    Tensor gK = make_tensor(make_gmem_ptr(k_ptr), Shape<Int<kBlockN>, Int<kD>>{}, make_stride(p.k.row_stride, _1{}));
    Tensor gV = make_tensor(make_gmem_ptr(v_ptr), Shape<Int<kBlockN>, Int<kD>>{}, make_stride(p.v.row_stride, _1{}));
    load_rows_async<Tr>(gK, sK, n_valid, p.head_dim, tid);
    load_rows_async<Tr>(gV, sV, n_valid, p.head_dim_v, tid);
    cute::cp_async_fence();
  }

  typename Tr::MmaSdP mma_sdp;
  typename Tr::MmadKV mma_dkv;
  typename Tr::MmadQ mma_dq;
  Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kD>>{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kD>>{});
  clear(acc_dk);
  clear(acc_dv);

  const int32_t* loaded_slice = reinterpret_cast<const int32_t*>(intptr_t(-1));  // none loaded yet
  for (int hq = hk * group; hq < (hk + 1) * group; ++hq) {
    const BlockBounds bb = key_block_bounds(p, ws, b, hq, n_block);
    const int2 range = query_block_range(bb, n0, p.seqlen_q, p.causal, causal_off, kBlockM);
    auto tile_kind = [&](int m) {
      if (!p.block_kept(b, hq, m * kBlockM, n0)) return TileKind::kMasked;
      return classify_tile(m * kBlockM, min((m + 1) * kBlockM, p.seqlen_q), n0, n0 + n_valid, bb, p.causal,
                           causal_off);
    };
    auto next_block = [&](int m) {
      while (m < range.y && tile_kind(m) == TileKind::kMasked) ++m;
      return m;
    };
    int m = next_block(range.x);
    if (m >= range.y) continue;

    // Column bounds of this head's mask slice (heads sharing a slice reuse them). Read after the
    // barrier at the top of the first tile; the previous head's reads ended at its last barrier.
    const int32_t* slice = mask_slice_or_null(p, b, hq);
    if (slice != loaded_slice) {
      load_columns<Tr>(p, slice, n0, s_col, tid);
      loaded_slice = slice;
    }

    const Element* q_head = p.q.at<const Element>(b, 0, hq);
    const Element* do_head = p.dout.at<const Element>(b, 0, hq);
    const int64_t row_base = (int64_t(b) * p.heads_q + hq) * ws.seqlen_q_pad;
    auto load_q_do = [&](int mb, int stage) {
      Tensor gQ = make_tensor(make_gmem_ptr(q_head + int64_t(mb) * kBlockM * p.q.row_stride),
                              Shape<Int<kBlockM>, Int<kD>>{}, make_stride(p.q.row_stride, _1{}));
      Tensor gdO = make_tensor(make_gmem_ptr(do_head + int64_t(mb) * kBlockM * p.dout.row_stride),
                               Shape<Int<kBlockM>, Int<kD>>{}, make_stride(p.dout.row_stride, _1{}));
      Tensor sQs = make_tensor(make_smem_ptr(sQ_ptr + stage * Tr::kQElems), typename Tr::SmemLayoutQ{});
      Tensor sdOs = make_tensor(make_smem_ptr(sdO_ptr + stage * Tr::kQElems), typename Tr::SmemLayoutQ{});
      const int valid = p.seqlen_q - mb * kBlockM;
      load_rows_async<Tr>(gQ, sQs, valid, p.head_dim, tid);
      load_rows_async<Tr>(gdO, sdOs, valid, p.head_dim_v, tid);
      cute::cp_async_fence();
    };

    int stage = 0;
    load_q_do(m, stage);
    while (m < range.y) {
      const bool need_mask = tile_kind(m) == TileKind::kPartial || n_valid < kBlockN;
      const int m_next = next_block(m + 1);
      const bool prefetch = Tr::kQStages > 1 && m_next < range.y;
      if (prefetch) load_q_do(m_next, stage ^ 1);
      load_row_vectors<Tr>(ws.lse_log2 + row_base + m * kBlockM, ws.dpsum + row_base + m * kBlockM, s_lse,
                           s_dpsum, tid);
      if (prefetch) cute::cp_async_wait<1>();
      else cute::cp_async_wait<0>();
      __syncthreads();

      Tensor sQ = make_tensor(make_smem_ptr(sQ_ptr + stage * Tr::kQElems), typename Tr::SmemLayoutQ{});
      Tensor sdO = make_tensor(make_smem_ptr(sdO_ptr + stage * Tr::kQElems), typename Tr::SmemLayoutQ{});
      Tensor sQt = make_tensor(make_smem_ptr(sQ_ptr + stage * Tr::kQElems), typename Tr::SmemLayoutQt{});
      Tensor sdOt = make_tensor(make_smem_ptr(sdO_ptr + stage * Tr::kQElems), typename Tr::SmemLayoutQt{});

      Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
      Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
      clear(acc_s);
      clear(acc_dp);
      gemm_ss<typename Tr::LdsmN, typename Tr::LdsmN>(acc_s, sQ, sK, mma_sdp, tid);
      compute_p<Tr>(acc_s, s_lse, s_col, need_mask, m * kBlockM, n0, p.seqlen_k, p.causal, causal_off, scale_log2,
                    tid);
      // Dropout (Z = keep / (1 - p)): dV takes P * Z, dS = P * (Z * dP - D).
      uint32_t keep[dropout_words_for(decltype(size(acc_s))::value)];
      if constexpr (kDropout) {
        tile_keep_bits<Tr>(keep, p, b, hq, m * kBlockM, n0, tid);
        Tensor p_kept = make_fragment_like(acc_s);
        cute::copy(acc_s, p_kept);
        apply_dropout(p_kept, keep, p.dropout_p);
        store_acc<Tr>(p_kept, sP, mma_sdp, tid);
      } else {
        store_acc<Tr>(acc_s, sP, mma_sdp, tid);  // overlaps the dP GEMM
      }
      gemm_ss<typename Tr::LdsmN, typename Tr::LdsmN>(acc_dp, sdO, sV, mma_sdp, tid);
      if constexpr (kDropout) apply_dropout(acc_dp, keep, p.dropout_p);
      compute_ds<Tr>(acc_s, acc_dp, s_dpsum, tid);
      store_acc<Tr>(acc_dp, sdS, mma_sdp, tid);
      __syncthreads();

      gemm_ss<typename Tr::LdsmT, typename Tr::LdsmT>(acc_dv, sPt, sdOt, mma_dkv, tid);
      gemm_ss<typename Tr::LdsmT, typename Tr::LdsmT>(acc_dk, sdSt, sQt, mma_dkv, tid);
      if (ws.dq_accum != nullptr) {
        Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kD>>{});
        clear(acc_dq);
        gemm_ss<typename Tr::LdsmN, typename Tr::LdsmT>(acc_dq, sdS, sKt, mma_dq, tid);
        // Thread order, not row-major (bwd_workspace.h); padded rows exist, so no edge checks.
        dq_accum_add<Tr::kThreads>(ws.dq_accum + (row_base + m * kBlockM) * kD, acc_dq, tid);
      }
      __syncthreads();  // the next prefetch overwrites this stage; P/dS/row vectors are rewritten
      m = m_next;
      stage ^= (Tr::kQStages > 1 ? 1 : 0);
      if (!prefetch && m < range.y) load_q_do(m, stage);
    }
  }

  // dK = scale * sum dS^T Q and dV through shared memory (K/V are dead) for 16-byte global stores.
  cute::cp_async_wait<0>();
  __syncthreads();
  scale_acc(acc_dk, p.softmax_scale);
  store_acc<Tr>(acc_dk, sK, mma_dkv, tid);
  store_acc<Tr>(acc_dv, sV, mma_dkv, tid);
  __syncthreads();
  Element* dk_ptr = p.dk.at<Element>(b, n0, hk);
  Element* dv_ptr = p.dv.at<Element>(b, n0, hk);
  Tensor gdK = make_tensor(make_gmem_ptr(dk_ptr), Shape<Int<kBlockN>, Int<kD>>{}, make_stride(p.dk.row_stride, _1{}));
  Tensor gdV = make_tensor(make_gmem_ptr(dv_ptr), Shape<Int<kBlockN>, Int<kD>>{}, make_stride(p.dv.row_stride, _1{}));
  store_rows<Tr>(sK, gdK, n_valid, p.head_dim, tid);
  store_rows<Tr>(sV, gdV, n_valid, p.head_dim_v, tid);
}

}  // namespace bwd
}  // namespace flashmask
