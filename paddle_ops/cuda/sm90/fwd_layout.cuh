// Register-layout helpers for the sm90 kernels: the accumulator reinterpreted as the A operand of
// the next wgmma, and one wgmma batch issue. (Its (rows, cols) view: ../accumulator_view.cuh.)
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#include "../accumulator_view.cuh"

namespace flashmask {
namespace sm90 {

using namespace cute;

// A 16-bit accumulator-shaped fragment as the register A operand of a K=16-per-step wgmma:
// ((2, 2, N/8), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, N/16 * MMA_N). The C layout of a 64 x N wgmma
// holds exactly the A fragments of its N/16 k-steps, so no data moves.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_a_operand(Layout l) {
  auto k_pairs = logical_divide(get<0, 2>(l), Tile<_2>{});  // ((2, N/16))
  return make_layout(make_layout(get<0, 0>(l), get<0, 1>(l), get<0, 0>(k_pairs)), get<1>(l),
                     coalesce(make_layout(get<0, 1>(k_pairs), get<2>(l))));
}

// Float accumulator -> Element fragment of the same layout (packed conversions).
template <typename To, class Engine, class Layout>
CUTE_DEVICE auto convert_fragment(Tensor<Engine, Layout> const& t) {
  using From = typename Engine::value_type;
  constexpr int kN = decltype(size(t))::value;
  cutlass::NumericArrayConverter<To, From, kN> convert;
  Tensor out = make_tensor<To>(t.layout());
  *reinterpret_cast<cutlass::Array<To, kN>*>(out.data()) =
      convert(*reinterpret_cast<cutlass::Array<From, kN> const*>(t.data()));
  return out;
}

// Issues one warpgroup's wgmma batch over the k-steps of (tA, tB), then waits until at most
// kWait batches are in flight (kWait < 0: no wait). kZeroInit overwrites tC instead of adding.
template <bool kZeroInit, int kWait, bool kAInRegisters, class TiledMma, class TA, class TB,
          class TC>
CUTE_DEVICE void wgmma(TiledMma& mma, TA const& tA, TB const& tB, TC& tC) {
  if constexpr (kAInRegisters) warpgroup_fence_operand(const_cast<TA&>(tA));
  warpgroup_fence_operand(tC);
  warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTLASS_PRAGMA_UNROLL
  for (int k = 0; k < size<2>(tA); ++k) {
    cute::gemm(mma, tA(_, _, k), tB(_, _, k), tC);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(tC);
  if constexpr (kAInRegisters) warpgroup_fence_operand(const_cast<TA&>(tA));
}

}  // namespace sm90
}  // namespace flashmask
