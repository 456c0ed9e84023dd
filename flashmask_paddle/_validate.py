"""Argument validation for ``flashmask_attention``, free of any framework.

Works on shapes (tuples of ints), dtype names (``"float16"``, ``"paddle.bfloat16"``,
``"torch.float32"`` all normalise) and numpy arrays, so the Paddle API and the PyTorch binding
share it: the one home of user-facing messages. Every error names the argument, what was expected
and what came: TypeError for a wrong type or dtype, ValueError for a wrong shape or value. Bound
*values* are checked by :func:`flashmask_paddle.masks.validate`, the one place that knows the
bound columns. Which dtypes and head dims a device supports comes from the library
(:mod:`flashmask_paddle._capabilities`); the C++ side checks the same rules again
(paddle_ops/include/flashmask/check.h) for callers of the C ABI.
"""
from __future__ import annotations

import math
from typing import Callable, Hashable, NamedTuple, Sequence

import numpy as np

from . import _env
from ._capabilities import Capabilities
from ._tensor_stamp import SeenTensor, TensorStamp, TensorTable
from .masks._core import check_bound_columns, validate  # numpy only, like this module

__all__ = ["Dims", "dtype_name", "check_qkv", "check_indices_layout", "check_indices_values",
           "check_block_mask_layout", "check_block_mask_values", "check_dropout",
           "check_softmax_scale", "window_pair", "OncePerTensor", "BLOCK_MASK_SIZE"]

BLOCK_MASK_SIZE = 128  # rows and columns of one block_mask entry (flashmask::kBlockMaskSize)


class Dims(NamedTuple):
    """Sizes read from query/key/value by :func:`check_qkv`."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_k: int
    head_dim: int
    head_dim_v: int


def dtype_name(dtype) -> str:
    """'paddle.float16' / 'torch.bfloat16' / np.dtype('float32') -> 'float16' / 'bfloat16' / 'float32'."""
    return str(dtype).rsplit(".", 1)[-1]


def check_qkv(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int],
              q_dtype, k_dtype, v_dtype, capabilities: Capabilities) -> Dims:
    """Shapes (q ``[B, Sq, Hq, D]``, k ``[B, Sk, Hk, D]``, v ``[B, Sk, Hk, Dv]``) and dtypes of
    query/key/value against what the device's kernels support; returns the sizes."""
    shapes = {"query": tuple(q_shape), "key": tuple(k_shape), "value": tuple(v_shape)}
    for arg, shape in shapes.items():
        if len(shape) != 4:
            raise ValueError(f"{arg} must have rank 4 [batch, seqlen, num_heads, head_dim], "
                             f"got rank {len(shape)} with shape {list(shape)}")
        if min(shape) < 1:
            raise ValueError(f"{arg} must have every dimension >= 1, got shape {list(shape)}")
    q, k, v = shapes["query"], shapes["key"], shapes["value"]
    if v[:3] != k[:3]:
        raise ValueError(f"value must have the shape of key {list(k[:3])} in batch, seqlen and num_heads "
                         f"(its head_dim may differ), got {list(v)}")
    if k[0] != q[0]:
        raise ValueError(f"key batch size must equal query batch size {q[0]}, got {k[0]}")
    if k[3] != q[3]:
        raise ValueError(f"key head_dim must equal query head_dim {q[3]}, got {k[3]}")
    if q[2] % k[2] != 0:
        raise ValueError(f"query num_heads must be a multiple of key num_heads {k[2]} (GQA/MQA), "
                         f"got {q[2]}")
    names = {"query": dtype_name(q_dtype), "key": dtype_name(k_dtype), "value": dtype_name(v_dtype)}
    supported = capabilities.dtypes
    if names["query"] not in supported:
        raise TypeError(f"query dtype must be one of {', '.join(supported)} on {capabilities.device}, "
                        f"got {names['query']}")
    for arg in ("key", "value"):
        if names[arg] != names["query"]:
            raise TypeError(f"{arg} dtype must equal query dtype {names['query']}, got {names[arg]}")
    pairs = capabilities.head_dims
    if pairs is not None and (q[3], v[3]) not in pairs:
        raise ValueError(f"(query head_dim, value head_dim) must be {describe_head_dims(pairs)} on "
                         f"{capabilities.device}, got ({q[3]}, {v[3]}); the CPU kernels take any head dims")
    return Dims(batch=q[0], seqlen_q=q[1], seqlen_k=k[1], heads_q=q[2], heads_k=k[2], head_dim=q[3],
                head_dim_v=v[3])


def describe_head_dims(pairs) -> str:
    """The supported (D, Dv) pairs in words: a rule where they are every pair of one arithmetic
    range (the CUDA kernels: each a multiple of 8 from 32 to 256), else the list.

    >>> describe_head_dims([(d, dv) for d in (32, 40, 48) for dv in (32, 40, 48)])
    'each a multiple of 8 from 32 to 48'
    >>> describe_head_dims([(64, 64), (128, 128)])
    'one of (64, 64), (128, 128)'
    """
    dims = sorted({d for pair in pairs for d in pair})
    step = dims[1] - dims[0] if len(dims) > 1 else 0
    if (len(dims) > 1 and dims == list(range(dims[0], dims[-1] + 1, step)) and dims[0] % step == 0
            and set(pairs) == {(a, b) for a in dims for b in dims}):
        return f"each a multiple of {step} from {dims[0]} to {dims[-1]}"
    return "one of " + ", ".join(f"({d}, {dv})" for d, dv in pairs)


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


def check_block_mask_layout(shape: Sequence[int], dtype, dims: Dims, mask_heads: int | None) -> None:
    """int32 ``[B, Hm, ceil(Sq/128), ceil(Sk/128)]`` with Hm the heads of startend_row_indices
    (``mask_heads``; None when they are missing, which block_mask needs)."""
    if mask_heads is None:
        raise ValueError("block_mask needs startend_row_indices: it masks 128x128 blocks on top of them "
                         "(pass e.g. masks.full(...) indices for a block mask alone)")
    name = dtype_name(dtype)
    if name != "int32":
        raise TypeError(f"block_mask dtype must be int32, got {name}")
    n = BLOCK_MASK_SIZE
    want = [dims.batch, mask_heads, -(-dims.seqlen_q // n), -(-dims.seqlen_k // n)]
    if list(shape) != want:
        raise ValueError(f"block_mask must have shape [batch, startend_row_indices.shape[1], "
                         f"ceil(seqlen_q/{n}), ceil(seqlen_k/{n})] = {want}, got {list(shape)}")


def check_block_mask_values(block_mask: np.ndarray) -> None:
    """Every entry 0 (mask the block) or 1 (keep it); the first other value in the message."""
    block_mask = np.asarray(block_mask)
    bad = np.argwhere((block_mask != 0) & (block_mask != 1))
    if bad.size:
        at = tuple(int(i) for i in bad[0])
        raise ValueError(f"block_mask values must be 0 or 1, got {int(block_mask[at])} at index {list(at)}")


def check_dropout(dropout, training: bool) -> float:
    """``dropout`` as a float in [0, 1); the probability to apply (0 unless training)."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.floating)):
        raise TypeError(f"dropout must be a float in [0, 1), got {type(dropout).__name__}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    return float(dropout) if training else 0.0


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


class OncePerTensor:
    """Runs a host-side check of a tensor's values once per tensor and version.

    A mask tensor reused across calls (a model's layers, steps with a cached mask, the detached
    copies of reentrant recompute) is then read back to the host once, not on every call.
    ``stamp`` reads the binding's tensors (``_tensor_stamp``): an in-place write, or a new tensor
    in the memory of one that is gone, runs the check again. ``key`` names what else the check
    depended on (e.g. the query length bounds are checked against). ``FLASHMASK_CHECK_BOUNDS=0``
    skips the checks.
    """

    def __init__(self, stamp: TensorStamp):
        self._seen = TensorTable(stamp)

    def run(self, tensor, key: Hashable, check: Callable[[], None]) -> None:
        if not _env.flag("FLASHMASK_CHECK_BOUNDS"):
            return
        if self._seen.find(tensor, lambda entry: entry.key == key) is not None:
            return
        check()
        self._seen.add(tensor, lambda seen: _Checked(seen, key))

    def forget(self, tensor) -> None:
        """The next ``run`` with ``tensor`` (or an alias of it) checks it again."""
        self._seen.remove_if(lambda entry: entry.seen.views(tensor, self._seen.stamp))


class _Checked(NamedTuple):
    seen: SeenTensor
    key: Hashable
