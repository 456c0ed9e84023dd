// Development-only C entry for the backward (tests_dev/bwd_check.py): fm_args -> BwdParams ->
// run_bwd_cuda, without the rest of the library. Not part of sources_cuda.txt.
#include <string>

#include "flashmask/launch.h"
#include "../../capi/fm_args_params.h"

namespace {
thread_local std::string g_error;

flashmask::BwdParams params_of(const fm_args* a) { return flashmask::bwd_params_of(*a); }
}  // namespace

extern "C" const char* fmdev_error() { return g_error.c_str(); }

extern "C" int fmdev_bwd_workspace_bytes(const fm_args* a, size_t* bytes) {
  try { *bytes = flashmask::bwd_workspace_bytes_cuda(params_of(a)); return 0; }
  catch (const std::exception& e) { g_error = e.what(); return 1; }
}

extern "C" int fmdev_bwd(const fm_args* a, void* workspace, void* stream) {
  try { flashmask::run_bwd_cuda(params_of(a), workspace, static_cast<cudaStream_t>(stream)); return 0; }
  catch (const std::exception& e) { g_error = e.what(); return 1; }
}
