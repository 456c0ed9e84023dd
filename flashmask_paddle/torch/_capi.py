"""ctypes mirror of paddle_ops/capi/flashmask_capi.h and the loader of libflashmask.

Keep the two structures field-for-field identical to the header (ctypes applies the same C
alignment rules, so the layouts match). `load_library()` returns a ready ctypes.CDLL: the
process's library, or inside `using_library(path)` the build at `path`.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading

from ._build import find_or_build_library

ABI_VERSION = 3  # FLASHMASK_CAPI_VERSION


class FmTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("batch_stride", ctypes.c_int64),
        ("row_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


class FmArgs(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_k", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("q", FmTensor),
        ("k", FmTensor),
        ("v", FmTensor),
        ("out", FmTensor),
        ("lse", ctypes.c_void_p),
        ("startend_row_indices", ctypes.c_void_p),
        ("mask_heads", ctypes.c_int32),
        ("mask_cols", ctypes.c_int32),
        ("dout", FmTensor),
        ("dq", FmTensor),
        ("dk", FmTensor),
        ("dv", FmTensor),
        ("deterministic", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("block_mask", ctypes.c_void_p),
        ("dropout", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
        ("plan", ctypes.c_void_p),
        ("plan_key", ctypes.c_uint64),
    ]


_ARGS = ctypes.POINTER(FmArgs)
_SIGNATURES = {
    "fm_abi_version": ([], ctypes.c_int),
    "fm_last_error": ([], ctypes.c_char_p),
    "fm_has_cuda": ([], ctypes.c_int),
    "fm_supported_dtypes": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32], ctypes.c_int),
    "fm_supported_head_dims": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                ctypes.c_int32], ctypes.c_int),
    "fm_fwd_cpu": ([_ARGS], ctypes.c_int),
    "fm_bwd_cpu": ([_ARGS], ctypes.c_int),
    "fm_fwd_workspace_bytes": ([_ARGS, ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "fm_bwd_workspace_bytes": ([_ARGS, ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "fm_fwd_cuda": ([_ARGS, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
    "fm_bwd_cuda": ([_ARGS, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
    "fm_fwd_plan_size": ([_ARGS, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int),
    "fm_bwd_plan_size": ([_ARGS, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int),
    "fm_fwd_plan_build": ([_ARGS, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
    "fm_bwd_plan_build": ([_ARGS, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
}

_lock = threading.RLock()
_default = None  # the process's library (find_or_build_library), opened on first use
_opened: dict = {}  # every library opened, by real path: a build opens once however it is named
_override = threading.local()  # using_library's build for the calls of one thread


def _open(path) -> ctypes.CDLL:
    """The library at `path`, opened once per process (two builds at two paths are two copies)."""
    key = os.path.realpath(path)
    with _lock:
        lib = _opened.get(key)
        if lib is None:
            lib = ctypes.CDLL(key)
            for name, (argtypes, restype) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = argtypes, restype
            version = lib.fm_abi_version()
            if version != ABI_VERSION:
                raise RuntimeError(
                    f"{path} speaks C ABI version {version}, this binding expects {ABI_VERSION}; "
                    "rebuild the library (unset FLASHMASK_LIB or point it at a fresh build)")
            lib.fm_path = key
            _opened[key] = lib
        return lib


def load_library() -> ctypes.CDLL:
    """The library this thread's calls go to: using_library's build inside its block, else the
    process's libflashmask (found or built on first use, see _build.py)."""
    lib = getattr(_override, "lib", None)
    if lib is not None:
        return lib
    global _default
    if _default is None:
        with _lock:
            if _default is None:
                _default = _open(find_or_build_library())
    return _default


@contextlib.contextmanager
def using_library(path):
    """Sends this thread's calls inside the block to the libflashmask build at `path`, so that two
    builds are timed in one process on the same inputs, call after call (benchmarks/kernel_bench.py
    --variant NAME:FLASHMASK_LIB=PATH). Each build keeps its own mask plans."""
    if not os.path.isfile(path):
        raise ValueError(f"using_library: {path} is not a file")
    saved = getattr(_override, "lib", None)
    _override.lib = _open(path)
    try:
        yield _override.lib
    finally:
        _override.lib = saved


def check(lib: ctypes.CDLL, rc: int, call: str) -> None:
    """Raises the library's thread-local error message when a C ABI call failed."""
    if rc == 0:
        return
    msg = (lib.fm_last_error() or b"").decode(errors="replace")
    if rc == 1:  # bad argument: the same class the Python validation raises
        raise ValueError(f"{call}: {msg}")
    raise RuntimeError(f"{call} failed (code {rc}): {msg}")
