// sm90a forward instantiation: fp16, head dim 256 (one per file: small TUs build in parallel).
#include "fwd_launch_template.cuh"

namespace flashmask {
namespace sm90 {
FM_SM90_FWD_INSTANTIATE(cutlass::half_t, 256)
}  // namespace sm90
}  // namespace flashmask
