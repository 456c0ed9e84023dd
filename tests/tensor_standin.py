"""A stand-in for a framework tensor in the tests of the per-tensor caches (flashmask_paddle/
_tensor_stamp.py): weak-referenceable, with an in-place version, a data pointer and a layout that
a test sets at will."""
from __future__ import annotations

from flashmask_paddle._tensor_stamp import TensorStamp


class StandInTensor:
    def __init__(self, pointer: int = 0x1000, shape=(1, 1, 8, 2)):
        self.version, self.pointer, self.shape, self.dtype = 0, pointer, shape, "int32"

    def data_ptr(self) -> int:
        return self.pointer

    def alias(self) -> "StandInTensor":  # a detached copy: same memory, its own object
        copy = StandInTensor(self.pointer, self.shape)
        copy.version = self.version
        return copy


STAMP = TensorStamp(version=lambda t: t.version, strides=lambda t: (len(t.shape),))
