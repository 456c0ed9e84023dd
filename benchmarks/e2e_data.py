"""The end-to-end benchmark's batches: document lengths (the real short SFT documents of
benchmarks/data/doc_lengths.json, or long documents drawn uniformly in LONG_DOCS), packed greedily
into rows, and each batch as a collator hands it over (segment ids, per-document positions, token
ids, labels, RoPE tables)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from e2e_config import Config, RunPlan
from e2e_model import rope_tables
from kernel_masks import LONG_DOCS

DOC_LENGTHS = Path(__file__).resolve().parent / "data" / "doc_lengths.json"


def load_lengths(dataset: str, scale: int) -> np.ndarray:
    """The short documents' token counts (`dataset`: gsm8k, hh_rlhf or mix), divided by `scale`."""
    with open(DOC_LENGTHS, encoding="utf-8") as f:
        lengths = {k: np.asarray(v, dtype=np.int64) for k, v in json.load(f)["lengths"].items()}
    if dataset == "mix":
        out = np.concatenate(list(lengths.values()))
    elif dataset in lengths:
        out = lengths[dataset]
    else:
        raise ValueError(f"dataset must be 'mix' or one of {sorted(lengths)}, got {dataset!r}")
    return np.maximum(out // scale, 2)


def pack_rows(lengths: np.ndarray, seqlen: int, rows: int, rng: np.random.Generator):
    """Greedy in-order packing of a shuffled document stream into `rows` rows of `seqlen` tokens.

    Returns a list of rows; each row is a list of segment lengths summing to `seqlen`; the last
    segment of a row is padding when the documents do not fill it (flag in the second list).
    """
    order = rng.permutation(len(lengths))
    packed, pad_flags, i = [], [], 0
    for _ in range(rows):
        segs, used = [], 0
        while True:
            doc = int(min(lengths[order[i % len(order)]], seqlen))
            if used + doc > seqlen:
                break
            segs.append(doc)
            used += doc
            i += 1
        has_pad = used < seqlen
        if has_pad:
            segs.append(seqlen - used)
        packed.append(segs)
        pad_flags.append(has_pad)
    return packed, pad_flags


def segment_arrays(packed, pad_flags, seqlen: int):
    """numpy views of one packed batch: segment ids, per-document positions, real-token flags.

    The padding tail of a row gets a segment id of its own (not a padding id): dense SDPA turns a
    fully masked row into NaN, so every attention here sees padding as one more short document.
    """
    b = len(packed)
    seg_id = np.zeros((b, seqlen), np.int32)
    pos = np.zeros((b, seqlen), np.int64)
    valid = np.ones((b, seqlen), bool)
    for r, (segs, has_pad) in enumerate(zip(packed, pad_flags)):
        start = 0
        for s, n in enumerate(segs):
            seg_id[r, start:start + n] = s
            pos[r, start:start + n] = np.arange(n)
            start += n
        if has_pad:
            valid[r, seqlen - segs[-1]:] = False
    return seg_id, pos, valid


def long_lengths(rng: np.random.Generator, scale: int, count: int = 4096) -> np.ndarray:
    lo, hi = LONG_DOCS
    return rng.integers(lo // scale, hi // scale + 1, size=count)


def make_batches(torch, config: Config, plan: RunPlan, short_lengths, device, dtype, scale: int):
    """plan.batches packed batches of `config`: segment ids on the device, the rows' segment
    lengths on the host (a collator's output), token ids, labels and RoPE tables."""
    rows, s, shape = max(1, config.tokens_per_step // config.seqlen), config.seqlen, config.shape
    rng = np.random.default_rng([plan.seed, s, rows])
    out = []
    for _ in range(plan.batches):
        lengths = short_lengths if config.docs == "short" else long_lengths(rng, scale)
        packed, pad = pack_rows(lengths, s, rows, rng)
        seg_id, pos, valid = segment_arrays(packed, pad, s)
        labels = np.where(valid, rng.integers(0, shape.vocab, (rows, s)), -100)
        out.append({
            "seg_id": torch.from_numpy(seg_id).to(device),
            "doc_lengths": packed,  # per row, the padding tail included (one more segment)
            "ids": torch.from_numpy(rng.integers(0, shape.vocab, (rows, s))).to(device),
            "labels": torch.from_numpy(labels).to(device),
            "rope": rope_tables(torch, torch.from_numpy(pos).to(device), shape, dtype),
            "real_tokens": int(valid.sum()), "docs": sum(len(p) - f for p, f in zip(packed, pad)),
            "pairs": sum(n * (n + 1) // 2 for row in packed for n in row),  # per head
        })
    return out
