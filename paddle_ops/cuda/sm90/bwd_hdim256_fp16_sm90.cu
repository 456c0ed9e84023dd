// sm90a backward, fp16, head_dim 256 (one instantiation per file: parallel builds).
#include "bwd_launch_template.cuh"

namespace flashmask {
namespace sm90 {
FM_SM90_BWD_INSTANTIATE(cutlass::half_t, 256)
}  // namespace sm90
}  // namespace flashmask
