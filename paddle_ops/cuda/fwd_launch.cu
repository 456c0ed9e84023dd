// run_fwd_cuda / fwd_workspace_bytes_cuda (launch.h) for the portable sm80+ path: validates the
// parameters the kernels rely on, builds the block lists on the GPU, dispatches on dtype x head dim.
#include <algorithm>
#include <string>

#include "flashmask/check.h"
#include "flashmask/launch.h"
#include "fwd_launch.h"
#include "preprocess.cuh"
#include "tile_size.h"
#include "utils.cuh"
#if FLASHMASK_HAS_SM90
#include "sm90/fwd_sm90.h"  // Hopper path (sm90a), chosen per call by fwd_sm90_selected
#endif

namespace flashmask {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("flashmask run_fwd_cuda: " + what);
}

// 16-byte vector loads need 16-byte aligned rows: base pointer and every stride a multiple of 8
// elements (2-byte dtypes).
void check_view(const TensorView& t, const char* name) {
  if (t.data == nullptr) fail(std::string(name) + " is null");
  const bool aligned = reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.batch_stride % 8 == 0 &&
                       t.row_stride % 8 == 0 && t.head_stride % 8 == 0;
  if (!aligned) {
    fail(std::string(name) + " must be 16-byte aligned with strides that are multiples of 8 elements (got strides " +
         std::to_string(t.batch_stride) + ", " + std::to_string(t.row_stride) + ", " +
         std::to_string(t.head_stride) + ")");
  }
}

void check_launch(const FwdParams& p, const void* workspace) {
  flashmask::check_params(p, "flashmask run_fwd_cuda");
  check_cuda_support(p, "flashmask run_fwd_cuda");
  check_view(p.q, "q");
  check_view(p.k, "k");
  check_view(p.v, "v");
  check_view(p.out, "out");
  if (workspace == nullptr && fwd_workspace_bytes_cuda(p) > 0) fail("workspace is null");
}

}  // namespace

size_t fwd_workspace_bytes_cuda(const FwdParams& p) {
  const FwdTileSize tile = fwd_tile_size(cuda_kernel_head_dim(p.head_dim, p.head_dim_v), p.mask_form.has_indices());
  size_t bytes = fwd_block_lists_workspace_bytes(p, tile.block_m, tile.block_n);
#if FLASHMASK_HAS_SM90
  bytes = std::max(bytes, fwd_sm90_workspace_bytes(p));
#endif
  return bytes;
}

void run_fwd_cuda(const FwdParams& p, void* workspace, cudaStream_t stream) {
  check_launch(p, workspace);
#if FLASHMASK_HAS_SM90
  if (fwd_sm90_selected(p)) return run_fwd_sm90(p, workspace, stream);
#endif
  const int32_t kernel_dim = cuda_kernel_head_dim(p.head_dim, p.head_dim_v);
  const FwdTileSize tile = fwd_tile_size(kernel_dim, p.mask_form.has_indices());
  const FwdBlockLists lists = build_fwd_block_lists(p, tile.block_m, tile.block_n, workspace, stream);
  FM_DTYPE_SWITCH(p.dtype, Element, [&] {
    FM_HEADDIM_SWITCH(kernel_dim, kHeadDim, [&] { run_fwd_hdim<Element, kHeadDim>(p, lists, stream); });
  });
}

}  // namespace flashmask
