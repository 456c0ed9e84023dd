"""What the compiled kernels support, asked from the library itself (the C ABI's
``fm_supported_dtypes`` / ``fm_supported_head_dims``, backed by paddle_ops/include/flashmask/check.h),
so neither the Paddle API nor the torch binding keeps its own list."""
from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

__all__ = ["Capabilities", "query"]

_DTYPE_NAMES = {0: "float32", 1: "float16", 2: "bfloat16"}


class Capabilities(NamedTuple):
    device: str                                  # "CPU" or "CUDA"
    dtypes: tuple[str, ...]                      # dtype names of q/k/v
    head_dims: tuple[tuple[int, int], ...] | None  # (D, Dv) pairs; None: any positive D, Dv


@functools.lru_cache(maxsize=None)
def query(library_path: str, cuda: bool) -> Capabilities:
    """Capabilities of the kernels of one device kind in the library at ``library_path``."""
    lib = ctypes.CDLL(library_path)
    ints = ctypes.POINTER(ctypes.c_int32)
    lib.fm_supported_dtypes.argtypes = [ctypes.c_int32, ints, ctypes.c_int32]
    lib.fm_supported_head_dims.argtypes = [ctypes.c_int32, ints, ints, ctypes.c_int32]
    codes = (ctypes.c_int32 * 8)()
    n = lib.fm_supported_dtypes(int(cuda), codes, 8)
    dtypes = tuple(_DTYPE_NAMES[codes[i]] for i in range(min(n, 8)))
    count = lib.fm_supported_head_dims(int(cuda), None, None, 0)
    head_dims = None
    if count >= 0:
        qk, v = (ctypes.c_int32 * count)(), (ctypes.c_int32 * count)()
        lib.fm_supported_head_dims(int(cuda), qk, v, count)
        head_dims = tuple((qk[i], v[i]) for i in range(count))
    return Capabilities("CUDA" if cuda else "CPU", dtypes, head_dims)
