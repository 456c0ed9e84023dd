"""The cache of CUDA mask plans shared by the Paddle op (``_plans.py``) and the torch binding
(``torch/_plans.py``): plans by mask tensor (identity and version stamp) and by plan id.

A plan lives as long as its mask tensor (a weak reference drops it with the tensor); of calls
without a mask tensor (plain causal or full attention) the last few plans are kept. What a plan
is and how it is built and ordered on streams is the binding's; this module only keeps them.
"""
from __future__ import annotations

import collections
import threading
import weakref
from typing import Any, Callable, Hashable, Optional


class _MaskEntry:
    """The plans of one mask tensor and block mask (weak references: an id is reused once its
    object is gone), valid for one stamp (version) of them."""

    __slots__ = ("ref", "block_mask_ref", "stamp", "plans")

    def __init__(self, ref: weakref.ref, block_mask: Optional[Any], stamp: Hashable):
        self.ref, self.stamp, self.plans = ref, stamp, {}
        self.block_mask_ref = None if block_mask is None else weakref.ref(block_mask)

    def block_mask(self) -> Optional[Any]:
        return None if self.block_mask_ref is None else self.block_mask_ref()

    def holds(self, indices: Any, block_mask: Optional[Any], stamp: Hashable) -> bool:
        return self.ref() is indices and self.block_mask() is block_mask and self.stamp == stamp

    def built_from(self, mask: Any) -> bool:
        return self.ref() is mask or (mask is not None and self.block_mask() is mask)


class PlanCache:
    """Plans by mask tensor (with its block mask, if any) and plan id.

    ``version(tensor)`` is the framework's in-place version counter: with the data pointers it
    stamps the mask and block mask, and an in-place write (a new stamp) drops the mask's plans.
    ``plan_id`` names everything a plan's layout and contents depend on besides the mask's values.
    """

    def __init__(self, version: Callable[[Any], int], maskless_kept: int = 8):
        # Re-entrant: a weak-reference callback may run (garbage collection) while the lock is held.
        self._lock = threading.RLock()
        self._by_mask: dict[int, _MaskEntry] = {}
        self._maskless: collections.OrderedDict = collections.OrderedDict()
        self._maskless_kept = maskless_kept
        self._version = version

    def _stamp(self, indices: Any, block_mask: Optional[Any]) -> Hashable:
        def of(t):
            return None if t is None else (self._version(t), t.data_ptr())
        return of(indices), of(block_mask)

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
            stamp = self._stamp(indices, block_mask)
            entry = self._by_mask.get(id(indices))
            if entry is None or not entry.holds(indices, block_mask, stamp):
                entry = _MaskEntry(weakref.ref(indices, self._forget(id(indices))), block_mask, stamp)
                self._by_mask[id(indices)] = entry
            plan = entry.plans.get(plan_id)
            if plan is None:
                plan = entry.plans[plan_id] = build()
            return plan

    def _forget(self, key: int):
        def drop(ref):  # the mask tensor is gone: free its plans (unless its id was reused already)
            with self._lock:
                entry = self._by_mask.get(key)
                if entry is not None and entry.ref is ref:
                    del self._by_mask[key]
        return drop

    def clear(self, mask: Optional[Any] = None) -> None:
        """Drops every plan, or with ``mask`` the plans built from that mask or block mask tensor."""
        with self._lock:
            if mask is None:
                self._by_mask.clear()
                self._maskless.clear()
                return
            for key, entry in list(self._by_mask.items()):
                if entry.built_from(mask):
                    del self._by_mask[key]

    def __len__(self) -> int:
        with self._lock:
            return sum(len(e.plans) for e in list(self._by_mask.values())) + len(self._maskless)
