"""Pack documents into fixed-length rows with column-wise masks (numpy only, no paddle).

A :class:`Document` is any token sequence with per-position labels (already shifted, PaddleNLP
style: ``labels[i]`` is the target predicted at position ``i``, ``IGNORE_INDEX`` = no loss) and,
optionally, its own position ids and metadata. :func:`pack` places documents into rows of
``max_length`` tokens by first-fit decreasing, never splitting a document; documents longer than a
row are truncated or dropped (``overlong``) and counted. Each :class:`Pack` (one row) carries
input ids, labels, position ids (restarting per document), its ``startend_row_indices``
``[Hm, S, C]`` and the document boundaries, so DPO/RM, benchmarks and tests can reuse the layout.

The mask of a row comes from ``mask_fn(docs_in_row, seqlen) -> ColumnMask`` (one row); the default is
:func:`flashmask_paddle.masks.pack_documents` (causal document mask, padding columns fully masked).
Preference data passes a share-question builder that reads ``Document.meta``.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

__all__ = ["IGNORE_INDEX", "Document", "Pack", "PackStats", "RowStats", "PackingError", "prompt_response_document",
           "conversation_document", "first_fit_decreasing", "pack", "check_pack", "causal_document_mask", "stack_packs", "mask_densities",
           "row_bookkeeping", "packing_report"]

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100  # PaddleNLP's CrossEntropyLoss ignore_index for labels


class PackingError(ValueError):
    """A pack whose mask, ids or document boundaries disagree."""


@dataclass
class Document:
    input_ids: Sequence[int]
    labels: Sequence[int]  # same length; shifted targets, IGNORE_INDEX where no loss
    position_ids: Optional[Sequence[int]] = None  # default 0..n-1
    meta: dict = field(default_factory=dict)  # free-form, e.g. {"question_len": q, "answer_lens": [..]}

    def __post_init__(self):
        if len(self.labels) != len(self.input_ids):
            raise ValueError(f"Document.labels has {len(self.labels)} entries, expected len(input_ids) = "
                             f"{len(self.input_ids)}")
        if self.position_ids is not None and len(self.position_ids) != len(self.input_ids):
            raise ValueError(f"Document.position_ids has {len(self.position_ids)} entries, expected "
                             f"len(input_ids) = {len(self.input_ids)}")
        if len(self.input_ids) == 0:
            raise ValueError("Document.input_ids is empty; expected at least one token")

    def __len__(self):
        return len(self.input_ids)


def prompt_response_document(prompt_ids, response_ids, bos_id=None, eos_id=None, **meta) -> Document:
    """``[bos] prompt response [eos]`` with loss only on predicting the response (and eos).

    Position ``i`` is labelled with token ``i + 1`` when that token belongs to the response; the
    prompt's own tokens and the last position (nothing follows inside the document) get
    ``IGNORE_INDEX``, so no loss ever crosses into the next document of a pack.
    """
    return conversation_document([(prompt_ids, response_ids)], bos_id, eos_id, **meta)


def conversation_document(turns, bos_id=None, eos_id=None, **meta) -> Document:
    """A multi-turn document ``[bos] prompt_1 response_1 [eos] [bos] prompt_2 response_2 [eos] ...``
    from ``turns`` = ``[(prompt_ids, response_ids), ...]``: loss on predicting every response and its
    eos, none on the prompts (the one-turn case is :func:`prompt_response_document`)."""
    tokens, labelled = [], []  # labelled[i]: token i is a response token (or its eos)
    for n, (prompt_ids, response_ids) in enumerate(turns):
        head = ([bos_id] if bos_id is not None else []) + list(prompt_ids)
        tail = list(response_ids) + ([eos_id] if eos_id is not None else [])
        if not head and not tokens:
            raise ValueError("prompt_response_document: empty prompt and no bos_id; the first response token "
                             "would have no position to be predicted from")
        if n == 0:
            meta = {"prompt_len": len(head), **meta}
        tokens += head + tail
        labelled += [False] * len(head) + [True] * len(tail)
    labels = [tokens[i + 1] if labelled[i + 1] else IGNORE_INDEX for i in range(len(tokens) - 1)]
    return Document(tokens, labels + [IGNORE_INDEX], meta=meta)


@dataclass
class Pack:
    """One packed row of ``seqlen`` tokens (right padding)."""

    input_ids: np.ndarray  # int64 [S]
    labels: np.ndarray  # int64 [S], IGNORE_INDEX on padding
    position_ids: np.ndarray  # int64 [S], restart at 0 per document, 0 on padding
    startend_row_indices: np.ndarray  # int32 [Hm, S, C]
    causal: bool
    doc_ids: list  # indices of the source documents, in row order
    doc_bounds: list  # [(start, end)] in row coordinates, same order

    @property
    def num_tokens(self) -> int:
        return self.doc_bounds[-1][1] if self.doc_bounds else 0

    @property
    def seqlen(self) -> int:
        return len(self.input_ids)


@dataclass
class RowStats:
    """What packed rows hold, shared by the SFT and the preference statistics."""

    tokens: int = 0  # real tokens in the rows
    padding: int = 0
    mask_density: float = 0.0  # visible (q, k) pairs / S^2, mean over rows
    tile_density: float = 0.0  # 128x128 tiles not fully masked, mean over rows

    def rows_summary(self) -> str:
        fill = self.tokens / max(1, self.tokens + self.padding)
        return (f"row fill {fill:.1%}, mask density {self.mask_density:.4f}, "
                f"128x128 tile density {self.tile_density:.3f}")


@dataclass
class PackStats(RowStats):
    documents: int = 0
    packs: int = 0
    truncated: int = 0
    dropped: int = 0
    loss_tokens: int = 0

    def summary(self) -> str:
        return (f"{self.documents} documents -> {self.packs} rows; truncated {self.truncated}, dropped "
                f"{self.dropped}; {self.tokens} tokens ({self.loss_tokens} with loss), {self.rows_summary()}")

    def report(self) -> dict:
        """The packing report of a run's summary (:func:`packing_report`)."""
        return packing_report(self.documents, self.documents - self.dropped, self.truncated,
                              {"too_long": self.dropped} if self.dropped else {}, self.tokens, self.padding)


def packing_report(records: int, kept: int, truncated: int, dropped: dict, tokens: int, padding: int) -> dict:
    """Records read, kept (truncated ones included), truncated, dropped (by reason) and the padding
    ratio (padding tokens / row tokens) of a packing: the same keys for every task's data."""
    return {"records": records, "kept": kept, "truncated": truncated, "dropped": sum(dropped.values()),
            "dropped_by_reason": dict(dropped), "padding_ratio": round(padding / max(1, tokens + padding), 5)}


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list:
    """Bins of item indices: longest first, each into the first bin with room. Every length <= capacity.

    Deterministic (ties keep input order). Returns bins in creation order, items in insertion order.
    O(n log n): a max-tree over the bins' free room finds the leftmost bin that fits, so packing
    hundreds of thousands of documents stays fast.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.min() < 1 or lengths.max() > capacity):
        raise ValueError(f"every length must be in [1, capacity={capacity}], got min {lengths.min()} "
                         f"max {lengths.max()}")
    size = 1
    while size < max(1, lengths.size):
        size *= 2
    # tree[size + b] = free room of bin b (capacity for bins not opened yet); inner nodes hold the max
    tree = [capacity] * (2 * size)
    bins = []
    for i in np.argsort(-lengths, kind="stable"):
        n = int(lengths[i])
        node = 1
        while node < size:  # descend to the leftmost leaf with room >= n (the root always has room)
            node = 2 * node if tree[2 * node] >= n else 2 * node + 1
        b = node - size
        if b == len(bins):
            bins.append([])
        bins[b].append(int(i))
        tree[node] -= n
        node //= 2
        while node:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2
    return bins


def causal_document_mask(docs: Sequence[Document], seqlen: int):
    """Default ``mask_fn``: causal inside each document, padding columns fully masked (C=1)."""
    from flashmask_paddle import masks

    return masks.pack_documents([[len(d) for d in docs]], seqlen, causal=True)


def _fit(doc: Document, max_length: int) -> Document:
    pos = doc.position_ids
    return dataclasses.replace(doc, input_ids=list(doc.input_ids)[:max_length], labels=list(doc.labels)[:max_length],
                               position_ids=None if pos is None else list(pos)[:max_length])


def _build_row(docs, doc_ids, seqlen, pad_id, mask_fn) -> Pack:
    ids = np.full(seqlen, pad_id, dtype=np.int64)
    labels = np.full(seqlen, IGNORE_INDEX, dtype=np.int64)
    pos = np.zeros(seqlen, dtype=np.int64)
    bounds, offset = [], 0
    for d in docs:
        n = len(d)
        ids[offset:offset + n] = d.input_ids
        labels[offset:offset + n] = d.labels
        pos[offset:offset + n] = np.arange(n) if d.position_ids is None else d.position_ids
        bounds.append((offset, offset + n))
        offset += n
    mask = mask_fn(docs, seqlen)
    indices = np.asarray(mask.indices, dtype=np.int32)
    if indices.ndim != 4 or indices.shape[0] != 1:
        raise PackingError(f"mask_fn must return one row [1, Hm, S, C], got shape {tuple(indices.shape)}")
    return Pack(ids, labels, pos, indices[0], bool(mask.causal), list(doc_ids), bounds)


def pack(documents: Sequence[Document], max_length: int, pad_id: int, *, overlong: str = "truncate",
         packing: bool = True, mask_fn: Callable = causal_document_mask, shuffle_seed: Optional[int] = None,
         check: bool = True):
    """Pack ``documents`` into rows of ``max_length``. Returns ``(packs, stats)``.

    ``overlong``: ``"truncate"`` cuts a longer document to ``max_length``; ``"drop"`` skips it.
    ``packing=False`` puts one document per row (the padded baseline). ``shuffle_seed`` shuffles the
    order of the rows (deterministically) so a training run does not see all long documents first.
    ``check`` runs :func:`check_pack` on every row.
    """
    if overlong not in ("truncate", "drop"):
        raise ValueError(f"overlong must be 'truncate' or 'drop', got {overlong!r}")
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    stats = PackStats(documents=len(documents))
    kept, kept_ids, overlong_docs = [], [], 0
    for i, d in enumerate(documents):
        overlong_docs += len(d) > max_length
        if len(d) > max_length:
            if overlong == "drop":
                stats.dropped += 1
                continue
            d = _fit(d, max_length)
            stats.truncated += 1
        elif d.meta.get("truncated"):  # cut before packing (e.g. a prompt over its own limit)
            stats.truncated += 1
        kept.append(d)
        kept_ids.append(i)
    if overlong_docs:
        logger.warning("packing: %d of %d documents longer than max_length=%d were %s", overlong_docs,
                       len(documents), max_length, "truncated" if overlong == "truncate" else "dropped")
    if packing:
        bins = first_fit_decreasing([len(d) for d in kept], max_length)
    else:
        bins = [[i] for i in range(len(kept))]
    if shuffle_seed is not None:
        perm = np.random.default_rng(shuffle_seed).permutation(len(bins))
        bins = [bins[p] for p in perm]
    packs = []
    for b in bins:
        row = _build_row([kept[i] for i in b], [kept_ids[i] for i in b], max_length, pad_id, mask_fn)
        if check:
            check_pack(row)
        stats.tokens += row.num_tokens
        stats.loss_tokens += int((row.labels != IGNORE_INDEX).sum())
        stats.padding += max_length - row.num_tokens
        packs.append(row)
    stats.packs = len(packs)
    if packs:
        stats.mask_density, stats.tile_density = mask_densities(
            np.stack([p.startend_row_indices for p in packs]), packs[0].causal)
    return packs, stats


def mask_densities(indices, causal: bool) -> tuple[float, float]:
    """``(mask_density, tile_density)`` of packed rows' ``startend_row_indices`` ``[B, Hm, S, C]``:
    visible (query, key) pairs / S^2 and the share of 128x128 tiles not fully masked, each the mean
    over rows and mask heads (the figures of :class:`PackStats` and the preference stats)."""
    from flashmask_paddle import masks

    indices = np.asarray(indices)
    seqlen = indices.shape[2]
    return (float(masks.count_visible(indices, causal=causal).mean()) / seqlen ** 2,
            float(masks.tile_density(indices, causal=causal)))


def row_bookkeeping(num_tokens, indices, causal: bool) -> dict:
    """The per-row bookkeeping keys of a batch (``dataset.META_KEYS``, popped by
    ``packed_trainer.PackedMetricsMixin``): ``num_tokens`` (real tokens) and ``visible_pairs`` (visible
    (query, key) pairs, mean over mask heads) of rows with ``startend_row_indices`` ``[B, Hm, S, C]``."""
    from flashmask_paddle import masks

    return {"num_tokens": np.asarray(num_tokens, dtype=np.int64),
            "visible_pairs": masks.count_visible(indices, causal=causal).mean(axis=1).astype(np.int64)}


def check_pack(p: Pack) -> None:
    """Raise :class:`PackingError` when a pack's mask, ids and document boundaries disagree.

    Always: array lengths equal ``S``, the indices are a valid ``startend_row_indices`` (dtype,
    C, bounds), documents are back to back from column 0, padding carries no loss. For the causal
    C=1 form every row builder here emits: each column sees itself and nothing past its document's
    end (``j < LTS_j <= doc_end``), and every padding column is fully masked (``LTS_j = 0``).
    """
    from flashmask_paddle import masks

    s = len(p.input_ids)
    for name in ("labels", "position_ids"):
        if len(getattr(p, name)) != s:
            raise PackingError(f"pack {name} has length {len(getattr(p, name))}, expected seqlen {s}")
    idx = p.startend_row_indices
    if idx.ndim != 3 or idx.shape[1] != s:
        raise PackingError(f"pack startend_row_indices must be [Hm, S={s}, C], got shape {tuple(idx.shape)}")
    try:
        masks.validate(idx[None], p.causal, s)
    except ValueError as e:
        raise PackingError(f"pack startend_row_indices invalid: {e}") from None
    expected_start = 0
    for k, (a, e) in enumerate(p.doc_bounds):
        if a != expected_start or e <= a:
            raise PackingError(f"pack document {k} spans [{a}, {e}), expected to start at {expected_start} "
                               "and be non-empty (documents back to back from column 0)")
        expected_start = e
    end = expected_start
    if end > s:
        raise PackingError(f"pack documents end at {end}, past seqlen {s}")
    if (p.labels[end:] != IGNORE_INDEX).any():
        raise PackingError(f"pack padding positions [{end}, {s}) carry labels; expected {IGNORE_INDEX}")
    if p.causal and idx.shape[-1] == 1:
        lts = idx[..., 0].astype(np.int64)  # [Hm, S]
        doc_end = np.zeros(s, dtype=np.int64)
        for a, e in p.doc_bounds:
            doc_end[a:e] = e
        cols = np.arange(s)
        real = cols < end
        bad = real & ((lts <= cols) | (lts > doc_end)).any(axis=0)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise PackingError(f"pack mask column {j} has LTS={lts[:, j].tolist()}, expected within "
                               f"({j}, {doc_end[j]}]: a token must see itself and nothing past its document end")
        bad = ~real & (lts != 0).any(axis=0)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise PackingError(f"pack padding column {j} has LTS={lts[:, j].tolist()}, expected 0 (fully masked)")


def stack_packs(packs: Sequence[Pack]) -> dict:
    """Numpy batch of packs: the model inputs plus ``num_tokens`` and ``visible_pairs`` per row."""
    if not packs:
        raise ValueError("stack_packs: no packs")
    seqlens = {p.seqlen for p in packs}
    if len(seqlens) != 1:
        raise PackingError(f"stack_packs: rows of different lengths {sorted(seqlens)}")
    idx = np.stack([p.startend_row_indices for p in packs]).astype(np.int32)
    return {
        "input_ids": np.stack([p.input_ids for p in packs]),
        "labels": np.stack([p.labels for p in packs]),
        "position_ids": np.stack([p.position_ids for p in packs]),
        "attn_mask_startend_row_indices": idx,
        **row_bookkeeping([p.num_tokens for p in packs], idx, packs[0].causal),
    }
