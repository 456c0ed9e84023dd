// The C ABI over the launcher (launch.h): converts fm_args into FwdParams/BwdParams, checks them
// with flashmask/check.h (sizes, forms, null pointers: no tensor data is read), and turns every C++
// exception into a return code plus a thread-local message, so no exception crosses the C boundary.
#include "flashmask_capi.h"

#include <exception>
#include <stdexcept>
#include <string>

#include "fm_args_params.h"
#include "flashmask/check.h"
#include "flashmask/launch.h"

namespace {

thread_local std::string g_last_error;

using flashmask::ArgError;

void require(bool ok, const std::string& what) {
  if (!ok) throw ArgError(what);
}

// `need_data`: false for workspace-size queries, which may come before the outputs exist.
flashmask::FwdParams fwd_params(const fm_args* a, bool need_data = true) {
  require(a != nullptr, "args is NULL");
  require(a->startend_row_indices != nullptr || a->mask_cols == 0,
          "mask_cols must be 0 when startend_row_indices is NULL");
  const flashmask::FwdParams p = flashmask::fwd_params_of(*a);
  flashmask::check_params(p, "fm_args", need_data);
  return p;
}

flashmask::BwdParams bwd_params(const fm_args* a, bool need_data = true) {
  require(a != nullptr, "args is NULL");
  const flashmask::BwdParams p = flashmask::bwd_params_of(*a);
  fwd_params(a, need_data);
  flashmask::check_bwd_params(p, "fm_args", need_data);
  return p;
}

// Runs `body`, mapping exceptions to codes: 1 bad argument, 2 runtime/CUDA error, 3 anything else.
template <class F>
int guarded(F&& body) noexcept {
  try {
    body();
    g_last_error.clear();
    return 0;
  } catch (const ArgError& e) {
    g_last_error = std::string("flashmask: invalid argument: ") + e.what();
    return 1;
  } catch (const std::exception& e) {
    g_last_error = std::string("flashmask: ") + e.what();
    return 2;
  } catch (...) {
    g_last_error = "flashmask: unknown C++ exception";
    return 3;
  }
}

#if defined(FLASHMASK_WITH_CUDA)
flashmask::MaskPlan plan_of(const fm_args* a) {
  flashmask::MaskPlan plan;
  plan.data = a->plan;
  plan.key = a->plan_key;
  return plan;
}
#else
[[noreturn]] void no_cuda() {
  throw std::runtime_error("this libflashmask was built without CUDA (FLASHMASK_WITH_CUDA=OFF)");
}
#endif

}  // namespace

extern "C" {

int fm_abi_version(void) { return FLASHMASK_CAPI_VERSION; }

const char* fm_last_error(void) { return g_last_error.c_str(); }

int fm_fwd_cpu(const fm_args* args) {
  return guarded([&] { flashmask::run_fwd_cpu(fwd_params(args)); });
}

int fm_bwd_cpu(const fm_args* args) {
  return guarded([&] { flashmask::run_bwd_cpu(bwd_params(args)); });
}

int fm_fwd_workspace_bytes(const fm_args* args, size_t* bytes) {
  return guarded([&] {
    require(bytes != nullptr, "bytes is NULL");
#if defined(FLASHMASK_WITH_CUDA)
    const flashmask::FwdParams params = fwd_params(args, false);  // rejects a NULL args first
    *bytes = flashmask::fwd_workspace_bytes_cuda(params, args->plan != nullptr);
#else
    no_cuda();
#endif
  });
}

int fm_bwd_workspace_bytes(const fm_args* args, size_t* bytes) {
  return guarded([&] {
    require(bytes != nullptr, "bytes is NULL");
#if defined(FLASHMASK_WITH_CUDA)
    const flashmask::BwdParams params = bwd_params(args, false);  // rejects a NULL args first
    *bytes = flashmask::bwd_workspace_bytes_cuda(params, args->plan != nullptr);
#else
    no_cuda();
#endif
  });
}

int fm_fwd_cuda(const fm_args* args, void* workspace, void* stream) {
  return guarded([&] {
#if defined(FLASHMASK_WITH_CUDA)
    const flashmask::FwdParams params = fwd_params(args);  // rejects a NULL args first
    flashmask::run_fwd_cuda(params, workspace, static_cast<cudaStream_t>(stream), plan_of(args));
#else
    (void)args, (void)workspace, (void)stream;
    no_cuda();
#endif
  });
}

int fm_bwd_cuda(const fm_args* args, void* workspace, void* stream) {
  return guarded([&] {
#if defined(FLASHMASK_WITH_CUDA)
    const flashmask::BwdParams params = bwd_params(args);  // rejects a NULL args first
    flashmask::run_bwd_cuda(params, workspace, static_cast<cudaStream_t>(stream), plan_of(args));
#else
    (void)args, (void)workspace, (void)stream;
    no_cuda();
#endif
  });
}

int fm_fwd_plan_size(const fm_args* args, size_t* bytes, uint64_t* key) {
  return guarded([&] {
    require(bytes != nullptr && key != nullptr, "bytes or key is NULL");
#if defined(FLASHMASK_WITH_CUDA)
    const flashmask::MaskPlanSize size = flashmask::fwd_plan_size_cuda(fwd_params(args, false));
    *bytes = flashmask::plan_allocation_bytes(size);
    *key = size.key;
#else
    no_cuda();
#endif
  });
}

int fm_bwd_plan_size(const fm_args* args, size_t* bytes, uint64_t* key) {
  return guarded([&] {
    require(bytes != nullptr && key != nullptr, "bytes or key is NULL");
#if defined(FLASHMASK_WITH_CUDA)
    const flashmask::MaskPlanSize size = flashmask::bwd_plan_size_cuda(bwd_params(args, false));
    *bytes = flashmask::plan_allocation_bytes(size);
    *key = size.key;
#else
    no_cuda();
#endif
  });
}

int fm_fwd_plan_build(const fm_args* args, void* plan, void* stream) {
  return guarded([&] {
    require(plan != nullptr, "plan is NULL");
#if defined(FLASHMASK_WITH_CUDA)
    flashmask::build_fwd_plan_cuda(fwd_params(args, false), plan, static_cast<cudaStream_t>(stream));
#else
    (void)stream;
    no_cuda();
#endif
  });
}

int fm_bwd_plan_build(const fm_args* args, void* plan, void* stream) {
  return guarded([&] {
    require(plan != nullptr, "plan is NULL");
#if defined(FLASHMASK_WITH_CUDA)
    flashmask::build_bwd_plan_cuda(bwd_params(args, false), plan, static_cast<cudaStream_t>(stream));
#else
    (void)stream;
    no_cuda();
#endif
  });
}

}  // extern "C"
