"""Input checks of the torch binding. Shapes, dtypes, head counts, mask layout and bound values go
through the framework-free flashmask_paddle._validate (the same messages as the Paddle API); only
what is torch-specific lives here: tensor types, devices, memory layout, the bound-check cache.
"""
from __future__ import annotations

import os
import weakref

import torch

from .. import _validate
from ._ops import kernel_ready

# Bound values are checked on the host; a mask tensor reused across calls (benchmarks, a model's
# layers) is checked once per version instead of copied device->host on every call. Keyed by id
# with a weak reference to tell a live tensor from a new one at a recycled id (tensors compare
# elementwise, so they cannot be dictionary keys themselves).
_checked_masks: dict = {}

# Head dims the CUDA kernels are instantiated for (paddle_ops/cuda/*_hdim*.cu); checked here so a
# caller gets the contract's ValueError rather than the launcher's RuntimeError.
CUDA_HEAD_DIMS = (64, 128, 256)


def _check_tensors(q, k, v, indices):
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if indices is not None and not isinstance(indices, torch.Tensor):
        raise TypeError(f"startend_row_indices must be a torch.Tensor or None, got {type(indices).__name__}")
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(f"query must be a CPU or CUDA tensor, got device {q.device}")
    for name, t in (("key", k), ("value", v), ("startend_row_indices", indices)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} must be on query's device {q.device}, got {t.device}")


def _check_bound_values(indices, causal, seqlen_q):
    key = (indices._version, indices.data_ptr(), tuple(indices.shape), bool(causal), int(seqlen_q))
    seen = _checked_masks.get(id(indices))
    if seen is not None and seen[0]() is indices and seen[1] == key:
        return
    _validate.check_indices_values(indices.detach().cpu().numpy(), bool(causal), int(seqlen_q))
    if len(_checked_masks) > 256:  # forget tensors that are gone
        for tid in [t for t, (ref, _) in _checked_masks.items() if ref() is None]:
            del _checked_masks[tid]
    _checked_masks[id(indices)] = (weakref.ref(indices), key)


def check_inputs(q, k, v, indices, causal, softmax_scale):
    """Validates and returns ``(q, k, v, indices, scale)`` ready for the kernels.

    ``FLASHMASK_CHECK_BOUNDS=0`` skips the bound-value check (a device->host copy of the indices
    the first time a mask tensor is seen); out-of-range bounds then give undefined results.
    """
    _check_tensors(q, k, v, indices)
    supported = _validate.GPU_DTYPES if q.is_cuda else _validate.CPU_DTYPES
    dims = _validate.check_qkv(q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, supported)
    if q.is_cuda and dims.head_dim not in CUDA_HEAD_DIMS:
        raise ValueError(f"query head_dim must be one of {CUDA_HEAD_DIMS} on CUDA, got {dims.head_dim}")
    if indices is not None:
        _validate.check_indices_layout(indices.shape, indices.dtype, dims, bool(causal))
        if os.environ.get("FLASHMASK_CHECK_BOUNDS", "1") != "0":
            _check_bound_values(indices, causal, dims.seqlen_q)
        indices = indices.contiguous()
    scale = _validate.check_softmax_scale(softmax_scale, dims.head_dim)
    return kernel_ready(q), kernel_ready(k), kernel_ready(v), indices, scale
