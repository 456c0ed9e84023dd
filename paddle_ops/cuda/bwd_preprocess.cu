// Kernels around the backward main loop; see bwd_preprocess.h. Memory-bound and cheap: 16-byte
// loads, a row per group of lanes, no tiling.
#include "bwd_preprocess.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "flashmask/check.h"
#include "utils.cuh"

namespace flashmask {
namespace bwd {
namespace {

constexpr int kWarpsPerCta = 8;
constexpr float kLog2e = 1.4426950408889634f;

// Eight 16-bit values -> floats.
template <typename T> struct Pack8;
template <> struct Pack8<__nv_bfloat16> {
  static __device__ void to_float(const uint4& u, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) { float2 x = __bfloat1622float2(h[i]); f[2 * i] = x.x; f[2 * i + 1] = x.y; }
  }
};
template <> struct Pack8<__half> {
  static __device__ void to_float(const uint4& u, float* f) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) { float2 x = __half22float2(h[i]); f[2 * i] = x.x; f[2 * i + 1] = x.y; }
  }
};

// Lanes that share one row: each reads 8 of its Dv columns of O and of dO per 16-byte load, and a
// warp covers 32 / lanes_per_row rows at once, so that no lane idles below Dv = 256 (with a row per
// warp half of them did at Dv = 128, and the kernel had too few loads in flight to reach the memory
// bandwidth).
__host__ __device__ inline int lanes_per_row(int head_dim_v) {
  int lanes = 1;
  while (lanes < 32 && lanes * 8 < head_dim_v) lanes *= 2;
  return lanes;
}

template <typename T>
__global__ void __launch_bounds__(32 * kWarpsPerCta) prepare_rows_kernel(BwdParams p, Workspace ws) {
  const int b = blockIdx.z, h = blockIdx.y;
  const int lanes = lanes_per_row(p.head_dim_v);
  const int rows_per_cta = kWarpsPerCta * (32 / lanes);
  const int lane = threadIdx.x % lanes;
  const int first_row = blockIdx.x * rows_per_cta;
  const int row = first_row + threadIdx.x / lanes;
  const int64_t slice_row0 = (int64_t(b) * p.heads_q + h) * ws.seqlen_q_pad;  // row 0 of (b, h) in ws
  float dot = 0.f;
  if (row < p.seqlen_q) {
    const T* o = p.out.at<const T>(b, row, h);
    const T* d = p.dout.at<const T>(b, row, h);
    for (int c = lane * 8; c < p.head_dim_v; c += lanes * 8) {  // O and dO have Dv columns
      float fo[8], fd[8];
      Pack8<T>::to_float(*reinterpret_cast<const uint4*>(o + c), fo);
      Pack8<T>::to_float(*reinterpret_cast<const uint4*>(d + c), fd);
#pragma unroll
      for (int i = 0; i < 8; ++i) dot += fo[i] * fd[i];
    }
  }
  // A row's lanes are an aligned power-of-two group, so the butterfly stays inside it.
  for (int s = lanes / 2; s > 0; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
  if (lane == 0 && row < ws.seqlen_q_pad) {
    const int64_t r = slice_row0 + row;
    ws.dpsum[r] = dot;
    // P = exp2(S * scale * log2e - lse_log2): +inf makes P exactly 0 on fully masked rows (LSE = -inf)
    // and on padding rows, without a branch in the main loop.
    const float lse = row < p.seqlen_q ? p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + row] : -INFINITY;
    ws.lse_log2[r] = lse == -INFINITY ? INFINITY : lse * kLog2e;
  }
  if (ws.dq_first_store) {
    // The claim words of the row groups starting in this CTA's rows, every plane: the Hopper dQ
    // writers store each group's first partial (sm90/bwd_dq_claims.cuh), so the accumulator stays
    // as it is.
    const int groups = ws.seqlen_q_pad / kDqClaimRows;
    const int g0 = (first_row + kDqClaimRows - 1) / kDqClaimRows;
    const int g_end = min(groups, (first_row + rows_per_cta + kDqClaimRows - 1) / kDqClaimRows);
    uint32_t* claims = ws.dq_claims + (int64_t(b) * p.heads_q + h) * ws.dq_claim_planes * groups;
    for (int i = threadIdx.x; i < ws.dq_claim_planes * (g_end - g0); i += blockDim.x)
      claims[i / (g_end - g0) * groups + g0 + i % (g_end - g0)] = 0u;
  } else if (ws.dq_accum) {
    // This CTA's rows of the accumulator are one contiguous span.
    const int cols = cuda_kernel_head_dim(p.head_dim, p.head_dim_v);  // the accumulator's row (bwd_workspace.h)
    const int rows = min(rows_per_cta, ws.seqlen_q_pad - first_row);
    float4* acc = reinterpret_cast<float4*>(ws.dq_accum + (slice_row0 + first_row) * cols);
    for (int i = threadIdx.x; i < rows * cols / 4; i += blockDim.x) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

}  // namespace

void launch_prepare_rows(const BwdParams& p, const Workspace& ws, cudaStream_t stream) {
  const int rows_per_cta = kWarpsPerCta * (32 / lanes_per_row(p.head_dim_v));
  const dim3 grid((ws.seqlen_q_pad + rows_per_cta - 1) / rows_per_cta, p.heads_q, p.batch);
  if (p.dtype == DType::kBFloat16)
    prepare_rows_kernel<__nv_bfloat16><<<grid, kWarpsPerCta * 32, 0, stream>>>(p, ws);
  else
    prepare_rows_kernel<__half><<<grid, kWarpsPerCta * 32, 0, stream>>>(p, ws);
  FM_CHECK_LAUNCH("prepare_rows");
}

}  // namespace bwd
}  // namespace flashmask
