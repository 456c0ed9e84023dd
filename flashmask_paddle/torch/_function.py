"""`flashmask_attention` for torch: input checks and the autograd Function over _ops."""
from __future__ import annotations

import torch

from .. import _tensor_stamp
from . import _capi, _ops
from ._checks import check_inputs


class _FlashMaskAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, indices, causal, scale, deterministic, extras):
        # The backward runs on the forward's build: autograd may call it from another thread, which
        # a using_library block does not reach.
        ctx.lib = _capi.load_library()
        out, lse = _ops.forward(q, k, v, indices, causal, scale, extras, ctx.lib)
        ctx.save_for_backward(q, k, v, out, lse, indices)
        # The caller's mask tensors by weak reference: the backward takes their plans only while
        # they hold the values the kernels' copies were made from.
        ctx.mask_given = tuple(None if t is None else _tensor_stamp.SeenTensor(t, _tensor_stamp.TORCH)
                               for t in extras.mask_given)
        ctx.extras = extras._replace(mask_given=(None, None))
        ctx.causal, ctx.scale, ctx.deterministic = causal, scale, deterministic
        ctx.mark_non_differentiable(lse)  # the LSE is an output for inspection, not a loss term
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, indices = ctx.saved_tensors
        extras = ctx.extras._replace(mask_given=tuple(
            None if seen is None else seen.unwritten(_tensor_stamp.TORCH) for seen in ctx.mask_given))
        dq, dk, dv = _ops.backward(q, k, v, out, lse, dout, indices, ctx.causal, ctx.scale,
                                   ctx.deterministic, extras, ctx.lib)
        return dq, dk, dv, None, None, None, None, None


def _seed_offset(fixed_seed_offset, generator):
    """(seed, offset) for dropout: the given pair, or two draws from `generator` (torch's default
    CPU generator when None), so torch.manual_seed reproduces a run."""
    if fixed_seed_offset is not None:
        pair = torch.as_tensor(fixed_seed_offset)
        if pair.dtype != torch.int64 or tuple(pair.shape) != (2,):
            raise ValueError("fixed_seed_offset must be an int64 tensor of shape [2] ([seed, offset]), got "
                             f"{pair.dtype} {list(pair.shape)}")
        return tuple(int(x) for x in pair.cpu())
    return tuple(int(x) for x in torch.randint(0, 2 ** 62, (2,), dtype=torch.int64, generator=generator))


def flashmask_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        startend_row_indices: torch.Tensor | None = None, causal: bool = False,
                        softmax_scale: float | None = None, return_softmax_lse: bool = False,
                        deterministic: bool = False, block_mask: torch.Tensor | None = None,
                        dropout: float = 0.0, fixed_seed_offset=None, return_seed_offset: bool = False,
                        generator: torch.Generator | None = None):
    """Exact attention under a column-wise FlashMask mask, differentiable in q, k and v.

    q ``[B, Sq, Hq, D]``, k ``[B, Sk, Hk, D]`` (``Hq % Hk == 0``), v ``[B, Sk, Hk, Dv]``, one
    device, one dtype (CUDA: float16/bfloat16 and the (D, Dv) pairs the library reports; CPU: also
    float32, any D and Dv); any strides with the head dim contiguous (otherwise copied).
    ``startend_row_indices``: int32 ``[B, Hm, Sk, C]`` on the same device, ``Hm`` in
    ``{1, Hk, Hq}``, meaning per (causal, C) as in docs/MASKS_AND_API.md; None
    for plain causal/full attention. ``block_mask``: int32 0/1 ``[B, Hm, ceil(Sq/128),
    ceil(Sk/128)]``, 0 masks a 128x128 block on top of the bounds (Paddle 3.3's meaning).
    ``softmax_scale`` defaults to ``D ** -0.5``. ``deterministic=True`` (or
    ``FLASHMASK_DETERMINISTIC=1``) makes dq bitwise reproducible. ``dropout``: the
    probability of dropping an attention weight, kept ones scaled by ``1 / (1 - dropout)``, the
    mask drawn by Philox from ``fixed_seed_offset`` (int64 ``[seed, offset]``) or from
    ``generator``; pass 0 for evaluation.

    Returns ``out`` (``[B, Sq, Hq, Dv]``, like q), then ``lse`` float32 ``[B, Hq, Sq]`` when
    ``return_softmax_lse`` and the int64 ``[seed, offset]`` when ``return_seed_offset`` (a tuple
    when more than one). Fully masked query rows give 0, LSE ``-inf`` and zero gradients.
    """
    q, k, v, startend_row_indices, block_mask, scale, dropout, mask_given = check_inputs(
        q, k, v, startend_row_indices, causal, softmax_scale, block_mask, dropout)
    seed_offset = _seed_offset(fixed_seed_offset, generator) if dropout > 0.0 or fixed_seed_offset is not None \
        else (0, 0)
    extras = _ops.Extras(block_mask, dropout, seed_offset, mask_given)
    deterministic = bool(deterministic) or _ops.deterministic_from_env()
    out, lse = _FlashMaskAttention.apply(q, k, v, startend_row_indices, bool(causal), scale, deterministic,
                                         extras)
    outputs = [out]
    if return_softmax_lse:
        outputs.append(lse)
    if return_seed_offset:
        outputs.append(torch.tensor(seed_offset, dtype=torch.int64))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def prepare_mask_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      startend_row_indices: torch.Tensor | None = None, causal: bool = False,
                      block_mask: torch.Tensor | None = None, dropout: float = 0.0,
                      backward: bool = True) -> int:
    """Builds now, on the current stream, the mask plans that CUDA calls of ``flashmask_attention``
    with these shapes and this mask will use: the preprocessing of the mask (block bounds, block
    lists, mask payloads, tile order) that every call with the same ``startend_row_indices`` tensor
    (and version) shares, forward and, unless ``backward=False``, backward. Calls build a missing
    plan themselves; this moves that one-time cost out of the first call (e.g. next to building
    the mask, as FlexAttention's ``create_block_mask``). Returns the plans' device bytes; 0 for
    CPU tensors and with ``FLASHMASK_MASK_PLAN=0`` (nothing to build). Arguments as for
    ``flashmask_attention``.
    """
    q, k, v, startend_row_indices, block_mask, _, dropout, mask_given = check_inputs(
        q, k, v, startend_row_indices, causal, None, block_mask, dropout)
    if not q.is_cuda:
        return 0
    extras = _ops.Extras(block_mask, dropout, mask_given=mask_given)
    return _ops.prepare_plans(q, k, v, startend_row_indices, bool(causal), extras, bool(backward))


__all__ = ["flashmask_attention", "prepare_mask_plan"]
