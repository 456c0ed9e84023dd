// Shared helpers of the CUDA kernels: error checking, runtime-value -> template-parameter switches
// (one place, like FlashAttention's static_switch.h), and small device math.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include <cutlass/numeric_types.h>

#include "flashmask/params.h"

// Throws std::runtime_error naming the failing call and where it was made.
#define FM_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    const cudaError_t fm_err_ = (call);                                                       \
    if (fm_err_ != cudaSuccess) {                                                             \
      throw std::runtime_error(std::string("flashmask: ") + #call + " failed: " +             \
                               cudaGetErrorString(fm_err_) + " at " + __FILE__ + ":" +        \
                               std::to_string(__LINE__));                                     \
    }                                                                                         \
  } while (0)

// After a <<<...>>> launch: reports bad launch configurations and earlier asynchronous errors.
#define FM_CHECK_LAUNCH(what)                                                                 \
  do {                                                                                        \
    const cudaError_t fm_err_ = cudaGetLastError();                                           \
    if (fm_err_ != cudaSuccess) {                                                             \
      throw std::runtime_error(std::string("flashmask: launch of ") + (what) + " failed: " +  \
                               cudaGetErrorString(fm_err_) + " at " + __FILE__ + ":" +        \
                               std::to_string(__LINE__));                                     \
    }                                                                                         \
  } while (0)

// FM_DTYPE_SWITCH(dtype, T, ...): runs the body with T = cutlass::half_t or cutlass::bfloat16_t.
#define FM_DTYPE_SWITCH(DTYPE, T, ...)                                                        \
  [&] {                                                                                       \
    if ((DTYPE) == ::flashmask::DType::kFloat16) {                                            \
      using T = cutlass::half_t;                                                              \
      return __VA_ARGS__();                                                                   \
    } else if ((DTYPE) == ::flashmask::DType::kBFloat16) {                                    \
      using T = cutlass::bfloat16_t;                                                          \
      return __VA_ARGS__();                                                                   \
    }                                                                                         \
    throw std::runtime_error("flashmask: CUDA kernels take float16 or bfloat16 tensors");     \
  }()

// FM_HEADDIM_SWITCH(head_dim, D, ...): runs the body with constexpr int D in {64, 128, 256} (the
// kernel's columns, cuda_kernel_head_dim of the call's D and Dv).
#define FM_HEADDIM_SWITCH(HEAD_DIM, D, ...)                                                   \
  [&] {                                                                                       \
    if ((HEAD_DIM) == 64) {                                                                   \
      constexpr static int D = 64;                                                            \
      return __VA_ARGS__();                                                                   \
    } else if ((HEAD_DIM) == 128) {                                                           \
      constexpr static int D = 128;                                                           \
      return __VA_ARGS__();                                                                   \
    } else if ((HEAD_DIM) == 256) {                                                           \
      constexpr static int D = 256;                                                           \
      return __VA_ARGS__();                                                                   \
    }                                                                                         \
    throw std::runtime_error("flashmask: CUDA kernel instantiations are 64, 128 or 256 columns, got " + \
                             std::to_string(HEAD_DIM));                                       \
  }()

namespace flashmask {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline size_t align_up(size_t bytes, size_t alignment = 256) {
  return (bytes + alignment - 1) / alignment * alignment;
}

#if defined(__CUDACC__)
// 2^x with the hardware approximation (what FlashAttention uses for the softmax); ftz is harmless
// because the softmax inputs are <= 0 and tiny results only ever add to a sum >= 1.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Max / sum over the 4 lanes of a quad: the threads that share a row of an MMA accumulator (both
// the sm80 mma.sync and the sm90 wgmma layouts spread a row's columns over one quad).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
#endif

}  // namespace flashmask
