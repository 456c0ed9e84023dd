"""Dense float64 attention in numpy: the test oracle for every kernel.

Written from the mask semantics of docs/MASKS_AND_API.md alone (through :func:`visible_pairs`), never from
the kernels. Layout ``[B, S, H, D]`` as in the op; masks broadcast over heads from ``Hm`` in
``{1, Hk, Hq}``. Fully masked query rows give output 0, LSE ``-inf`` and zero gradients.
"""
from __future__ import annotations

import numpy as np

__all__ = ["visible_pairs", "attention_forward", "attention_backward", "gradient_magnitudes"]


def visible_pairs(startend_row_indices, causal: bool, seqlen_q: int, seqlen_k: int | None = None):
    """Boolean ``[B, Hm, Sq, Sk]``: True where query row ``i`` may attend key column ``j``.

    ``startend_row_indices`` is ``[B, Hm, Sk, C]`` or None (then ``[1, 1, Sq, Sk]``; ``seqlen_k``
    is required). Causal masking is bottom-right aligned: ``j <= i + Sk - Sq``.
    """
    if startend_row_indices is None:
        if seqlen_k is None:
            raise ValueError("seqlen_k is required when startend_row_indices is None")
        idx = np.zeros((1, 1, seqlen_k, 0), dtype=np.int64)
    else:
        idx = np.asarray(startend_row_indices).astype(np.int64)
    batch, heads, sk, c = idx.shape
    rows = np.arange(seqlen_q).reshape(1, 1, seqlen_q, 1)
    masked = np.zeros((batch, heads, seqlen_q, sk), dtype=bool)

    def col(k):  # bound k broadcast against rows: [B, Hm, 1, Sk]
        return idx[..., k][:, :, None, :]

    if c == 1:  # causal only: rows >= LTS
        masked |= rows >= col(0)
    elif c == 2 and causal:  # LTS <= row < LTE
        masked |= (rows >= col(0)) & (rows < col(1))
    elif c == 2:  # row >= LTS or row < UTE
        masked |= (rows >= col(0)) | (rows < col(1))
    elif c == 4:
        masked |= (rows >= col(0)) & (rows < col(1))
        masked |= (rows >= col(2)) & (rows < col(3))
    elif c != 0:
        raise ValueError(f"startend_row_indices must have 1, 2 or 4 bound columns, got {c}")
    if causal:
        cols = np.arange(sk).reshape(1, 1, 1, sk)
        masked |= cols > rows + (sk - seqlen_q)
    return ~masked


def _expand(visible, batch: int, heads_q: int):
    """Broadcast a ``[B|1, Hm, Sq, Sk]`` mask to ``[B, Hq, Sq, Sk]``: Hm=1, per GQA group, or per head."""
    hm = visible.shape[1]
    if hm not in (1, heads_q) and heads_q % hm:
        raise ValueError(f"mask heads {hm} do not divide query heads {heads_q}")
    visible = np.repeat(visible, heads_q // hm, axis=1)
    return np.broadcast_to(visible, (batch,) + visible.shape[1:])


def _scores(q, k, visible, scale):
    """Masked scaled scores ``[B, Hq, Sq, Sk]`` in float64 (masked entries -inf)."""
    s = _heads_first(q) @ _heads_first(_per_query_head(k, q.shape[2])).swapaxes(-1, -2) * scale
    return np.where(_expand(visible, q.shape[0], q.shape[2]), s, -np.inf)


def attention_forward(q, k, v, visible, softmax_scale: float | None = None, dropout_scale=None):
    """Returns ``(out [B, Sq, Hq, Dv] float64, lse [B, Hq, Sq] float64)``.

    ``dropout_scale``: optional ``[B, Hq, Sq, Sk]`` factors applied to the probabilities after the
    softmax (0 for a dropped weight, ``1 / (1 - p)`` for a kept one); the LSE does not see them.
    """
    p, lse = _softmax(q, k, visible, _scale(q, softmax_scale))
    if dropout_scale is not None:
        p = p * dropout_scale
    out = _seq_first(p @ _heads_first(_per_query_head(v, q.shape[2])))
    return out, lse


def attention_backward(q, k, v, visible, dout, softmax_scale: float | None = None, out=None,
                       dropout_scale=None):
    """Returns ``(dq, dk, dv)`` in float64; dk/dv summed over the query heads of each GQA group.
    ``dropout_scale`` as in :func:`attention_forward` (the same factors as that forward).

    ``out``: the forward output to use in ``D = rowsum(dO * O)``. FlashAttention-style backward
    kernels read the *saved, rounded* output there; passing it compares like with like, so a
    low-precision test measures the kernel's arithmetic rather than the rounding of O (which,
    amplified by ``softmax_scale * |K|``, can exceed fp16's few-ulp budget on its own).
    Default: the exact output, i.e. ``D = rowsum(dP * P)``.
    """
    scale = _scale(q, softmax_scale)
    heads_q, heads_k = q.shape[2], k.shape[2]
    p, _ = _softmax(q, k, visible, scale)  # 0 on masked entries
    z = 1.0 if dropout_scale is None else dropout_scale
    do_h = _heads_first(dout)
    dv_full = _seq_first((p * z).swapaxes(-1, -2) @ do_h)
    dp = (do_h @ _heads_first(_per_query_head(v, heads_q)).swapaxes(-1, -2)) * z  # w.r.t. the undropped P
    ds = p * (dp - _row_delta(dout, out, dp, p)) * scale
    dq = _seq_first(ds @ _heads_first(_per_query_head(k, heads_q)))
    dk_full = _seq_first(ds.swapaxes(-1, -2) @ _heads_first(q))
    return dq, _sum_groups(dk_full, heads_k), _sum_groups(dv_full, heads_k)


def gradient_magnitudes(q, k, v, visible, dout, softmax_scale: float | None = None, out=None):
    """Cancellation-free sizes ``(dq_mag, dk_mag)`` of dQ and dK (float64, their shapes): the
    backward's formulas with ``|dP| + |D|`` in place of ``dP - D`` and ``|K|``, ``|Q|`` in place of K, Q.

    They bound what the rounding of ``dS = P (dP - D)`` can amount to. Where the softmax saturates
    (a row whose weight sits on one key), ``dP - D`` cancels and the exact dQ / dK are orders of
    magnitude below these sizes (and below any float32 evaluation's rounding of them), so an error
    stated relative to the exact gradient alone would measure that rounding, not the kernel.
    ``out`` as in :func:`attention_backward`.
    """
    scale = _scale(q, softmax_scale)
    heads_q, heads_k = q.shape[2], k.shape[2]
    p, _ = _softmax(q, k, visible, scale)
    dp = _heads_first(dout) @ _heads_first(_per_query_head(v, heads_q)).swapaxes(-1, -2)
    ds_mag = p * (np.abs(dp) + np.abs(_row_delta(dout, out, dp, p))) * abs(scale)
    dq_mag = _seq_first(ds_mag @ np.abs(_heads_first(_per_query_head(k, heads_q))))
    dk_full = _seq_first(ds_mag.swapaxes(-1, -2) @ np.abs(_heads_first(q)))
    return dq_mag, _sum_groups(dk_full, heads_k)


def _scale(q, softmax_scale):
    return q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale


def _softmax(q, k, visible, scale):
    """``(P [B, Hq, Sq, Sk], lse [B, Hq, Sq])`` in float64; P is 0 on masked entries and on fully
    masked rows (LSE -inf)."""
    s = _scores(q, k, visible, scale)
    lse = _logsumexp(s)
    return np.exp(s - np.where(np.isfinite(lse), lse, 0.0)[..., None]), lse


def _row_delta(dout, out, dp, p):
    """``D [B, Hq, Sq, 1]``: ``rowsum(dO * out)`` with the given output, else ``rowsum(dP * P)``."""
    if out is None:
        return np.sum(dp * p, axis=-1, keepdims=True)
    return _heads_first(np.sum(np.asarray(dout, dtype=np.float64) * np.asarray(out, dtype=np.float64), axis=-1))[..., None]


def _per_query_head(t, heads_q):
    """``[B, S, Hk, D]`` -> ``[B, S, Hq, D]`` float64, each key/value head repeated over its GQA group."""
    return np.repeat(np.asarray(t, dtype=np.float64), heads_q // t.shape[2], axis=2)


def _sum_groups(t, heads_k):
    """``[B, Sk, Hq, D]`` -> ``[B, Sk, Hk, D]``: the sum over each GQA group's query heads."""
    return t.reshape(t.shape[0], t.shape[1], heads_k, t.shape[2] // heads_k, t.shape[3]).sum(axis=3)


def _heads_first(t):
    """``[B, S, H, ...]`` -> ``[B, H, S, ...]`` (batched matmuls run on BLAS; einsum would not)."""
    return np.asarray(t, dtype=np.float64).swapaxes(1, 2)


def _seq_first(t):
    """``[B, H, S, D]`` -> ``[B, S, H, D]``."""
    return t.swapaxes(1, 2)


def _logsumexp(s):
    m = np.max(s, axis=-1)
    safe_m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(s - safe_m[..., None]), axis=-1)) + safe_m
