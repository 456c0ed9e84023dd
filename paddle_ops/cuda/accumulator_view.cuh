// A thread's MMA accumulator seen as (rows, cols), for the portable (mma.sync, sm80) and the
// Hopper (wgmma) kernels alike. Both accumulators start with a value mode of (column pair, row
// half) -- wgmma's adds the groups of 8 columns -- followed by (MMA_M, MMA_N): a thread holds rows
// r and r + 8 of every MMA_M block, and the columns of a row are spread over the 4 lanes of a quad,
// so a row reduction is two shuffles (utils.cuh: quad_max, quad_sum).
#pragma once

#include <cute/tensor.hpp>

namespace flashmask {

// mma.sync ((2, 2), MMA_M, MMA_N)      -> ((2, MMA_M), (2, MMA_N))
// wgmma    ((2, 2, N/8), MMA_M, MMA_N) -> ((2, MMA_M), (2, N/8, MMA_N))
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rowcol(Layout l) {
  using namespace cute;
  static_assert(decltype(rank(l))::value == 3, "an MMA accumulator: (values, MMA_M, MMA_N)");
  constexpr int kValueModes = decltype(rank<0>(l))::value;
  static_assert(kValueModes == 2 || kValueModes == 3, "mma.sync or wgmma accumulator");
  if constexpr (kValueModes == 3) {
    return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                       make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
  } else {
    return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<2>(l)));
  }
}

// The same registers (or coordinates) through that (rows, cols) layout.
template <class Tensor>
CUTE_HOST_DEVICE constexpr auto rowcol_view(Tensor&& t) {
  return cute::make_tensor(t.data(), acc_rowcol(t.layout()));
}

}  // namespace flashmask
