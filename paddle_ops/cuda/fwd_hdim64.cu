// Forward kernel instantiations for head dim 64 (float16 and bfloat16); one file per head dim keeps
// compile units small and parallel.
#include "fwd_kernel.cuh"

namespace flashmask {
FM_FWD_INSTANTIATIONS(, 64)
}  // namespace flashmask
