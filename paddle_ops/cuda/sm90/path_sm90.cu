// Device check and FLASHMASK_FORCE_PATH parsing for the sm90 dispatchers (path_sm90.h).
#include "path_sm90.h"

#include "../utils.cuh"
#include "flashmask/env.h"

namespace flashmask {
namespace sm90 {

int forced_path() {
  switch (env_choice("FLASHMASK_FORCE_PATH", {"sm80", "sm90"})) {
    case 1: return 80;
    case 2: return 90;
    default: return 0;
  }
}

bool device_is_sm90() {
  constexpr int kMaxDevices = 64;
  static signed char cache[kMaxDevices] = {};  // 0 unknown, 1 yes, -1 no
  int dev = 0;
  FM_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < kMaxDevices && cache[dev] != 0) return cache[dev] > 0;
  int major = 0, minor = 0;
  FM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  FM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const bool ok = major == 9 && minor == 0;
  if (dev >= 0 && dev < kMaxDevices) cache[dev] = ok ? 1 : -1;
  return ok;
}

}  // namespace sm90
}  // namespace flashmask
