"""The cache of CUDA mask plans shared by the Paddle op (``_plans.py``) and the torch binding
(``torch/_plans.py``): plans by mask tensor and by plan id.

A plan lives as long as its mask tensor (a weak reference drops it with the tensor) and serves that
tensor and its live aliases (``_tensor_stamp``: a detached copy under reentrant recompute finds the
plans of the tensor it was copied from); of calls without a mask tensor (plain causal or full
attention) the last few plans are kept. What a plan is and how it is built and ordered on streams
is the binding's; this module only keeps them.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable, Optional

from ._tensor_stamp import SeenTensor, TensorStamp, TensorTable


class _MaskEntry:
    """The plans of one mask tensor (``seen``) and block mask, valid while both are unwritten."""

    __slots__ = ("seen", "block_mask", "plans")

    def __init__(self, seen: SeenTensor, block_mask: Optional[SeenTensor]):
        self.seen, self.block_mask, self.plans = seen, block_mask, {}

    def has_block_mask(self, block_mask: Optional[Any], stamp: TensorStamp) -> bool:
        if block_mask is None or self.block_mask is None:
            return block_mask is None and self.block_mask is None
        return self.block_mask.matches(block_mask, stamp.place(block_mask), stamp)

    def built_from(self, mask: Any, stamp: TensorStamp) -> bool:
        return self.seen.views(mask, stamp) or (self.block_mask is not None and self.block_mask.views(mask, stamp))


class PlanCache:
    """Plans by mask tensor (with its block mask, if any) and plan id.

    ``stamp`` reads the binding's tensors (``_tensor_stamp.PADDLE`` or ``TORCH``): a mask tensor's
    plans serve it and its live aliases until an in-place write. ``plan_id`` names everything a
    plan's layout and contents depend on besides the mask's values.
    """

    def __init__(self, stamp: TensorStamp, maskless_kept: int = 8):
        # Re-entrant, as the table's: building a plan may run garbage collection.
        self._lock = threading.RLock()
        self._by_mask = TensorTable(stamp)
        self._maskless: collections.OrderedDict = collections.OrderedDict()
        self._maskless_kept = maskless_kept

    def get_or_build(self, indices: Optional[Any], block_mask: Optional[Any], plan_id: Hashable,
                     build: Callable[[], Any]) -> Any:
        with self._lock:
            if indices is None:
                plan = self._maskless.get(plan_id)
                if plan is None:
                    plan = build()
                    self._maskless[plan_id] = plan
                    while len(self._maskless) > self._maskless_kept:
                        self._maskless.popitem(last=False)
                else:
                    self._maskless.move_to_end(plan_id)
                return plan
            stamp = self._by_mask.stamp
            entry = self._by_mask.find(indices, lambda e: e.has_block_mask(block_mask, stamp))
            if entry is None:
                block_seen = None if block_mask is None else SeenTensor(block_mask, stamp)
                entry = self._by_mask.add(indices, lambda seen: _MaskEntry(seen, block_seen))
            plan = entry.plans.get(plan_id)
            if plan is None:
                plan = entry.plans[plan_id] = build()
            return plan

    def clear(self, mask: Optional[Any] = None) -> None:
        """Drops every plan, or with ``mask`` the plans built from that mask or block mask tensor
        (or an alias of it)."""
        with self._lock:
            if mask is None:
                self._by_mask.clear()
                self._maskless.clear()
                return
            self._by_mask.remove_if(lambda entry: entry.built_from(mask, self._by_mask.stamp))

    def __len__(self) -> int:
        with self._lock:
            return sum(len(e.plans) for e in self._by_mask) + len(self._maskless)
