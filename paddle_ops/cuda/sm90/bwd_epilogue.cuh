// Epilogue of the sm90 backward: each consumer warpgroup's dK (times softmax_scale) and dV
// accumulators (its keys x its columns), reduced over the GQA group on chip, leave once per CTA,
// without atomics, through shared memory and TMA stores. Against 32-bit stores straight from the
// registers (which sat in the LSU queue: stall_lg on 64 stores per thread, then the exit drain;
// 8% of the warp samples at 8K causal document) the H200 measured, bwd TFLOP/s at 8K, bf16, D=128:
// causal 450 -> 469, sliding window 325 -> 352, causal document 281 -> 289, share question
// 228 -> 237, short documents 166 -> 179; D=64 causal 334 -> 348; D=256 within noise (309 -> 307).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "flashmask/params.h"
#include "bwd_barriers.cuh"
#include "bwd_params.cuh"
#include "fwd_layout.cuh"

namespace flashmask {
namespace sm90 {

// dK (times softmax_scale) and dV through shared memory: once both warpgroups' wgmmas have retired
// (the other warpgroup's dQ and, at D = 256, its S^T still read this warpgroup's K rows), each
// writes its keys x columns of dK into the K tile and of dV into the V tile by stmatrix, and one
// thread stores both tiles by TMA (keys past Sk clipped), then waits until the TMA has read them
// so that the CTA's shared memory outlives the reads.
template <class Traits, class Acc, class TiledMma>
__device__ __forceinline__ void store_dkdv(const BwdKernelParams<Traits>& kp,
                                           typename Traits::SharedStorage& smem, Acc const& acc_dk,
                                           Acc const& acc_dv, TiledMma const& mma_dkv, int tidx, int key_slice,
                                           int col_slice, int32_t n_block, int32_t head_k, int32_t b) {
  using namespace cute;
  using Element = typename Traits::Element;
  const BwdParams& p = kp.p;
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutK{});
  const auto wg_tile = Shape<Int<Traits::kWGKeys>, Int<Traits::kWGCols>>{};
  Tensor sdKw = local_tile(sK, wg_tile, make_coord(key_slice, col_slice));
  Tensor sdVw = local_tile(sV, wg_tile, make_coord(key_slice, col_slice));

  Tensor dk = make_tensor_like(acc_dk);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < size(acc_dk); ++i) dk(i) = acc_dk(i) * p.softmax_scale;
  Tensor dk16 = convert_fragment<Element>(dk);
  Tensor dv16 = convert_fragment<Element>(acc_dv);
  auto r2s = make_tiled_copy_C(typename Traits::SmemCopyAtomdKV{}, mma_dkv);
  auto thr_r2s = r2s.get_thread_slice(tidx);
  cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kBarrierDkdvStaged);
  cute::copy(r2s, thr_r2s.retile_S(dk16), thr_r2s.partition_D(sdKw));
  cute::copy(r2s, thr_r2s.retile_S(dv16), thr_r2s.partition_D(sdVw));
  cutlass::arch::fence_view_async_shared();  // visible to the TMA (async proxy)
  cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kBarrierDkdvStaged);
  if (threadIdx.x == 128) {
    const auto k_tile = Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDim>>{};
    auto store = [&](auto const& tma, auto const& s_tile, int32_t cols) {  // cols: D or Dv
      Tensor m = tma.get_tma_tensor(make_shape(p.seqlen_k, cols, p.heads_k, p.batch));
      Tensor g = local_tile(m(_, _, head_k, b), k_tile, make_coord(n_block, _0{}));
      auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(s_tile), group_modes<0, 2>(g));
      cute::copy(tma, ts, tg);
    };
    store(kp.tma_dk, sK, p.head_dim);
    store(kp.tma_dv, sV, p.head_dim_v);
    cute::tma_store_arrive();
    cute::tma_store_wait<0>();
  }
}

}  // namespace sm90
}  // namespace flashmask
