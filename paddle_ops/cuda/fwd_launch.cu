// run_fwd_cuda / fwd_workspace_bytes_cuda (launch.h) for the portable sm80+ path: validates the
// parameters the kernels rely on, builds the block lists on the GPU, dispatches on dtype x head dim.
#include <algorithm>
#include <string>

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

void check_params(const FwdParams& p, const void* workspace) {
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16) fail("dtype must be float16 or bfloat16");
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    fail("head_dim must be 64, 128 or 256, got " + std::to_string(p.head_dim));
  if (p.batch < 0 || p.seqlen_q < 0 || p.seqlen_k < 0) fail("sizes must be non-negative");
  if (p.heads_k <= 0 || p.heads_q <= 0 || p.heads_q % p.heads_k != 0)
    fail("heads_q (" + std::to_string(p.heads_q) + ") must be a positive multiple of heads_k (" +
         std::to_string(p.heads_k) + ")");
  if (p.batch > 65535 || p.heads_q > 65535) fail("batch and heads_q must be at most 65535");
  check_view(p.q, "q");
  check_view(p.k, "k");
  check_view(p.v, "v");
  check_view(p.out, "out");
  if (p.lse == nullptr) fail("lse is null");
  if (p.mask_form.has_indices()) {
    const int32_t hm = p.mask_heads;
    if (p.startend_row_indices == nullptr) fail("startend_row_indices is null but mask_form has columns");
    if (hm != 1 && hm != p.heads_k && hm != p.heads_q)
      fail("mask_heads must be 1, heads_k or heads_q, got " + std::to_string(hm));
  }
  if (workspace == nullptr && fwd_workspace_bytes_cuda(p) > 0) fail("workspace is null");
}

}  // namespace

size_t fwd_workspace_bytes_cuda(const FwdParams& p) {
  const FwdTileSize tile = fwd_tile_size(p.head_dim, p.mask_form.has_indices());
  size_t bytes = fwd_block_lists_workspace_bytes(p, tile.block_m, tile.block_n);
#if FLASHMASK_HAS_SM90
  bytes = std::max(bytes, fwd_sm90_workspace_bytes(p));
#endif
  return bytes;
}

void run_fwd_cuda(const FwdParams& p, void* workspace, cudaStream_t stream) {
  check_params(p, workspace);
  if (p.batch == 0 || p.seqlen_q == 0) return;
#if FLASHMASK_HAS_SM90
  if (fwd_sm90_selected(p)) return run_fwd_sm90(p, workspace, stream);
#endif
  const FwdTileSize tile = fwd_tile_size(p.head_dim, p.mask_form.has_indices());
  const FwdBlockLists lists = build_fwd_block_lists(p, tile.block_m, tile.block_n, workspace, stream);
  FM_DTYPE_SWITCH(p.dtype, Element, [&] {
    FM_HEADDIM_SWITCH(p.head_dim, kHeadDim, [&] { run_fwd_hdim<Element, kHeadDim>(p, lists, stream); });
  });
}

}  // namespace flashmask
