"""``flashmask_attention``: a drop-in for Paddle 3.3's ``paddle.nn.functional.flashmask_attention``
backed by this package's own custom op (CPU kernel; CUDA kernel when built with CUDA)."""
from __future__ import annotations

import numpy as np
import paddle

from . import _ops, _validate

__all__ = ["flashmask_attention"]


def flashmask_attention(query, key, value, startend_row_indices=None, *, dropout=0.0, causal=False,
                        window_size=None, return_softmax_lse=False, return_seed_offset=False,
                        fixed_seed_offset=None, rng_name="", training=True, name=None,
                        softmax_scale=None):
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
        value (Tensor): same shape and dtype as ``key``.
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
        dropout (float): dropout probability. Only ``0.0`` is implemented while ``training``;
            with ``training=False`` dropout is not applied (as in Paddle).
        causal (bool): also mask the causal triangle; for ``seqlen_q != seqlen_k`` it is
            bottom-right aligned (query ``i`` sees keys ``j <= i + seqlen_k - seqlen_q``).
        window_size (int | tuple, optional): sliding-window attention; ``w`` means ``(w, w)``.
            Query ``i`` sees keys ``[i - left, i]`` when causal, ``[i - left, i + right]``
            otherwise. Cannot be combined with ``startend_row_indices``.
        return_softmax_lse (bool): also return the log-sum-exp of each row, float32
            ``[batch_size, num_heads, seqlen_q]`` (``-inf`` on fully masked rows).
        return_seed_offset (bool): also return the dropout seed/offset, int64 ``[2]``
            (zeros, or ``fixed_seed_offset``, since no dropout is drawn).
        fixed_seed_offset (Tensor, optional): int64 ``[2]`` dropout seed/offset.
        rng_name (str): name of the generator for dropout (unused without dropout).
        training (bool): training mode (dropout is only applied while training).
        name (str, optional): unused; for API compatibility with Paddle.
        softmax_scale (float, optional): scale of ``Q K^T``; default ``head_dim ** -0.5``.

    Returns:
        ``out`` (shape and dtype of ``query``), or a list ``[out, lse]``, ``[out, seed_offset]``
        or ``[out, lse, seed_offset]`` following ``return_softmax_lse`` / ``return_seed_offset``.
        Fully masked query rows give ``out`` 0, ``lse`` ``-inf`` and zero gradients. Gradients
        flow to ``query``, ``key`` and ``value`` through ``out``; ``lse`` is not differentiable
        (as in Paddle's kernels).

    Raises:
        TypeError / ValueError: a bad argument (the message names it, the expectation and what
            came); NotImplementedError: ``dropout > 0`` while training.

    Examples:
        .. code-block:: python

            >>> import paddle
            >>> from flashmask_paddle import flashmask_attention, masks
            >>> q = paddle.randn([1, 10, 2, 32]); k = paddle.randn([1, 10, 2, 32]); v = paddle.randn([1, 10, 2, 32])
            >>> idx, causal = masks.causal_document([4, 3, 3])   # LTS = [4,4,4,4,7,7,7,10,10,10]
            >>> out = flashmask_attention(q, k, v, paddle.to_tensor(idx), causal=causal)
            >>> out, lse = flashmask_attention(q, k, v, causal=True, return_softmax_lse=True)
    """
    for arg, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, paddle.Tensor):
            raise TypeError(f"{arg} must be a paddle.Tensor, got {type(t).__name__}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    causal = bool(causal)
    _validate.check_dropout(dropout, training)
    supported = _validate.GPU_DTYPES if query.place.is_gpu_place() else _validate.CPU_DTYPES
    dims = _validate.check_qkv(query.shape, key.shape, value.shape, query.dtype, key.dtype,
                               value.dtype, supported)
    scale = _validate.check_softmax_scale(softmax_scale, dims.head_dim)
    seed_offset = _seed_offset(fixed_seed_offset) if (return_seed_offset or fixed_seed_offset is not None) else None

    if window_size is not None:
        if startend_row_indices is not None:
            raise ValueError("window_size and startend_row_indices cannot both be given: "
                             "window_size builds the indices itself")
        startend_row_indices = _sliding_window_indices(window_size, dims, causal, query.place)
    elif startend_row_indices is not None:
        if not isinstance(startend_row_indices, paddle.Tensor):
            raise TypeError("startend_row_indices must be a paddle.Tensor or None, got "
                            f"{type(startend_row_indices).__name__}")
        _validate.check_indices_layout(startend_row_indices.shape, startend_row_indices.dtype, dims, causal)
        _validate.check_indices_values(startend_row_indices.numpy(), causal, dims.seqlen_q)
        if startend_row_indices.place != query.place:
            startend_row_indices = startend_row_indices.to(query.place)

    out, lse = _ops.flashmask_attn(query, key, value, startend_row_indices, causal, scale)

    outputs = [out]
    if return_softmax_lse:
        outputs.append(lse)
    if return_seed_offset:
        outputs.append(seed_offset)
    return outputs[0] if len(outputs) == 1 else outputs


def _sliding_window_indices(window_size, dims: _validate.Dims, causal: bool, place):
    """Paddle's ``window_size`` semantics via ``masks.sliding_window``, repeated over the batch."""
    from . import masks

    left, right = _validate.window_pair(window_size)
    mask = masks.sliding_window(dims.seqlen_q, dims.seqlen_k, window_left=left, window_right=right,
                                causal=causal)
    indices = np.ascontiguousarray(np.broadcast_to(mask.indices, (dims.batch,) + mask.indices.shape[1:]))
    return paddle.to_tensor(indices, dtype="int32", place=place)


def _seed_offset(fixed_seed_offset):
    """No dropout is drawn, so the seed/offset pair is the fixed one if given, else zeros (as Paddle)."""
    if fixed_seed_offset is None:
        return paddle.zeros([2], dtype="int64")
    if not isinstance(fixed_seed_offset, paddle.Tensor):
        raise TypeError(f"fixed_seed_offset must be a paddle.Tensor or None, got {type(fixed_seed_offset).__name__}")
    if _validate.dtype_name(fixed_seed_offset.dtype) != "int64" or list(fixed_seed_offset.shape) != [2]:
        raise ValueError("fixed_seed_offset must be an int64 tensor of shape [2], got "
                         f"{_validate.dtype_name(fixed_seed_offset.dtype)} {list(fixed_seed_offset.shape)}")
    return fixed_seed_offset.clone()
