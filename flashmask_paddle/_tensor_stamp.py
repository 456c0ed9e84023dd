"""Which mask tensor a cached result belongs to, for the caches of what the bindings derive from a
mask's values: the host-side value checks (``_validate.OncePerTensor``) and the CUDA mask plans
(``_plan_cache.PlanCache``).

A result is found again by the tensor it was made from, at the same memory and in-place version,
and by a live alias of that tensor: one that shares its storage (not merely its address: two
wrappers of one buffer from numpy or DLPack keep a version counter each), in the same layout, at
the same version, while the tensor is alive and unmoved. That is a detached copy: reentrant
recompute (Paddle's ``fleet.utils.recompute``, torch's reentrant checkpoint) re-runs each layer on
``x.detach()`` copies of its inputs, which share the storage and, in both frameworks, the version
counter, so an in-place write through either is seen by both. (torch's ``x.data`` shares the
storage with a counter of its own: writes through it are not seen, as they never were by ``x``.)

Entries are one per tensor object: seen at other memory or another version, its entry is replaced.
Aliases are found through an index of the tensors with an entry at each place.

Framework-free: a binding names its tensors' version counter, strides and storage sharing in a
``TensorStamp``.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Hashable, Iterator, Optional

__all__ = ["TensorStamp", "SeenTensor", "TensorTable", "PADDLE", "TORCH"]


class TensorStamp:
    """A binding's reading of a tensor: where its values live (``place``), their version, and
    whether two tensors share one storage (``shares_storage``: a detached copy does; two wrappers
    of one buffer from numpy or DLPack, which keep a version counter each, do not)."""

    __slots__ = ("version", "shares_storage", "_strides")

    def __init__(self, version: Callable[[Any], int], strides: Callable[[Any], Any],
                 shares_storage: Callable[[Any, Any], bool]):
        self.version, self._strides, self.shares_storage = version, strides, shares_storage

    def place(self, t: Any) -> Hashable:
        """Data pointer, shape, strides and dtype: equal for two live tensors only when they view
        the same memory the same way."""
        return t.data_ptr(), tuple(t.shape), tuple(self._strides(t)), t.dtype


# Paddle: a distributed tensor is compared with dense ones only as unshared (the buffer comparison
# of a distributed tensor with a dense one crashes in Paddle 3.3).
PADDLE = TensorStamp(version=lambda t: t._inplace_version(), strides=lambda t: t.strides,
                     shares_storage=lambda a, b: a.is_dist() == b.is_dist() and a._is_shared_buffer_with(b))
# torch: an inference tensor has no version counter (it may be written in inference mode unseen), so
# it gets a version of its own on every reading and matches nothing.
TORCH = TensorStamp(version=lambda t: object() if t.is_inference() else t._version, strides=lambda t: t.stride(),
                    shares_storage=lambda a, b: a.is_set_to(b))


class SeenTensor:
    """A tensor (by weak reference) with its place and version when a result was made from it."""

    __slots__ = ("ref", "place", "version")

    def __init__(self, t: Any, stamp: TensorStamp, on_gone: Optional[Callable[[weakref.ref], None]] = None):
        self.ref = weakref.ref(t) if on_gone is None else weakref.ref(t, on_gone)
        self.place, self.version = stamp.place(t), stamp.version(t)

    def _unmoved(self, owner: Optional[Any], stamp: TensorStamp) -> bool:
        """``owner`` (the tensor, or None once it is gone) is alive and still at its place."""
        return owner is not None and stamp.place(owner) == self.place

    def matches(self, t: Any, place: Hashable, stamp: TensorStamp) -> bool:
        """``t`` (at ``place``, ``stamp.place(t)``) has this tensor's values: the tensor itself or a
        live alias of it, unwritten since."""
        if place != self.place or stamp.version(t) != self.version:
            return False
        owner = self.ref()
        return owner is t or (self._unmoved(owner, stamp) and stamp.version(owner) == self.version
                              and stamp.shares_storage(t, owner))

    def unwritten(self, stamp: TensorStamp) -> Optional[Any]:
        """The tensor itself while it is alive, unmoved and unwritten since; else None."""
        owner = self.ref()
        return owner if owner is not None and self.matches(owner, stamp.place(owner), stamp) else None

    def views(self, t: Any, stamp: TensorStamp) -> bool:
        """``t`` is this tensor, or views its memory (at any version): what a request to forget it
        means."""
        owner = self.ref()
        return owner is t or (stamp.place(t) == self.place and self._unmoved(owner, stamp))


class TensorTable:
    """Entries per tensor object, found by that tensor or a live alias of it.

    An entry is any object with a ``seen`` attribute (the ``SeenTensor`` it was made from, created
    by ``add``). An entry goes with its tensor (a weak reference), and ``add`` replaces the
    tensor's previous entry.
    """

    def __init__(self, stamp: TensorStamp):
        self.stamp = stamp
        # Re-entrant: a weak-reference callback may run (garbage collection) while the lock is held.
        self._lock = threading.RLock()
        self._by_id: dict[int, Any] = {}
        # place -> ids of the tensors with an entry there (frozen: replaced, never changed, so that
        # a weak-reference callback during a lookup's iteration cannot change what it iterates)
        self._ids_at: dict[Hashable, frozenset[int]] = {}

    def find(self, t: Any, accept: Callable[[Any], bool] = lambda entry: True) -> Optional[Any]:
        """The entry of ``t``, or of a live tensor ``t`` aliases, if it still matches ``t`` and
        ``accept`` takes it."""
        place = self.stamp.place(t)
        own = self._by_id.get(id(t))  # a dict read is atomic: the common case takes no lock
        if own is not None and own.seen.matches(t, place, self.stamp) and accept(own):
            return own
        with self._lock:
            others = [self._by_id[key] for key in self._ids_at.get(place, ()) if key != id(t)]
        for entry in others:
            if entry.seen.matches(t, place, self.stamp) and accept(entry):
                return entry
        return None

    def add(self, t: Any, make: Callable[[SeenTensor], Any]) -> Any:
        """Makes ``t``'s entry (``make(seen)``), replacing its previous one."""
        key = id(t)
        with self._lock:
            self._remove(key)
            seen = SeenTensor(t, self.stamp, self._forget(key))
            entry = self._by_id[key] = make(seen)
            self._ids_at[seen.place] = self._ids_at.get(seen.place, frozenset()) | {key}
            return entry

    def _forget(self, key: int):
        def drop(ref):  # the tensor is gone: its entry with it (unless its id is another's now)
            with self._lock:
                entry = self._by_id.get(key)
                if entry is not None and entry.seen.ref is ref:
                    self._remove(key)
        return drop

    def _remove(self, key: int) -> None:
        entry = self._by_id.pop(key, None)
        if entry is None:
            return
        ids = self._ids_at.get(entry.seen.place, frozenset()) - {key}
        if ids:
            self._ids_at[entry.seen.place] = ids
        else:
            self._ids_at.pop(entry.seen.place, None)

    def remove_if(self, condition: Callable[[Any], bool]) -> None:
        """Drops the entries ``condition`` holds for."""
        with self._lock:
            for key, entry in list(self._by_id.items()):
                if condition(entry):
                    self._remove(key)

    def clear(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._ids_at.clear()

    def __iter__(self) -> Iterator[Any]:
        with self._lock:
            return iter(list(self._by_id.values()))
