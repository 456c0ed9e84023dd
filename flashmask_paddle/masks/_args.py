"""Argument checks and the small array helpers every builder shares."""
from __future__ import annotations

import numbers

import numpy as np

from ._core import ColumnMask


def check_int(name: str, value, *, minimum: int = 0, maximum: int | None = None,
              maximum_name: str | None = None) -> int:
    """``value`` as a Python int in ``[minimum, maximum]``; TypeError/ValueError naming ``name``
    otherwise (and ``maximum_name``, e.g. ``"seqlen"``, when the upper bound is another argument)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        limit = f"{maximum_name}={maximum}" if maximum_name else f"{maximum}"
        raise ValueError(f"{name} must be <= {limit}, got {value}")
    return int(value)


def check_pair(name: str, value, what: str):
    """``value`` as a 2-sequence (tuple or list); ValueError "``name`` must be a ``what`` pair" otherwise."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{name} must be a {what} pair, got {value!r}")
    return value


def check_lengths(name: str, values, *, minimum: int = 1, allow_empty: bool = False) -> np.ndarray:
    """A 1-D int64 array of lengths, each >= ``minimum``."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    checked = [check_int(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(values)]
    if not checked and not allow_empty:
        raise ValueError(f"{name} must hold at least one length, got an empty sequence")
    return np.asarray(checked, dtype=np.int64)


def window_pair(name: str, window) -> tuple[int, int]:
    """``w`` -> ``(w, w)``; ``(left, right)`` -> itself; both non-negative ints."""
    if isinstance(window, (tuple, list)):
        if len(window) != 2:
            raise ValueError(f"{name} must be an int or a (left, right) pair, got {window!r}")
        return check_int(f"{name}[0]", window[0]), check_int(f"{name}[1]", window[1])
    w = check_int(name, window)
    return w, w


def column_mask(columns, causal: bool) -> ColumnMask:
    """Stack per-column bound vectors (each ``[Sk]`` or ``[B, Sk]``...) into ``[B, 1, Sk, C]`` int32."""
    stacked = np.stack([np.asarray(c, dtype=np.int64) for c in columns], axis=-1)
    if stacked.ndim == 2:  # [Sk, C] -> [1, 1, Sk, C]
        stacked = stacked[None, None]
    elif stacked.ndim == 3:  # [B, Sk, C] -> [B, 1, Sk, C]
        stacked = stacked[:, None]
    return ColumnMask(np.ascontiguousarray(stacked.astype(np.int32)), bool(causal))


def empty_lower(start, end, seqlen_q):
    """Normalise empty lower intervals to ``(Sq, Sq)`` as Paddle's examples write them."""
    empty = np.asarray(end) <= np.asarray(start)
    return np.where(empty, seqlen_q, start), np.where(empty, seqlen_q, end)


def empty_upper(start, end):
    """Normalise empty upper intervals to ``(0, 0)`` as Paddle's examples write them."""
    empty = np.asarray(end) <= np.asarray(start)
    return np.where(empty, 0, start), np.where(empty, 0, end)


def doc_bounds(lengths: np.ndarray):
    """Per-column (start, end) of the document holding it, for back-to-back documents."""
    ends = np.cumsum(lengths)
    return np.repeat(ends - lengths, lengths), np.repeat(ends, lengths)
