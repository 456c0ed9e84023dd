// Entry of the Hopper (sm90a) backward for the launcher (../bwd_launch.cu): when
// bwd_sm90_selected(p) it calls run_bwd_sm90 with the workspace it carved (../bwd_workspace.h)
// instead of the portable kernels. Built only where the *_sm90.cu sources are (FLASHMASK_HAS_SM90).
#pragma once

#include <cuda_runtime.h>

#include <cutlass/numeric_types.h>

#include "flashmask/params.h"
#include "../bwd_workspace.h"

namespace flashmask {

// True when this problem runs on the sm90 backward: compute capability 9.0 with the sm_90a kernels
// in this build, D and Dv CUDA head dims (path_sm90.h), not dropout together with deterministic
// mode (deterministic mode: Hopper dK/dV, then the portable deterministic dQ kernel).
// FLASHMASK_FORCE_PATH=sm80 turns the path off, =sm90 on (where supported).
bool bwd_sm90_selected(const BwdParams& p);
void run_bwd_sm90(const BwdParams& p, const bwd::Workspace& ws, cudaStream_t stream);

namespace sm90 {
// Mask payloads of the backward's partial tiles (bwd_mask_payload.cuh), part of its mask plan.
// Query rows of a payload tile: those of the kernel that runs `p` (its rows per step), or 0 where
// that kernel takes none (D = 256, whose warps walk their tiles themselves).
int32_t bwd_payload_tile_rows(const BwdParams& p);
// Payload slots per (mask slice, key block) list, pooled over the lists of a plan: 8. Partial tiles
// per 128-key block of the masks timed (bf16, 8K and 32K): 1-2 for causal and prefix-LM causal, 4
// for sliding windows, 4-6 on average for documents, where the few blocks that straddle two of them
// have up to a few hundred; the kernel writes the payloads of tiles past the pool
// (bwd_payload_writer.cuh). FLASHMASK_SM90_BWD_PAYLOAD_TILES=N overrides (0: the kernel writes
// them all; read when a plan or workspace is sized).
int32_t bwd_payload_tiles_per_list();
// The rows the backward's tiles are anchored at (bwd::PlanLayout::row_align): bwd::kSm90RowAlign
// (16), so that each key block's tiles start at the first row it sees (rounded down to the dQ
// accumulator's row groups, bwd_dq_layout.cuh) and visit fewer rows of other documents; 0 (tiles
// at multiples of the rows per step) with a block_mask, whose 128 x 128 blocks a tile must not
// straddle, or with FLASHMASK_BWD_ROW_ANCHOR off (read when a plan or workspace is sized).
int32_t bwd_row_align(const BwdParams& p);
// Writes the payloads of the plan carved into `ws` (its bounds and key blocks built before it on
// `stream`); next_slot: the plan's slot counter (PlanLayout::carve).
void build_bwd_mask_payloads(const BwdParams& p, const bwd::Workspace& ws, uint64_t* next_slot, cudaStream_t stream);

// One instantiation per (dtype, head dim), each in its own bwd_hdim*_sm90.cu: block bounds at the
// kernel's key block, the main kernel and the dQ conversion (after the shared row preprocessing).
template <typename Element, int kHeadDim>
void run_bwd_sm90_kernels(const BwdParams& p, const bwd::Workspace& ws, cudaStream_t stream);
template <typename Element, int kHeadDim>
bool bwd_sm90_kernel_built();
template <typename Element, int kHeadDim>
void build_bwd_mask_payloads_for(const BwdParams& p, const bwd::Workspace& ws, uint64_t* next_slot, cudaStream_t stream);
}  // namespace sm90

}  // namespace flashmask
