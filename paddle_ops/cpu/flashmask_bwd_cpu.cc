// CPU FlashMask backward (FlashAttention-2 style): probabilities are recomputed from the LSE,
// D_i = rowsum(dO_i * O_i), dS = P * (dP - D) * scale. The main pass runs in parallel over
// (batch, kv head, key block) and loops over the query heads of the GQA group inside, so dK and dV
// are owned by one work item and need no atomics. dQ, which every key block touches, goes either
//   - fused: into one fp32 dQ buffer per thread (static schedule), summed in thread order at the
//     end: 5 tile products per tile; used when the buffers fit in fused_budget_bytes(); or
//   - in a second pass over (batch, query head, query block) that recomputes P and dS: 7 products.
// Both skip fully masked tiles and mask only partial ones (block.h via KeyBlockPlan), and both are
// deterministic run to run (for a given thread count).
#include <algorithm>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_common.h"
#include "flashmask/env.h"
#include "flashmask/launch.h"

namespace flashmask {
namespace cpu {
namespace {

// Inputs packed once to fp32 panels.
struct BwdInputs {
  Panels q, dout;    // [B, Hq] x [Sq_pad, D] / [Sq_pad, Dv]
  Panels k, kt, vt;  // [B, Hk] x [Sk_pad, D] / [D, Sk_pad] / [Dv, Sk_pad]
  std::vector<float> delta;  // D_i = rowsum(dO * O), [B, Hq, Sq]
};

BwdInputs pack_inputs(const BwdParams& p) {
  BwdInputs in;
  in.q = pack_panels(p.q, p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim, false);
  in.dout = pack_panels(p.dout, p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, false);
  in.k = pack_panels(p.k, p.dtype, p.batch, p.seqlen_k, p.heads_k, p.head_dim, false);
  in.kt = pack_panels(p.k, p.dtype, p.batch, p.seqlen_k, p.heads_k, p.head_dim, true);
  in.vt = pack_panels(p.v, p.dtype, p.batch, p.seqlen_k, p.heads_k, p.head_dim_v, true);
  in.delta.assign(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q, 0.f);
  const int dim = p.head_dim_v;
#pragma omp parallel
  {
    std::vector<float> o(dim);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h) {
        const float* dout = in.dout.at(b, h);
        for (int s = 0; s < p.seqlen_q; ++s) {
          load_row(row_ptr(p.out, p.dtype, b, s, h), p.dtype, dim, o.data());
          float acc = 0.f;
          for (int d = 0; d < dim; ++d) acc += o[d] * dout[static_cast<size_t>(s) * dim + d];
          in.delta[(static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + s] = acc;
        }
      }
  }
  return in;
}

// For one tile: P (in `p_tile`) and dS (in `ds_tile`), both [rows, kBlockN]; columns >= cols and
// masked entries are 0. With dropout, `p_tile` holds the dropped and rescaled P that the forward
// multiplied with V (what dV needs), and dS = P * (dP * Z - D) with Z the same keep/scale factors.
void tile_probs_and_dscores(const BwdParams& p, const KeyBlockPlan& plan, const BwdInputs& in,
                            int b, int hq, int qb, int kb, TileKind kind, float* p_tile,
                            float* ds_tile) {
  const int dim = p.head_dim, hk = hq / (p.heads_q / p.heads_k);
  const int row0 = qb * kBlockM, col0 = kb * kBlockN;
  const int rows = std::min(kBlockM, p.seqlen_q - row0), cols = std::min(kBlockN, p.seqlen_k - col0);
  const float* q = in.q.at(b, hq) + static_cast<size_t>(row0) * dim;
  const float* dout = in.dout.at(b, hq) + static_cast<size_t>(row0) * p.head_dim_v;
  const size_t row_index = (static_cast<size_t>(b) * p.heads_q + hq) * p.seqlen_q + row0;
  const float* lse = p.lse + row_index;
  const float* delta = in.delta.data() + row_index;

  tile_scores<kBlockN>(q, rows, dim, in.kt.at(b, hk) + col0, in.kt.rows_pad, p.softmax_scale, p_tile);
  if (kind == TileKind::kPartial) plan.mask_partial_tile(b, hq, qb, kb, rows, cols, p_tile);
  tile_scores<kBlockN>(dout, rows, p.head_dim_v, in.vt.at(b, hk) + col0, in.vt.rows_pad, 1.f, ds_tile);  // dP
  for (int i = 0; i < rows; ++i) {
    float* pr = p_tile + i * kBlockN;
    float* dsr = ds_tile + i * kBlockN;
    const float l = lse[i], di = delta[i];
    if (l == kNegInf) {  // fully masked row: no probability mass, no gradient
      std::fill(pr, pr + kBlockN, 0.f);
      std::fill(dsr, dsr + kBlockN, 0.f);
      continue;
    }
#pragma omp simd
    for (int j = 0; j < kBlockN; ++j) pr[j] = (j < cols && pr[j] != kNegInf) ? exp_nonpositive(pr[j] - l) : 0.f;
    if (p.dropout_p > 0.f) {
      float z[kBlockN];
      std::fill(z, z + kBlockN, 1.f);
      apply_dropout_row(p, b, hq, row0 + i, col0, cols, z);
#pragma omp simd
      for (int j = 0; j < kBlockN; ++j) {
        dsr[j] = pr[j] * (dsr[j] * z[j] - di) * p.softmax_scale;
        pr[j] *= z[j];
      }
      continue;
    }
#pragma omp simd
    for (int j = 0; j < kBlockN; ++j) dsr[j] = pr[j] * (dsr[j] - di) * p.softmax_scale;
  }
}

// Largest total size of the per-thread dQ buffers of the fused path (else dQ takes a second pass):
// 256 MiB, or FLASHMASK_CPU_FUSED_DQ_MB (0 forces the two-pass path; the tests cover both).
size_t fused_budget_bytes() {
  return static_cast<size_t>(env_int("FLASHMASK_CPU_FUSED_DQ_MB", 256, 0)) << 20;
}

struct TileScratch {
  std::vector<float> p, ds, transposed;
  TileScratch() : p(kBlockM * kBlockN), ds(kBlockM * kBlockN), transposed(kBlockN * kBlockM) {}
};

// Pass 1: dK, dV of key block kb of (b, hk), summed over the group's query heads.
// dq_partial: this thread's fp32 [B, Hq, Sq, D] dQ accumulator, or nullptr (dQ in a second pass).
void backward_key_block(const BwdParams& p, const KeyBlockPlan& plan, const BwdInputs& in, int b,
                        int hk, int kb, TileScratch& w, std::vector<float>& dk, std::vector<float>& dv,
                        float* dq_partial) {
  const int dim = p.head_dim, group = p.heads_q / p.heads_k;
  const int col0 = kb * kBlockN, cols = std::min(kBlockN, p.seqlen_k - col0);
  const int nqb = num_blocks(p.seqlen_q, kBlockM);
  std::fill(dk.begin(), dk.end(), 0.f);
  std::fill(dv.begin(), dv.end(), 0.f);
  for (int hq = hk * group; hq < (hk + 1) * group; ++hq) {
    for (int qb = 0; qb < nqb; ++qb) {
      const TileKind kind = plan.classify(b, hq, qb, kb);
      if (kind == TileKind::kMasked) continue;
      tile_probs_and_dscores(p, plan, in, b, hq, qb, kb, kind, w.p.data(), w.ds.data());
      const int row0 = qb * kBlockM, rows = std::min(kBlockM, p.seqlen_q - row0);
      const float* q = in.q.at(b, hq) + static_cast<size_t>(row0) * dim;
      const float* dout = in.dout.at(b, hq) + static_cast<size_t>(row0) * p.head_dim_v;
      transpose_tile(w.p.data(), kBlockN, rows, cols, w.transposed.data(), kBlockM);  // P^T
      accumulate_product(w.transposed.data(), kBlockM, cols, rows, dout, p.head_dim_v, dv.data());
      transpose_tile(w.ds.data(), kBlockN, rows, cols, w.transposed.data(), kBlockM);  // dS^T
      accumulate_product(w.transposed.data(), kBlockM, cols, rows, q, dim, dk.data());
      if (dq_partial) {
        float* dq = dq_partial + ((static_cast<size_t>(b) * p.heads_q + hq) * p.seqlen_q + row0) * dim;
        accumulate_product(w.ds.data(), kBlockN, rows, cols, in.k.at(b, hk) + static_cast<size_t>(col0) * dim,
                           dim, dq);
      }
    }
  }
  for (int j = 0; j < cols; ++j) {
    store_row(&dk[static_cast<size_t>(j) * dim], p.dtype, dim, row_ptr_mut(p.dk, p.dtype, b, col0 + j, hk));
    store_row(&dv[static_cast<size_t>(j) * p.head_dim_v], p.dtype, p.head_dim_v,
              row_ptr_mut(p.dv, p.dtype, b, col0 + j, hk));
  }
}

// Pass 2: dQ of query block qb of (b, hq).
void backward_query_block(const BwdParams& p, const KeyBlockPlan& plan, const BwdInputs& in, int b,
                          int hq, int qb, TileScratch& w, std::vector<float>& dq) {
  const int dim = p.head_dim, hk = hq / (p.heads_q / p.heads_k);
  const int row0 = qb * kBlockM, rows = std::min(kBlockM, p.seqlen_q - row0);
  std::fill(dq.begin(), dq.end(), 0.f);
  const float* k = in.k.at(b, hk);
  for (int kb = 0; kb < plan.num_key_blocks(); ++kb) {
    const TileKind kind = plan.classify(b, hq, qb, kb);
    if (kind == TileKind::kMasked) continue;
    tile_probs_and_dscores(p, plan, in, b, hq, qb, kb, kind, w.p.data(), w.ds.data());
    const int col0 = kb * kBlockN, cols = std::min(kBlockN, p.seqlen_k - col0);
    accumulate_product(w.ds.data(), kBlockN, rows, cols, k + static_cast<size_t>(col0) * dim, dim, dq.data());
  }
  for (int i = 0; i < rows; ++i)
    store_row(&dq[static_cast<size_t>(i) * dim], p.dtype, dim, row_ptr_mut(p.dq, p.dtype, b, row0 + i, hq));
}

}  // namespace
}  // namespace cpu

void run_bwd_cpu(const BwdParams& p) {
  using namespace cpu;
  check_bwd_params(p, "run_bwd_cpu");
  const KeyBlockPlan plan(p);
  const BwdInputs in = pack_inputs(p);
  const int nkb = plan.num_key_blocks(), nqb = num_blocks(p.seqlen_q, kBlockM);
  const size_t block_elems = static_cast<size_t>(std::max(kBlockM, kBlockN)) * std::max(p.head_dim, p.head_dim_v);
#ifdef _OPENMP
  const int max_threads = omp_get_max_threads();
#else
  const int max_threads = 1;
#endif
  const size_t q_elems = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * p.head_dim;
  const bool fused = static_cast<size_t>(max_threads) * q_elems * sizeof(float) <= fused_budget_bytes();
  std::vector<float> dq_partials(fused ? static_cast<size_t>(max_threads) * q_elems : 0, 0.f);
#pragma omp parallel
  {
    TileScratch w;
    std::vector<float> acc_a(block_elems), acc_b(block_elems);
    if (fused) {
#ifdef _OPENMP
      const int thread = omp_get_thread_num(), threads = omp_get_num_threads();
#else
      const int thread = 0, threads = 1;
#endif
      float* mine = dq_partials.data() + static_cast<size_t>(thread) * q_elems;
      // Static round-robin: the same work lands on the same thread every run, so the summation
      // order of dQ, and the result, is reproducible.
#pragma omp for collapse(3) schedule(static, 1)
      for (int b = 0; b < p.batch; ++b)
        for (int hk = 0; hk < p.heads_k; ++hk)
          for (int kb = 0; kb < nkb; ++kb) backward_key_block(p, plan, in, b, hk, kb, w, acc_a, acc_b, mine);
#pragma omp for collapse(2) schedule(static)
      for (int b = 0; b < p.batch; ++b)
        for (int hq = 0; hq < p.heads_q; ++hq)
          for (int s = 0; s < p.seqlen_q; ++s) {
            const size_t at = ((static_cast<size_t>(b) * p.heads_q + hq) * p.seqlen_q + s) * p.head_dim;
            float* row = acc_a.data();
            std::copy(dq_partials.begin() + at, dq_partials.begin() + at + p.head_dim, row);
            for (int t = 1; t < threads; ++t) {
              const float* part = dq_partials.data() + static_cast<size_t>(t) * q_elems + at;
              for (int d = 0; d < p.head_dim; ++d) row[d] += part[d];
            }
            store_row(row, p.dtype, p.head_dim, row_ptr_mut(p.dq, p.dtype, b, s, hq));
          }
    } else {
#pragma omp for collapse(3) schedule(dynamic, 1)
      for (int b = 0; b < p.batch; ++b)
        for (int hk = 0; hk < p.heads_k; ++hk)
          for (int kb = 0; kb < nkb; ++kb) backward_key_block(p, plan, in, b, hk, kb, w, acc_a, acc_b, nullptr);
#pragma omp for collapse(3) schedule(dynamic, 1)
      for (int b = 0; b < p.batch; ++b)
        for (int hq = 0; hq < p.heads_q; ++hq)
          for (int qb = 0; qb < nqb; ++qb) backward_query_block(p, plan, in, b, hq, qb, w, acc_a);
    }
  }
}

}  // namespace flashmask
