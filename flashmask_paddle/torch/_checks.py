"""Input checks of the torch binding. Shapes, dtypes, head dims, mask layouts and values go through
the framework-free flashmask_paddle._validate (the same messages as the Paddle API), against what
the library reports it supports; only what is torch-specific lives here: tensor types, devices,
memory layout.
"""
from __future__ import annotations

import torch

from .. import _capabilities, _tensor_stamp, _validate
from ._capi import load_library
from ._ops import kernel_ready

# Bound and block-mask values are checked on the host, once per tensor and version (a mask reused
# across calls, as by a model's layers, is not copied device->host on every call).
_checked = _validate.OncePerTensor(_tensor_stamp.TORCH)


def _check_tensors(q, k, v, indices, block_mask):
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("startend_row_indices", indices), ("block_mask", block_mask)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(f"query must be a CPU or CUDA tensor, got device {q.device}")
    for name, t in (("key", k), ("value", v), ("startend_row_indices", indices), ("block_mask", block_mask)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} must be on query's device {q.device}, got {t.device}")


def _once(t, key, check):
    _checked.run(t, key, check)


def check_inputs(q, k, v, indices, causal, softmax_scale, block_mask=None, dropout=0.0):
    """Validates and returns ``(q, k, v, indices, block_mask, scale, dropout, mask_given)`` ready for
    the kernels; ``mask_given`` is ``Extras.mask_given`` (_ops.py): each of the caller's
    (indices, block_mask) tensors that the kernels read a contiguous copy of, else None.

    ``FLASHMASK_CHECK_BOUNDS=0`` skips the value checks (a device->host copy of a mask the first
    time it is seen); out-of-range bounds then give undefined results.
    """
    _check_tensors(q, k, v, indices, block_mask)
    given = (indices, block_mask)
    capabilities = _capabilities.query(load_library().fm_path, q.is_cuda)
    dims = _validate.check_qkv(q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, capabilities)
    dropout = _validate.check_dropout(dropout, True)
    if indices is not None:
        _validate.check_indices_layout(indices.shape, indices.dtype, dims, bool(causal))
        _once(indices, (bool(causal), dims.seqlen_q), lambda: _validate.check_indices_values(
            indices.detach().cpu().numpy(), bool(causal), int(dims.seqlen_q)))
        indices = indices.contiguous()
    if block_mask is not None:
        mask_heads = None if indices is None else indices.shape[1]
        _validate.check_block_mask_layout(block_mask.shape, block_mask.dtype, dims, mask_heads)
        _once(block_mask, (), lambda: _validate.check_block_mask_values(block_mask.detach().cpu().numpy()))
        block_mask = block_mask.contiguous()
    scale = _validate.check_softmax_scale(softmax_scale, dims.head_dim)
    mask_given = tuple(None if g is used else g for g, used in zip(given, (indices, block_mask)))
    return kernel_ready(q), kernel_ready(k), kernel_ready(v), indices, block_mask, scale, dropout, mask_given
