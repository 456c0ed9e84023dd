"""Gradients through Paddle autograd in a small model (projection -> attention -> projection ->
loss): our op against the same model with dense float64 attention whose mask is built from
startend_row_indices with Paddle ops (independent of the kernel and of the numpy reference)."""
from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from flashmask_paddle import flashmask_attention

B, S, E, HQ, HK, D = 2, 75, 24, 4, 2, 16


def dense_mask(idx, causal, sq, sk):
    """bool [B, Hm, Sq, Sk], True = visible, from int indices with Paddle ops (docs/MASKS_AND_API.md)."""
    rows = paddle.arange(sq, dtype="int64").reshape([1, 1, sq, 1])
    bound = lambda c: idx[..., c].astype("int64").unsqueeze(2)  # [B, Hm, 1, Sk]
    c = idx.shape[-1]
    if c == 1:
        masked = rows >= bound(0)
    elif c == 2 and causal:
        masked = (rows >= bound(0)) & (rows < bound(1))
    elif c == 2:
        masked = (rows >= bound(0)) | (rows < bound(1))
    else:
        masked = ((rows >= bound(0)) & (rows < bound(1))) | ((rows >= bound(2)) & (rows < bound(3)))
    if causal:
        cols = paddle.arange(sk, dtype="int64").reshape([1, 1, 1, sk])
        masked = masked | (cols > rows + (sk - sq))
    return ~masked


def dense_attention(q, k, v, visible, scale):
    """float64 attention in [B, S, H, D] with GQA; fully masked rows give 0."""
    group = q.shape[2] // k.shape[2]
    k = paddle.repeat_interleave(k, group, axis=2)
    v = paddle.repeat_interleave(v, group, axis=2)
    s = paddle.einsum("bihd,bjhd->bhij", q, k) * scale
    visible = visible.astype(s.dtype)  # 1 visible, 0 masked
    visible = paddle.expand(paddle.repeat_interleave(visible, q.shape[2] // visible.shape[1], axis=1), s.shape)
    s = paddle.where(visible > 0, s, paddle.full_like(s, -1e30))
    p = F.softmax(s, axis=-1) * visible  # exact zeros on masked entries and fully masked rows
    return paddle.einsum("bhij,bjhd->bihd", p, v)


def forward(params, x, idx, causal, attention):
    w_in, w_out = params
    h = paddle.matmul(x, w_in)
    q, k, v = paddle.split(h, [HQ * D, HK * D, HK * D], axis=-1)
    q, k, v = q.reshape([B, S, HQ, D]), k.reshape([B, S, HK, D]), v.reshape([B, S, HK, D])
    o = attention(q, k, v, idx, causal)
    y = paddle.matmul(o.reshape([B, S, HQ * D]), w_out)
    return (y * y).mean() + y.sum() * 0.01


@pytest.mark.parametrize("causal,columns", [(True, 1), (True, 2), (False, 2), (False, 4), (True, 0), (False, 0)])
def test_model_gradients_match_dense_float64_model(rng, causal, columns):
    x = rng.standard_normal((B, S, E))
    w_in = rng.standard_normal((E, (HQ + 2 * HK) * D)) / np.sqrt(E)
    w_out = rng.standard_normal((HQ * D, E)) / np.sqrt(HQ * D)
    idx = None
    if columns:
        bounds = np.sort(rng.integers(0, S + 1, size=(B, HK, S, columns)), axis=-1)  # LTS<=LTE<=UTS<=UTE
        if not causal and columns == 2:
            bounds = bounds[..., ::-1]  # LTS >= UTE: a visible band [UTE, LTS) per column
        idx = np.ascontiguousarray(bounds).astype(np.int32)

    def ours(q, k, v, i, c):
        return flashmask_attention(q, k, v, i, causal=c)

    def dense(q, k, v, i, c):
        if i is None:  # nothing masked by bounds: LTS = S (and UTE = 0)
            i = paddle.to_tensor(np.array([S] if c else [S, 0], np.int32).reshape([1, 1, 1, -1]).repeat(S, 2))
        vis = dense_mask(i, c, S, S)
        return dense_attention(q, k, v, vis, D ** -0.5)

    grads = {}
    for name, attention, dtype in (("ours", ours, "float32"), ("dense", dense, "float64")):
        params = [paddle.to_tensor(w.astype(dtype), stop_gradient=False) for w in (w_in, w_out)]
        tidx = None if idx is None else paddle.to_tensor(idx)
        loss = forward(params, paddle.to_tensor(x.astype(dtype)), tidx, causal, attention)
        loss.backward()
        grads[name] = [loss.item()] + [p.grad.numpy().astype(np.float64) for p in params]
    assert abs(grads["ours"][0] - grads["dense"][0]) < 1e-5 * max(1.0, abs(grads["dense"][0]))
    for got, want in zip(grads["ours"][1:], grads["dense"][1:]):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max(), rtol=1e-4)
