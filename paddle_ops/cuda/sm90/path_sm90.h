// Which kernels a call runs on a Hopper GPU: the device check and the FLASHMASK_FORCE_PATH switch,
// shared by the forward and backward dispatchers (fwd_launch_sm90.cu, bwd_launch_sm90.cu).
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include <cutlass/numeric_types.h>

#include "flashmask/check.h"
#include "flashmask/params.h"

namespace flashmask {
namespace sm90 {

// Every sm90 kernel family is instantiated for bf16 and fp16 x 64, 128 and 256 columns (one
// *_sm90.cu each). A call's D (q, k) and Dv (v, out) run in the instantiation holding both, the
// same as on the portable kernels (cuda_kernel_head_dim, flashmask/check.h): the TMA descriptors
// carry the true D or Dv, so the hardware zero-fills the columns past them on every load (zero
// columns add nothing to S = QK^T, dP = dO V^T or any product) and clips them on every store.
inline bool instantiated(DType dtype, int head_dim, int head_dim_v) {
  return cuda_supports_head_dims(head_dim, head_dim_v) && (dtype == DType::kBFloat16 || dtype == DType::kFloat16);
}

// The columns of the instantiation that runs a call (FwdParams or BwdParams).
template <class Params>
int kernel_head_dim(const Params& p) {
  return cuda_kernel_head_dim(p.head_dim, p.head_dim_v);
}

template <int kHeadDim>
using HeadDim = std::integral_constant<int, kHeadDim>;

// Calls f(Element{}, HeadDim<head_dim>{}) with the instantiation's types (fp16 for any dtype but
// bf16: callers check instantiated() first); head_dim is kernel_head_dim(), anything else throws,
// naming `caller`.
template <class F>
void dispatch_instantiation(DType dtype, int head_dim, const char* caller, F&& f) {
  const bool bf16 = dtype == DType::kBFloat16;
  switch (head_dim) {
    case 64: return bf16 ? f(cutlass::bfloat16_t{}, HeadDim<64>{}) : f(cutlass::half_t{}, HeadDim<64>{});
    case 128: return bf16 ? f(cutlass::bfloat16_t{}, HeadDim<128>{}) : f(cutlass::half_t{}, HeadDim<128>{});
    case 256: return bf16 ? f(cutlass::bfloat16_t{}, HeadDim<256>{}) : f(cutlass::half_t{}, HeadDim<256>{});
    default:
      throw std::runtime_error(std::string("flashmask ") + caller + ": head_dim must be 64, 128 or 256, got " +
                               std::to_string(head_dim));
  }
}

// Whether pred(Element{}, HeadDim<D>{}) holds for every instantiation (e.g. its kernels are in
// this build).
template <class Pred>
bool every_instantiation(Pred&& pred) {
  return pred(cutlass::bfloat16_t{}, HeadDim<64>{}) && pred(cutlass::half_t{}, HeadDim<64>{}) &&
         pred(cutlass::bfloat16_t{}, HeadDim<128>{}) && pred(cutlass::half_t{}, HeadDim<128>{}) &&
         pred(cutlass::bfloat16_t{}, HeadDim<256>{}) && pred(cutlass::half_t{}, HeadDim<256>{});
}

// 0: no override; 80 / 90: FLASHMASK_FORCE_PATH=sm80 / sm90 (anything else is an ArgError naming it).
int forced_path();

// Whether the current device has compute capability 9.0 (cached per device: the query costs a
// driver call). Each dispatcher also checks that its own sm_90a kernels are in the build.
bool device_is_sm90();

// device_is_sm90() and `built()` (whether this build has the caller's sm_90a kernels), the latter
// asked once per caller, on the first sm90 device (each lambda type has its own cache).
template <class Built>
bool device_runs(Built built) {
  if (!device_is_sm90()) return false;
  static const bool ok = built();
  return ok;
}

}  // namespace sm90
}  // namespace flashmask
