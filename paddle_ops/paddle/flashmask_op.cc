// The Paddle custom ops `flashmask_attn`, forward (out, lse) and its gradient op, and
// `flashmask_attn_plan`, a mask plan for them (CUDA). A skin over the
// launcher (launch.h): it checks what could make a kernel read out of bounds, makes inputs
// contiguous, allocates outputs, fills FwdParams/BwdParams (checked by flashmask/check.h in the
// launchers) and dispatches on the tensors' place. User-facing validation with friendly messages
// lives in flashmask_paddle/_validate.py.
#include "flashmask_op.h"

#include <string>
#include <vector>

#include "flashmask/launch.h"

namespace flashmask_op {
namespace {

flashmask::DType dtype_of(const paddle::Tensor& t, const char* name) {
  switch (t.dtype()) {
    case paddle::DataType::FLOAT32: return flashmask::DType::kFloat32;
    case paddle::DataType::FLOAT16: return flashmask::DType::kFloat16;
    case paddle::DataType::BFLOAT16: return flashmask::DType::kBFloat16;
    default:
      PD_THROW("flashmask_attn: ", name, " must be float32, float16 or bfloat16, got ",
               phi::DataTypeToString(t.dtype()));
  }
}

// [B, S, H, D] view of a contiguous tensor.
flashmask::TensorView view_of(const paddle::Tensor& t) {
  const auto s = t.shape();
  flashmask::TensorView v;
  v.data = const_cast<void*>(t.data());
  v.head_stride = s[3];
  v.row_stride = s[2] * s[3];
  v.batch_stride = s[1] * s[2] * s[3];
  return v;
}

paddle::Tensor contiguous(const paddle::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

paddle::optional<paddle::Tensor> contiguous(const paddle::optional<paddle::Tensor>& t) {
  if (!t) return t;
  return paddle::optional<paddle::Tensor>(contiguous(*t));
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// What the parameter struct cannot express: tensor ranks, dtypes, places, and that each tensor's
// shape agrees with the sizes the kernels take from q/k/v. Everything else (GQA, mask form, mask
// heads, dropout range) is flashmask/check.h's, run on the parameters in run_launcher.
void check_tensors(const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
                   const Extras& x) {
  PD_CHECK(q.shape().size() == 4 && k.shape().size() == 4 && v.shape().size() == 4,
           "flashmask_attn: query, key and value must be rank 4 [B, S, H, D]");
  const auto qs = q.shape(), ks = k.shape(), vs = v.shape();
  PD_CHECK(vs[0] == ks[0] && vs[1] == ks[1] && vs[2] == ks[2],
           "flashmask_attn: key and value shapes differ in [B, Sk, Hk]: ", shape_str(ks), " and ", shape_str(vs));
  PD_CHECK(qs[0] == ks[0] && qs[3] == ks[3], "flashmask_attn: query/key batch or head dim differ");
  PD_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "flashmask_attn: q, k, v dtypes differ");
  dtype_of(q, "query");
  PD_CHECK(q.place() == k.place() && q.place() == v.place(), "flashmask_attn: q, k, v on different places");
  const auto& idx = x.startend_row_indices;
  if (idx) {
    const auto is = idx->shape();
    PD_CHECK(idx->dtype() == paddle::DataType::INT32, "flashmask_attn: startend_row_indices must be int32");
    PD_CHECK(is.size() == 4 && is[0] == qs[0] && is[2] == ks[1],
             "flashmask_attn: startend_row_indices must be [B, Hm, Sk, C], got ", shape_str(is));
    PD_CHECK(idx->place() == q.place(), "flashmask_attn: startend_row_indices on a different place");
  }
  if (x.block_mask) {
    PD_CHECK(idx, "flashmask_attn: block_mask needs startend_row_indices");
    const auto bs = x.block_mask->shape();
    const int64_t n = flashmask::kBlockMaskSize;
    const std::vector<int64_t> want = {qs[0], idx->shape()[1], (qs[1] + n - 1) / n, (ks[1] + n - 1) / n};
    PD_CHECK(x.block_mask->dtype() == paddle::DataType::INT32, "flashmask_attn: block_mask must be int32");
    PD_CHECK(bs == want, "flashmask_attn: block_mask must be ", shape_str(want), ", got ", shape_str(bs));
    PD_CHECK(x.block_mask->place() == q.place(), "flashmask_attn: block_mask on a different place");
  }
  for (const auto* plan : {&x.fwd_plan, &x.bwd_plan}) {
    if (!*plan) continue;
    PD_CHECK(q.is_gpu(), "flashmask_attn: mask plans are built for GPU tensors only");
    PD_CHECK((*plan)->dtype() == paddle::DataType::UINT8 && (*plan)->shape().size() == 1 &&
                 (*plan)->place() == q.place(),
             "flashmask_attn: a mask plan must be a uint8 vector on the place of query "
             "(from the flashmask_attn_plan op)");
  }
}

// What running with dropout needs beyond check_tensors (a mask plan does not: only the rate).
void check_seed_offset(const Extras& x) {
  if (x.dropout > 0.f) {
    PD_CHECK(x.seed_offset && x.seed_offset->is_cpu() && x.seed_offset->dtype() == paddle::DataType::INT64 &&
                 x.seed_offset->numel() == 2,
             "flashmask_attn: dropout > 0 needs seed_offset, an int64 [2] CPU tensor");
  }
}

}  // namespace

flashmask::FwdParams make_problem_params(const paddle::Tensor& q, const paddle::Tensor& k,
                                         const paddle::Tensor& v, const Extras& x, bool causal,
                                         float softmax_scale) {
  const paddle::optional<paddle::Tensor>& startend_row_indices = x.startend_row_indices;
  flashmask::FwdParams p;
  const auto qs = q.shape(), ks = k.shape();
  p.dtype = dtype_of(q, "query");
  p.batch = static_cast<int32_t>(qs[0]);
  p.seqlen_q = static_cast<int32_t>(qs[1]);
  p.heads_q = static_cast<int32_t>(qs[2]);
  p.head_dim = static_cast<int32_t>(qs[3]);
  p.head_dim_v = static_cast<int32_t>(v.shape()[3]);
  p.seqlen_k = static_cast<int32_t>(ks[1]);
  p.heads_k = static_cast<int32_t>(ks[2]);
  p.softmax_scale = softmax_scale;
  p.causal = causal;
  p.q = view_of(q);
  p.k = view_of(k);
  p.v = view_of(v);
  p.mask_form.causal = causal;
  if (startend_row_indices) {
    p.startend_row_indices = startend_row_indices->data<int32_t>();
    p.mask_heads = static_cast<int32_t>(startend_row_indices->shape()[1]);
    p.mask_form.num_cols = static_cast<int32_t>(startend_row_indices->shape()[3]);
  }
  if (x.block_mask) p.block_mask = x.block_mask->data<int32_t>();
  p.dropout_p = x.dropout;
  if (x.dropout > 0.f && x.seed_offset) {  // check_seed_offset: an int64 [2] CPU tensor
    const int64_t* so = x.seed_offset->data<int64_t>();
    p.dropout_seed = static_cast<uint64_t>(so[0]);
    p.dropout_offset = static_cast<uint64_t>(so[1]);
  }
  return p;
}

flashmask::FwdParams make_fwd_params(const paddle::Tensor& q, const paddle::Tensor& k,
                                     const paddle::Tensor& v, const Extras& x,
                                     const paddle::Tensor& out, const paddle::Tensor& lse,
                                     bool causal, float softmax_scale) {
  flashmask::FwdParams p = make_problem_params(q, k, v, x, causal, softmax_scale);
  p.out = view_of(out);
  p.lse = const_cast<float*>(lse.data<float>());
  return p;
}

flashmask::BwdParams make_bwd_params(const paddle::Tensor& q, const paddle::Tensor& k,
                                     const paddle::Tensor& v, const Extras& x,
                                     const paddle::Tensor& out, const paddle::Tensor& lse,
                                     const paddle::Tensor& dout, const paddle::Tensor& dq,
                                     const paddle::Tensor& dk, const paddle::Tensor& dv,
                                     bool causal, float softmax_scale) {
  flashmask::BwdParams p;
  static_cast<flashmask::FwdParams&>(p) =
      make_fwd_params(q, k, v, x, out, lse, causal, softmax_scale);
  p.dout = view_of(dout);
  p.dq = view_of(dq);
  p.dk = view_of(dk);
  p.dv = view_of(dv);
  p.deterministic = x.deterministic;
  return p;
}

}  // namespace flashmask_op

namespace {

using flashmask_op::check_seed_offset;
using flashmask_op::check_tensors;
using flashmask_op::contiguous;
using flashmask_op::Extras;
using OptTensor = paddle::optional<paddle::Tensor>;
using OptShape = paddle::optional<std::vector<int64_t>>;
using OptDtype = paddle::optional<paddle::DataType>;

Extras extras_of(const OptTensor& idx, const OptTensor& block_mask, const OptTensor& seed_offset,
                 const OptTensor& fwd_plan, const OptTensor& bwd_plan, float dropout, bool deterministic) {
  return Extras{contiguous(idx), contiguous(block_mask), seed_offset, dropout, deterministic, fwd_plan, bwd_plan};
}

std::vector<paddle::Tensor> FlashmaskForward(const paddle::Tensor& q_in, const paddle::Tensor& k_in,
                                             const paddle::Tensor& v_in, const OptTensor& idx_in,
                                             const OptTensor& block_mask_in, const OptTensor& seed_offset,
                                             const OptTensor& fwd_plan, const OptTensor& bwd_plan,
                                             bool causal, float softmax_scale, float dropout,
                                             bool deterministic) {
  const Extras x = extras_of(idx_in, block_mask_in, seed_offset, fwd_plan, bwd_plan, dropout, deterministic);
  check_tensors(q_in, k_in, v_in, x);
  check_seed_offset(x);
  const paddle::Tensor q = contiguous(q_in), k = contiguous(k_in), v = contiguous(v_in);
  if (q.is_gpu()) {
#ifdef FLASHMASK_WITH_CUDA
    return flashmask_op::flashmask_fwd_gpu(q, k, v, x, causal, softmax_scale);
#else
    PD_THROW("flashmask_attn: this build of flashmask_paddle has no CUDA kernels (built without CUDA); "
             "use CPU tensors or rebuild with a CUDA-enabled Paddle");
#endif
  }
  PD_CHECK(q.is_cpu(), "flashmask_attn: tensors must be on CPU or GPU");
  const auto qs = q.shape();
  paddle::Tensor out = paddle::empty({qs[0], qs[1], qs[2], v.shape()[3]}, q.dtype(), q.place());
  paddle::Tensor lse = paddle::empty({qs[0], qs[2], qs[1]}, paddle::DataType::FLOAT32, q.place());
  if (q.numel() > 0 && k.numel() > 0)
    flashmask_op::run_launcher("flashmask_attn forward (CPU)", [&] {
      flashmask::run_fwd_cpu(flashmask_op::make_fwd_params(q, k, v, x, out, lse, causal, softmax_scale));
    });
  return {out, lse};
}

std::vector<paddle::Tensor> FlashmaskBackward(const paddle::Tensor& q_in, const paddle::Tensor& k_in,
                                              const paddle::Tensor& v_in, const OptTensor& idx_in,
                                              const OptTensor& block_mask_in, const OptTensor& seed_offset,
                                              const OptTensor& fwd_plan, const OptTensor& bwd_plan,
                                              const paddle::Tensor& out_in, const paddle::Tensor& lse_in,
                                              const paddle::Tensor& dout_in, bool causal,
                                              float softmax_scale, float dropout, bool deterministic) {
  const Extras x = extras_of(idx_in, block_mask_in, seed_offset, fwd_plan, bwd_plan, dropout, deterministic);
  check_seed_offset(x);
  const paddle::Tensor q = contiguous(q_in), k = contiguous(k_in), v = contiguous(v_in);
  const paddle::Tensor out = contiguous(out_in), lse = contiguous(lse_in), dout = contiguous(dout_in);
  PD_CHECK(dout.shape() == out.shape() && dout.dtype() == q.dtype(),
           "flashmask_attn_grad: grad of out must match out in shape and query in dtype");
  if (q.is_gpu()) {
#ifdef FLASHMASK_WITH_CUDA
    return flashmask_op::flashmask_bwd_gpu(q, k, v, x, out, lse, dout, causal, softmax_scale);
#else
    PD_THROW("flashmask_attn_grad: built without CUDA");
#endif
  }
  paddle::Tensor dq = paddle::empty(q.shape(), q.dtype(), q.place());
  paddle::Tensor dk = paddle::empty(k.shape(), k.dtype(), k.place());
  paddle::Tensor dv = paddle::empty(v.shape(), v.dtype(), v.place());
  if (q.numel() > 0 && k.numel() > 0)
    flashmask_op::run_launcher("flashmask_attn backward (CPU)", [&] {
      flashmask::run_bwd_cpu(flashmask_op::make_bwd_params(q, k, v, x, out, lse, dout, dq, dk, dv,
                                                           causal, softmax_scale));
    });
  return {dq, dk, dv};
}

std::vector<std::vector<int64_t>> FlashmaskForwardShape(const std::vector<int64_t>& q,
                                                        const std::vector<int64_t>& k,
                                                        const std::vector<int64_t>& v, const OptShape&,
                                                        const OptShape&, const OptShape&, const OptShape&,
                                                        const OptShape&) {
  return {{q[0], q[1], q[2], v[3]}, {q[0], q[2], q[1]}};
}

std::vector<paddle::DataType> FlashmaskForwardDtype(const paddle::DataType& q, const paddle::DataType&,
                                                    const paddle::DataType&, const OptDtype&,
                                                    const OptDtype&, const OptDtype&, const OptDtype&,
                                                    const OptDtype&) {
  return {q, paddle::DataType::FLOAT32};
}

std::vector<std::vector<int64_t>> FlashmaskBackwardShape(
    const std::vector<int64_t>& q, const std::vector<int64_t>& k, const std::vector<int64_t>& v,
    const OptShape&, const OptShape&, const OptShape&, const OptShape&, const OptShape&,
    const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&) {
  return {q, k, v};
}

std::vector<paddle::DataType> FlashmaskBackwardDtype(
    const paddle::DataType& q, const paddle::DataType& k, const paddle::DataType& v, const OptDtype&,
    const OptDtype&, const OptDtype&, const OptDtype&, const OptDtype&, const paddle::DataType&,
    const paddle::DataType&,
    const paddle::DataType&) {
  return {q, k, v};
}

// A mask plan for later flashmask_attn calls with this problem and mask (the forward's, or with
// `backward` the backward's); GPU only. The inputs need not be contiguous: only their shapes are read.
std::vector<paddle::Tensor> FlashmaskPlan(const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
                                          const OptTensor& idx_in, const OptTensor& block_mask_in, bool causal,
                                          float dropout, bool deterministic, bool backward) {
  const Extras x = extras_of(idx_in, block_mask_in, OptTensor(), OptTensor(), OptTensor(), dropout, deterministic);
  check_tensors(q, k, v, x);
  PD_CHECK(q.is_gpu(), "flashmask_attn_plan: mask plans are for GPU tensors (the CPU kernels read the mask as it is)");
#ifdef FLASHMASK_WITH_CUDA
  return {flashmask_op::flashmask_plan_gpu(q, k, v, x, causal, backward)};
#else
  PD_THROW("flashmask_attn_plan: this build of flashmask_paddle has no CUDA kernels (built without CUDA)");
#endif
}

std::vector<std::vector<int64_t>> FlashmaskPlanShape(const std::vector<int64_t>&, const std::vector<int64_t>&,
                                                     const std::vector<int64_t>&, const OptShape&, const OptShape&) {
  return {{-1}};  // the plan's bytes depend on the device and the kernels' path
}

std::vector<paddle::DataType> FlashmaskPlanDtype(const paddle::DataType&, const paddle::DataType&,
                                                 const paddle::DataType&, const OptDtype&, const OptDtype&) {
  return {paddle::DataType::UINT8};
}

}  // namespace

PD_BUILD_OP(flashmask_attn)
    .Inputs({"q", "k", "v", paddle::Optional("startend_row_indices"), paddle::Optional("block_mask"),
             paddle::Optional("seed_offset"), paddle::Optional("fwd_plan"), paddle::Optional("bwd_plan")})
    .Outputs({"out", "lse"})
    .Attrs({"causal: bool", "softmax_scale: float", "dropout: float", "deterministic: bool"})
    .SetKernelFn(PD_KERNEL(FlashmaskForward))
    .SetInferShapeFn(PD_INFER_SHAPE(FlashmaskForwardShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FlashmaskForwardDtype));

PD_BUILD_GRAD_OP(flashmask_attn)
    .Inputs({"q", "k", "v", paddle::Optional("startend_row_indices"), paddle::Optional("block_mask"),
             paddle::Optional("seed_offset"), paddle::Optional("fwd_plan"), paddle::Optional("bwd_plan"),
             "out", "lse", paddle::Grad("out")})
    .Outputs({paddle::Grad("q"), paddle::Grad("k"), paddle::Grad("v")})
    .Attrs({"causal: bool", "softmax_scale: float", "dropout: float", "deterministic: bool"})
    .SetKernelFn(PD_KERNEL(FlashmaskBackward))
    .SetInferShapeFn(PD_INFER_SHAPE(FlashmaskBackwardShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FlashmaskBackwardDtype));

// No gradient: a plan is derived from the mask alone, which has none.
PD_BUILD_OP(flashmask_attn_plan)
    .Inputs({"q", "k", "v", paddle::Optional("startend_row_indices"), paddle::Optional("block_mask")})
    .Outputs({"plan"})
    .Attrs({"causal: bool", "dropout: float", "deterministic: bool", "backward: bool"})
    .SetKernelFn(PD_KERNEL(FlashmaskPlan))
    .SetInferShapeFn(PD_INFER_SHAPE(FlashmaskPlanShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FlashmaskPlanDtype));
