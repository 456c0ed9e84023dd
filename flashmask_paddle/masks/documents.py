"""Single-sequence masks made of documents or blocks laid out back to back: ``[1, 1, S, C]``."""
from __future__ import annotations

import numpy as np

from ._args import check_int, check_lengths, column_mask, doc_bounds, empty_lower
from ._core import ColumnMask, picture  # noqa: F401  (picture: used by the doctests)
from .packing import pack_documents, pack_share_question

__all__ = ["causal_document", "document", "share_question", "causal_blockwise", "prefix_lm_document"]


def causal_document(doc_lens) -> ColumnMask:
    """Causal attention inside each document, none across: C=1, causal. ``LTS`` = document end.

    >>> causal_document([3, 4, 2]).indices[0, 0, :, 0].tolist()
    [3, 3, 3, 7, 7, 7, 7, 9, 9]
    >>> print(picture(causal_document([3, 4, 2])))
    ■ · · · · · · · ·
    ■ ■ · · · · · · ·
    ■ ■ ■ · · · · · ·
    · · · ■ · · · · ·
    · · · ■ ■ · · · ·
    · · · ■ ■ ■ · · ·
    · · · ■ ■ ■ ■ · ·
    · · · · · · · ■ ·
    · · · · · · · ■ ■
    """
    lens = check_lengths("doc_lens", doc_lens)
    return pack_documents([lens.tolist()], int(lens.sum()), causal=True)


def document(doc_lens) -> ColumnMask:
    """Bidirectional attention inside each document: C=2, non-causal. ``LTS`` = document end,
    ``UTE`` = document start.

    >>> document([3, 5, 2]).indices[0, 0].T.tolist()
    [[3, 3, 3, 8, 8, 8, 8, 8, 10, 10], [0, 0, 0, 3, 3, 3, 3, 3, 8, 8]]
    >>> print(picture(document([3, 5, 2])))
    ■ ■ ■ · · · · · · ·
    ■ ■ ■ · · · · · · ·
    ■ ■ ■ · · · · · · ·
    · · · ■ ■ ■ ■ ■ · ·
    · · · ■ ■ ■ ■ ■ · ·
    · · · ■ ■ ■ ■ ■ · ·
    · · · ■ ■ ■ ■ ■ · ·
    · · · ■ ■ ■ ■ ■ · ·
    · · · · · · · · ■ ■
    · · · · · · · · ■ ■
    """
    lens = check_lengths("doc_lens", doc_lens)
    return pack_documents([lens.tolist()], int(lens.sum()), causal=False)


def share_question(question_len: int, answer_lens) -> ColumnMask:
    """One question shared by k answers (DPO/RM): C=1, causal.

    The question is causal; each answer sees the question and itself causally, not its siblings.
    ``LTS`` = end of the whole sequence on question columns, end of the answer on answer columns.

    >>> share_question(3, [3, 2]).indices[0, 0, :, 0].tolist()
    [8, 8, 8, 6, 6, 6, 8, 8]
    >>> print(picture(share_question(3, [3, 2])))
    ■ · · · · · · ·
    ■ ■ · · · · · ·
    ■ ■ ■ · · · · ·
    ■ ■ ■ ■ · · · ·
    ■ ■ ■ ■ ■ · · ·
    ■ ■ ■ ■ ■ ■ · ·
    ■ ■ ■ · · · ■ ·
    ■ ■ ■ · · · ■ ■
    """
    question_len = check_int("question_len", question_len, minimum=1)
    answers = check_lengths("answer_lens", answer_lens, allow_empty=True)
    return pack_share_question([[(question_len, answers.tolist())]], question_len + int(answers.sum()))


def causal_blockwise(block_lens) -> ColumnMask:
    """Causal blockwise (in-context learning): C=2, causal.

    Every block but the last is causal inside itself only; the last block (the test example)
    sees all previous blocks and itself causally. Column j of a non-last block is masked on rows
    ``[end of its block, start of the last block)`` (``LTS``, ``LTE``); empty intervals are
    written ``(S, S)`` as in Paddle's example.

    >>> causal_blockwise([2, 3, 5]).indices[0, 0].T.tolist()
    [[2, 2, 10, 10, 10, 10, 10, 10, 10, 10], [5, 5, 10, 10, 10, 10, 10, 10, 10, 10]]
    >>> print(picture(causal_blockwise([2, 3, 5])))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    · · ■ · · · · · · ·
    · · ■ ■ · · · · · ·
    · · ■ ■ ■ · · · · ·
    ■ ■ ■ ■ ■ ■ · · · ·
    ■ ■ ■ ■ ■ ■ ■ · · ·
    ■ ■ ■ ■ ■ ■ ■ ■ · ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    """
    lens = check_lengths("block_lens", block_lens)
    total = int(lens.sum())
    _, end = doc_bounds(lens)
    last_start = total - int(lens[-1])
    lte = np.where(np.arange(total) < last_start, last_start, total)
    lts, lte = empty_lower(np.where(np.arange(total) < last_start, end, total), lte, total)
    return column_mask([lts, lte], True)


def prefix_lm_document(doc_lens, prefix_lens) -> ColumnMask:
    """Prefix-LM per document: C=2, non-causal.

    Inside each document the first ``prefix_len`` tokens attend bidirectionally among
    themselves; the rest attend causally (to the prefix and earlier tokens of the document).
    ``LTS`` = document end; ``UTE`` = document start on prefix columns and ``j`` elsewhere.

    >>> prefix_lm_document([3, 2, 5], [2, 2, 2]).indices[0, 0].T.tolist()
    [[3, 3, 3, 5, 5, 10, 10, 10, 10, 10], [0, 0, 2, 3, 3, 5, 5, 7, 8, 9]]
    >>> print(picture(prefix_lm_document([3, 2, 5], [2, 2, 2])))
    ■ ■ · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ · · · · · · ·
    · · · ■ ■ · · · · ·
    · · · ■ ■ · · · · ·
    · · · · · ■ ■ · · ·
    · · · · · ■ ■ · · ·
    · · · · · ■ ■ ■ · ·
    · · · · · ■ ■ ■ ■ ·
    · · · · · ■ ■ ■ ■ ■
    """
    lens = check_lengths("doc_lens", doc_lens)
    prefixes = check_lengths("prefix_lens", prefix_lens, minimum=0)
    if len(prefixes) != len(lens):
        raise ValueError(f"prefix_lens must have one entry per document ({len(lens)}), got {len(prefixes)}")
    too_long = np.flatnonzero(prefixes > lens)
    if too_long.size:
        d = int(too_long[0])
        raise ValueError(f"prefix_lens[{d}]={int(prefixes[d])} exceeds doc_lens[{d}]={int(lens[d])}")
    start, end = doc_bounds(lens)
    cols = np.arange(int(lens.sum()))
    in_prefix = cols < start + np.repeat(prefixes, lens)
    return column_mask([end, np.where(in_prefix, start, cols)], False)
