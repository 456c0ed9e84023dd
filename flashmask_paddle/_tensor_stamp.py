"""Which mask tensor a cached result belongs to, for the caches of what the bindings derive from a
mask's values: the host-side value checks (``_validate.OncePerTensor``) and the CUDA mask plans
(``_plan_cache.PlanCache``).

A result is found again by any tensor that views the same memory in the same layout at the same
in-place version while the tensor it was made from is alive: that tensor itself, or a detached copy
of it. Reentrant recompute (Paddle's ``fleet.utils.recompute``, torch's reentrant checkpoint)
re-runs each layer on ``x.detach()`` copies of its inputs; a copy shares the storage and, in both
frameworks, the version counter, so an in-place write through either is seen by both. A result is
stale once its tensor is gone (its memory may hold another tensor now), has moved to other memory
or has been written in place.

Framework-free: a binding names its tensors' version counter and strides in a ``TensorStamp``.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable, Optional

__all__ = ["TensorStamp", "SeenTensor", "PADDLE", "TORCH"]


class TensorStamp:
    """A binding's reading of a tensor: where its values live (``place``) and their version."""

    __slots__ = ("version", "_strides")

    def __init__(self, version: Callable[[Any], int], strides: Callable[[Any], Any]):
        self.version, self._strides = version, strides

    def place(self, t: Any) -> Hashable:
        """Data pointer, shape, strides and dtype: equal for two live tensors only when they view
        the same memory the same way."""
        return t.data_ptr(), tuple(t.shape), tuple(self._strides(t)), t.dtype


PADDLE = TensorStamp(version=lambda t: t._inplace_version(), strides=lambda t: t.strides)
TORCH = TensorStamp(version=lambda t: t._version, strides=lambda t: t.stride())


class SeenTensor:
    """A tensor (by weak reference) with its place and version when a result was made from it."""

    __slots__ = ("ref", "place", "version")

    def __init__(self, t: Any, stamp: TensorStamp, on_gone: Optional[Callable[[weakref.ref], None]] = None):
        self.ref = weakref.ref(t) if on_gone is None else weakref.ref(t, on_gone)
        self.place, self.version = stamp.place(t), stamp.version(t)

    def _owner(self, stamp: TensorStamp) -> Optional[Any]:
        """The tensor, while it is alive and still at its place."""
        owner = self.ref()
        return owner if owner is not None and stamp.place(owner) == self.place else None

    def matches(self, t: Any, place: Hashable, stamp: TensorStamp) -> bool:
        """``t`` (at ``place``, ``stamp.place(t)``) has this tensor's values: the tensor itself or a
        live alias of it, unwritten since."""
        if place != self.place or stamp.version(t) != self.version:
            return False
        owner = self.ref()
        if owner is t:
            return True
        owner = self._owner(stamp)
        return owner is not None and stamp.version(owner) == self.version

    def views(self, t: Any, stamp: TensorStamp) -> bool:
        """``t`` views this tensor's memory (at any version): what a request to forget it means."""
        return stamp.place(t) == self.place and self._owner(stamp) is not None
