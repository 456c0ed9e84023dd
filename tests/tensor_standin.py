"""A stand-in for a framework tensor in the tests of the per-tensor caches (flashmask_paddle/
_tensor_stamp.py): weak-referenceable, with an in-place version, a data pointer, a layout and a
storage (an object that aliases share) that a test sets at will."""
from __future__ import annotations

from flashmask_paddle._tensor_stamp import TensorStamp


class StandInTensor:
    def __init__(self, pointer: int = 0x1000, shape=(1, 1, 8, 2), storage=None):
        self.version, self.pointer, self.shape, self.dtype = 0, pointer, shape, "int32"
        self.storage = object() if storage is None else storage

    def data_ptr(self) -> int:
        return self.pointer

    def alias(self) -> "StandInTensor":  # a detached copy: same storage, its own object
        copy = StandInTensor(self.pointer, self.shape, self.storage)
        copy.version = self.version
        return copy

    def wrapper(self) -> "StandInTensor":  # the same buffer wrapped again (numpy, DLPack): own storage
        return StandInTensor(self.pointer, self.shape)


STAMP = TensorStamp(version=lambda t: t.version, strides=lambda t: (len(t.shape),),
                    shares_storage=lambda a, b: a.storage is b.storage)
