// Development-only C entry for the forward (tests_dev/fwd_check.py): fm_args -> FwdParams ->
// run_fwd_cuda, plus bf16 tile-shape variants (D, M, N, warps) for timing (compiled once per
// -DFM_FWD_VARIANT=1..3 as fmfwd_variant<N>). Not part of sources_cuda.txt.
#include <cstdio>
#include <string>

#include "../../capi/fm_args_params.h"
#include "flashmask/launch.h"

#if defined(FM_FWD_VARIANT)
#include "../fwd_kernel.cuh"
#endif

namespace {
thread_local std::string g_error;

flashmask::FwdParams params_of(const fm_args* a) { return flashmask::fwd_params_of(*a); }
}  // namespace

#if !defined(FM_FWD_VARIANT)
extern "C" const char* fmfwd_error() { return g_error.c_str(); }

extern "C" int fmfwd_workspace_bytes(const fm_args* a, size_t* bytes) {
  try { *bytes = flashmask::fwd_workspace_bytes_cuda(params_of(a)); return 0; }
  catch (const std::exception& e) { g_error = e.what(); return 1; }
}

extern "C" int fmfwd_run(const fm_args* a, void* workspace, void* stream) {
  try { flashmask::run_fwd_cuda(params_of(a), workspace, static_cast<cudaStream_t>(stream)); return 0; }
  catch (const std::exception& e) { g_error = e.what(); return 1; }
}
#else
#if FM_FWD_VARIANT == 1
#define FM_TILE 128, 128, 64, 4
#elif FM_FWD_VARIANT == 2
#define FM_TILE 64, 64, 64, 4
#else
#define FM_TILE 256, 128, 64, 8
#endif
#define FM_CAT2(a, b) a##b
#define FM_CAT(a, b) FM_CAT2(a, b)
using VariantTraits = flashmask::fwd::FwdTraits<cutlass::bfloat16_t, FM_TILE>;

// bf16 only, the head dim of FM_TILE; workspace as fwd_block_lists_workspace_bytes for this variant's tile.
extern "C" int FM_CAT(fmfwd_variant, FM_FWD_VARIANT)(const fm_args* a, void* workspace, void* stream,
                                                     size_t* bytes) {
  try {
    const flashmask::FwdParams p = params_of(a);
    const int bm = VariantTraits::kBlockM, bn = VariantTraits::kBlockN;
    if (bytes != nullptr) { *bytes = flashmask::fwd_block_lists_workspace_bytes(p, bm, bn); return 0; }
    const auto s = static_cast<cudaStream_t>(stream);
    const flashmask::FwdBlockLists lists = flashmask::build_fwd_block_lists(p, bm, bn, workspace, s);
    flashmask::launch_fwd_kernel<VariantTraits>(p, lists, s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fmfwd_variant: %s\n", e.what());
    return 1;
  }
}
#endif
