// The backward's entry points of launch.h: validation, workspace carving, the mask plan (the block
// bounds; built into the workspace unless the call brings one) and the head-dim switch of the
// portable (sm80+) backward. Kernels: bwd_kernel.cuh (dK/dV, atomic dQ),
// bwd_dq_kernel.cuh (deterministic dQ), bwd_preprocess.cu (D, LSE, block bounds, dQ cast).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "flashmask/check.h"
#include "flashmask/env.h"
#include "flashmask/launch.h"
#include "utils.cuh"
#include "bwd_tile_range.cuh"
#include "bwd_workspace.h"
#include "mask_plan.h"
#if FLASHMASK_HAS_SM90
#include "sm90/bwd_sm90.h"  // Hopper path (sm90a), chosen per call by bwd_sm90_selected
#endif

namespace flashmask {
namespace bwd {
template <int kHeadDim>
void run_bwd_hdim(const BwdParams& p, const Workspace& ws, cudaStream_t stream);

namespace {

// The caller every error of run_bwd_cuda names.
constexpr const char* kWhere = "flashmask run_bwd_cuda";

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(std::string(kWhere) + ": " + what);
}

void validate(const BwdParams& p) {
  check_bwd_params(p, kWhere, /*need_data=*/false);
  check_cuda_support(p, kWhere);
}

// Pointers and strides: only when running (the workspace size may be asked before tensors exist).
void validate_tensors(const BwdParams& p) {
  check_bwd_params(p, kWhere);
  const TensorView* views[] = {&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv};
  const char* names[] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};
  for (int i = 0; i < 8; ++i) check_cuda_view(*views[i], kWhere, names[i]);
}

// The backward's mask plan (bwd_workspace.h): the block bounds at the workspace grid's key block
// (bwd_tile_shape.h), read by both paths, and the document-aligned key blocks and mask payloads
// where the Hopper backward takes them (key_blocks.cuh, sm90/bwd_mask_payload.cuh).
PlanLayout plan_layout(const BwdParams& p) {
  PlanLayout layout;
  layout.block_n = workspace_grid(cuda_kernel_head_dim(p.head_dim, p.head_dim_v)).block_n;
#if FLASHMASK_HAS_SM90
  if (bwd_sm90_selected(p)) {
    layout.row_align = sm90::bwd_row_align(p);
    layout.document_blocks = document_key_blocks_apply(p, layout.row_align > 0);
    layout.payload_tile_rows = sm90::bwd_payload_tile_rows(p);
    layout.payload_tiles_per_list = layout.payload_tile_rows > 0 ? sm90::bwd_payload_tiles_per_list() : 0;
  }
#endif
  return layout;
}

}  // namespace

// Four groups: at 32K (16 slices) the global + sliding window tail stays gone (every group's long
// CTAs start within the first quarter of the launch) and causal keeps its L2 reuse of Q and dO
// (H200, bwd TF/s against one group: 32K causal 470 vs 456, global + sliding 348 vs 351; sixteen
// groups, i.e. head-major: 472 and 298). Against 16 and 1024 groups (one slice each) on the Hopper
// backward (bf16, D = 128, B*S = 32K, eight masks at 8K and 32K): no count ahead on every row, 16
// within -2 .. +4%, 1024 up to 5% behind at 8K and 4% ahead at 32K (FLASHMASK_BWD_SLICE_GROUPS=N
// re-measures).
constexpr int kKeyBlockSliceGroups = 4;

// Sixteen on the Hopper kernels for causal attention without indices, GQA or dropout at D <= 128:
// every CTA there walks the query rows from its key block to the end, so the slices a group runs
// at once share their Q and dO through L2 only while those fit it (8K: 4 slices of 4 MB against
// 16; 32K: one of 16 MB against 4), and the latest group's longest CTAs still end with the launch.
// H200, bf16, processes alternating, bwd TFLOP/s 4 -> 16 groups
// (benchmarks/results/kernel_h200_slice_groups_persistence_ab.json, two runs): D = 128 8K 528 / 517
// -> 528 / 532 and 532 / 533 -> 549 / 551, 32K 511 / 507 -> 524 / 525 and 534 / 547 -> 568 / 547;
// D = 64 8K 449 / 449 -> 455 / 452; one process, three rounds: 8K 531 -> 547, 32K 585 -> 597.
// With GQA a CTA walks the group's query heads, group-times longer, and the last group's ones end
// after the rest (16:4 8K causal 535 / 534 -> 528 / 519); index masks keep four, since prefix-LM
// causal gained (8K 523 / 519 -> 548 / 547) where causal documents and share question lost (32K
// 489 / 496 -> 476 / 479, 445 / 460 -> 440 / 440) and the host cannot tell them apart.
constexpr int kCausalSliceGroups = 16;

int key_block_slice_groups(const BwdParams& p, bool sm90) {
  const int forced = env_int("FLASHMASK_BWD_SLICE_GROUPS", 0, 1);
  if (forced > 0) return forced;
  const bool causal_rows = sm90 && p.causal && !p.mask_form.has_indices() && p.block_mask == nullptr &&
                           p.heads_q == p.heads_k && p.dropout_p == 0.f && !p.deterministic &&
                           cuda_kernel_head_dim(p.head_dim, p.head_dim_v) <= 128;
  return causal_rows ? kCausalSliceGroups : kKeyBlockSliceGroups;
}

dim3 key_block_grid(const BwdParams& p, const Workspace& ws, bool sm90) {
  const int32_t key_blocks = ws.key_block_slots();
  if (key_blocks > 65535)  // gridDim.y limit: 8M keys at block_n = 128 (6.7M with document blocks)
    throw std::invalid_argument("flashmask backward: seqlen_k too long for the key-block grid (" +
                                std::to_string(p.seqlen_k) + " keys)");
  const int slices = p.heads_k * p.batch;
  const int groups = std::min(key_block_slice_groups(p, sm90), std::max(slices, 1));  // no empty group
  const int per_group = (slices + groups - 1) / groups;
  return dim3(unsigned(per_group), unsigned(key_blocks), unsigned((slices + per_group - 1) / per_group));
}

}  // namespace bwd

MaskPlanSize bwd_plan_size_cuda(const BwdParams& params) {
  bwd::validate(params);
  const bwd::PlanLayout layout = bwd::plan_layout(params);
  return {align_up(layout.bytes(params)),
          mask_plan_key(params, PlanDirection::kBackward,
                        {layout.block_n, int64_t(layout.document_blocks), layout.payload_tiles_per_list,
                         layout.payload_tile_rows, layout.row_align})};
}

void build_bwd_plan_cuda(const BwdParams& params, void* plan, cudaStream_t stream) {
  bwd::validate(params);
  if (plan == nullptr) throw ArgError("flashmask build_bwd_plan_cuda: plan is null");
  const bwd::PlanLayout layout = bwd::plan_layout(params);
  bwd::Workspace carved;
  uint64_t* next_payload_slot = layout.carve(params, plan, &carved);
  launch_block_bounds(params, layout.block_n, const_cast<BlockBounds*>(carved.bounds), stream);
  if (layout.document_blocks)
    build_document_key_blocks(params, layout.block_n, const_cast<int2*>(carved.key_blocks.ranges), stream);
#if FLASHMASK_HAS_SM90
  // After the bounds and key blocks, on the same stream: the payloads' tiles are theirs.
  if (next_payload_slot != nullptr) sm90::build_bwd_mask_payloads(params, carved, next_payload_slot, stream);
#endif
}

size_t bwd_workspace_bytes_cuda(const BwdParams& params, bool with_plan) {
  bwd::validate(params);
  return bwd::carve_workspace(params, bwd::plan_layout(params), nullptr, nullptr, with_plan);
}

void run_bwd_cuda(const BwdParams& params, void* workspace, cudaStream_t stream, MaskPlan plan) {
  bwd::validate(params);
  bwd::validate_tensors(params);
  bwd::require(workspace != nullptr, "workspace must hold bwd_workspace_bytes_cuda(params) bytes");
  const bwd::PlanLayout layout = bwd::plan_layout(params);
  bwd::Workspace ws;
  bwd::carve_workspace(params, layout, workspace, &ws, plan.data != nullptr);
  if (plan.data == nullptr) {
    build_bwd_plan_cuda(params, const_cast<BlockBounds*>(ws.bounds), stream);  // in the workspace
  } else {
    check_plan_key(plan, bwd_plan_size_cuda(params).key, bwd::kWhere);
    layout.carve(params, plan.data, &ws);
  }
#if FLASHMASK_HAS_SM90
  if (bwd_sm90_selected(params)) return run_bwd_sm90(params, ws, stream);
#endif
  switch (cuda_kernel_head_dim(params.head_dim, params.head_dim_v)) {
    case 64: bwd::run_bwd_hdim<64>(params, ws, stream); break;
    case 128: bwd::run_bwd_hdim<128>(params, ws, stream); break;
    default: bwd::run_bwd_hdim<256>(params, ws, stream); break;
  }
}

}  // namespace flashmask
