// What the sm90 forward kernel receives (__grid_constant__): the TMA descriptors (Q, K, V loads,
// the O store) built from the caller's strides, the problem (FwdParams) and the preprocessing's block lists.
#pragma once

#include "flashmask/params.h"
#include "../preprocess.cuh"
#include "fwd_sm90.h"

namespace flashmask {
namespace sm90 {

template <class Traits>
struct FwdKernelParams {
  typename Traits::TmaQ tma_q;
  typename Traits::TmaKV tma_k;
  typename Traits::TmaKV tma_v;
  typename Traits::TmaO tma_o;
  FwdParams p;
  FwdBlockLists lists;
  MaskSlices slices;
  float scale_log2;  // softmax_scale * log2(e)
  int32_t* tile_counter;  // persistent CTAs' tile claims (fwd_tiles.cuh), zeroed before the launch
  FwdMaskPayload payload;
  const int32_t* tile_order;  // fwd_tile_order.cuh, or nullptr: natural order
};

}  // namespace sm90
}  // namespace flashmask
