"""Argument validation for ``flashmask_attention``, free of any framework.

Works on shapes (tuples of ints), dtype names (``"float16"``, ``"paddle.bfloat16"``,
``"torch.float32"`` all normalise) and numpy arrays, so the Paddle API and the PyTorch binding
share it. Every error names the argument, what was expected and what came: TypeError for a wrong
type or dtype, ValueError for a wrong shape or value. Bound *values* are checked by
:func:`flashmask_paddle.masks.validate`, the one place that knows the bound columns.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from .masks._core import check_bound_columns, validate  # numpy only, like this module

__all__ = ["Dims", "dtype_name", "check_qkv", "check_indices_layout", "check_indices_values",
           "check_dropout", "check_softmax_scale", "window_pair", "CPU_DTYPES", "GPU_DTYPES"]

CPU_DTYPES = ("float32", "float16", "bfloat16")
GPU_DTYPES = ("float16", "bfloat16")


class Dims(NamedTuple):
    """Sizes read from query/key/value by :func:`check_qkv`."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_k: int
    head_dim: int


def dtype_name(dtype) -> str:
    """'paddle.float16' / 'torch.bfloat16' / np.dtype('float32') -> 'float16' / 'bfloat16' / 'float32'."""
    return str(dtype).rsplit(".", 1)[-1]


def check_qkv(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int],
              q_dtype, k_dtype, v_dtype, supported: Sequence[str] = CPU_DTYPES) -> Dims:
    """Shapes ``[B, S, H, D]`` and dtypes of query/key/value; returns the sizes."""
    shapes = {"query": tuple(q_shape), "key": tuple(k_shape), "value": tuple(v_shape)}
    for arg, shape in shapes.items():
        if len(shape) != 4:
            raise ValueError(f"{arg} must have rank 4 [batch, seqlen, num_heads, head_dim], "
                             f"got rank {len(shape)} with shape {list(shape)}")
        if min(shape) < 1:
            raise ValueError(f"{arg} must have every dimension >= 1, got shape {list(shape)}")
    q, k, v = shapes["query"], shapes["key"], shapes["value"]
    if v != k:
        raise ValueError(f"value must have the shape of key {list(k)}, got {list(v)}")
    if k[0] != q[0]:
        raise ValueError(f"key batch size must equal query batch size {q[0]}, got {k[0]}")
    if k[3] != q[3]:
        raise ValueError(f"key head_dim must equal query head_dim {q[3]}, got {k[3]}")
    if q[2] % k[2] != 0:
        raise ValueError(f"query num_heads must be a multiple of key num_heads {k[2]} (GQA/MQA), "
                         f"got {q[2]}")
    names = {"query": dtype_name(q_dtype), "key": dtype_name(k_dtype), "value": dtype_name(v_dtype)}
    if names["query"] not in supported:
        raise TypeError(f"query dtype must be one of {', '.join(supported)}, got {names['query']}")
    for arg in ("key", "value"):
        if names[arg] != names["query"]:
            raise TypeError(f"{arg} dtype must equal query dtype {names['query']}, got {names[arg]}")
    return Dims(batch=q[0], seqlen_q=q[1], seqlen_k=k[1], heads_q=q[2], heads_k=k[2], head_dim=q[3])


def check_indices_layout(shape: Sequence[int], dtype, dims: Dims, causal: bool) -> None:
    """dtype int32, shape ``[B, Hm, Sk, C]`` with Hm in {1, Hk, Hq}, C allowed for ``causal``."""
    shape = tuple(shape)
    name = dtype_name(dtype)
    if name != "int32":
        raise TypeError(f"startend_row_indices dtype must be int32, got {name}")
    if len(shape) != 4:
        raise ValueError("startend_row_indices must have rank 4 [batch, mask_heads, seqlen_k, C], "
                         f"got rank {len(shape)} with shape {list(shape)}")
    b, hm, sk, c = shape
    if b != dims.batch:
        raise ValueError(f"startend_row_indices.shape[0] must equal the batch size {dims.batch}, got {b}")
    if sk != dims.seqlen_k:
        raise ValueError(f"startend_row_indices.shape[2] must equal seqlen_k {dims.seqlen_k}, got {sk}")
    allowed_heads = sorted({1, dims.heads_k, dims.heads_q})
    if hm not in allowed_heads:
        raise ValueError(f"startend_row_indices.shape[1] (mask heads) must be one of {allowed_heads} "
                         f"(1, key num_heads or query num_heads), got {hm}")
    check_bound_columns(c, bool(causal))


def check_indices_values(indices: np.ndarray, causal: bool, seqlen_q: int) -> None:
    """Every bound in [0, Sq], LTS <= LTE, UTS <= UTE (first offending position in the message)."""
    validate(np.asarray(indices), bool(causal), int(seqlen_q))


def check_dropout(dropout, training: bool) -> float:
    """``dropout`` as a float in [0, 1); NotImplementedError when it would have to be applied."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise TypeError(f"dropout must be a float in [0, 1), got {type(dropout).__name__}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if dropout > 0.0 and training:
        raise NotImplementedError(
            f"flashmask_attention: dropout={dropout} with training=True is not implemented yet; "
            "use dropout=0.0 (or training=False, where dropout is not applied)")
    return float(dropout)


def check_softmax_scale(softmax_scale, head_dim: int) -> float:
    """``None`` -> ``head_dim ** -0.5``; otherwise a finite real number."""
    if softmax_scale is None:
        return float(head_dim) ** -0.5
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"softmax_scale must be a float or None, got {type(softmax_scale).__name__}")
    if not math.isfinite(float(softmax_scale)):
        raise ValueError(f"softmax_scale must be finite, got {softmax_scale}")
    return float(softmax_scale)


def window_pair(window_size) -> tuple[int, int]:
    """``w`` -> ``(w, w)``; ``(left, right)`` -> itself; non-negative ints (Paddle's convention)."""
    if isinstance(window_size, (int, np.integer)) and not isinstance(window_size, bool):
        pair = (int(window_size), int(window_size))
    elif (isinstance(window_size, (tuple, list)) and len(window_size) == 2
          and all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in window_size)):
        pair = (int(window_size[0]), int(window_size[1]))
    else:
        raise TypeError(f"window_size must be an int or a (left, right) pair of ints, got {window_size!r}")
    if min(pair) < 0:
        raise ValueError(f"window_size must be non-negative, got {window_size!r}")
    return pair
