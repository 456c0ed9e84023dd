// The producer warp of the sm90 forward: one thread issues every TMA load. Q once (its own
// transaction barrier), then K and V of each key block on the query block's list, in list order,
// into the kStages-deep rings; the consumers release a stage once their wgmma has read it.
#pragma once

#include "fwd_params.cuh"
#include "fwd_traits.cuh"

namespace flashmask {
namespace sm90 {

// 1-D bulk copy global -> shared completing on `mbar` (16-byte aligned, multiple of 16 bytes).
__device__ __forceinline__ void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                              uint64_t* mbar) {
  const uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem_dst);
  const uint32_t bar = (uint32_t)__cvta_generic_to_shared(mbar);
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(gmem_src), "r"(bytes), "r"(bar)
      : "memory");
}

template <class Traits>
__device__ __forceinline__ void produce_tiles(const FwdKernelParams<Traits>& kp,
                                              typename Traits::SharedStorage& smem,
                                              typename Traits::Pipeline& pipeline_k,
                                              typename Traits::Pipeline& pipeline_v,
                                              int32_t m_block, int32_t head_q, int32_t b,
                                              int32_t slice, const int32_t* entries,
                                              int32_t num_entries) {
  using namespace cute;
  using TileShapeQK = typename Traits::TileShapeQK;
  const FwdParams& p = kp.p;
  const int32_t head_k = head_q / (p.heads_q / p.heads_k);

  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutKV{});

  Tensor mQ = kp.tma_q.get_tma_tensor(make_shape(p.seqlen_q, p.head_dim, p.heads_q, p.batch));
  Tensor mK = kp.tma_k.get_tma_tensor(make_shape(p.seqlen_k, p.head_dim, p.heads_k, p.batch));
  Tensor mV = kp.tma_v.get_tma_tensor(make_shape(p.seqlen_k, p.head_dim, p.heads_k, p.batch));
  Tensor gQ = local_tile(mQ(_, _, head_q, b), select<0, 2>(TileShapeQK{}), make_coord(m_block, _0{}));
  Tensor gK = local_tile(mK(_, _, head_k, b), select<1, 2>(TileShapeQK{}), make_coord(_, _0{}));
  Tensor gV = local_tile(mV(_, _, head_k, b), select<1, 2>(TileShapeQK{}), make_coord(_, _0{}));

  auto [tQgQ, tQsQ] = tma_partition(kp.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                    group_modes<0, 2>(gQ));
  auto [tKgK, tKsK] = tma_partition(kp.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                    group_modes<0, 2>(gK));
  auto [tVgV, tVsV] = tma_partition(kp.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                    group_modes<0, 2>(gV));

  if (num_entries == 0) return;  // nothing visible: no load may outlive the CTA
  using BarrierType = typename Traits::Pipeline::ProducerBarrierType;
  smem.barrier_q.arrive_and_expect_tx(Traits::kQBytes);
  copy(kp.tma_q.with(reinterpret_cast<BarrierType&>(smem.barrier_q), 0), tQgQ, tQsQ);

  const ColumnBounds* columns =
      kp.lists.columns != nullptr ? kp.lists.columns + (int64_t)slice * p.seqlen_k : nullptr;
  auto write = cutlass::make_producer_start_state<typename Traits::Pipeline>();
  for (int32_t i = 0; i < num_entries; ++i) {
    const int32_t entry = entries[i];
    const int32_t n_block = entry_n_block(entry);
    pipeline_k.producer_acquire(write);  // arrives, expecting the K bytes (not yet issued)
    if (columns != nullptr && entry_is_partial(entry)) {
      // The element mask's column bounds ride on the K stage's barrier: expected before any copy
      // is issued, so the phase cannot complete early.
      const int32_t col0 = n_block * Traits::kBlockN;
      const uint32_t bytes = (uint32_t)min(Traits::kBlockN, p.seqlen_k - col0) * sizeof(ColumnBounds);
      pipeline_k.producer_expect_transaction(write, bytes);
      bulk_copy_g2s(smem.columns.data() + write.index() * Traits::kBlockN, columns + col0, bytes,
                    pipeline_k.producer_get_barrier(write));
    }
    copy(kp.tma_k.with(*pipeline_k.producer_get_barrier(write), 0), tKgK(_, n_block),
         tKsK(_, write.index()));
    pipeline_v.producer_acquire(write);
    copy(kp.tma_v.with(*pipeline_v.producer_get_barrier(write), 0), tVgV(_, n_block),
         tVsV(_, write.index()));
    ++write;
  }
}

}  // namespace sm90
}  // namespace flashmask
