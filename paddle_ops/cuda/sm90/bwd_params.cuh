// What the sm90 backward kernel receives (__grid_constant__): TMA descriptors over the caller's
// strides, the problem (BwdParams) and the backward workspace (LSE/D rows, block bounds, dQ
// accumulator; ../bwd_workspace.h).
#pragma once

#include "flashmask/params.h"
#include "../bwd_workspace.h"

namespace flashmask {
namespace sm90 {

template <class Traits>
struct BwdKernelParams {
  typename Traits::TmaQ tma_q;
  typename Traits::TmaQ tma_do;
  typename Traits::TmaK tma_k;
  typename Traits::TmaK tma_v;
  typename Traits::TmaStoreK tma_dk;
  typename Traits::TmaStoreK tma_dv;
  BwdParams p;
  bwd::Workspace ws;
  float scale_log2;  // softmax_scale * log2(e)
};

}  // namespace sm90
}  // namespace flashmask
