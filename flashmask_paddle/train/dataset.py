"""Packs as a ``paddle.io.Dataset`` plus the collator that batches them for PaddleNLP trainers.

Batches hold the model inputs (``input_ids``, ``labels``, ``position_ids``,
``attn_mask_startend_row_indices`` int32 ``[B, Hm, S, C]``) and two bookkeeping keys, ``META_KEYS``
(``num_tokens``, ``visible_pairs`` per row), which a trainer removes with :func:`split_meta` before
calling the model and uses for tokens/s and mask density.
"""
from __future__ import annotations

import numpy as np
import paddle

from .packing import Pack, stack_packs

__all__ = ["PackedDataset", "collate_packs", "split_meta", "META_KEYS"]

META_KEYS = ("num_tokens", "visible_pairs")


class PackedDataset(paddle.io.Dataset):
    """Rows of a packing (``packing.pack``), in their (already shuffled) order."""

    def __init__(self, packs, stats=None):
        super().__init__()
        self.packs = list(packs)
        self.stats = stats

    def __len__(self):
        return len(self.packs)

    def __getitem__(self, i) -> Pack:
        return self.packs[i]


def collate_packs(packs) -> dict:
    """List of :class:`Pack` -> dict of paddle tensors (model inputs + META_KEYS)."""
    return {k: paddle.to_tensor(v) for k, v in stack_packs(packs).items()}


def split_meta(inputs: dict):
    """Remove META_KEYS from a batch: returns ``(model_inputs, meta)``; meta values as numpy."""
    inputs = dict(inputs)
    meta = {}
    for k in META_KEYS:
        if k in inputs:
            v = inputs.pop(k)
            meta[k] = v.numpy() if hasattr(v, "numpy") else np.asarray(v)
    return inputs, meta
