// The forward's entry points of launch.h: validates the parameters the kernels rely on, picks the
// path (Hopper or portable) and tile shape, builds the mask plan (block lists on the GPU) or takes
// the caller's, and dispatches on dtype x head dim.
#include <algorithm>
#include <string>

#include "flashmask/check.h"
#include "flashmask/launch.h"
#include "fwd_launch.h"
#include "mask_plan.h"
#include "preprocess.cuh"
#include "tile_size.h"
#include "utils.cuh"
#if FLASHMASK_HAS_SM90
#include "sm90/fwd_sm90.h"  // Hopper path (sm90a), chosen per call by fwd_sm90_selected
#include "sm90/path_sm90.h"
#endif

namespace flashmask {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("flashmask run_fwd_cuda: " + what);
}

void check_launch(const FwdParams& p) {
  constexpr const char* where = "flashmask run_fwd_cuda";
  flashmask::check_params(p, where);
  check_cuda_support(p, where);
  check_cuda_view(p.q, where, "q");
  check_cuda_view(p.k, where, "k");
  check_cuda_view(p.v, where, "v");
  check_cuda_view(p.out, where, "out");
}

// The path, tile shape and persistence of a call, decided in one place for its plan and its launch.
struct FwdPath {
  bool sm90;
  int32_t block_m, block_n;
  bool persistent;  // sm90 only
};

FwdPath fwd_path(const FwdParams& p) {
#if FLASHMASK_HAS_SM90
  if (fwd_sm90_selected(p)) {
    const sm90::FwdShape shape = sm90::fwd_shape(p);
    return {true, shape.block_m, sm90::fwd_block_n(shape.block_m, sm90::kernel_head_dim(p)), shape.persistent};
  }
#endif
  const FwdTileSize tile = fwd_tile_size(cuda_kernel_head_dim(p.head_dim, p.head_dim_v), p.mask_form.has_indices());
  return {false, tile.block_m, tile.block_n, false};
}

// Workspace of a call beside its plan: the sm90 kernel's persistent tile counter.
size_t fwd_scratch_bytes(const FwdPath& path) {
#if FLASHMASK_HAS_SM90
  if (path.sm90) return sm90::kFwdScratchBytes;
#endif
  (void)path;
  return 0;
}

MaskPlanSize plan_size(const FwdParams& p, const FwdPath& path) {
#if FLASHMASK_HAS_SM90
  if (path.sm90) return fwd_sm90_plan_size(p, path.block_m);
#endif
  return {align_up(fwd_block_lists_workspace_bytes(p, path.block_m, path.block_n)),
          mask_plan_key(p, PlanDirection::kForward, {80, path.block_m, path.block_n})};
}

void build_plan(const FwdParams& p, const FwdPath& path, void* plan, cudaStream_t stream) {
#if FLASHMASK_HAS_SM90
  if (path.sm90) return build_fwd_sm90_plan(p, path.block_m, plan, stream);
#endif
  build_fwd_block_lists(p, path.block_m, path.block_n, plan, stream);
}

}  // namespace

MaskPlanSize fwd_plan_size_cuda(const FwdParams& p) {
  check_params(p, "flashmask fwd_plan_size_cuda", /*need_data=*/false);
  check_cuda_support(p, "flashmask fwd_plan_size_cuda");
  return plan_size(p, fwd_path(p));
}

void build_fwd_plan_cuda(const FwdParams& p, void* plan, cudaStream_t stream) {
  check_params(p, "flashmask build_fwd_plan_cuda", /*need_data=*/false);
  check_cuda_support(p, "flashmask build_fwd_plan_cuda");
  if (plan == nullptr) throw ArgError("flashmask build_fwd_plan_cuda: plan is null");
  build_plan(p, fwd_path(p), plan, stream);
}

size_t fwd_workspace_bytes_cuda(const FwdParams& p, bool with_plan) {
  const FwdPath path = fwd_path(p);
  return fwd_scratch_bytes(path) + (with_plan ? 0 : plan_size(p, path).bytes);
}

void run_fwd_cuda(const FwdParams& p, void* workspace, cudaStream_t stream, MaskPlan plan) {
  check_launch(p);
  const FwdPath path = fwd_path(p);
  const MaskPlanSize size = plan_size(p, path);
  if (workspace == nullptr && fwd_scratch_bytes(path) + (plan.data == nullptr ? size.bytes : 0) > 0)
    fail("workspace is null");
  char* scratch = static_cast<char*>(workspace);
  if (plan.data == nullptr) {  // preprocess the mask into the workspace, the scratch after it
    build_plan(p, path, workspace, stream);
    plan = {workspace, size.key};
    scratch += size.bytes;
  }
  check_plan_key(plan, size.key, "flashmask run_fwd_cuda");
#if FLASHMASK_HAS_SM90
  if (path.sm90) return run_fwd_sm90(p, {path.block_m, path.persistent}, plan.data, scratch, stream);
#endif
  const FwdBlockLists lists = carve_fwd_block_lists(p, path.block_m, path.block_n, plan.data);
  if (lists.num_m_blocks == 0) return;
  const int32_t kernel_dim = cuda_kernel_head_dim(p.head_dim, p.head_dim_v);
  FM_DTYPE_SWITCH(p.dtype, Element, [&] {
    FM_HEADDIM_SWITCH(kernel_dim, kHeadDim, [&] { run_fwd_hdim<Element, kHeadDim>(p, lists, stream); });
  });
}

}  // namespace flashmask
