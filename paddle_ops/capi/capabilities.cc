// The C ABI's capability queries (flashmask_capi.h): what check.h accepts, for bindings to read
// instead of keeping their own lists. Compiled into libflashmask and into the Paddle op library.
#include <algorithm>

#include "flashmask/check.h"
#include "flashmask_capi.h"

namespace {

// Writes items 0 .. min(n, capacity) - 1 through write(i, item(i)); returns n, so that a caller
// can size its buffer with a first call of capacity 0.
template <class Item, class Write>
int write_list(int32_t n, Item item, int32_t capacity, Write write) {
  for (int32_t i = 0; i < std::min(n, capacity); ++i) write(i, item(i));
  return n;
}

template <class T, size_t N, class Write>
int write_list(const T (&list)[N], int32_t capacity, Write write) {
  return write_list(static_cast<int32_t>(N), [&](int32_t i) { return list[i]; }, capacity, write);
}

}  // namespace

extern "C" {

int fm_has_cuda(void) {
#if defined(FLASHMASK_WITH_CUDA)
  return 1;
#else
  return 0;
#endif
}

int fm_supported_dtypes(int32_t cuda, int32_t* codes, int32_t capacity) {
  auto write = [&](int32_t i, flashmask::DType d) { codes[i] = static_cast<int32_t>(d); };
  if (codes == nullptr) capacity = 0;
  return cuda ? write_list(flashmask::kCudaDTypes, capacity, write)
              : write_list(flashmask::kCpuDTypes, capacity, write);
}

int fm_supported_head_dims(int32_t cuda, int32_t* head_dim, int32_t* head_dim_v, int32_t capacity) {
  if (!cuda) return -1;
  if (head_dim == nullptr || head_dim_v == nullptr) capacity = 0;
  return write_list(flashmask::kCudaHeadDimCount * flashmask::kCudaHeadDimCount, flashmask::cuda_head_dims_pair,
                    capacity, [&](int32_t i, flashmask::HeadDims d) {
                      head_dim[i] = d.qk;
                      head_dim_v[i] = d.v;
                    });
}

}  // extern "C"
