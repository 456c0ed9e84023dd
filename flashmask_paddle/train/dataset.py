"""Packed rows as a ``paddle.io.Dataset`` and the collators that batch them into paddle tensors.

Batches hold the model inputs (``input_ids``, ``labels``, ``position_ids``,
``attn_mask_startend_row_indices`` int32 ``[B, Hm, S, C]``; preference batches their label rows and
``response_indexs``) and two bookkeeping keys, ``META_KEYS`` (``num_tokens``, ``visible_pairs`` per
row), which ``packed_trainer.PackedMetricsMixin`` removes with :func:`split_meta` before calling the
model and turns into tokens/s and mask density.
"""
from __future__ import annotations

import numpy as np
import paddle

from .packing import Pack, row_bookkeeping, stack_packs

__all__ = ["PackedDataset", "collate_packs", "make_collator", "split_meta", "META_KEYS"]

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


def make_collator(collate):
    """Wrap a numpy collator (``preference.collate_dpo`` / ``collate_rm``) into paddle tensors plus the
    ``num_tokens`` / ``visible_pairs`` bookkeeping keys that ``packed_trainer.PackedMetricsMixin`` pops.

    Must not raise on data that passed ``check_row`` (a raising collate_fn hangs paddle's DataLoader).
    """
    def collator(rows):
        batch = collate(rows)
        batch.update(row_bookkeeping([r.num_tokens for r in rows], batch["attn_mask_startend_row_indices"],
                                     causal=True))
        return {k: paddle.to_tensor(v) for k, v in batch.items()}

    return collator
