// CPU FlashMask forward: tiled online softmax over (query block, key block) tiles, skipping the
// tiles block.h classifies as fully masked and applying the element mask only on partial ones.
// Parallel over batch x query heads x query blocks; each work item owns its output rows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_common.h"
#include "flashmask/launch.h"

namespace flashmask {
namespace cpu {
namespace {

struct FwdScratch {
  std::vector<float> q, o, s, m, l;
  FwdScratch(int dim, int dim_v)
      : q(kBlockM * dim), o(kBlockM * dim_v), s(kBlockM * kBlockN), m(kBlockM), l(kBlockM) {}
};

// One query block of one (batch, query head): rows [qb*kBlockM, +rows).
void forward_query_block(const FwdParams& p, const KeyBlockPlan& plan, const Panels& kt,
                         const Panels& v, int b, int hq, int qb, FwdScratch& w) {
  const int dim = p.head_dim, dim_v = p.head_dim_v, row0 = qb * kBlockM;
  const int rows = std::min(kBlockM, p.seqlen_q - row0);
  const int hk = hq / (p.heads_q / p.heads_k);
  for (int i = 0; i < rows; ++i) load_row(row_ptr(p.q, p.dtype, b, row0 + i, hq), p.dtype, dim, &w.q[i * dim]);
  std::fill(w.o.begin(), w.o.end(), 0.f);
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), 0.f);
  const float* ktp = kt.at(b, hk);
  const float* vp = v.at(b, hk);

  for (int kb = 0; kb < plan.num_key_blocks(); ++kb) {
    const TileKind kind = plan.classify(b, hq, qb, kb);
    if (kind == TileKind::kMasked) continue;
    const int col0 = kb * kBlockN, cols = std::min(kBlockN, p.seqlen_k - col0);
    tile_scores<kBlockN>(w.q.data(), rows, dim, ktp + col0, kt.rows_pad, p.softmax_scale, w.s.data());
    if (kind == TileKind::kPartial) plan.mask_partial_tile(b, hq, qb, kb, rows, cols, w.s.data());

    // Online softmax: scores -> probabilities in place (relative to the new row max), rescale
    // the running output by exp(m_old - m_new), then O += P V for the whole tile at once.
    for (int i = 0; i < rows; ++i) {
      float* s = &w.s[i * kBlockN];
      float tile_max = kNegInf;
      for (int j = 0; j < cols; ++j) tile_max = std::max(tile_max, s[j]);
      if (tile_max == kNegInf) {  // every column of this row is masked here
        std::fill(s, s + kBlockN, 0.f);
        continue;
      }
      const float m_new = std::max(w.m[i], tile_max);
      const float alpha = w.m[i] == kNegInf ? 0.f : std::exp(w.m[i] - m_new);
      float row_sum = 0.f;
#pragma omp simd reduction(+ : row_sum)
      for (int j = 0; j < kBlockN; ++j) {
        const float e = (j < cols && s[j] != kNegInf) ? exp_nonpositive(s[j] - m_new) : 0.f;
        s[j] = e;
        row_sum += e;
      }
      w.m[i] = m_new;
      w.l[i] = w.l[i] * alpha + row_sum;  // the softmax normaliser sees every probability
      if (alpha != 1.f) {
        float* o = &w.o[i * dim_v];
        for (int d = 0; d < dim_v; ++d) o[d] *= alpha;
      }
      if (p.dropout_p > 0.f) apply_dropout_row(p, b, hq, row0 + i, col0, cols, s);  // O only
    }
    accumulate_product(w.s.data(), kBlockN, rows, cols, vp + static_cast<size_t>(col0) * dim_v, dim_v,
                       w.o.data());
  }

  float* lse = p.lse + (static_cast<int64_t>(b) * p.heads_q + hq) * p.seqlen_q + row0;
  for (int i = 0; i < rows; ++i) {
    float* o = &w.o[i * dim_v];
    if (w.l[i] > 0.f) {
      const float inv = 1.f / w.l[i];
      for (int d = 0; d < dim_v; ++d) o[d] *= inv;
      lse[i] = w.m[i] + std::log(w.l[i]);
    } else {  // fully masked row: output 0, LSE -inf
      std::fill(o, o + dim_v, 0.f);
      lse[i] = kNegInf;
    }
    store_row(o, p.dtype, dim_v, row_ptr_mut(p.out, p.dtype, b, row0 + i, hq));
  }
}

}  // namespace
}  // namespace cpu

void run_fwd_cpu(const FwdParams& p) {
  using namespace cpu;
  check_params(p, "run_fwd_cpu");
  const KeyBlockPlan plan(p);
  const Panels kt = pack_panels(p.k, p.dtype, p.batch, p.seqlen_k, p.heads_k, p.head_dim, /*transpose=*/true);
  const Panels v = pack_panels(p.v, p.dtype, p.batch, p.seqlen_k, p.heads_k, p.head_dim_v, /*transpose=*/false);
  const int nqb = num_blocks(p.seqlen_q, kBlockM);
#pragma omp parallel
  {
    FwdScratch w(p.head_dim, p.head_dim_v);
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < p.batch; ++b)
      for (int hq = 0; hq < p.heads_q; ++hq)
        for (int qb = 0; qb < nqb; ++qb) forward_query_block(p, plan, kt, v, b, hq, qb, w);
  }
}

}  // namespace flashmask
