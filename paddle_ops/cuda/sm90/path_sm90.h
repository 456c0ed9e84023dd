// Which kernels a call runs on a Hopper GPU: the device check and the FLASHMASK_FORCE_PATH switch,
// shared by the forward and backward dispatchers (fwd_launch_sm90.cu, bwd_launch_sm90.cu).
#pragma once

namespace flashmask {
namespace sm90 {

// 0: no override; 80 / 90: FLASHMASK_FORCE_PATH=sm80 / sm90 (anything else throws, naming it).
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
