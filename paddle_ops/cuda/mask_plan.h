// Keys of mask plans (flashmask/launch.h): a hash of everything a plan's layout and contents depend
// on besides the mask values, so that a call handed a plan built for another problem is refused
// instead of reading lists of another shape. Host-only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "flashmask/check.h"
#include "flashmask/launch.h"
#include "flashmask/params.h"

namespace flashmask {

// What the plan is for, first in every key.
enum class PlanDirection : int64_t { kForward = 1, kBackward = 2 };

// FNV-1a over the problem's sizes and mask form, the direction and the launcher's own choices for
// it (path, tile shape, payload slots, ...).
inline uint64_t mask_plan_key(const FwdParams& p, PlanDirection direction, std::initializer_list<int64_t> choices) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&h](int64_t v) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (uint64_t(v) >> (8 * byte)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (int64_t v : {int64_t(direction), int64_t(p.dtype), int64_t(p.batch), int64_t(p.seqlen_q),
                    int64_t(p.seqlen_k), int64_t(p.heads_q), int64_t(p.heads_k), int64_t(p.head_dim),
                    int64_t(p.head_dim_v), int64_t(p.mask_heads), int64_t(p.mask_form.num_cols),
                    int64_t(p.causal), int64_t(p.block_mask != nullptr)})
    add(v);
  for (int64_t v : choices) add(v);
  return h;
}

// Throws ArgError unless `plan` carries `key`.
inline void check_plan_key(const MaskPlan& plan, uint64_t key, const char* where) {
  if (plan.key != key) {
    throw ArgError(std::string(where) +
                   ": the mask plan was built for another problem (shapes, mask form, head dim, dtype or "
                   "kernel switches differ); build one for this call");
  }
}

}  // namespace flashmask
