// Path selection and launch of the Hopper backward (bwd_sm90.h): the (dtype, head dim) sm90 kernels,
// which run the portable backward's row preprocessing first (the block bounds come with the call's
// mask plan, ../bwd_launch.cu).
#include <algorithm>
#include <cstdio>

#include "../bwd_tile_shape.h"
#include "../utils.cuh"
#include "flashmask/env.h"
#include "bwd_sm90.h"
#include "path_sm90.h"

namespace flashmask {
namespace {

// The device is sm90 and this build has the sm_90a backward kernels.
bool device_runs_sm90_bwd() {
  return sm90::device_runs([] {
    return sm90::every_instantiation(
        [](auto e, auto d) { return sm90::bwd_sm90_kernel_built<decltype(e), decltype(d)::value>(); });
  });
}

}  // namespace

bool bwd_sm90_selected(const BwdParams& p) {
  const bool selected =
      sm90::forced_path() != 80 && sm90::instantiated(p.dtype, p.head_dim, p.head_dim_v) &&
      !(p.dropout_p > 0.f && p.deterministic) && device_runs_sm90_bwd();
  static bool logged = false;  // FLASHMASK_LOG_PATH=1: say once per process which path ran
  if (!logged && env_switch("FLASHMASK_LOG_PATH") == EnvSwitch::kOn) {
    logged = true;
    std::fprintf(stderr, "flashmask bwd path: %s (head_dim %d, head_dim_v %d)\n", selected ? "sm90" : "sm80",
                 p.head_dim, p.head_dim_v);
  }
  return selected;
}

int32_t sm90::bwd_payload_tile_rows(const BwdParams& p) {
  const int kernel_dim = sm90::kernel_head_dim(p);
  if (bwd::sm90_keys_per_cta(kernel_dim) != 128) return 0;  // the head-dim split kernel (D = 256)
  return bwd::sm90_rows_per_step(kernel_dim, p.dropout_p > 0.f);  // with_step_shape's rows
}

int32_t sm90::bwd_row_align(const BwdParams& p) {
  if (p.block_mask != nullptr || env_switch("FLASHMASK_BWD_ROW_ANCHOR") == EnvSwitch::kOff) return 0;
  return bwd::kSm90RowAlign;
}

int32_t sm90::bwd_payload_tiles_per_list() { return env_int("FLASHMASK_SM90_BWD_PAYLOAD_TILES", 8, 0); }

void sm90::build_bwd_mask_payloads(const BwdParams& p, const bwd::Workspace& ws, uint64_t* next_slot,
                                   cudaStream_t stream) {
  sm90::dispatch_instantiation(p.dtype, sm90::kernel_head_dim(p), "build_bwd_mask_payloads", [&](auto e, auto d) {
    sm90::build_bwd_mask_payloads_for<decltype(e), decltype(d)::value>(p, ws, next_slot, stream);
  });
}

void run_bwd_sm90(const BwdParams& p, const bwd::Workspace& ws, cudaStream_t stream) {
  // The workspace is carved once for both paths (../bwd_workspace.h): rows padded to the workspace
  // grid's row multiple, which every sm90 shape's query tile divides (a static_assert in
  // run_bwd_sm90_shape), and an fp32 dQ accumulator unless deterministic.
  if (ws.seqlen_q_pad % bwd::workspace_grid(sm90::kernel_head_dim(p)).row_multiple != 0 ||
      (ws.row_align != 0 && ws.row_align != bwd::kSm90RowAlign) || (ws.dq_accum == nullptr) != p.deterministic)
    throw std::runtime_error("flashmask run_bwd_sm90: workspace not laid out for the sm90 backward");
  sm90::dispatch_instantiation(p.dtype, sm90::kernel_head_dim(p), "run_bwd_sm90", [&](auto e, auto d) {
    sm90::run_bwd_sm90_kernels<decltype(e), decltype(d)::value>(p, ws, stream);
  });
}

}  // namespace flashmask
