"""The fp64 oracle itself: visible_pairs against per-column loops for every (causal, C) form,
forward against a per-row loop softmax, backward against finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashmask_paddle import reference

FAST = settings(max_examples=30, deadline=None)


def random_indices(rng, batch, heads, sq, sk, causal, c):
    """Random valid startend_row_indices [B, Hm, Sk, C] of any (causal, C) form."""
    a = rng.integers(0, sq + 1, size=(batch, heads, sk, c))
    if c == 4 or (causal and c == 2):
        a[..., 0:2] = np.sort(a[..., 0:2], axis=-1)
    if c == 4:
        a[..., 2:4] = np.sort(a[..., 2:4], axis=-1)
    return a.astype(np.int32)


def column_loops(idx, causal, sq):
    """docs/MASKS_AND_API.md table, one key column at a time (True = visible)."""
    batch, heads, sk, c = idx.shape
    vis = np.ones((batch, heads, sq, sk), bool)
    for b in range(batch):
        for h in range(heads):
            for j in range(sk):
                bounds = idx[b, h, j]
                for i in range(sq):
                    if c == 1:
                        masked = i >= bounds[0]
                    elif c == 2 and causal:
                        masked = bounds[0] <= i < bounds[1]
                    elif c == 2:
                        masked = i >= bounds[0] or i < bounds[1]
                    else:
                        masked = bounds[0] <= i < bounds[1] or bounds[2] <= i < bounds[3]
                    if causal and j > i + sk - sq:  # bottom-right aligned
                        masked = True
                    vis[b, h, i, j] = not masked
    return vis


@FAST
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 12), st.integers(1, 12),
       st.sampled_from([(True, 1), (True, 2), (False, 2), (False, 4)]))
def test_visible_pairs_follows_the_bound_table_for_every_form(seed, sq, sk, form):
    causal, c = form
    idx = random_indices(np.random.default_rng(seed), 2, 3, sq, sk, causal, c)
    np.testing.assert_array_equal(reference.visible_pairs(idx, causal, sq), column_loops(idx, causal, sq))


def test_visible_pairs_without_indices_is_plain_causal_or_full():
    vis = reference.visible_pairs(None, True, 3, 5)[0, 0]
    np.testing.assert_array_equal(vis, np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool))
    assert reference.visible_pairs(None, False, 3, 5).all()


def naive_forward(q, k, v, visible, scale):
    """One query row at a time, a textbook softmax; masked-out rows give 0 and -inf."""
    batch, sq, hq, d = q.shape
    hk, hm = k.shape[2], visible.shape[1]
    out = np.zeros((batch, sq, hq, d))
    lse = np.full((batch, hq, sq), -np.inf)
    for b in range(batch):
        for h in range(hq):
            kh = h // (hq // hk)
            mh = h // (hq // hm)
            for i in range(sq):
                keys = [j for j in range(k.shape[1]) if visible[min(b, visible.shape[0] - 1), mh, i, j]]
                if not keys:
                    continue
                s = np.array([q[b, i, h] @ k[b, j, kh] * scale for j in keys])
                m = s.max()
                w = np.exp(s - m)
                lse[b, h, i] = m + np.log(w.sum())
                out[b, i, h] = sum(wj * v[b, j, kh] for wj, j in zip(w / w.sum(), keys))
    return out, lse


def problem(seed, batch=2, sq=7, sk=9, hq=4, hk=2, hm=2, d=5, causal=True, c=2):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, n, h, d)) for n, h in ((sq, hq), (sk, hk), (sk, hk)))
    idx = random_indices(rng, batch, hm, sq, sk, causal, c)
    visible = reference.visible_pairs(idx, causal, sq)
    return q, k, v, visible


@pytest.mark.parametrize("hq, hk, hm", [(4, 4, 1), (4, 2, 2), (4, 1, 4), (6, 2, 1)])
@pytest.mark.parametrize("form", [(True, 1), (True, 2), (False, 2), (False, 4)])
def test_forward_matches_per_row_softmax_with_gqa(hq, hk, hm, form):
    causal, c = form
    q, k, v, visible = problem(hq * 10 + hk + hm, hq=hq, hk=hk, hm=hm, causal=causal, c=c)
    visible[0, 0, 2, :] = False  # a fully masked query row
    out, lse = reference.attention_forward(q, k, v, visible, softmax_scale=0.37)
    want_out, want_lse = naive_forward(q, k, v, visible, 0.37)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))
    np.testing.assert_allclose(lse[np.isfinite(lse)], want_lse[np.isfinite(want_lse)], rtol=1e-12)
    assert np.isneginf(lse[0, : hq // hm, 2]).all() and (out[0, 2, : hq // hm] == 0).all()


def test_default_scale_is_inverse_sqrt_head_dim():
    q, k, v, visible = problem(3)
    out, _ = reference.attention_forward(q, k, v, visible)
    want, _ = naive_forward(q, k, v, visible, q.shape[-1] ** -0.5)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hq, hk, hm", [(2, 2, 1), (4, 2, 2), (4, 1, 4)])
def test_backward_matches_finite_differences(hq, hk, hm):
    q, k, v, visible = problem(17 + hq + hk, batch=1, sq=5, sk=6, hq=hq, hk=hk, hm=hm, d=3, causal=False, c=4)
    visible[0, 0, 1, :] = False  # a fully masked row: zero gradient, never NaN
    rng = np.random.default_rng(5)
    dout = rng.standard_normal(q.shape)
    scale = 0.6

    def loss(q_, k_, v_):
        return float(np.sum(reference.attention_forward(q_, k_, v_, visible, scale)[0] * dout))

    dq, dk, dv = reference.attention_backward(q, k, v, visible, dout, scale)
    eps = 1e-6
    for grad, which in ((dq, 0), (dk, 1), (dv, 2)):
        args = [q, k, v]
        numeric = np.zeros_like(args[which])
        for pos in np.ndindex(*args[which].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[which][pos] += eps
            minus[which][pos] -= eps
            numeric[pos] = (loss(*plus) - loss(*minus)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)
        assert np.isfinite(grad).all()
    assert (dq[0, 1, : hq // hm] == 0).all()


def test_backward_with_exact_saved_output_equals_default():
    """Passing the exact forward output as ``out`` is the same math as D = rowsum(dP * P)."""
    rng = np.random.default_rng()
    q, k, v, dout = (rng.standard_normal(s) for s in [(2, 9, 4, 8), (2, 11, 2, 8), (2, 11, 2, 8), (2, 9, 4, 8)])
    idx = np.sort(rng.integers(0, 10, (2, 2, 11, 2)), axis=-1).astype(np.int32)
    visible = reference.visible_pairs(idx, True, 9)
    out, _ = reference.attention_forward(q, k, v, visible, 0.4)
    for a, b in zip(reference.attention_backward(q, k, v, visible, dout, 0.4),
                    reference.attention_backward(q, k, v, visible, dout, 0.4, out=out)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@FAST
@given(seed=st.integers(0, 2**31 - 1), form=st.sampled_from([(True, 1), (False, 2), (True, 4), (False, 0)]))
def test_gradient_magnitudes_bound_the_gradients_elementwise(seed, form):
    rng = np.random.default_rng(seed)
    causal, c = form
    q, k, v, do = (rng.standard_normal(s) for s in ((2, 13, 4, 8), (2, 17, 2, 8), (2, 17, 2, 8), (2, 13, 4, 8)))
    idx = random_indices(rng, 2, 2, 13, 17, causal, c) if c else None
    vis = reference.visible_pairs(idx, causal, 13, 17)
    dq, dk, _ = reference.attention_backward(q, k, v, vis, do, 0.7)
    dq_mag, dk_mag = reference.gradient_magnitudes(q, k, v, vis, do, 0.7)
    assert dq_mag.shape == dq.shape and dk_mag.shape == dk.shape
    assert (np.abs(dq) <= dq_mag * (1 + 1e-12) + 1e-15).all()
    assert (np.abs(dk) <= dk_mag * (1 + 1e-12) + 1e-15).all()


def test_saturated_softmax_rows_have_gradients_far_below_their_magnitudes():
    # Every row's weight on one key (scores ~ +-40 apart): dP - D cancels, dQ is ~0 while the
    # terms it cancels are O(1); the norm-wise check must measure errors against the terms.
    from flashmask_paddle.testing.tolerance import REL_TOL, compare
    rng = np.random.default_rng(0)
    k = np.zeros((1, 2, 1, 8))
    k[0, 0, 0, 0], k[0, 1, 0, 0] = 8.0, -8.0
    q = np.zeros((1, 3, 1, 8))
    q[0, :, 0, 0] = 5.0
    v, do = rng.standard_normal((1, 2, 1, 8)), rng.standard_normal((1, 3, 1, 8))
    vis = reference.visible_pairs(None, False, 3, 2)
    out, lse = reference.attention_forward(q, k, v, vis, 1.0)
    dq, dk, dv = reference.attention_backward(q, k, v, vis, do, 1.0)
    mags = reference.gradient_magnitudes(q, k, v, vis, do, 1.0)
    assert np.linalg.norm(dq) < 1e-12 * np.linalg.norm(mags[0])
    want = (out, lse, dq, dk, dv)
    # float32-sized rounding of the cancelled terms: meaningless relative to the exact dQ, fine
    # relative to the terms.
    noisy = (out, lse, dq + 1e-7 * mags[0], dk + 1e-7 * mags[1], dv)
    assert compare(noisy, want)["dq"] > REL_TOL
    assert compare(noisy, want, mags)["dq"] <= REL_TOL and compare(noisy, want, mags)["dk"] <= REL_TOL
    # A real error (a tenth of the terms) still fails.
    wrong = (out, lse, dq + 0.1 * mags[0], dk, dv)
    assert compare(wrong, want, mags)["dq"] > REL_TOL


def test_the_floor_leaves_ordinary_rows_judged_by_their_exact_gradient():
    from flashmask_paddle.testing.tolerance import compare
    rng = np.random.default_rng(1)
    q, k, v, do = (rng.standard_normal(s) for s in ((1, 9, 2, 8), (1, 11, 2, 8), (1, 11, 2, 8), (1, 9, 2, 8)))
    vis = reference.visible_pairs(None, True, 9, 11)
    out, lse = reference.attention_forward(q, k, v, vis, 0.35)
    dq, dk, dv = reference.attention_backward(q, k, v, vis, do, 0.35)
    mags = reference.gradient_magnitudes(q, k, v, vis, do, 0.35)
    off = (out, lse, dq * 1.02, dk * 1.02, dv)  # 2% off: over REL_TOL with or without the floor
    assert compare(off, (out, lse, dq, dk, dv), mags)["dq"] == pytest.approx(0.02)
    assert compare(off, (out, lse, dq, dk, dv), mags)["dk"] == pytest.approx(0.02)
