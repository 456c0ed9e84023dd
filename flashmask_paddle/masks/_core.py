"""The column-wise mask value, its validation, and views of it (dense picture, tile density).

Semantics live in one place, :func:`flashmask_paddle.reference.visible_pairs` (docs/MASKS_AND_API.md);
everything here that needs "which pairs are visible" either calls it or is tested against it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import reference

__all__ = ["ColumnMask", "validate", "to_dense", "picture", "tile_density", "count_visible",
           "bound_names"]


class ColumnMask(NamedTuple):
    """A FlashMask mask: ``indices`` int32 ``[B, Hm, Sk, C]`` and the ``causal`` flag it needs.

    Unpacks like a pair: ``idx, causal = masks.causal_document([4, 3, 3])``; pass both to
    ``flashmask_attention(q, k, v, idx, causal=causal)``.
    """

    indices: np.ndarray
    causal: bool


def bound_names(causal: bool, columns: int) -> tuple[str, ...]:
    """Names of the bound columns for a (causal, C) form, in storage order (the table of docs/MASKS_AND_API.md)."""
    if causal:
        return {1: ("LTS",), 2: ("LTS", "LTE")}[columns]
    return {2: ("LTS", "UTE"), 4: ("LTS", "LTE", "UTS", "UTE")}[columns]


def check_bound_columns(columns: int, causal: bool) -> None:
    """Raise ValueError unless C = ``columns`` is a form docs/MASKS_AND_API.md defines for ``causal``.

    The one place that says which C goes with which flag: :func:`validate` and the op's layout
    check (``flashmask_paddle._validate.check_indices_layout``) both call it.
    """
    if columns not in (1, 2, 4):
        raise ValueError(f"startend_row_indices must have C in {{1, 2, 4}} bound columns (its last "
                         f"dimension), got {columns}: C={columns} is not a FlashMask form")
    if causal and columns == 4:
        raise ValueError("startend_row_indices with causal=True must have C=1 (LTS) or C=2 (LTS, LTE), "
                         "got C=4; C=4 (LTS, LTE, UTS, UTE) needs causal=False")
    if not causal and columns == 1:
        raise ValueError("startend_row_indices with causal=False must have C=2 (LTS, UTE) or C=4 "
                         "(LTS, LTE, UTS, UTE), got C=1; C=1 (LTS) needs causal=True")


def validate(indices, causal: bool, seqlen_q: int) -> None:
    """Raise ValueError unless ``indices`` is a well-formed ``startend_row_indices`` for ``causal``.

    Checks: int32 dtype, rank 4, C in {1, 2, 4}, C allowed for ``causal`` (causal with C=4 and
    non-causal with C=1 are invalid), every bound in ``[0, seqlen_q]``, LTS <= LTE, UTS <= UTE.
    Messages name ``startend_row_indices``, the bound, the first offending ``[b, h, col]`` and
    its value.
    """
    arr = np.asarray(indices)
    if arr.dtype != np.int32:
        raise ValueError(f"startend_row_indices must have dtype int32, got {arr.dtype}")
    if arr.ndim != 4:
        raise ValueError("startend_row_indices must have rank 4 [batch, mask_heads, seqlen_k, C], "
                         f"got rank {arr.ndim} with shape {tuple(arr.shape)}")
    columns = arr.shape[-1]
    check_bound_columns(columns, causal)
    if not isinstance(seqlen_q, (int, np.integer)) or seqlen_q < 0:
        raise ValueError(f"seqlen_q must be a non-negative int, got {seqlen_q!r}")
    names = bound_names(bool(causal), columns)
    for k, name in enumerate(names):
        bad = (arr[..., k] < 0) | (arr[..., k] > seqlen_q)
        if bad.any():
            b, h, col = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(f"startend_row_indices bound {name} at [b={b}, h={h}, col={col}] is "
                             f"{int(arr[b, h, col, k])}, outside [0, seqlen_q={seqlen_q}]")
    for start, end in (("LTS", "LTE"), ("UTS", "UTE")):
        if start in names and end in names:
            s, e = names.index(start), names.index(end)
            bad = arr[..., s] > arr[..., e]
            if bad.any():
                b, h, col = (int(x) for x in np.argwhere(bad)[0])
                raise ValueError(f"startend_row_indices bound {start} > {end} at [b={b}, h={h}, col={col}]: "
                                 f"{start}={int(arr[b, h, col, s])}, {end}={int(arr[b, h, col, e])}")


def _unpack(mask_or_indices, causal, seqlen_q):
    """(indices int64 [B,Hm,Sk,C], causal, seqlen_q) from a ColumnMask or a raw array + flag."""
    if isinstance(mask_or_indices, ColumnMask):
        indices, flag = mask_or_indices
        if causal is not None and bool(causal) != bool(flag):
            raise ValueError(f"causal={causal} contradicts the ColumnMask's causal={flag}")
        causal = flag
    else:
        indices = mask_or_indices
        if causal is None:
            raise ValueError("causal is required when passing raw startend_row_indices")
    arr = np.asarray(indices)
    if arr.ndim != 4:
        raise ValueError(f"startend_row_indices must have rank 4, got shape {tuple(arr.shape)}")
    if seqlen_q is None:
        seqlen_q = arr.shape[2]
    return arr.astype(np.int64), bool(causal), int(seqlen_q)


def to_dense(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None) -> np.ndarray:
    """Boolean ``[B, Hm, Sq, Sk]``, True = visible. ``seqlen_q`` defaults to ``Sk`` (square)."""
    arr, causal, seqlen_q = _unpack(mask_or_indices, causal, seqlen_q)
    return reference.visible_pairs(arr, causal, seqlen_q)


def picture(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None, *,
            batch: int = 0, head: int = 0, visible: str = "■", masked: str = "·") -> str:
    """Text picture of one (batch, head) of the mask: rows = queries, columns = keys."""
    dense = to_dense(mask_or_indices, causal, seqlen_q)[batch, head]
    return "\n".join(" ".join(visible if v else masked for v in row) for row in dense)


def _masked_intervals(arr, causal, seqlen_q):
    """Two masked row intervals per column, ``(s1, e1), (s2, e2)`` each int64 ``[B, Hm, Sk]``.

    The causal triangle becomes the upper interval ``[0, j - (Sk - Sq))`` (clipped), so every form
    of docs/MASKS_AND_API.md reads as "column j is masked on the union of two intervals".
    """
    batch, heads, sk, columns = arr.shape
    full = np.full((batch, heads, sk), seqlen_q, dtype=np.int64)
    zero = np.zeros_like(full)
    if causal:
        lower_end = arr[..., 1] if columns == 2 else full
        diag = np.clip(np.arange(sk) - (sk - seqlen_q), 0, seqlen_q)
        upper = (zero, np.broadcast_to(diag, full.shape))
    elif columns == 2:
        lower_end, upper = full, (zero, arr[..., 1])
    else:
        lower_end, upper = arr[..., 1], (arr[..., 2], arr[..., 3])
    lower = (np.clip(arr[..., 0], 0, seqlen_q), np.clip(lower_end, 0, seqlen_q))
    upper = (np.clip(upper[0], 0, seqlen_q), np.clip(upper[1], 0, seqlen_q))
    return lower, upper


def _visible_pieces(arr, causal, seqlen_q):
    """Visible rows of each column as three half-open pieces ``[a, b)`` (possibly empty)."""
    (ls, le), (us, ue) = _masked_intervals(arr, causal, seqlen_q)
    # an empty interval must not split the column: move it to the end of the rows
    ls, le = np.where(le > ls, ls, seqlen_q), np.where(le > ls, le, seqlen_q)
    us, ue = np.where(ue > us, us, seqlen_q), np.where(ue > us, ue, seqlen_q)
    first = ls <= us
    s1, e1 = np.where(first, ls, us), np.where(first, le, ue)
    s2, e2 = np.where(first, us, ls), np.where(first, ue, le)
    zero = np.zeros_like(s1)
    return [(zero, s1), (e1, np.maximum(e1, s2)), (np.maximum(e1, e2), np.full_like(s1, seqlen_q))]


def document_starts(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None) -> np.ndarray:
    """Where the mask is block diagonal: bool ``[B, Hm, S]``, True at position j when no query row
    at or after j sees a key before j and no query row before j sees a key at or after j (position 0
    always). For packed documents these are the document starts, the sequence boundaries a varlen
    kernel would take (cu_seqlens); a share-question group or a prefix-LM document is one block,
    a sliding window or a single causal row has none past 0. Square masks only (Sq = Sk)."""
    arr, causal, seqlen_q = _unpack(mask_or_indices, causal, seqlen_q)
    if seqlen_q != arr.shape[2]:
        raise ValueError(f"document_starts needs Sq = Sk, got Sq={seqlen_q}, Sk={arr.shape[2]}")
    pieces = list(_visible_pieces(arr, causal, seqlen_q))
    live = [b > a for a, b in pieces]
    # per key column: first visible row (S if none) and one past the last (0 if none)
    first = np.min([np.where(m, a, seqlen_q) for (a, _), m in zip(pieces, live)], axis=0)
    end = np.max([np.where(m, b, 0) for (_, b), m in zip(pieces, live)], axis=0)
    j = np.arange(seqlen_q)
    # rows >= j see no key < j: the keys before j end by j; rows < j see no key >= j: those start at j
    end_before = np.concatenate([np.zeros_like(end[..., :1]), np.maximum.accumulate(end, axis=-1)[..., :-1]],
                                axis=-1)
    first_from = np.minimum.accumulate(first[..., ::-1], axis=-1)[..., ::-1]
    starts = (end_before <= j) & (first_from >= j)
    starts[..., :1] = seqlen_q > 0
    return starts


def count_visible(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None) -> np.ndarray:
    """Number of visible (query, key) pairs per ``[B, Hm]`` without building the dense mask.

    This is the ``pairs`` the benchmarks count (benchmarks/README.md; FLOPs = 4·D·pairs·Hq forward).
    """
    arr, causal, seqlen_q = _unpack(mask_or_indices, causal, seqlen_q)
    pieces = _visible_pieces(arr, causal, seqlen_q)
    return sum(np.maximum(b - a, 0).sum(axis=-1) for a, b in pieces)


def tile_density(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None, *,
                 block: int = 128, block_k: int | None = None) -> float:
    """Fraction of ``block x block_k`` tiles (query block, key block) that are not fully masked.

    Exact, computed from the visible row pieces of each column (O(Sk + tiles) memory, never the
    dense picture), averaged over batch and mask heads. Edge tiles count as whole tiles.
    """
    arr, causal, seqlen_q = _unpack(mask_or_indices, causal, seqlen_q)
    block_k = block if block_k is None else block_k
    if block < 1 or block_k < 1:
        raise ValueError(f"block sizes must be positive, got block={block}, block_k={block_k}")
    if seqlen_q == 0 or arr.shape[2] == 0:
        return 0.0
    starts = np.arange(0, seqlen_q, block), np.arange(0, arr.shape[2], block_k)
    return float(_touched_tiles(arr, causal, seqlen_q, *starts).mean())


def visited_tiles(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None, *,
                  row_starts, key_starts) -> np.ndarray:
    """Number of tiles holding a visible pair per ``[B, Hm]``, for tiles whose query blocks begin at
    ``row_starts`` and key blocks at ``key_starts`` (ascending positions, the first 0): e.g. blocks
    that restart at every document start, as varlen kernels tile packed documents."""
    return touched_tiles(mask_or_indices, causal, seqlen_q, row_starts=row_starts,
                         key_starts=key_starts).sum(axis=(2, 3))


def touched_tiles(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None, *,
                  row_starts, key_starts) -> np.ndarray:
    """Which tiles hold a visible pair: bool ``[B, Hm, query blocks, key blocks]`` for the blocks of
    :func:`visited_tiles`, e.g. to place each key block's query tiles from its first visible row."""
    arr, causal, seqlen_q = _unpack(mask_or_indices, causal, seqlen_q)
    row_starts, key_starts = _block_starts(row_starts, key_starts, seqlen_q, arr.shape[2])
    return _touched_tiles(arr, causal, seqlen_q, row_starts, key_starts)


def unmasked_tiles(mask_or_indices, causal: bool | None = None, seqlen_q: int | None = None, *,
                   row_starts, key_starts, block_n: int | None = None) -> np.ndarray:
    """Which tiles of :func:`touched_tiles`' blocks have every pair visible: bool ``[B, Hm, query
    blocks, key blocks]``. With ``block_n``, a key block shorter than it is never unmasked: a kernel
    that loads ``block_n`` keys per tile must mask the keys past the block. Visited tiles that are
    not unmasked are the partial ones, which need the element mask."""
    arr, causal, seqlen_q = _unpack(mask_or_indices, causal, seqlen_q)
    row_starts, key_starts = _block_starts(row_starts, key_starts, seqlen_q, arr.shape[2])
    row_ends = np.append(row_starts[1:], seqlen_q)
    covered = np.zeros((*arr.shape[:3], len(row_starts)), dtype=bool)  # column sees all rows of a query block
    for a, b in _visible_pieces(arr, causal, seqlen_q):
        covered |= (a[..., None] <= row_starts) & (b[..., None] >= row_ends)
    full = np.logical_and.reduceat(covered, key_starts, axis=2).transpose(0, 1, 3, 2)
    if block_n is not None:
        full &= np.diff(np.append(key_starts, arr.shape[2])) >= block_n
    return full


def _block_starts(row_starts, key_starts, seqlen_q: int, seqlen_k: int):
    row_starts, key_starts = (np.asarray(x, dtype=np.int64) for x in (row_starts, key_starts))
    for name, starts, length in (("row_starts", row_starts, seqlen_q), ("key_starts", key_starts, seqlen_k)):
        if starts.ndim != 1 or len(starts) == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0) or \
                starts[-1] >= max(length, 1):
            raise ValueError(f"{name} must ascend strictly from 0 below {length}, got {starts.tolist()[:8]}")
    return row_starts, key_starts


def _touched_tiles(arr, causal, seqlen_q, row_starts, key_starts):
    batch, heads, sk, _ = arr.shape
    n_q, n_k = len(row_starts), len(key_starts)
    # difference array over query blocks: +1 where a visible piece starts touching, -1 after it
    diff = np.zeros((batch, heads, n_q + 1, n_k), dtype=np.int32)
    key_block = np.searchsorted(key_starts, np.arange(sk), side="right") - 1
    bi, hi, kb = np.meshgrid(np.arange(batch), np.arange(heads), key_block, indexing="ij")
    for a, b in _visible_pieces(arr, causal, seqlen_q):
        live = b > a
        first_block = np.searchsorted(row_starts, a[live], side="right") - 1
        after_block = np.searchsorted(row_starts, b[live] - 1, side="right")
        np.add.at(diff, (bi[live], hi[live], first_block, kb[live]), 1)
        np.add.at(diff, (bi[live], hi[live], after_block, kb[live]), -1)
    return np.cumsum(diff[:, :, :n_q], axis=2) > 0
