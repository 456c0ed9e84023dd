"""``flashmask_attention``: a drop-in for Paddle 3.3's ``paddle.nn.functional.flashmask_attention``
backed by this package's own custom op (CPU kernel; CUDA kernel when built with CUDA)."""
from __future__ import annotations

import functools

import numpy as np
import paddle

from . import _env, _ops, _plans, _tensor_stamp, _validate
from ._plans import cached_plan_count

__all__ = ["flashmask_attention", "prepare_mask_plan", "clear_mask_plans", "cached_plan_count"]


# Run as written under paddle.jit, AST and SOT alike: it branches on arguments only, never on tensor
# values, and builds static graphs itself.
@paddle.jit.marker.unified
def flashmask_attention(query, key, value, startend_row_indices=None, *, dropout=0.0, causal=False,
                        window_size=None, return_softmax_lse=False, return_seed_offset=False,
                        fixed_seed_offset=None, rng_name="", training=True, name=None,
                        softmax_scale=None, block_mask=None):
    r"""FlashMask attention: exact softmax attention with a column-wise sparse mask.

    .. math::

        \text{out} = \text{softmax}\left(\text{scale} \cdot Q K^T + M\right) V

    where ``M`` is ``-inf`` on the masked (query row, key column) pairs described by
    ``startend_row_indices`` (and by the causal triangle when ``causal=True``). The mask costs
    O(Sk) memory; tiles it hides entirely are skipped by the kernels.

    Args:
        query (Tensor): ``[batch_size, seqlen_q, num_heads, head_dim]``; float32, float16 or
            bfloat16 on CPU (float16/bfloat16 on GPU).
        key (Tensor): ``[batch_size, seqlen_k, num_heads_k, head_dim]``, same dtype;
            ``num_heads % num_heads_k == 0`` (GQA/MQA).
        value (Tensor): ``[batch_size, seqlen_k, num_heads_k, head_dim_v]``, same dtype; the
            output has ``head_dim_v``. On CPU any head dims (e.g. 192/128 as in MLA); on GPU the
            (head_dim, head_dim_v) pairs the CUDA kernels are built for (README, "Head dims").
        startend_row_indices (Tensor, optional): int32 ``[batch_size, mask_heads, seqlen_k, C]``
            with ``mask_heads`` in ``{1, num_heads_k, num_heads}`` (broadcast over heads). Row =
            query index. For key column ``j`` the masked rows are

            - ``causal=True, C=1`` (LTS): ``row >= LTS_j``;
            - ``causal=True, C=2`` (LTS, LTE): ``LTS_j <= row < LTE_j``;
            - ``causal=False, C=2`` (LTS, UTE): ``row >= LTS_j`` or ``row < UTE_j``;
            - ``causal=False, C=4`` (LTS, LTE, UTS, UTE): ``LTS_j <= row < LTE_j`` or
              ``UTS_j <= row < UTE_j``.

            Bounds lie in ``[0, seqlen_q]``. ``None``: plain causal or full attention.
            ``flashmask_paddle.masks`` builds every common mask.
        dropout (float): dropout probability on the attention weights while ``training`` (kept
            weights are scaled by ``1 / (1 - dropout)``); with ``training=False`` it is not applied
            (as in Paddle). The keep decision is counter-based (Philox, from the seed/offset pair),
            so the backward regenerates the forward's mask; the CPU and CUDA kernels drop the same
            weights for the same pair.
        causal (bool): also mask the causal triangle; for ``seqlen_q != seqlen_k`` it is
            bottom-right aligned (query ``i`` sees keys ``j <= i + seqlen_k - seqlen_q``).
        window_size (int | tuple, optional): sliding-window attention; ``w`` means ``(w, w)``.
            Query ``i`` sees keys ``[i - left, i]`` when causal, ``[i - left, i + right]``
            otherwise. Cannot be combined with ``startend_row_indices``.
        return_softmax_lse (bool): also return the log-sum-exp of each row, float32
            ``[batch_size, num_heads, seqlen_q]`` (``-inf`` on fully masked rows).
        return_seed_offset (bool): also return the dropout ``[seed, offset]``, int64 ``[2]`` on
            CPU: the pair the call used (zeros, or ``fixed_seed_offset``, when no dropout is drawn).
            Passing it back as ``fixed_seed_offset`` reproduces the dropout mask.
        fixed_seed_offset (Tensor, optional): int64 ``[2]`` ``[seed, offset]`` for dropout;
            otherwise they are drawn from the generator (below), advancing it.
        rng_name (str): name of the generator to draw the seed/offset from (one registered with
            ``paddle.framework.core.set_random_seed_generator``, e.g. by fleet's RNG state
            tracker); ``""``: the default generator of the device.
        training (bool): training mode (dropout is only applied while training).
        name (str, optional): unused; for API compatibility with Paddle.
        softmax_scale (float, optional): scale of ``Q K^T``; default ``head_dim ** -0.5``.
        block_mask (Tensor, optional): int32 ``[batch_size, mask_heads, ceil(seqlen_q / 128),
            ceil(seqlen_k / 128)]`` of 0/1 (``mask_heads`` = ``startend_row_indices.shape[1]``):
            0 masks the whole 128x128 block of (query rows, key columns), on top of
            ``startend_row_indices`` (required with it). As in Paddle 3.3, but any head dim.

    Deterministic backward: ``paddle.set_flags({"FLAGS_cudnn_deterministic": True})`` or
    ``FLASHMASK_DETERMINISTIC=1`` (docs/ENV.md) makes dQ bitwise reproducible on GPU.

    On GPU the mask's preprocessing (its mask plan) is built by the first call with a
    ``startend_row_indices`` tensor and reused by later calls with it (every layer, forward and
    backward) until the tensor is changed in place or freed; :func:`prepare_mask_plan` builds it
    ahead.

    Returns:
        ``out`` (``[batch_size, seqlen_q, num_heads, head_dim_v]``, dtype of ``query``), or a list ``[out, lse]``, ``[out, seed_offset]``
        or ``[out, lse, seed_offset]`` following ``return_softmax_lse`` / ``return_seed_offset``.
        Fully masked query rows give ``out`` 0, ``lse`` ``-inf`` and zero gradients. Gradients
        flow to ``query``, ``key`` and ``value`` through ``out``; ``lse`` is not differentiable
        (as in Paddle's kernels).

    Raises:
        TypeError / ValueError: a bad argument (the message names it, the expectation and what
            came).

    Examples:
        .. code-block:: python

            >>> import paddle
            >>> from flashmask_paddle import flashmask_attention, masks
            >>> q = paddle.randn([1, 10, 2, 32]); k = paddle.randn([1, 10, 2, 32]); v = paddle.randn([1, 10, 2, 32])
            >>> idx, causal = masks.causal_document([4, 3, 3])   # LTS = [4,4,4,4,7,7,7,10,10,10]
            >>> out = flashmask_attention(q, k, v, paddle.to_tensor(idx), causal=causal)
            >>> out, lse = flashmask_attention(q, k, v, causal=True, return_softmax_lse=True)
    """
    causal, dims = _check_qkv(query, key, value, causal)
    dropout = _validate.check_dropout(dropout, training)
    scale = _validate.check_softmax_scale(softmax_scale, dims.head_dim)
    if fixed_seed_offset is not None:
        _check_seed_offset(fixed_seed_offset)
    mask = _Mask.of(query, dims, causal, startend_row_indices, window_size, block_mask)

    if dropout > 0.0:
        seed_offset = (_cpu_int64(fixed_seed_offset) if fixed_seed_offset is not None
                       else _draw_seed_offset(rng_name, query))
    elif return_seed_offset or fixed_seed_offset is not None:
        seed_offset = _no_dropout_seed_offset(fixed_seed_offset)
    else:
        seed_offset = None
    deterministic = _deterministic()
    fwd_plan, bwd_plan = mask.plans(query, key, value, causal, dropout, deterministic,
                                    backward=_needs_grad(query, key, value))
    out, lse = _ops.flashmask_attn(query, key, value, mask.indices, mask.block_mask,
                                   seed_offset if dropout > 0.0 else None, causal, scale, dropout,
                                   deterministic, fwd_plan=fwd_plan, bwd_plan=bwd_plan)

    outputs = [out]
    if return_softmax_lse:
        outputs.append(lse)
    if return_seed_offset:
        outputs.append(seed_offset)
    return outputs[0] if len(outputs) == 1 else outputs


@paddle.jit.marker.unified
def prepare_mask_plan(query, key, value, startend_row_indices=None, *, causal=False, window_size=None,
                      block_mask=None, dropout=0.0, backward=True) -> int:
    """Builds now, on the current stream, the mask plans that CUDA calls of
    :func:`flashmask_attention` with these shapes and this mask will use: the preprocessing of the
    mask (block bounds, block lists, mask payloads, tile order) that every call with the same
    ``startend_row_indices`` tensor (and version) shares, forward and, unless ``backward=False``,
    backward. Calls build a missing plan themselves; this moves that one-time cost out of the first
    call (e.g. next to building the mask, as FlexAttention's ``create_block_mask``). Arguments as
    for :func:`flashmask_attention` (``dropout`` as the calls' effective rate). Returns the plans'
    device bytes; 0 for CPU tensors, in static graphs and with ``FLASHMASK_MASK_PLAN=0`` (nothing
    to build).
    """
    causal, dims = _check_qkv(query, key, value, causal)
    dropout = _validate.check_dropout(dropout, True)
    mask = _Mask.of(query, dims, causal, startend_row_indices, window_size, block_mask)
    plans = mask.plans(query, key, value, causal, dropout, _deterministic(), backward=bool(backward))
    return sum(int(plan.shape[0]) for plan in plans if plan is not None)


def clear_mask_plans(*masks) -> None:
    """Drops every cached mask plan (their memory returns to Paddle's allocator), or, given
    ``startend_row_indices`` / ``block_mask`` tensors, their plans and the record that their values
    were checked. Needed after refilling a mask in place with ``Tensor.copy_``, ``set_value`` or
    ``paddle.assign(numpy_array, output=mask)``, which in Paddle 3.3 do not mark a tensor as
    changed (indexed assignment, ``fill_`` and ``paddle.assign(tensor, output=mask)`` do, and the
    next call then sees the new values)."""
    if not masks:
        _plans.clear_mask_plans()
    for mask in masks:
        _plans.clear_mask_plans(mask)
        _CHECKED.forget(mask)


def _check_qkv(query, key, value, causal):
    """(causal as bool, the problem's sizes) after the checks of query, key, value and causal."""
    for arg, t in (("query", query), ("key", key), ("value", value)):
        if not _is_tensor(t):
            raise TypeError(f"{arg} must be a paddle.Tensor, got {type(t).__name__}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    dims = _validate.check_qkv(query.shape, key.shape, value.shape, query.dtype, key.dtype,
                               value.dtype, _ops.capabilities(cuda=_on_gpu(query)))
    return bool(causal), dims


class _Mask:
    """A call's mask as the op takes it (indices and block mask on the query's device, values
    checked), and the tensors the caller gave, whose identity and version its mask plans follow."""

    __slots__ = ("indices", "block_mask", "given")

    def __init__(self, indices, block_mask, given):
        self.indices, self.block_mask, self.given = indices, block_mask, given

    @classmethod
    def of(cls, query, dims, causal: bool, startend_row_indices, window_size, block_mask) -> "_Mask":
        if window_size is not None:
            if startend_row_indices is not None:
                raise ValueError("window_size and startend_row_indices cannot both be given: "
                                 "window_size builds the indices itself")
            startend_row_indices = _sliding_window_indices(window_size, dims, causal, query.place)
        elif startend_row_indices is not None:
            if not _is_tensor(startend_row_indices):
                raise TypeError("startend_row_indices must be a paddle.Tensor or None, got "
                                f"{type(startend_row_indices).__name__}")
            _validate.check_indices_layout(startend_row_indices.shape, startend_row_indices.dtype, dims, causal)
            _check_values_once(startend_row_indices, (causal, dims.seqlen_q),
                               lambda: _validate.check_indices_values(startend_row_indices.numpy(), causal,
                                                                      dims.seqlen_q))
        if block_mask is not None:
            if not _is_tensor(block_mask):
                raise TypeError(f"block_mask must be a paddle.Tensor or None, got {type(block_mask).__name__}")
            mask_heads = None if startend_row_indices is None else startend_row_indices.shape[1]
            _validate.check_block_mask_layout(block_mask.shape, block_mask.dtype, dims, mask_heads)
            _check_values_once(block_mask, (), lambda: _validate.check_block_mask_values(block_mask.numpy()))
        return cls(None if startend_row_indices is None else _to_place_of(startend_row_indices, query),
                   None if block_mask is None else _to_place_of(block_mask, query),
                   (startend_row_indices, block_mask))

    def plans(self, query, key, value, causal: bool, dropout: float, deterministic: bool, backward: bool):
        """(forward plan, backward plan): mask plans of a CUDA call, None where it takes none."""
        return _plans.plans_for(query, key, value, self.indices, self.block_mask, causal, dropout,
                                deterministic, backward, mask_given=self.given)


def _needs_grad(*tensors) -> bool:
    return paddle.is_grad_enabled() and not all(t.stop_gradient for t in tensors)


# Bound and block-mask values are read back to the host once per mask tensor and version, not on
# every call (a device->host sync per layer per step otherwise). Static graphs (paddle.jit) hold
# no values at trace time: there the builders' guarantees stand (FLASHMASK_CHECK_BOUNDS, docs/ENV.md).
_CHECKED = _validate.OncePerTensor(_tensor_stamp.PADDLE)


def _is_tensor(t) -> bool:
    return isinstance(t, (paddle.Tensor, paddle.pir.Value))


def _on_gpu(t) -> bool:
    if paddle.in_dynamic_mode():
        return t.place.is_gpu_place()
    return "gpu" in paddle.get_device()  # a static Value has no place: the program's device


def _check_values_once(t, key: tuple, check) -> None:
    """Runs a host-side value check of ``t`` once per tensor and version (eager mode only)."""
    if paddle.in_dynamic_mode():
        _CHECKED.run(t, key, check)


def _to_place_of(t, query):
    if paddle.in_dynamic_mode() and t.place != query.place:
        return t.to(query.place)
    return t


def _deterministic() -> bool:
    """Paddle's switch (FLAGS_cudnn_deterministic, as Paddle's own flash attention) or ours."""
    try:
        paddle_flag = paddle.get_flags(["FLAGS_cudnn_deterministic"])["FLAGS_cudnn_deterministic"]
    except ValueError:  # a CPU-only paddle has no cuDNN flags
        paddle_flag = False
    return bool(paddle_flag) or _env.flag("FLASHMASK_DETERMINISTIC")


def _sliding_window_indices(window_size, dims: _validate.Dims, causal: bool, place):
    """Paddle's ``window_size`` semantics via ``masks.sliding_window``, repeated over the batch."""
    left, right = _validate.window_pair(window_size)
    args = (left, right, causal, dims.batch, dims.seqlen_q, dims.seqlen_k, place)
    return _kept_window_indices(*args) if paddle.in_dynamic_mode() else _window_indices(*args)


def _window_indices(left: int, right: int, causal: bool, batch: int, seqlen_q: int, seqlen_k: int, place):
    from . import masks

    mask = masks.sliding_window(seqlen_q, seqlen_k, window_left=left, window_right=right, causal=causal)
    indices = np.ascontiguousarray(np.broadcast_to(mask.indices, (batch,) + mask.indices.shape[1:]))
    return paddle.to_tensor(indices, dtype="int32", place=place)


# The last few window masks, kept in eager mode: a model's layers (and steps) then share one
# indices tensor, so no host-to-device copy per call and one mask plan for all of them.
_kept_window_indices = functools.lru_cache(maxsize=8)(_window_indices)


def _check_seed_offset(fixed_seed_offset) -> None:
    if not _is_tensor(fixed_seed_offset):
        raise TypeError(f"fixed_seed_offset must be a paddle.Tensor or None, got {type(fixed_seed_offset).__name__}")
    if _validate.dtype_name(fixed_seed_offset.dtype) != "int64" or list(fixed_seed_offset.shape) != [2]:
        raise ValueError("fixed_seed_offset must be an int64 tensor of shape [2] ([seed, offset]), got "
                         f"{_validate.dtype_name(fixed_seed_offset.dtype)} {list(fixed_seed_offset.shape)}")


def _cpu_int64(t):
    """The op reads [seed, offset] on the host (the kernels take them as scalars)."""
    if paddle.in_dynamic_mode() and not t.place.is_cpu_place():
        return t.cpu()
    return t


def _no_dropout_seed_offset(fixed_seed_offset):
    """No dropout is drawn, so the seed/offset pair is the fixed one if given, else zeros (as Paddle),
    on the host like a drawn pair."""
    if fixed_seed_offset is not None:
        return _cpu_int64(fixed_seed_offset).clone()
    if not paddle.in_dynamic_mode():
        return paddle.zeros([2], dtype="int64")
    return paddle.to_tensor([0, 0], dtype="int64", place=paddle.CPUPlace())


def _draw_seed_offset(rng_name: str, query):
    """``[seed, offset]`` from the generator (Paddle draws its flash-attention seed/offset the same
    way): the generator's seed, and an offset taken from its stream, which advances it, so
    ``paddle.seed(s)`` reproduces a run and get_state/set_state (recompute) replays one."""
    if not isinstance(rng_name, str):
        raise TypeError(f"rng_name must be a str, got {type(rng_name).__name__}")
    if not paddle.in_dynamic_mode():
        if rng_name:
            raise ValueError("rng_name needs dynamic mode (a static program draws from the default "
                             "generator); pass fixed_seed_offset instead")
        return paddle.randint(0, 2 ** 62, [2], dtype="int64")  # an op of the program: new per run
    core = paddle.framework.core
    if rng_name:
        try:
            gen = core.get_random_seed_generator(rng_name)
        except Exception as err:  # paddle raises a generic error for an unknown name
            raise ValueError(f"rng_name {rng_name!r} names no registered generator ({err})") from None
    elif query.place.is_gpu_place():
        gen = core.default_cuda_generator(query.place.gpu_device_id())
    else:
        gen = core.default_cpu_generator()
    seed = gen.get_state().current_seed() & (2 ** 63 - 1)
    offset = gen.random() & (2 ** 62 - 1)
    return paddle.to_tensor([seed, offset], dtype="int64", place=paddle.CPUPlace())
