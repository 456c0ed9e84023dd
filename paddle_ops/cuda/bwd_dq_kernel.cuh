// Deterministic dQ (BwdParams::deterministic): one CTA per (query block, head_q, batch) keeps Q, dO
// and the dQ accumulator on chip and walks the key blocks of its row range in ascending order,
// recomputing S, P, dP and dS (no atomics, so bitwise identical run to run). Cost over the atomic
// path: the dK/dV kernel skips its dQ GEMM, this kernel adds two GEMMs (S and dP) plus dQ, so about
// 7 instead of 5 tile GEMMs (~1.4x the backward FLOPs), and K/V are re-read once per query block.
#pragma once

#include "bwd_tile_math.cuh"
#include "bwd_workspace.h"

namespace flashmask {
namespace bwd {

template <typename Tr, bool kDropout>
__global__ void __launch_bounds__(Tr::kThreads, 1) dq_kernel(const BwdParams p, const Workspace ws) {
  using Element = typename Tr::Element;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kD = Tr::kHeadDim;
  static_assert(kBlockMaskSize % kBlockM == 0 && kBlockMaskSize % kBlockN == 0,
                "a tile must lie inside one block_mask block (block_kept is asked once per tile)");
  extern __shared__ __align__(128) char smem_raw[];
  const int tid = threadIdx.x;
  const int m_block = blockIdx.x, hq = blockIdx.y, b = blockIdx.z;
  const int m0 = m_block * kBlockM;
  const int m_valid = min(kBlockM, p.seqlen_q - m0);
  const int hk = hq / (p.heads_q / p.heads_k);
  const int causal_off = causal_offset(p.seqlen_q, p.seqlen_k);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const int32_t* slice = mask_slice_or_null(p, b, hq);

  // Shared memory: Q, dO | K, V | dS | LSE, D rows | column bounds.
  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Element* sQ_ptr = smem;
  Element* sdO_ptr = sQ_ptr + Tr::kQElems;
  Element* sK_ptr = sdO_ptr + Tr::kQElems;
  Element* sV_ptr = sK_ptr + Tr::kKElems;
  Element* sdS_ptr = sV_ptr + Tr::kKElems;
  float* s_lse = reinterpret_cast<float*>(sdS_ptr + Tr::kPElems);
  float* s_dpsum = s_lse + kBlockM;
  ColumnBounds* s_col = reinterpret_cast<ColumnBounds*>(s_dpsum + kBlockM);

  Tensor sQ = make_tensor(make_smem_ptr(sQ_ptr), typename Tr::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(sdO_ptr), typename Tr::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(sK_ptr), typename Tr::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(sV_ptr), typename Tr::SmemLayoutK{});
  Tensor sKt = make_tensor(make_smem_ptr(sK_ptr), typename Tr::SmemLayoutKt{});
  Tensor sdS = make_tensor(make_smem_ptr(sdS_ptr), typename Tr::SmemLayoutP{});

  const Element* q_ptr = p.q.at<const Element>(b, m0, hq);
  const Element* do_ptr = p.dout.at<const Element>(b, m0, hq);
  {
    Tensor gQ = make_tensor(make_gmem_ptr(q_ptr), Shape<Int<kBlockM>, Int<kD>>{}, make_stride(p.q.row_stride, _1{}));
    Tensor gdO = make_tensor(make_gmem_ptr(do_ptr), Shape<Int<kBlockM>, Int<kD>>{}, make_stride(p.dout.row_stride, _1{}));
    load_rows_async<Tr>(gQ, sQ, m_valid, p.head_dim, tid);
    load_rows_async<Tr>(gdO, sdO, m_valid, p.head_dim_v, tid);
    cute::cp_async_fence();
  }
  const int64_t row_base = (int64_t(b) * p.heads_q + hq) * ws.seqlen_q_pad + m0;
  load_row_vectors<Tr>(ws.lse_log2 + row_base, ws.dpsum + row_base, s_lse, s_dpsum, tid);

  typename Tr::MmaSdP mma_sdp;
  typename Tr::MmadQ mma_dq;
  Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kD>>{});
  clear(acc_dq);

  // Key blocks this query block can see: causality bounds the last one; classify_tile the rest.
  const int row_end = m0 + m_valid;
  int n_end = ws.n_blocks;
  const int last_visible_col = row_end - 1 + causal_off;
  if (p.causal) n_end = last_visible_col < 0 ? 0 : min(n_end, last_visible_col / kBlockN + 1);
  const Element* k_head = p.k.at<const Element>(b, 0, hk);
  const Element* v_head = p.v.at<const Element>(b, 0, hk);

  for (int n = 0; n < n_end; ++n) {
    const int n0 = n * kBlockN;
    const int n_valid = min(kBlockN, p.seqlen_k - n0);
    const BlockBounds bb = key_block_bounds(p, ws, b, hq, n);
    const TileKind kind = p.block_kept(b, hq, m0, n0)
                              ? classify_tile(m0, row_end, n0, n0 + n_valid, bb, p.causal, causal_off)
                              : TileKind::kMasked;
    if (kind == TileKind::kMasked) continue;
    const bool need_mask = kind == TileKind::kPartial || n_valid < kBlockN;

    Tensor gK = make_tensor(make_gmem_ptr(k_head + int64_t(n0) * p.k.row_stride), Shape<Int<kBlockN>, Int<kD>>{},
                            make_stride(p.k.row_stride, _1{}));
    Tensor gV = make_tensor(make_gmem_ptr(v_head + int64_t(n0) * p.v.row_stride), Shape<Int<kBlockN>, Int<kD>>{},
                            make_stride(p.v.row_stride, _1{}));
    load_rows_async<Tr>(gK, sK, n_valid, p.head_dim, tid);
    load_rows_async<Tr>(gV, sV, n_valid, p.head_dim_v, tid);
    cute::cp_async_fence();
    if (need_mask) load_columns<Tr>(p, slice, n0, s_col, tid);
    cute::cp_async_wait<0>();
    __syncthreads();

    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    clear(acc_dp);
    gemm_ss<typename Tr::LdsmN, typename Tr::LdsmN>(acc_s, sQ, sK, mma_sdp, tid);
    compute_p<Tr>(acc_s, s_lse, s_col, need_mask, m0, n0, p.seqlen_k, p.causal, causal_off, scale_log2, tid);
    gemm_ss<typename Tr::LdsmN, typename Tr::LdsmN>(acc_dp, sdO, sV, mma_sdp, tid);
    if constexpr (kDropout) {  // dS = P * (Z * dP - D), as in the dK/dV kernel
      uint32_t keep[dropout_words_for(decltype(size(acc_s))::value)];
      tile_keep_bits<Tr>(keep, p, b, hq, m0, n0, tid);
      apply_dropout(acc_dp, keep, p.dropout_p);
    }
    compute_ds<Tr>(acc_s, acc_dp, s_dpsum, tid);
    store_acc<Tr>(acc_dp, sdS, mma_sdp, tid);
    __syncthreads();
    gemm_ss<typename Tr::LdsmN, typename Tr::LdsmT>(acc_dq, sdS, sKt, mma_dq, tid);
    __syncthreads();  // K, V, dS and the column bounds are rewritten by the next key block
  }

  // dQ = scale * sum dS K through shared memory (Q is dead) for 16-byte global stores.
  cute::cp_async_wait<0>();
  __syncthreads();
  scale_acc(acc_dq, p.softmax_scale);
  store_acc<Tr>(acc_dq, sQ, mma_dq, tid);
  __syncthreads();
  Element* dq_ptr = p.dq.at<Element>(b, m0, hq);
  Tensor gdQ = make_tensor(make_gmem_ptr(dq_ptr), Shape<Int<kBlockM>, Int<kD>>{}, make_stride(p.dq.row_stride, _1{}));
  store_rows<Tr>(sQ, gdQ, m_valid, p.head_dim, tid);
}

}  // namespace bwd
}  // namespace flashmask
