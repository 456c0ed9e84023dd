// Backward kernels for head dim 128 (bf16 and fp16): one translation unit per head dim keeps each
// compile small and lets CMake build them in parallel.
#include "bwd_launch_template.cuh"

namespace flashmask {
namespace bwd {
template void run_bwd_hdim<128>(const BwdParams&, const Workspace&, cudaStream_t);
}  // namespace bwd
}  // namespace flashmask
