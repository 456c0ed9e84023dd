"""`flashmask_attention` for torch: input checks and the autograd Function over _ops."""
from __future__ import annotations

import torch

from . import _ops
from ._checks import check_inputs


class _FlashMaskAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, indices, causal, scale, deterministic):
        out, lse = _ops.forward(q, k, v, indices, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse, indices)
        ctx.causal, ctx.scale, ctx.deterministic = causal, scale, deterministic
        ctx.mark_non_differentiable(lse)  # the LSE is an output for inspection, not a loss term
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, indices = ctx.saved_tensors
        dq, dk, dv = _ops.backward(q, k, v, out, lse, dout, indices, ctx.causal, ctx.scale,
                                   ctx.deterministic)
        return dq, dk, dv, None, None, None, None


def flashmask_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        startend_row_indices: torch.Tensor | None = None, causal: bool = False,
                        softmax_scale: float | None = None, return_softmax_lse: bool = False,
                        deterministic: bool = False):
    """Exact attention under a column-wise FlashMask mask, differentiable in q, k and v.

    q ``[B, Sq, Hq, D]``, k/v ``[B, Sk, Hk, D]`` (``Hq % Hk == 0``), one device, one dtype (CUDA:
    float16/bfloat16; CPU: also float32); any strides with the head dim contiguous (otherwise
    copied). ``startend_row_indices``: int32 ``[B, Hm, Sk, C]`` on the same device, ``Hm`` in
    ``{1, Hk, Hq}``, meaning per (causal, C) as in docs/MASKS_AND_API.md; None for plain causal/full
    attention. ``softmax_scale`` defaults to ``D ** -0.5``. ``deterministic=True`` (or
    ``FLASHMASK_DETERMINISTIC=1``) makes dq bitwise reproducible.

    Returns ``out`` (like q), or ``(out, lse)`` with ``lse`` float32 ``[B, Hq, Sq]`` when
    ``return_softmax_lse``. Fully masked query rows give 0, LSE ``-inf`` and zero gradients.
    """
    q, k, v, startend_row_indices, scale = check_inputs(q, k, v, startend_row_indices, causal, softmax_scale)
    deterministic = bool(deterministic) or _ops.deterministic_from_env()
    out, lse = _FlashMaskAttention.apply(q, k, v, startend_row_indices, bool(causal), scale, deterministic)
    return (out, lse) if return_softmax_lse else out


__all__ = ["flashmask_attention"]
