"""Mask plans of the CUDA kernels for the Paddle op (the ``flashmask_attn_plan`` custom op).

What the kernels derive from a mask alone (block bounds, block lists, partial tiles' mask payloads,
tile order) is built on the GPU once per mask tensor, its version and the problem, and handed to
every later call with that mask: a model's layers and their backward passes share one plan instead
of preprocessing the mask inside each call. The backward's plan is built with the forward call
that needs a gradient and travels to the gradient op as one of its inputs.

A plan is keyed by everything the call's kernel parameters derive from (shapes, dtype, mask form,
dropout, determinism, the kernels' environment switches), the device and the stream: plans are
built and used on one stream, so Paddle's allocator may recycle a dropped plan's memory in that
stream's order. No plans in static graphs, while a CUDA graph is captured (the call then
preprocesses the mask inside the graph), or with ``FLASHMASK_MASK_PLAN=0``.
"""
from __future__ import annotations

import paddle

from . import _env, _ops, _tensor_stamp
from ._plan_cache import PlanCache

_cache = PlanCache(_tensor_stamp.PADDLE)


def clear_mask_plans(mask=None) -> None:
    """Drops every cached mask plan of the Paddle op, or with ``mask`` those built from that
    ``startend_row_indices`` or ``block_mask`` tensor (their memory returns to Paddle's allocator)."""
    _cache.clear(mask)


def cached_plan_count() -> int:
    """How many mask plans the Paddle op has cached now (forward and backward, per live mask)."""
    return len(_cache)


def plans_enabled(query) -> bool:
    """Whether calls with these inputs use mask plans: eager GPU tensors (not distributed ones, whose
    outputs' shapes come from the ops' shape functions), outside CUDA graph capture."""
    return (paddle.in_dynamic_mode() and query.place.is_gpu_place() and not query.is_dist()
            and _env.flag("FLASHMASK_MASK_PLAN") and not paddle.base.core.is_cuda_graph_capturing())


def _device_and_stream(q) -> tuple:
    """(GPU index, handle of its current stream): where the call's kernels run."""
    device = q.place.gpu_device_id()
    return device, paddle.device.current_stream(f"gpu:{device}").stream_base.cuda_stream


def plans_for(q, k, v, indices, block_mask, causal: bool, dropout: float, deterministic: bool,
              backward: bool, mask_given=None):
    """(forward plan, backward plan or None) of a call, built on the current stream when not cached
    yet; (None, None) where :func:`plans_enabled` says no. Inputs must already be validated.
    ``mask_given``: the (indices, block_mask) tensors the caller passed, when ``indices`` and
    ``block_mask`` are copies of them on the query's device: the plans belong to the caller's."""
    if not plans_enabled(q):
        return None, None
    problem = _device_and_stream(q) + (
        tuple(q.shape), tuple(k.shape), tuple(v.shape), str(q.dtype), bool(causal),
        None if indices is None else tuple(indices.shape), float(dropout), bool(deterministic),
        _env.kernel_settings())
    owner, owner_block_mask = (indices, block_mask) if mask_given is None else mask_given

    def plan(direction_is_backward: bool):
        return _cache.get_or_build(
            owner, owner_block_mask, (direction_is_backward,) + problem,
            lambda: _ops.build_plan(q, k, v, indices, block_mask, causal, dropout, deterministic,
                                    direction_is_backward))

    return plan(False), plan(True) if backward else None
