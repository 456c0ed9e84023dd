// What the sm90 forward kernel receives (__grid_constant__): the TMA descriptors (Q, K, V loads,
// the O store) built from the caller's strides, the problem (FwdParams) and the preprocessing's block lists.
#pragma once

#include "flashmask/params.h"
#include "../preprocess.cuh"
#include "copy.cuh"
#include "fwd_sm90.h"

namespace flashmask {
namespace sm90 {

template <class Traits>
struct FwdKernelParams {
  cute::TmaDescriptor q_rows;    // Q tiles (copy.cuh: make_row_tile_map)
  cute::TmaDescriptor out_rows;  // O tiles
  typename Traits::TmaKV tma_k;
  typename Traits::TmaKV tma_v;
  // The problem as the tiles see it: with GQA heads packed into the rows (pack_shift > 0: 2^pack_shift
  // query heads per tile, fwd_sm90.h), heads_q counts the packed groups (= heads_k) and a tile's
  // kBlockM rows cover kBlockM >> pack_shift positions; lse and the row maps keep the real heads.
  FwdParams p;
  int32_t pack_shift;
  FwdBlockLists lists;
  MaskSlices slices;
  float scale_log2;  // softmax_scale * log2(e)
  int32_t* tile_counter;  // persistent CTAs' tile claims (fwd_tiles.cuh), zeroed before the launch
  FwdMaskPayload payload;
  const int32_t* tile_order;  // fwd_tile_order.cuh, or nullptr: natural order
};

}  // namespace sm90
}  // namespace flashmask
