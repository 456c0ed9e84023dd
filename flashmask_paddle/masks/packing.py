"""Packed rows: several documents (or share-question groups) per row, right-padded to ``seqlen``.

Conventions for every builder here (indices are in row coordinates of the pack):

* a **padding column** has ``LTS = 0`` (and ``UTE = 0`` in the non-causal form): every query row
  is masked on it, so padding keys never reach a real token;
* a **padding row** sees nothing: every real column's masked range starts at its document's
  end, which is at or before the padding, and padding columns are masked. Such rows are fully
  masked: the op gives them output 0, LSE ``-inf`` and zero gradients, and they never change a
  real token's result.
"""
from __future__ import annotations

import numbers

import numpy as np

from ._args import check_int, check_lengths, check_pair, column_mask, doc_bounds
from ._core import ColumnMask, picture  # noqa: F401  (picture: used by the doctests)

__all__ = ["pack_documents", "from_segment_ids", "pack_share_question"]


def _pad(values: np.ndarray, seqlen: int, fill: int = 0) -> np.ndarray:
    return np.concatenate([values, np.full(seqlen - len(values), fill, dtype=np.int64)])


def _rows(name: str, rows) -> list:
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__") or len(rows) == 0:
        raise ValueError(f"{name} must be a non-empty list of rows, got {rows!r}")
    return list(rows)


def _fits(name: str, row: int, used: int, seqlen: int) -> None:
    if used > seqlen:
        raise ValueError(f"{name}[{row}] holds {used} tokens, more than seqlen={seqlen}")


def pack_documents(doc_lens_per_row, seqlen: int, *, causal: bool = True) -> ColumnMask:
    """Rows of back-to-back documents, right-padded to ``seqlen``: ``[B, 1, seqlen, C]``.

    ``causal=True`` (C=1, ``LTS`` = end of the column's document): causal inside each document.
    ``causal=False`` (C=2, ``LTS`` = document end, ``UTE`` = document start): bidirectional
    inside each document. Padding columns are masked for every row; padding rows see nothing.

    >>> mask = pack_documents([[4, 3], [5, 2, 1]], 10)
    >>> mask.indices[:, 0, :, 0].tolist()
    [[4, 4, 4, 4, 7, 7, 7, 0, 0, 0], [5, 5, 5, 5, 5, 7, 7, 8, 0, 0]]
    >>> print(picture(mask))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ · · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    · · · · ■ · · · · ·
    · · · · ■ ■ · · · ·
    · · · · ■ ■ ■ · · ·
    · · · · · · · · · ·
    · · · · · · · · · ·
    · · · · · · · · · ·
    >>> print(picture(pack_documents([[4, 3]], 10, causal=False)))
    ■ ■ ■ ■ · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    · · · · ■ ■ ■ · · ·
    · · · · ■ ■ ■ · · ·
    · · · · ■ ■ ■ · · ·
    · · · · · · · · · ·
    · · · · · · · · · ·
    · · · · · · · · · ·
    """
    seqlen = check_int("seqlen", seqlen)
    lts, ute = [], []
    for r, lens in enumerate(_rows("doc_lens_per_row", doc_lens_per_row)):
        lens = check_lengths(f"doc_lens_per_row[{r}]", lens, allow_empty=True)
        _fits("doc_lens_per_row", r, int(lens.sum()), seqlen)
        start, end = doc_bounds(lens)
        lts.append(_pad(end, seqlen))
        ute.append(_pad(start, seqlen))
    return column_mask([lts] if causal else [lts, ute], causal)


def from_segment_ids(segment_ids, *, causal: bool = True, pad_id: int | None = None) -> ColumnMask:
    """Packed rows from per-token segment ids ``[B, S]``: ``[B, 1, S, C]`` (C as in pack_documents).

    A document is a maximal run of equal consecutive ids (an id that reappears after another
    starts a new document: column-wise bounds cannot join separated spans). Padding tokens are
    those with a negative id, or equal to ``pad_id`` when given; they may sit anywhere (usually
    on the right) and follow the padding conventions of this module.

    >>> from_segment_ids([[0, 0, 0, 1, 1, 1, 1, 2, -1, -1]]).indices[0, 0, :, 0].tolist()
    [3, 3, 3, 7, 7, 7, 7, 8, 0, 0]
    >>> print(picture(from_segment_ids([[0, 0, 0, 1, 1, 1, 1, 2, -1, -1]])))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ · · · · · · ·
    · · · ■ · · · · · ·
    · · · ■ ■ · · · · ·
    · · · ■ ■ ■ · · · ·
    · · · ■ ■ ■ ■ · · ·
    · · · · · · · ■ · ·
    · · · · · · · · · ·
    · · · · · · · · · ·
    """
    ids = np.asarray(segment_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"segment_ids must be an int array [batch, seqlen], got shape "
                         f"{tuple(ids.shape)} and dtype {ids.dtype}")
    ids = ids.astype(np.int64)  # room for the padding sentinel below, whatever int width came in
    if pad_id is not None and not isinstance(pad_id, numbers.Integral):
        raise TypeError(f"pad_id must be an int or None, got {pad_id!r}")
    batch, seqlen = ids.shape
    padding = ids < 0 if pad_id is None else (ids < 0) | (ids == pad_id)
    lts = np.zeros((batch, seqlen), dtype=np.int64)
    ute = np.zeros((batch, seqlen), dtype=np.int64)
    if seqlen:
        for b in range(batch):
            row = np.where(padding[b], np.iinfo(np.int64).min, ids[b])
            change = np.r_[True, row[1:] != row[:-1]]
            run = np.cumsum(change) - 1
            starts = np.flatnonzero(change)
            ends = np.r_[starts[1:], seqlen]
            lts[b] = np.where(padding[b], 0, ends[run])
            ute[b] = np.where(padding[b], 0, starts[run])
    return column_mask([lts] if causal else [lts, ute], causal)


def _share_question_row(name: str, groups) -> np.ndarray:
    """LTS of one row of share-question groups: question columns -> group end, answers -> own end."""
    pieces, offset = [], 0
    for g, group in enumerate(groups):
        check_pair(f"{name}[{g}]", group, "(question_len, [answer_lens])")
        question = check_int(f"{name}[{g}] question_len", group[0], minimum=1)
        answers = check_lengths(f"{name}[{g}] answer_lens", group[1], allow_empty=True)
        group_end = offset + question + int(answers.sum())
        pieces.append(np.full(question, group_end, dtype=np.int64))
        pieces.append(np.repeat(offset + question + np.cumsum(answers), answers))
        offset = group_end
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


def pack_share_question(groups_per_row, seqlen: int) -> ColumnMask:
    """Rows of share-question groups (DPO/RM), right-padded to ``seqlen``: ``[B, 1, seqlen, 1]``.

    Each row is a list of ``(question_len, [answer_lens])`` groups laid out back to back as
    question, answer 1, answer 2, ... Causal everywhere; an answer sees its group's question and
    itself, never a sibling answer or another group. Padding as described in the module doc.

    >>> mask = pack_share_question([[(3, [2, 2]), (1, [1])]], 10)
    >>> mask.indices[0, 0, :, 0].tolist()
    [7, 7, 7, 5, 5, 7, 7, 9, 9, 0]
    >>> print(picture(mask))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ · · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    ■ ■ ■ ■ ■ · · · · ·
    ■ ■ ■ · · ■ · · · ·
    ■ ■ ■ · · ■ ■ · · ·
    · · · · · · · ■ · ·
    · · · · · · · ■ ■ ·
    · · · · · · · · · ·
    """
    seqlen = check_int("seqlen", seqlen)
    rows = []
    for r, groups in enumerate(_rows("groups_per_row", groups_per_row)):
        name = f"groups_per_row[{r}]"
        if isinstance(groups, tuple) and len(groups) == 2 and isinstance(groups[0], numbers.Integral):
            raise ValueError(f"{name} must be a list of (question_len, [answer_lens]) groups, got the "
                             f"single group {groups!r}; wrap it in a list")
        used = _share_question_row(name, groups)
        _fits("groups_per_row", r, len(used), seqlen)
        rows.append(_pad(used, seqlen))
    return column_mask([rows], True)
