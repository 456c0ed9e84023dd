// Kernel traits of the portable (sm80+) backward: tile sizes (from bwd_tile_shape.h), the three
// TiledMMAs, shared-memory layouts (swizzled, plus transposed views read with ldmatrix.trans) and
// copy atoms. Types only; the kernels are in bwd_kernel.cuh and bwd_dq_kernel.cuh.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "flashmask/mask.h"
#include "bwd_tile_shape.h"

namespace flashmask {
namespace bwd {

using namespace cute;

template <typename Element> struct MmaAtomOf;
template <> struct MmaAtomOf<cutlass::bfloat16_t> { using type = MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>; };
template <> struct MmaAtomOf<cutlass::half_t> { using type = MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>; };

// A warps_m x warps_n grid of 16x8x16 atoms, widened to 16-column steps per warp.
template <typename Atom, int kWarpsM, int kWarpsN>
using WarpGridMma = TiledMMA<Atom, Layout<Shape<Int<kWarpsM>, Int<kWarpsN>, _1>>,
                             Tile<Int<16 * kWarpsM>, Int<16 * kWarpsN>, _16>>;

template <int kHeadDim_, typename Element_>
struct Traits {
  using Element = Element_;
  static constexpr TileShape kShape = tile_shape(kHeadDim_);
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kBlockN = kShape.block_n;
  static constexpr int kQStages = kShape.q_stages;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static_assert(kHeadDim % 64 == 0, "smem rows are tiled in 64-element (128-byte) swizzle atoms");

  using Atom = typename MmaAtomOf<Element>::type;
  // S = Q K^T and dP = dO V^T: [kBlockM, kBlockN], reduction over D.
  using MmaSdP = WarpGridMma<Atom, 2, kWarps / 2>;
  // dV = P^T dO and dK = dS^T Q: [kBlockN, D], reduction over kBlockM.
  static constexpr int kWarpsNdKV = kBlockN >= 128 ? 4 : 2;
  using MmadKV = WarpGridMma<Atom, kWarpsNdKV, kWarps / kWarpsNdKV>;
  // dQ = dS K: [kBlockM, D], reduction over kBlockN.
  using MmadQ = WarpGridMma<Atom, 2, kWarps / 2>;

  // Rows of 64 elements with the 128-byte XOR swizzle: conflict-free ldmatrix and 16-byte cp.async.
  using SmemAtom = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));   // Q, dO, dQ
  using SmemLayoutK = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));   // K, V, dK, dV
  using SmemLayoutP = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));    // P, dS
  // Transposed views of the same bytes (operands that enter a GEMM along their other dimension).
  using SmemLayoutQt = decltype(composition(SmemLayoutQ{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
  using SmemLayoutKt = decltype(composition(SmemLayoutK{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutPt = decltype(composition(SmemLayoutP{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));

  using LdsmN = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using LdsmT = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using StoreAcc = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<32>, Element>;

  // Global <-> shared: 8 threads x 16 bytes per 64-element row segment.
  using GmemThreads = Layout<Shape<Int<kThreads / 8>, _8>, Stride<_8, _1>>;
  using GmemLoad = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{},
                                            GmemThreads{}, Layout<Shape<_1, _8>>{}));
  using GmemStore = decltype(make_tiled_copy(Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<128>, Element>{},
                                             GmemThreads{}, Layout<Shape<_1, _8>>{}));

  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kKElems = kBlockN * kHeadDim;
  static constexpr int kPElems = kBlockM * kBlockN;
  // Per-tile row vectors (LSE in log2 units, D = rowsum(dO * O)) and the tile's column bounds.
  static constexpr int kRowVecBytes = 2 * kBlockM * int(sizeof(float));
  static constexpr int kColBytes = kBlockN * int(sizeof(ColumnBounds));

  // dK/dV kernel: K, V | Q x stages, dO x stages | P, dS | rows | columns.
  static constexpr int kSmemDkdv = int(sizeof(Element)) * (2 * kKElems + 2 * kQStages * kQElems + 2 * kPElems) +
                                   kRowVecBytes + kColBytes;
  // dQ kernel: Q, dO | K, V | dS | rows | columns.
  static constexpr int kSmemDq = int(sizeof(Element)) * (2 * kQElems + 2 * kKElems + kPElems) + kRowVecBytes + kColBytes;
};

}  // namespace bwd
}  // namespace flashmask
