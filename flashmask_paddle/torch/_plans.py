"""Mask plans of the CUDA kernels (paddle_ops/include/flashmask/launch.h) for the torch binding.

What the kernels derive from a mask alone (block bounds, block lists, partial tiles' mask payloads,
tile order) is built on the GPU once per mask tensor, its version and the problem, then handed to
every later call with that mask: a model's layers and their backward passes share one plan, as
they share cuDNN's mask plans or FlexAttention's block masks, instead of preprocessing the mask
inside each call. A plan lives as long as its mask tensor; of calls without a mask tensor (plain
causal or full attention) the last eight plans are kept (the cache: ``.._plan_cache``).
An in-place write to the mask bumps its version and the next call builds a new plan.

No plan is used while a CUDA graph is being captured (the call then preprocesses the mask inside
the graph) or with ``FLASHMASK_MASK_PLAN=0``.
"""
from __future__ import annotations

import ctypes
from typing import Optional

import torch

from .. import _env, _tensor_stamp
from .._plan_cache import PlanCache
from . import _capi

class _Plan:
    """A built plan: its device buffer, its key, and the streams it is known to be ready on."""

    __slots__ = ("buffer", "key", "built", "streams")

    def __init__(self, buffer: torch.Tensor, key: int, stream: torch.cuda.Stream):
        self.buffer, self.key = buffer, key
        self.built = torch.cuda.Event()
        self.built.record(stream)
        self.streams = {stream.cuda_stream}

    def ready_on(self, stream: torch.cuda.Stream) -> None:
        """Orders `stream` after the plan's build and keeps the buffer alive for `stream`'s work."""
        if stream.cuda_stream not in self.streams:
            stream.wait_event(self.built)
            self.buffer.record_stream(stream)
            self.streams.add(stream.cuda_stream)


_cache = PlanCache(_tensor_stamp.TORCH)


def clear_mask_plans() -> None:
    """Drops every cached mask plan (their memory returns to torch's allocator)."""
    _cache.clear()


def cached_plan_count() -> int:
    """How many mask plans are cached now (each forward or backward problem of each live mask)."""
    return len(_cache)


def plan_for(lib, direction: str, args: _capi.FmArgs, indices: Optional[torch.Tensor],
             block_mask: Optional[torch.Tensor], device: torch.device, allocate) -> Optional[_Plan]:
    """The mask plan of a CUDA call ("fwd" or "bwd"), built on the current stream when it is not
    cached yet; None when plans are off (the call then preprocesses the mask itself). The call holds
    it until its launch: a plan found through an alias of the mask goes with that mask, which the
    call does not hold. `allocate(nbytes)` returns a uint8 CUDA tensor for a new plan."""
    if not _env.flag("FLASHMASK_MASK_PLAN") or torch.cuda.is_current_stream_capturing():
        return None
    size_fn = getattr(lib, f"fm_{direction}_plan_size")
    nbytes, key = ctypes.c_size_t(0), ctypes.c_uint64(0)
    _capi.check(lib, size_fn(ctypes.byref(args), ctypes.byref(nbytes), ctypes.byref(key)), size_fn.__name__)
    stream = torch.cuda.current_stream(device)

    def build() -> _Plan:
        buffer = allocate(int(nbytes.value))
        build_fn = getattr(lib, f"fm_{direction}_plan_build")
        _capi.check(lib, build_fn(ctypes.byref(args), buffer.data_ptr(), stream.cuda_stream), build_fn.__name__)
        return _Plan(buffer, key.value, stream)

    plan = _cache.get_or_build(indices, block_mask, (direction, device.index, key.value, lib.fm_path), build)
    plan.ready_on(stream)
    return plan
