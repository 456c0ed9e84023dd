"""The kernel benchmark's masks (kernel_bench.py): every mask type built as column bounds from
seeded documents (numpy, importable without torch), and the same masks' dense rule on the device
(visible pairs and 128x128 tile density, cuDNN-frontend's per-row key intervals).

Documents are drawn with lengths uniform in [S/32, S/4], seeded per (seed, S, mask): causal,
sliding_window (causal, window S/8: 1K at 8K), causal_document, document, share_question (each
document: first third prompt, then two answers), global_sliding_window (64 global tokens +
bidirectional window S/16 each side), prefix_lm_causal (first half bidirectional),
prefix_lm_document (each document's first half bidirectional), short_documents (causal documents
of lognormal lengths around 350 tokens, SFT-like), full, long_documents (causal documents of lengths
uniform in LONG_DOCS, 8K to 64K tokens: the kernel-level row of e2e_h200.py's long configurations,
for 128K-token rows; a row of 8K tokens or fewer is one document). full and long_documents are
left out of the default set.
"""
from __future__ import annotations

import numpy as np

from flashmask_paddle import masks

# Appended only: a mask's index in MASKS seeds its documents (build_mask).
MASKS = ("causal", "sliding_window", "causal_document", "document", "share_question",
         "global_sliding_window", "prefix_lm_causal", "prefix_lm_document", "short_documents", "full",
         "long_documents")
DEFAULT_MASKS = tuple(m for m in MASKS if m not in ("full", "long_documents"))
# Masks FA4 varlen runs without any mask, as sequences packed by cu_seqlens -> its causal flag.
VARLEN_MASKS = {"causal_document": True, "document": False, "short_documents": True,
                "long_documents": True, "causal": True, "full": False}
LONG_DOCS = (8192, 65536)  # long documents' lengths, uniform in [lo, hi] tokens (also e2e_h200's)
TILE = 128  # the tile of the rows' density, and FlexAttention's block size


def fill_row(seqlen: int, draw) -> list[int]:
    """Document lengths from draw() until S is filled (the last one truncated)."""
    lens, left = [], seqlen
    while left > 0:
        n = min(left, draw())
        lens.append(n)
        left -= n
    return lens


def uniform_doc_lengths(rng: np.random.Generator, seqlen: int, lo: int, hi: int) -> list[int]:
    """Document lengths uniform in [lo, hi] until S is filled."""
    return fill_row(seqlen, lambda: int(rng.integers(lo, hi + 1)))


def doc_lengths(rng: np.random.Generator, seqlen: int) -> list[int]:
    """Document lengths uniform in [S/32, S/4] until S is filled."""
    return uniform_doc_lengths(rng, seqlen, max(1, seqlen // 32), max(1, seqlen // 4))


def long_doc_lengths(rng: np.random.Generator, seqlen: int) -> list[int]:
    """Document lengths uniform in LONG_DOCS until S is filled."""
    return uniform_doc_lengths(rng, seqlen, *LONG_DOCS)


def short_doc_lengths(rng: np.random.Generator, seqlen: int) -> list[int]:
    """SFT-like documents: lognormal lengths around 350 tokens (16 at least) until S is filled."""
    return fill_row(seqlen, lambda: max(16, int(round(rng.lognormal(np.log(350.0), 0.6)))))


def _one_row(name: str, seqlen: int, rng: np.random.Generator, docs_out: list | None = None) -> masks.ColumnMask:
    if name in ("causal", "full"):  # one document: the whole row (FA4 varlen's sequence)
        if docs_out is not None:
            docs_out.append([seqlen])
        return masks.causal(seqlen) if name == "causal" else masks.full(seqlen)
    if name == "sliding_window":
        return masks.sliding_window(seqlen, window_left=seqlen // 8)
    if name == "global_sliding_window":
        w = seqlen // 16
        return masks.global_sliding_window(seqlen, global_tokens=64, window=(w, w))
    if name == "prefix_lm_causal":
        return masks.prefix_lm_causal(seqlen, seqlen // 2)
    draw = {"short_documents": short_doc_lengths, "long_documents": long_doc_lengths}.get(name, doc_lengths)
    docs = draw(rng, seqlen)
    if docs_out is not None:
        docs_out.append(docs)
    if name in ("causal_document", "short_documents", "long_documents"):
        return masks.causal_document(docs)
    if name == "document":
        return masks.document(docs)
    if name == "prefix_lm_document":
        return masks.prefix_lm_document(docs, [d // 2 for d in docs])
    if name == "share_question":
        groups = []
        for d in docs:
            prompt = max(1, d // 3)
            rest = d - prompt
            groups.append((prompt, [a for a in (rest - rest // 2, rest // 2) if a > 0]))
        return masks.pack_share_question([groups], seqlen)
    raise ValueError(f"unknown mask {name!r}; expected one of {', '.join(MASKS)}")


def varlen_sequences(name: str, docs: list[list[int]]) -> list[int] | None:
    """The sequence lengths FA4 varlen packs (cu_seqlens) for mask `name`, from the documents
    build_mask reported per row (a causal or full row is one document: FA4's own causal /
    non-causal kernels); None where varlen cannot express the mask."""
    if name not in VARLEN_MASKS:
        return None
    return [n for row in docs for n in row] if docs else None


def build_mask(name: str, seqlen: int, batch: int, seed: int = 0, docs_out: list | None = None) -> masks.ColumnMask:
    """int32 [batch, 1, S, C] bounds (each batch row its own documents) and the causal flag; the
    document lengths of each row go to docs_out when given (the varlen peers need them)."""
    rng = np.random.default_rng([seed, seqlen, MASKS.index(name)])
    rows = [_one_row(name, seqlen, rng, docs_out) for _ in range(batch)]
    return masks.ColumnMask(np.ascontiguousarray(np.concatenate([r.indices for r in rows], axis=0)),
                            rows[0].causal)


def four_bounds(torch, indices, causal: bool, seqlen_q: int):
    """(lts, lte, uts, ute) int32 [B, Sk] on indices' device: every (causal, C) form normalised the
    way paddle_ops/include/flashmask/mask.h does (absent intervals empty)."""
    idx = indices[:, 0]  # [B, Sk, C]; the benchmark's masks have Hm = 1
    c = idx.shape[-1]
    full, zero = torch.full_like(idx[..., 0], seqlen_q), torch.zeros_like(idx[..., 0])
    lts = idx[..., 0]
    lte = idx[..., 1] if (c == 4 or (causal and c == 2)) else full
    uts = idx[..., 2] if c == 4 else zero
    ute = idx[..., 3] if c == 4 else (idx[..., 1] if (not causal and c == 2) else zero)
    return [t.contiguous() for t in (lts, lte, uts, ute)]


def visible_rows(torch, bounds, causal: bool, r0: int, r1: int, seqlen_q: int, seqlen_k: int):
    """bool [B, r1 - r0, Sk]: which keys query rows r0 .. r1-1 see (the dense rule)."""
    lts, lte, uts, ute = bounds
    q = torch.arange(r0, r1, device=lts.device)[None, :, None]
    vis = ~((q >= lts[:, None]) & (q < lte[:, None]) | (q >= uts[:, None]) & (q < ute[:, None]))
    if causal:
        vis &= torch.arange(seqlen_k, device=lts.device)[None, None, :] <= q + (seqlen_k - seqlen_q)
    return vis


def count_pairs_and_tiles(torch, bounds, causal: bool, seqlen_q: int, seqlen_k: int, rows: int = 1024):
    """(visible pairs summed over batch, fraction of 128x128 tiles with a visible pair)."""
    lts, lte, uts, ute = bounds
    batch = lts.shape[0]
    nk = -(-seqlen_k // TILE)
    pad = nk * TILE - seqlen_k
    pairs = torch.zeros((), dtype=torch.int64, device=lts.device)
    tiles = torch.zeros((), dtype=torch.int64, device=lts.device)
    for r0 in range(0, seqlen_q, rows):
        r1 = min(seqlen_q, r0 + rows)
        vis = visible_rows(torch, bounds, causal, r0, r1, seqlen_q, seqlen_k)
        pairs += vis.sum()
        nq = -(-(r1 - r0) // TILE)
        vis = torch.nn.functional.pad(vis, (0, pad, 0, nq * TILE - (r1 - r0)))
        tiles += vis.view(batch, nq, TILE, nk, TILE).any(dim=4).any(dim=2).sum()
    total_tiles = batch * (-(-seqlen_q // TILE)) * nk
    return int(pairs.item()), int(tiles.item()) / total_tiles


def row_intervals(torch, bounds, causal: bool, seqlen_q: int, seqlen_k: int, rows: int = 1024):
    """The same mask row-wise, as cuDNN-frontend's flex_attention takes it: int32 [1, nfunc, B*Sq]
    with, per query row, visible keys [0, F0) U [F1, F2) U ... (unused intervals empty at Sk), as
    few as the mask needs: nfunc = 2 * (most visible runs in a row) - 1 where every row's first
    run starts at key 0 (causal, prefix-LM), else + 1 with F0 = 0. Built from the dense rule, rows
    at a time, on the bounds' device."""
    lts, lte, uts, ute = bounds
    batch = lts.shape[0]
    chunks, most = [], 1
    for r0 in range(0, seqlen_q, rows):
        r1 = min(seqlen_q, r0 + rows)
        vis = visible_rows(torch, bounds, causal, r0, r1, seqlen_q, seqlen_k)
        edges = torch.nn.functional.pad(vis.to(torch.int8), (1, 1)).diff(dim=-1)  # +-1 where a run starts/ends
        b, r, c = torch.nonzero(edges, as_tuple=True)  # row-major: each row's edges ascending
        key = b * (r1 - r0) + r
        count = torch.bincount(key, minlength=batch * (r1 - r0))
        rank = torch.arange(key.numel(), device=key.device) - (torch.cumsum(count, 0) - count)[key]
        chunks.append((r0, r1, key, rank, c.to(torch.int32)))
        most = max(most, int(count.max().item()) // 2)
    out = torch.full((batch, seqlen_q, 2 * most + 1), seqlen_k, dtype=torch.int32, device=lts.device)
    out[..., 0] = 0
    for r0, r1, key, rank, c in chunks:
        part = torch.full((batch * (r1 - r0), 2 * most + 1), seqlen_k, dtype=torch.int32, device=lts.device)
        part[:, 0] = 0
        part[key, rank + 1] = c
        out[:, r0:r1] = part.view(batch, r1 - r0, -1)
    first_start, first_end = out[..., 1], out[..., 2]
    if bool(((first_start == 0) | (first_start == seqlen_k)).all()):  # [0, F0) is the first run
        out = out[..., 2:].clone()
        out[..., 0] = torch.where(first_start == 0, first_end, torch.zeros_like(first_end))
    return out.reshape(batch * seqlen_q, -1).t().contiguous()[None]
