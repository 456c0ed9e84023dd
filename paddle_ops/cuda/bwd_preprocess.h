// The row preprocessing before the backward main loop (bwd_preprocess.cu):
//   prepare_rows   D = rowsum(dO * O), LSE in log2 units (+inf where P must be 0), dQ accumulator zeroed
//                  (or, with dq_first_store, its claim words: bwd_workspace.h)
#pragma once

#include "flashmask/params.h"
#include "bwd_workspace.h"

typedef struct CUstream_st* cudaStream_t;

namespace flashmask {
namespace bwd {

void launch_prepare_rows(const BwdParams& p, const Workspace& ws, cudaStream_t stream);

}  // namespace bwd
}  // namespace flashmask
