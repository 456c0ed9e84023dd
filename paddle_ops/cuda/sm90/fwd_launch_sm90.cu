// Path selection, mask plan and launch of the Hopper forward (fwd_sm90.h): device check, the plan
// (block lists built by the shared preprocessing at this kernel's tiles, payloads, tile order), then
// the (dtype, head dim) kernel.
#include <cstdio>
#include <string>

#include <algorithm>

#include "../mask_plan.h"
#include "../utils.cuh"
#include "flashmask/env.h"
#include "fwd_sm90.h"
#include "fwd_tile_order.cuh"
#include "path_sm90.h"

namespace flashmask {
namespace {

// The device is sm90 and this build has the sm_90a forward kernels.
bool device_runs_sm90() {
  return sm90::device_runs([] {
    return sm90::every_instantiation(
        [](auto e, auto d) { return sm90::fwd_sm90_kernel_built<decltype(e), decltype(d)::value>(); });
  });
}

int block_m_of(const FwdParams& p) {
  const int forced = env_int("FLASHMASK_SM90_BLOCK_M", 0, 0);
  if (forced != 0 && forced != 64 && forced != 128 && forced != 192)
    bad_env_value("FLASHMASK_SM90_BLOCK_M", std::to_string(forced), "64, 128 or 192");
  const int d = sm90::kernel_head_dim(p);
  if (d > 128) return 128;  // the only instantiated shape at 256 columns
  if (p.dropout_p > 0.f) return 128;  // the only shape with a dropout instantiation
  if (forced == 64 || forced == 128) return forced;
  // The 192-row kernel (three consumer warpgroups) runs 64 columns without a block mask, whose
  // 128-position blocks a 192-row tile would straddle.
  const bool tall_fits = d == 64 && p.block_mask == nullptr;
  if (forced == 192 && tall_fits) return 192;
  // 192 rows without indices. H200, bf16, B*S = 32K, one process, fwd TFLOP/s 128 -> 192 rows
  // (benchmarks/results/kernel_h200_fwd_d64_192_ab.json): 8K full 454 / 457 -> 493 / 491, causal
  // 443 / 440 -> 458 / 458 (persistent 128 rows), 32K causal 475 / 472 -> 495 / 494, GQA 16:4 8K
  // causal 438 / 434 -> 470 / 468, 6K causal 423 / 425 -> 437 / 436; 2K causal 385 / 382 -> 338 /
  // 340 and 4K 412 / 407 -> 392 / 395, so causal rows shorter than kTallCausalRows keep the
  // persistent 128-row kernel.
  if (tall_fits && !p.mask_form.has_indices() && (!p.causal || p.seqlen_q >= sm90::kTallCausalRows)) return 192;
  if (!p.mask_form.has_indices()) return 128;
  // Index masks at 64 columns over long rows: 192 rows (persistent) for bidirectional masks, 128
  // (persistent) for causal ones from kLongCausalIndexRows; their 64-row tiles waste less area but
  // run slower per element. H100, bf16, B*S = 32K, one process, two rounds, fwd TFLOP/s 64 rows ->
  // 128 / 192 (benchmarks/results/kernel_h100_fwd_d64_tile_heights.json): document 8K 334 -> 366 /
  // 353, 32K 414 -> 460 / 475; prefix-LM causal 8K 408 -> 461 / 511, 32K 414 -> 467 / 503; causal
  // document 32K 379 -> 423 / 408, share question 377 -> 401 / 358, sliding window 418 -> 459 /
  // 482. Short documents keep 64 rows ahead at both lengths (8K 217 -> 202 / 194, 32K 202 -> 186 /
  // 178) and at 8K the causal masks are level with 128 rows (causal document 319 / 320, share
  // question 269 / 265), so causal index masks switch at 16K rows, between the measured points.
  if (tall_fits && p.seqlen_q >= sm90::kLongRows) {
    if (!p.causal) return 192;
    if (p.seqlen_q >= sm90::kLongCausalIndexRows) return 128;
  }
  // Index masks: 128 rows (persistent) once rows are long enough for long key lists, else 64 rows
  // with two CTAs per SM. H200, bf16 D=128, B*S=32K, one process, fwd TFLOP/s 64 -> 128 rows (TMA
  // epilogue and longest-first tiles in both): 8K prefix-LM causal 503 -> 601, sliding window
  // 412 -> 463, document 361 -> 385, causal document 333 -> 340, share question 295 -> 286, short
  // documents 214 -> 200; at 32K 128 rows led by 5-19% already before those two changes.
  return d == 128 && p.seqlen_q >= sm90::kLongRows ? 128 : 64;
}

// 64 rows: persistent for causal masks, where it measured ahead (e2e-shaped 32K row: 0.82 vs
// 0.92 ms; kernel_bench rows within +-3%), not for bidirectional ones (document: 5-7% behind).
// 128 rows: for index masks (8K, 17093a4: causal document 299 -> 315, share question 248 -> 268,
// short documents 156 -> 172 TFLOP/s against one tile per CTA), and for causal attention, where
// the start and the epilogue of a one-tile CTA weigh most on short rows (H200, bf16, D = 128, fwd
// TFLOP/s one tile -> persistent: 2K 454 -> 530, 4K 540 -> 582, 8K 588 -> 606; 16K and 32K level,
// kernel_h200_fwd_persistent_causal_ab.json), and on long rows too (H100, library ebc5aa4, four
// rounds: 32K 660 -> 672, 64K 668 -> 679, 16:4 and fp16 alike, every round ahead; 128K +0.3-0.8%;
// kernel_h100_fwd_persistent_*_causal_ab.json); not for dense attention (8K full level). Dropout
// and 256 columns have one tile per CTA only (no room for the persistent kernel's second Q stage
// at 256). 192 rows (D = 64): persistent for causal attention and index masks, one tile per CTA for
// dense attention (H100, bf16, 8K causal 454 -> 508 TFLOP/s, 32K causal and 8K / 32K full within
// round-to-round spread; kernel_h100_fwd_d64_tile_heights.json).
bool persistent_of(const FwdParams& p, int block_m) {
  if (p.dropout_p > 0.f || sm90::kernel_head_dim(p) > 128) return false;
  const EnvSwitch forced = env_switch("FLASHMASK_SM90_PERSISTENT");
  if (forced != EnvSwitch::kUnset) return forced == EnvSwitch::kOn;
  return p.causal || (block_m >= 128 && p.mask_form.has_indices());
}

}  // namespace

sm90::FwdShape sm90::fwd_shape(const FwdParams& p) {
  const int block_m = block_m_of(p);
  return {block_m, persistent_of(p, block_m)};
}

int sm90::fwd_pack_shift(const FwdParams& p, int block_m) {
  const EnvSwitch forced = env_switch("FLASHMASK_SM90_PACK_GQA");
  if (forced == EnvSwitch::kOff) return 0;
  // Causal attention without indices runs one head per tile unless forced: there is no mask to
  // share and the packed tiles' narrower diagonal costs more than the shared K / V loads save (H100,
  // bf16, GQA 16:4, three rounds, fwd TFLOP/s packed -> one head per tile: D = 128 8K 644 -> 696,
  // 32K 672 -> 679; D = 64 level; kernel_h100_fwd_gqa_causal_variants.json).
  if (forced == EnvSwitch::kUnset && p.causal && !p.mask_form.has_indices()) return 0;
  const int group = p.heads_k > 0 ? p.heads_q / p.heads_k : 1;
  const bool one_slice_per_group =
      !p.mask_form.has_indices() || p.mask_heads <= 1 || p.mask_heads == p.heads_k;
  // Rows whose K / V head outgrows an L2 section (fwd_tile_order.cuh) gain nothing from packing
  // (1M-token causal-document row, GQA 16:4: 600 packed vs 603 TFLOP/s) and their block lists,
  // O(Sq / positions per tile x Sk / block_n), would grow by the group size: unpacked there.
  if (group <= 1 || (group & (group - 1)) != 0 || group > block_m / 8 || !one_slice_per_group ||
      p.dropout_p > 0.f || p.block_mask != nullptr || sm90::kernel_head_dim(p) > 128 ||
      sm90::order_keeps_locality(p))
    return 0;
  int shift = 0;
  while ((1 << shift) < group) ++shift;
  return shift;
}

bool sm90::fwd_document_blocks(const FwdParams& p) {
  // Document ranges are found on square masks (key_blocks.cuh); a block mask's blocks and dropout's
  // random bits sit at multiples of the fixed blocks.
  if (!p.mask_form.has_indices() || p.seqlen_q != p.seqlen_k || p.block_mask != nullptr || p.dropout_p > 0.f)
    return false;
  const EnvSwitch forced = env_switch("FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS");
  if (forced != EnvSwitch::kUnset) return forced == EnvSwitch::kOn;
  // Measured ahead on bidirectional masks (documents, prefix-LM documents; H100, 8K and 32K): D = 64
  // +6-20%, D = 128 +1-6% (benchmarks/results/kernel_h100_fwd_document_blocks*.json). Causal ones
  // are level or lose up to 4% (causal and short documents, share question), though they visit
  // fewer tiles and fewer partial ones too (DESIGN_forward.md). D = 256 is not measured.
  const int d = kernel_head_dim(p);
  return !p.causal && (d == 64 || d == 128);
}

bool fwd_sm90_selected(const FwdParams& p) {
  // Wherever it runs, unless FLASHMASK_FORCE_PATH=sm80 (tests/gpu compares both paths with an fp64
  // reference on every shape).
  const bool selected = sm90::forced_path() != 80 && sm90::instantiated(p.dtype, p.head_dim, p.head_dim_v) &&
                        p.seqlen_k > 0 && device_runs_sm90();
  // FLASHMASK_LOG_PATH=1: say once per process which path the forward took (tests of the switch).
  static bool logged = false;
  if (!logged && env_switch("FLASHMASK_LOG_PATH") == EnvSwitch::kOn) {
    logged = true;
    std::fprintf(stderr, "flashmask fwd path: %s (head_dim %d, head_dim_v %d)\n", selected ? "sm90" : "sm80",
                 p.head_dim, p.head_dim_v);
  }
  return selected;
}

int sm90::payload_tiles_per_list() { return env_int("FLASHMASK_SM90_PAYLOAD_TILES", 4, 0); }

namespace {

// Mask payload slots of a call, pooled over its query-block lists.
int32_t payload_capacity(const FwdParams& p, int32_t num_m_blocks) {
  const int64_t lists = (int64_t)MaskSlices::of(p).count() * num_m_blocks;
  return (int32_t)std::min<int64_t>(lists * sm90::payload_tiles_per_list(), INT32_MAX / 2);
}

// The tiles of a call: the kernel's block_m x block_n, the GQA packing (sm90::fwd_pack_shift) and,
// from it, the problem the tiles see and the positions a query block's list covers; whether the
// blocks follow the documents (sm90::fwd_document_blocks).
struct Sm90FwdTiling {
  int block_m, block_n, pack_shift, list_rows;
  bool documents;
  FwdParams tiles;

  Sm90FwdTiling(const FwdParams& p, int block_m_)
      : block_m(block_m_),
        block_n(sm90::fwd_block_n(block_m_, sm90::kernel_head_dim(p))),
        pack_shift(sm90::fwd_pack_shift(p, block_m_)),
        list_rows(block_m_ >> pack_shift),
        documents(sm90::fwd_document_blocks(p)),
        tiles(sm90::packed_view(p, pack_shift)) {}
};

// The sm90 forward's mask plan: the block lists (bounds, entries, counts, column bounds), the
// document blocks where the lists run over them, then the partial tiles' numbering and each payload
// slot's list, their mask payloads, the tile order.
struct Sm90FwdPlan {
  FwdBlockLists lists;
  FwdDocumentBlocks documents;
  // Where documents.rows and .cols are built; one region where the query tiles hold block_n
  // positions, their blocks being then the keys' (the finder runs once).
  void* row_blocks = nullptr;
  void* col_blocks = nullptr;
  sm90::FwdMaskPayload payload;
  int32_t* order = nullptr;
  size_t bytes = 0;

  // base: the plan's memory, or nullptr to count its bytes only.
  Sm90FwdPlan(const Sm90FwdTiling& t, const void* base) {
    const FwdParams& p = t.tiles;
    const int block_m = t.list_rows, block_n = t.block_n;
    // Addresses as integers: with base = nullptr only the size is wanted.
    const uintptr_t origin = reinterpret_cast<uintptr_t>(base);
    size_t at = fwd_block_lists_workspace_bytes(p, block_m, block_n, t.documents);
    auto take = [&](size_t region) {
      const uintptr_t where = origin + at;
      at += align_up(region);
      return reinterpret_cast<char*>(where);
    };
    if (t.documents) {
      row_blocks = take(document_key_blocks_bytes(p, block_m));
      col_blocks = block_m == block_n ? row_blocks : take(document_key_blocks_bytes(p, block_n));
      if (base != nullptr) {
        documents.rows = carve_document_key_blocks(p, block_m, row_blocks);
        documents.cols = carve_document_key_blocks(p, block_n, col_blocks);
      }
    }
    if (base != nullptr) lists = carve_fwd_block_lists(p, block_m, block_n, base, t.documents ? &documents : nullptr);
    const int32_t num_m_blocks = fwd_num_m_blocks(p, block_m, t.documents);
    payload.capacity = payload_capacity(p, num_m_blocks);
    payload.partial_offsets = reinterpret_cast<int32_t*>(take(partial_offsets_bytes(p, num_m_blocks)));
    payload.slot_lists = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * (size_t)payload.capacity));
    payload.words = reinterpret_cast<uint32_t*>(
        take((size_t)payload.capacity * sm90::fwd_payload_bytes(t.block_m, block_n)));
    order = reinterpret_cast<int32_t*>(take(sm90::fwd_tile_order_bytes(p, num_m_blocks)));
    bytes = at;
  }
};

}  // namespace

MaskPlanSize fwd_sm90_plan_size(const FwdParams& p, int block_m) {
  const Sm90FwdTiling t(p, block_m);
  const Sm90FwdPlan layout(t, nullptr);
  return {layout.bytes, mask_plan_key(p, PlanDirection::kForward,
                                      {90, block_m, t.block_n, t.pack_shift, layout.payload.capacity, t.documents})};
}

void build_fwd_sm90_plan(const FwdParams& p, int block_m, void* base, cudaStream_t stream) {
  const Sm90FwdTiling t(p, block_m);
  const Sm90FwdPlan plan(t, base);
  FwdDocumentBlocks documents;
  if (t.documents) {
    documents.cols = build_document_key_blocks(t.tiles, t.block_n, plan.col_blocks, stream);
    documents.rows = plan.row_blocks == plan.col_blocks
                         ? documents.cols
                         : build_document_key_blocks(t.tiles, t.list_rows, plan.row_blocks, stream,
                                                     /*with_bounds*/ false);
  }
  const FwdBlockLists lists =
      build_fwd_block_lists(t.tiles, t.list_rows, t.block_n, base, stream, t.documents ? &documents : nullptr);
  if (lists.num_m_blocks == 0) return;
  launch_partial_offsets(lists, t.tiles, const_cast<int32_t*>(plan.payload.partial_offsets), stream,
                         const_cast<int32_t*>(plan.payload.slot_lists), plan.payload.capacity);
  // Longest lists first where that shortens the tail (fwd_sorts_tiles, fwd_tile_order.cuh).
  if (sm90::fwd_sorts_tiles(p, t.pack_shift)) sm90::launch_fwd_tile_order(t.tiles, lists, plan.order, stream);
  sm90::dispatch_instantiation(p.dtype, sm90::kernel_head_dim(p), "build_fwd_sm90_plan", [&](auto e, auto d) {
    sm90::launch_fwd_mask_payload<decltype(e), decltype(d)::value>(p, lists, block_m, t.pack_shift, plan.payload,
                                                                   stream);
  });
}

void run_fwd_sm90(const FwdParams& p, sm90::FwdShape shape, const void* base, void* scratch, cudaStream_t stream) {
  const Sm90FwdTiling t(p, shape.block_m);
  const Sm90FwdPlan plan(t, base);
  if (plan.lists.num_m_blocks == 0) return;
  const int32_t* order = sm90::fwd_sorts_tiles(p, t.pack_shift) ? plan.order : nullptr;
  sm90::dispatch_instantiation(p.dtype, sm90::kernel_head_dim(p), "run_fwd_sm90", [&](auto e, auto d) {
    sm90::run_fwd_sm90_kernel<decltype(e), decltype(d)::value>(p, plan.lists, shape, t.pack_shift,
                                                               static_cast<int32_t*>(scratch), plan.payload,
                                                               order, stream);
  });
}

}  // namespace flashmask
