// The C ABI over the launcher (launch.h): converts fm_args into FwdParams/BwdParams, checks what
// can be checked without reading tensor data (sizes, forms, null pointers), and turns every C++
// exception into a return code plus a thread-local message, so no exception crosses the C boundary.
#include "flashmask_capi.h"

#include <exception>
#include <stdexcept>
#include <string>

#include "fm_args_params.h"
#include "flashmask/launch.h"

namespace {

thread_local std::string g_last_error;

struct ArgError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

void require(bool ok, const std::string& what) {
  if (!ok) throw ArgError(what);
}

// `need_data`: false for workspace-size queries, which may come before the outputs exist.
void require_data(const fm_tensor& t, const char* name, bool need_data) {
  require(!need_data || t.data != nullptr, std::string(name) + ".data is NULL");
}

// Shape/form checks that need no tensor data; the bound values are validated by the callers
// (flashmask_paddle._validate) because reading them may need a device copy.
void check_shapes(const fm_args& a) {
  require(a.dtype >= 0 && a.dtype <= 2, "dtype must be 0 (float32), 1 (float16) or 2 (bfloat16), got " +
                                            std::to_string(a.dtype));
  require(a.batch > 0 && a.seqlen_q > 0 && a.seqlen_k > 0 && a.heads_q > 0 && a.heads_k > 0 &&
              a.head_dim > 0,
          "batch, seqlen_q, seqlen_k, heads_q, heads_k and head_dim must be positive");
  require(a.heads_q % a.heads_k == 0, "heads_q (" + std::to_string(a.heads_q) +
                                          ") must be a multiple of heads_k (" +
                                          std::to_string(a.heads_k) + ")");
  if (a.startend_row_indices == nullptr) {
    require(a.mask_cols == 0, "mask_cols must be 0 when startend_row_indices is NULL");
    return;
  }
  const int c = a.mask_cols;
  require(c == 1 || c == 2 || c == 4, "mask_cols must be 1, 2 or 4, got " + std::to_string(c));
  require(!(a.causal && c == 4), "mask_cols=4 needs causal=0");
  require(!(!a.causal && c == 1), "mask_cols=1 needs causal=1");
  const int hm = a.mask_heads;
  require(hm == 1 || hm == a.heads_k || hm == a.heads_q,
          "mask_heads must be 1, heads_k or heads_q, got " + std::to_string(hm));
}

flashmask::FwdParams fwd_params(const fm_args* a, bool need_data = true) {
  require(a != nullptr, "args is NULL");
  check_shapes(*a);
  require_data(a->q, "q", need_data);
  require_data(a->k, "k", need_data);
  require_data(a->v, "v", need_data);
  require_data(a->out, "out", need_data);
  require(!need_data || a->lse != nullptr, "lse is NULL (the forward always writes the LSE)");
  return flashmask::fwd_params_of(*a);
}

flashmask::BwdParams bwd_params(const fm_args* a, bool need_data = true) {
  fwd_params(a, need_data);  // the forward's checks
  require_data(a->dout, "dout", need_data);
  require_data(a->dq, "dq", need_data);
  require_data(a->dk, "dk", need_data);
  require_data(a->dv, "dv", need_data);
  return flashmask::bwd_params_of(*a);
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

#if !defined(FLASHMASK_WITH_CUDA)
[[noreturn]] void no_cuda() {
  throw std::runtime_error("this libflashmask was built without CUDA (FLASHMASK_WITH_CUDA=OFF)");
}
#endif

}  // namespace

extern "C" {

int fm_abi_version(void) { return FLASHMASK_CAPI_VERSION; }

const char* fm_last_error(void) { return g_last_error.c_str(); }

int fm_has_cuda(void) {
#if defined(FLASHMASK_WITH_CUDA)
  return 1;
#else
  return 0;
#endif
}

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
    *bytes = flashmask::fwd_workspace_bytes_cuda(fwd_params(args, false));
#else
    no_cuda();
#endif
  });
}

int fm_bwd_workspace_bytes(const fm_args* args, size_t* bytes) {
  return guarded([&] {
    require(bytes != nullptr, "bytes is NULL");
#if defined(FLASHMASK_WITH_CUDA)
    *bytes = flashmask::bwd_workspace_bytes_cuda(bwd_params(args, false));
#else
    no_cuda();
#endif
  });
}

int fm_fwd_cuda(const fm_args* args, void* workspace, void* stream) {
  return guarded([&] {
#if defined(FLASHMASK_WITH_CUDA)
    flashmask::run_fwd_cuda(fwd_params(args), workspace, static_cast<cudaStream_t>(stream));
#else
    (void)args, (void)workspace, (void)stream;
    no_cuda();
#endif
  });
}

int fm_bwd_cuda(const fm_args* args, void* workspace, void* stream) {
  return guarded([&] {
#if defined(FLASHMASK_WITH_CUDA)
    flashmask::run_bwd_cuda(bwd_params(args), workspace, static_cast<cudaStream_t>(stream));
#else
    (void)args, (void)workspace, (void)stream;
    no_cuda();
#endif
  });
}

}  // extern "C"
