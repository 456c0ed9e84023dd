"""Loads the compiled FlashMask custom op (``flashmask_ops.so``) and calls it.

``python setup_ops.py install`` puts the library inside the installed package
(``site-packages/flashmask_paddle/flashmask_ops.so``). When this package is imported from a source
checkout (e.g. running pytest from the repo root, where ``./flashmask_paddle`` shadows the installed
copy) the library is not next to this file, so we also look in every ``flashmask_paddle`` directory
on ``sys.path``. ``FLASHMASK_OPS_LIBRARY=/path/to/flashmask_ops.so`` overrides the search.
"""
from __future__ import annotations

import os
import sys
import threading
import warnings

from . import _capabilities, _env

LIBRARY_NAME = "flashmask_ops.so"  # setup_ops.py: OP_EXTENSION = "flashmask_paddle.flashmask_ops"
OP_NAME = "flashmask_attn"
PLAN_OP_NAME = "flashmask_attn_plan"

_lock = threading.Lock()
_loaded_path: str | None = None


def _candidates():
    env = _env.value("FLASHMASK_OPS_LIBRARY")
    if env:
        yield env
        return
    yield os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)
    for entry in sys.path:
        yield os.path.join(os.path.abspath(entry or os.getcwd()), "flashmask_paddle", LIBRARY_NAME)


def find_library() -> str:
    """Path of the compiled op library; ImportError with the fix when it is missing."""
    tried = []
    for path in _candidates():
        if path in tried:
            continue
        tried.append(path)
        if os.path.isfile(path):
            return path
    raise ImportError(
        "flashmask_paddle: the compiled custom op library "
        f"'{LIBRARY_NAME}' was not found (looked in: {', '.join(tried[:4])}"
        f"{', ...' if len(tried) > 4 else ''}). Build and install it with "
        "`python setup_ops.py install` from the repository root.")


def library_path() -> str:
    """Loads the op library once (registering its ops with Paddle) and returns its path."""
    global _loaded_path
    with _lock:
        if _loaded_path is None:
            with warnings.catch_warnings():  # importing cpp_extension warns about ccache
                warnings.simplefilter("ignore")
                from paddle.utils.cpp_extension.extension_utils import load_op_meta_info_and_register_op

            path = find_library()
            ops = load_op_meta_info_and_register_op(path)
            missing = [name for name in (OP_NAME, PLAN_OP_NAME) if name not in ops]
            if missing:
                raise ImportError(f"flashmask_paddle: {path} does not register the op(s) {missing} "
                                  f"(found {ops}); rebuild with `python setup_ops.py install`")
            _loaded_path = path
    return _loaded_path


def capabilities(cuda: bool):
    """Dtypes and head dims the op's CPU or CUDA kernels support (asked from the library)."""
    return _capabilities.query(library_path(), bool(cuda))


def flashmask_attn(q, k, v, startend_row_indices, block_mask, seed_offset, causal: bool,
                   softmax_scale: float, dropout: float = 0.0, deterministic: bool = False,
                   fwd_plan=None, bwd_plan=None):
    """Runs the custom op (autograd-aware). Inputs must already be validated; the plans, if any,
    come from :func:`build_plan` for this problem and mask (the backward's rides along to the
    gradient op). Returns (out, lse)."""
    library_path()
    from paddle import _C_ops

    out, lse = _C_ops._run_custom_op(OP_NAME, q, k, v, startend_row_indices, block_mask, seed_offset,
                                     fwd_plan, bwd_plan, bool(causal), float(softmax_scale),
                                     float(dropout), bool(deterministic))
    return out, lse


def build_plan(q, k, v, startend_row_indices, block_mask, causal: bool, dropout: float,
               deterministic: bool, backward: bool):
    """The forward's or the backward's mask plan of this problem and mask (GPU tensors; a uint8
    tensor built on the current stream). Inputs must already be validated."""
    library_path()
    from paddle import _C_ops

    plan = _C_ops._run_custom_op(PLAN_OP_NAME, q, k, v, startend_row_indices, block_mask, bool(causal),
                                 float(dropout), bool(deterministic), bool(backward))
    return plan[0] if isinstance(plan, (list, tuple)) else plan
