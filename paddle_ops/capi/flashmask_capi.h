/* The framework-free C ABI over the FlashMask launcher (launch.h). Plain C so that ctypes, the
 * PyTorch binding and any other framework can call it. Every function returns 0 on success and a
 * non-zero code on failure; fm_last_error() then says what went wrong (thread-local). */
#ifndef FLASHMASK_CAPI_H_
#define FLASHMASK_CAPI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHMASK_CAPI_VERSION 3

/* A [B, S, H, D] view; D contiguous. Strides in elements. The CUDA kernels load rows as 16-byte
 * vectors: a 16-byte aligned base and strides that are multiples of 8 elements (else a bad argument). */
typedef struct {
  void* data;
  int64_t batch_stride, row_stride, head_stride;
} fm_tensor;

typedef struct {
  int32_t dtype; /* 0 float32, 1 float16, 2 bfloat16 */
  int32_t batch, seqlen_q, seqlen_k, heads_q, heads_k, head_dim;
  float softmax_scale;
  int32_t causal;
  fm_tensor q, k, v, out; /* q [B, Sq, Hq, D]; k [B, Sk, Hk, D]; v [B, Sk, Hk, Dv]; out [B, Sq, Hq, Dv] */
  float* lse;             /* [B, Hq, Sq] contiguous */
  const int32_t* startend_row_indices; /* [B, Hm, Sk, C] contiguous, or NULL */
  int32_t mask_heads, mask_cols;       /* Hm in {1, Hk, Hq}; C in {1, 2, 4} (0 when NULL) */
  /* backward only (ignored by forward calls) */
  fm_tensor dout, dq, dk, dv;
  int32_t deterministic;
  /* since version 2 */
  int32_t head_dim_v;         /* Dv of v, out, dout and dv */
  const int32_t* block_mask;  /* [B, Hm, ceil(Sq/128), ceil(Sk/128)] contiguous 0/1, or NULL */
  float dropout;              /* probability in [0, 1); 0 disables dropout */
  uint64_t dropout_seed, dropout_offset; /* Philox stream (flashmask/dropout.h) */
  /* since version 3 */
  const void* plan;  /* CUDA calls: the mask plan built by fm_*_plan_build for this call, or NULL */
  uint64_t plan_key; /* its key, as fm_*_plan_size reported it */
} fm_args;

int fm_abi_version(void);
const char* fm_last_error(void);
/* 1 when the library was built with CUDA kernels. */
int fm_has_cuda(void);
/* What the kernels of `cuda` (0: CPU, 1: CUDA) support, so bindings keep no copy of their own.
 * fm_supported_dtypes writes up to `capacity` dtype codes and returns how many there are.
 * fm_supported_head_dims writes up to `capacity` (D, Dv) pairs and returns how many there are,
 * or -1 when any positive D and Dv are supported (the CPU kernels). */
int fm_supported_dtypes(int32_t cuda, int32_t* codes, int32_t capacity);
int fm_supported_head_dims(int32_t cuda, int32_t* head_dim, int32_t* head_dim_v, int32_t capacity);

/* CPU kernels: pointers are host memory. */
int fm_fwd_cpu(const fm_args* args);
int fm_bwd_cpu(const fm_args* args);

/* CUDA kernels: pointers are device memory; `stream` is a cudaStream_t (NULL: default stream).
 * `workspace` holds at least the bytes the matching *_workspace_bytes call reports for the same
 * args (fewer when args->plan is set). */
int fm_fwd_workspace_bytes(const fm_args* args, size_t* bytes);
int fm_bwd_workspace_bytes(const fm_args* args, size_t* bytes);
int fm_fwd_cuda(const fm_args* args, void* workspace, void* stream);
int fm_bwd_cuda(const fm_args* args, void* workspace, void* stream);

/* Mask plans (flashmask/launch.h): the preprocessing of a mask (block bounds, block lists, mask
 * payloads, tile order), built once into `plan` (*bytes of device memory, never 0) and passed to
 * every later call with the same mask values and problem as args->plan and args->plan_key = *key.
 * A call given a plan of another key fails with code 1. The plan is ready for calls on `stream`;
 * calls on another stream must wait for it. */
int fm_fwd_plan_size(const fm_args* args, size_t* bytes, uint64_t* key);
int fm_bwd_plan_size(const fm_args* args, size_t* bytes, uint64_t* key);
int fm_fwd_plan_build(const fm_args* args, void* plan, void* stream);
int fm_bwd_plan_build(const fm_args* args, void* plan, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* FLASHMASK_CAPI_H_ */
