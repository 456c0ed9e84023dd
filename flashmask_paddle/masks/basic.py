"""Single-sequence masks defined by positions: full, causal, windows, prefix-LM, QK-sparse, eviction."""
from __future__ import annotations

import numpy as np

from ._args import check_int, check_pair, column_mask, empty_lower, empty_upper, window_pair
from ._core import ColumnMask, picture  # noqa: F401  (picture: used by the doctests)

__all__ = ["full", "causal", "sliding_window", "global_sliding_window", "prefix_lm_causal",
           "qk_sparse", "random_eviction"]


def _lengths(seqlen_q, seqlen_k):
    seqlen_q = check_int("seqlen_q", seqlen_q, minimum=1)
    seqlen_k = seqlen_q if seqlen_k is None else check_int("seqlen_k", seqlen_k, minimum=1)
    return seqlen_q, seqlen_k


def full(seqlen_q: int, seqlen_k: int | None = None) -> ColumnMask:
    """Every query sees every key: C=2, non-causal, ``LTS = Sq``, ``UTE = 0``.

    >>> print(picture(full(10)))
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    """
    seqlen_q, seqlen_k = _lengths(seqlen_q, seqlen_k)
    return column_mask([np.full(seqlen_k, seqlen_q), np.zeros(seqlen_k)], False)


def causal(seqlen_q: int, seqlen_k: int | None = None) -> ColumnMask:
    """Causal, bottom-right aligned when ``Sq != Sk`` (query i sees keys ``j <= i + Sk - Sq``):
    C=1, causal, ``LTS = Sq`` (the flag alone does the masking).

    >>> print(picture(causal(10)))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ · · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    ■ ■ ■ ■ ■ · · · · ·
    ■ ■ ■ ■ ■ ■ · · · ·
    ■ ■ ■ ■ ■ ■ ■ · · ·
    ■ ■ ■ ■ ■ ■ ■ ■ · ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    >>> print(picture(causal(4, 10), seqlen_q=4))
    ■ ■ ■ ■ ■ ■ ■ · · ·
    ■ ■ ■ ■ ■ ■ ■ ■ · ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    """
    seqlen_q, seqlen_k = _lengths(seqlen_q, seqlen_k)
    return column_mask([np.full(seqlen_k, seqlen_q)], True)


def sliding_window(seqlen_q: int, seqlen_k: int | None = None, *, window_left: int,
                   window_right: int = 0, causal: bool = True) -> ColumnMask:
    """Local attention: query i (aligned to key ``i + off``, ``off = Sk - Sq``) sees keys
    ``j`` with ``i + off - window_left <= j <= i + off + window_right``.

    Same indices as Paddle 3.3's ``flashmask_attention(window_size=...)`` builds (for Sq = Sk):
    ``window_size=w`` means ``(w, w)``; with ``causal=True`` the right window is ignored (the
    causal flag caps it at 0), C=1, ``LTS_j = min(j - off + window_left + 1, Sq)``; with
    ``causal=False``, C=2, ``LTS`` as above and ``UTE_j = clip(j - off - window_right, 0, Sq)``.
    Paddle only defines Sq = Sk; for Sq != Sk we use the bottom-right alignment of the causal flag.

    >>> sliding_window(10, window_left=2).indices[0, 0, :, 0].tolist()
    [3, 4, 5, 6, 7, 8, 9, 10, 10, 10]
    >>> print(picture(sliding_window(10, window_left=2)))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ · · · · · · ·
    · ■ ■ ■ · · · · · ·
    · · ■ ■ ■ · · · · ·
    · · · ■ ■ ■ · · · ·
    · · · · ■ ■ ■ · · ·
    · · · · · ■ ■ ■ · ·
    · · · · · · ■ ■ ■ ·
    · · · · · · · ■ ■ ■
    >>> print(picture(sliding_window(10, window_left=1, window_right=2, causal=False)))
    ■ ■ ■ · · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    · ■ ■ ■ ■ · · · · ·
    · · ■ ■ ■ ■ · · · ·
    · · · ■ ■ ■ ■ · · ·
    · · · · ■ ■ ■ ■ · ·
    · · · · · ■ ■ ■ ■ ·
    · · · · · · ■ ■ ■ ■
    · · · · · · · ■ ■ ■
    · · · · · · · · ■ ■
    """
    seqlen_q, seqlen_k = _lengths(seqlen_q, seqlen_k)
    left = check_int("window_left", window_left)
    right = check_int("window_right", window_right)
    shift = np.arange(seqlen_k) - (seqlen_k - seqlen_q)  # the query row aligned to key j
    lts = np.clip(shift + left + 1, 0, seqlen_q)
    if causal:
        return column_mask([lts], True)
    return column_mask([lts, np.clip(shift - right, 0, seqlen_q)], False)


def global_sliding_window(seqlen: int, *, global_tokens: int, window) -> ColumnMask:
    """Global + sliding window (Longformer/BigBird style): C=4, non-causal.

    The first ``global_tokens`` tokens see everything and are seen by everyone; every other
    query i sees keys ``i - left .. i + right`` (``window`` = ``w`` or ``(left, right)``) plus
    the global keys. Empty intervals are written ``(S, S)`` / ``(0, 0)`` as in Paddle's example.

    >>> global_sliding_window(10, global_tokens=2, window=1).indices[0, 0].T.tolist()
    [[10, 10, 4, 5, 6, 7, 8, 9, 10, 10], [10, 10, 10, 10, 10, 10, 10, 10, 10, 10], [0, 0, 0, 0, 2, 2, 2, 2, 2, 2], [0, 0, 0, 0, 3, 4, 5, 6, 7, 8]]
    >>> print(picture(global_sliding_window(10, global_tokens=2, window=1)))
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    ■ ■ ■ ■ · · · · · ·
    ■ ■ ■ ■ ■ · · · · ·
    ■ ■ · ■ ■ ■ · · · ·
    ■ ■ · · ■ ■ ■ · · ·
    ■ ■ · · · ■ ■ ■ · ·
    ■ ■ · · · · ■ ■ ■ ·
    ■ ■ · · · · · ■ ■ ■
    ■ ■ · · · · · · ■ ■
    """
    seqlen = check_int("seqlen", seqlen, minimum=1)
    g = check_int("global_tokens", global_tokens, maximum=seqlen, maximum_name="seqlen")
    left, right = window_pair("window", window)
    cols = np.arange(seqlen)
    is_global = cols < g
    lts, lte = empty_lower(np.where(is_global, seqlen, np.clip(cols + left + 1, g, seqlen)),
                           np.full(seqlen, seqlen), seqlen)
    uts, ute = empty_upper(np.full(seqlen, g), np.where(is_global, 0, np.clip(cols - right, 0, seqlen)))
    return column_mask([lts, lte, uts, ute], False)


def prefix_lm_causal(seqlen: int, prefix_len: int) -> ColumnMask:
    """Prefix-LM: the first ``prefix_len`` tokens attend bidirectionally among themselves, the
    rest causally: C=2, non-causal, ``LTS = S``, ``UTE`` = 0 on prefix columns and ``j`` after.

    >>> print(picture(prefix_lm_causal(9, 4)))
    ■ ■ ■ ■ · · · · ·
    ■ ■ ■ ■ · · · · ·
    ■ ■ ■ ■ · · · · ·
    ■ ■ ■ ■ · · · · ·
    ■ ■ ■ ■ ■ · · · ·
    ■ ■ ■ ■ ■ ■ · · ·
    ■ ■ ■ ■ ■ ■ ■ · ·
    ■ ■ ■ ■ ■ ■ ■ ■ ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■
    """
    seqlen = check_int("seqlen", seqlen, minimum=1)
    prefix_len = check_int("prefix_len", prefix_len, maximum=seqlen, maximum_name="seqlen")
    cols = np.arange(seqlen)
    return column_mask([np.full(seqlen, seqlen), np.where(cols < prefix_len, 0, cols)], False)


def qk_sparse(seqlen: int, *, spans) -> ColumnMask:
    """QK-sparse (as in Paddle's FlashMask examples and benchmark): C=2, causal.

    ``spans`` is a list of ``(start, length)`` key spans, sorted and disjoint. The keys of a
    span are hidden from every query inside the span and become visible (causally) only to the
    queries after it: query i sees key j iff ``j <= i`` and not (j lies in a span and
    ``i < start + length`` of that span). So a query inside a span sees only the context before
    the span. Column j of a span is masked on rows ``[j, start + length)``.

    >>> qk_sparse(10, spans=[(2, 3), (6, 2)]).indices[0, 0].T.tolist()
    [[10, 10, 2, 3, 4, 10, 6, 7, 10, 10], [10, 10, 5, 5, 5, 10, 8, 8, 10, 10]]
    >>> print(picture(qk_sparse(10, spans=[(2, 3), (6, 2)])))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ ■ ■ ■ · · · ·
    ■ ■ ■ ■ ■ ■ · · · ·
    ■ ■ ■ ■ ■ ■ · · · ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ·
    ■ ■ ■ ■ ■ ■ ■ ■ ■ ■
    """
    seqlen = check_int("seqlen", seqlen, minimum=1)
    lts = np.full(seqlen, seqlen, dtype=np.int64)
    lte = np.full(seqlen, seqlen, dtype=np.int64)
    previous_end = 0
    for s, span in enumerate(spans):
        check_pair(f"spans[{s}]", span, "(start, length)")
        start = check_int(f"spans[{s}] start", span[0])
        length = check_int(f"spans[{s}] length", span[1], minimum=1)
        if start < previous_end:
            raise ValueError(f"spans must be sorted and disjoint: spans[{s}] starts at {start}, "
                             f"before the previous span's end {previous_end}")
        if start + length > seqlen:
            raise ValueError(f"spans[{s}] = ({start}, {length}) ends past seqlen={seqlen}")
        lts[start:start + length] = np.arange(start, start + length)
        lte[start:start + length] = start + length
        previous_end = start + length
    return column_mask([lts, lte], True)


def random_eviction(seqlen: int, *, cache_size: int, seed: int, batch: int = 1, heads: int = 1) -> ColumnMask:
    """Random KV-cache eviction (the paper's "random eviction" mask): C=1, causal.

    A cache holds at most ``cache_size`` keys. Queries ``i < cache_size`` see keys ``0..i``;
    each later query first evicts one key drawn uniformly from the keys still cached before it
    (never itself), so it sees exactly ``cache_size`` keys and an evicted key stays invisible to
    every later query: ``LTS_j`` = the row that evicted key j (``S`` if never evicted). Drawn
    independently per (batch, head) from ``numpy.random.default_rng(seed)``: ``[batch, heads, S, 1]``.

    >>> print(picture(random_eviction(10, cache_size=4, seed=0)))
    ■ · · · · · · · · ·
    ■ ■ · · · · · · · ·
    ■ ■ ■ · · · · · · ·
    ■ ■ ■ ■ · · · · · ·
    ■ ■ ■ · ■ · · · · ·
    ■ ■ ■ · · ■ · · · ·
    ■ ■ · · · ■ ■ · · ·
    ■ ■ · · · · ■ ■ · ·
    ■ ■ · · · · · ■ ■ ·
    ■ ■ · · · · · ■ · ■
    """
    seqlen = check_int("seqlen", seqlen, minimum=1)
    cache_size = check_int("cache_size", cache_size, minimum=1, maximum=seqlen, maximum_name="seqlen")
    batch = check_int("batch", batch, minimum=1)
    heads = check_int("heads", heads, minimum=1)
    rng = np.random.default_rng(check_int("seed", seed))
    lts = np.full((batch, heads, seqlen), seqlen, dtype=np.int64)
    for b in range(batch):
        for h in range(heads):
            cached = list(range(cache_size))  # keys before the first evicting row
            picks = rng.random(seqlen)
            for row in range(cache_size, seqlen):
                k = int(picks[row] * len(cached))
                cached[k], cached[-1] = cached[-1], cached[k]
                lts[b, h, cached.pop()] = row
                cached.append(row)  # the row's own key enters the cache after it attends
    return ColumnMask(np.ascontiguousarray(lts[..., None].astype(np.int32)), True)
