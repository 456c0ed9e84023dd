"""Parity with Paddle 3.3's flashmask_attention beyond the mask: block_mask, dropout in training,
value head dim != query head dim, forward and backward against the fp64 reference (CPU kernels)."""
from __future__ import annotations

import numpy as np
import paddle
import pytest

from flashmask_paddle.testing import cases
from flashmask_paddle.testing.cases import FORMS, Case
from flashmask_paddle.testing.tolerance import TOL, TOL_GRAD, assert_close, assert_lse


def random_bounds(rng, case: Case):
    """Random valid bounds for the case's (causal, C), mask heads and shape."""
    return cases.random_bounds(rng, (case.causal, case.columns), case.batch, case.hm(), case.seqlen_q,
                               case.seqlen_k, masked_rows=case.masked_rows)
from flashmask_paddle import flashmask_attention
from flashmask_paddle.reference import attention_backward, attention_forward, visible_pairs
from philox_numpy import keep_mask, philox4x32_10

BLOCK = 128


def run(q, k, v, dout, idx=None, dtype="float32", **kwargs):
    """(out, lse, dq, dk, dv) of the op as fp32 numpy."""
    tq, tk, tv = (paddle.to_tensor(x).astype(dtype) for x in (q, k, v))
    for t in (tq, tk, tv):
        t.stop_gradient = False
    tidx = None if idx is None else paddle.to_tensor(idx)
    out, lse = flashmask_attention(tq, tk, tv, tidx, return_softmax_lse=True, **kwargs)
    out.backward(paddle.to_tensor(dout).astype(dtype))
    f32 = lambda x: x.astype("float32").numpy()
    return f32(out), lse.numpy(), f32(tq.grad), f32(tk.grad), f32(tv.grad)


def inputs(rng, b, sq, sk, hq, hk, d, dv=None, dtype="float32"):
    def t(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return paddle.to_tensor(x).astype(dtype).astype("float32").numpy()
    dv = d if dv is None else dv
    return t((b, sq, hq, d)), t((b, sk, hk, d)), t((b, sk, hk, dv)), t((b, sq, hq, dv))


class Label(str):
    """What assert_close needs of a case: its dtype, and a description for the message."""

    def __new__(cls, text, dtype):
        label = super().__new__(cls, f"{text} dtype={dtype}")
        label.dtype = dtype
        return label


def compare(got, q, k, v, dout, visible, dtype="float32", what="", dropout_scale=None, scale=None):
    case = Label(what, dtype)
    out, lse = attention_forward(q, k, v, visible, scale, dropout_scale=dropout_scale)
    grads = attention_backward(q, k, v, visible, dout, scale, out=got[0], dropout_scale=dropout_scale)
    assert_close("out", got[0], out, TOL[dtype], case)
    assert_lse(got[1], lse, TOL[dtype], case)
    for name, a, want in zip(("dq", "dk", "dv"), got[2:], grads):
        assert_close(name, a, want, TOL_GRAD[dtype], case)


# ---------------------------------------------------------------------------------------------
# block_mask

def block_visible(block_mask, sq, sk):
    """[B, Hm, nbq, nbk] 0/1 -> boolean [B, Hm, Sq, Sk]: each entry widened to its 128x128 block."""
    wide = np.repeat(np.repeat(block_mask.astype(bool), BLOCK, axis=2), BLOCK, axis=3)
    return wide[:, :, :sq, :sk]


def random_block_mask(rng, batch, heads, sq, sk):
    nbq, nbk = -(-sq // BLOCK), -(-sk // BLOCK)
    bm = (rng.random((batch, heads, nbq, nbk)) < 0.6).astype(np.int32)
    bm[:, :, -1, :] = 0  # a band of fully masked query rows
    return bm


@pytest.mark.parametrize("causal,columns", [f for f in FORMS if f[1] > 0])
@pytest.mark.parametrize("mask_heads", ["1", "hk", "hq"])
def test_block_mask_masks_its_blocks_on_top_of_the_bounds(seed, causal, columns, mask_heads):
    rng = np.random.default_rng(seed)
    case = Case(batch=2, seqlen_q=300, seqlen_k=261, heads_q=4, heads_k=2, head_dim=16, causal=causal,
                columns=columns, mask_heads=mask_heads)
    q, k, v, dout = inputs(rng, 2, 300, 261, 4, 2, 16)
    idx = random_bounds(rng, case)
    bm = random_block_mask(rng, 2, case.hm(), 300, 261)
    got = run(q, k, v, dout, idx, causal=causal, block_mask=paddle.to_tensor(bm))
    visible = visible_pairs(idx, causal, 300, 261) & block_visible(bm, 300, 261)
    compare(got, q, k, v, dout, visible, what=f"block_mask causal={causal} C={columns} Hm={mask_heads}")


def test_block_mask_of_ones_changes_nothing_and_bf16_matches(seed):
    rng = np.random.default_rng(seed)
    q, k, v, dout = inputs(rng, 1, 200, 140, 2, 1, 32, dtype="bfloat16")
    idx = random_bounds(rng, Case(1, 200, 140, 2, 1, 32, causal=True, columns=2))
    ones = paddle.ones([1, 1, 2, 2], dtype="int32")
    plain = run(q, k, v, dout, idx, dtype="bfloat16", causal=True)
    with_ones = run(q, k, v, dout, idx, dtype="bfloat16", causal=True, block_mask=ones)
    for a, b in zip(plain, with_ones):
        np.testing.assert_array_equal(a, b)
    bm = np.array([[[[1, 0], [0, 1]]]], dtype=np.int32)
    got = run(q, k, v, dout, idx, dtype="bfloat16", causal=True, block_mask=paddle.to_tensor(bm))
    visible = visible_pairs(idx, True, 200, 140) & block_visible(bm, 200, 140)
    compare(got, q, k, v, dout, visible, dtype="bfloat16", what="block_mask bf16")


@pytest.mark.parametrize("block_mask,with_indices,error,words", [
    (np.ones((1, 1, 1, 1), np.int32), False, ValueError, ["block_mask", "startend_row_indices"]),
    (np.ones((1, 1, 2, 1), np.int64), True, TypeError, ["block_mask", "int32", "int64"]),
    (np.ones((1, 1, 1, 1), np.int32), True, ValueError, ["block_mask", "[1, 1, 2, 1]", "[1, 1, 1, 1]"]),
    (np.ones((1, 2, 2, 1), np.int32), True, ValueError, ["block_mask", "shape[1]"]),
    (np.array([[[[1], [2]]]], np.int32), True, ValueError, ["block_mask", "0 or 1", "got 2", "[0, 0, 1, 0]"]),
])
def test_bad_block_mask_raises_naming_it(block_mask, with_indices, error, words):
    q = paddle.ones([1, 130, 2, 16])
    idx = paddle.full([1, 1, 20, 1], 130, dtype="int32") if with_indices else None
    with pytest.raises(error) as info:
        flashmask_attention(q, q[:, :20], q[:, :20], idx, causal=True, block_mask=paddle.to_tensor(block_mask))
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


# ---------------------------------------------------------------------------------------------
# dropout

def test_numpy_philox_reproduces_the_published_test_vectors():
    """Known-answer vectors of Philox4x32-10 (Random123's kat_vectors)."""
    cases = [([0, 0, 0, 0], (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
             ([0xFFFFFFFF] * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
             ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], (0xA4093822, 0x299F31D0),
              [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]
    for counter, key, want in cases:
        assert philox4x32_10(np.array(counter, np.uint32), *key).tolist() == want


def _float32(p):
    return float(np.float32(p))  # the kernels take the probability as a float


def _seed_offset(rng):
    return int(rng.integers(0, 2 ** 62)), int(rng.integers(0, 2 ** 62))


def test_dropout_keeps_exactly_the_philox_pattern_scaled_by_one_over_keep(seed):
    """Uniform weights (q = 0) and one-hot values (Dv = Sk) make out[b, i, h, j] = Z_bhij / Sk, so
    the output spells out the kernel's keep mask element by element."""
    rng = np.random.default_rng(seed)
    b, sq, sk, hq, hk, p = 2, 70, 67, 3, 1, 0.3
    s, o = _seed_offset(rng)
    q = paddle.zeros([b, sq, hq, 16])
    k = paddle.to_tensor(rng.standard_normal((b, sk, hk, 16)).astype(np.float32))
    v = paddle.to_tensor(np.broadcast_to(np.eye(sk, dtype=np.float32)[None, :, None, :], (b, sk, hk, sk)).copy())
    out = flashmask_attention(q, k, v, dropout=p, fixed_seed_offset=paddle.to_tensor([s, o], dtype="int64"))
    got = out.numpy().transpose(0, 2, 1, 3)  # [B, Hq, Sq, Sk]
    keep = keep_mask(s, o, b, hq, sq, sk, _float32(p))
    np.testing.assert_array_equal(got > 0, keep)
    np.testing.assert_allclose(got[keep], 1.0 / ((1 - _float32(p)) * sk), rtol=1e-5)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keep_rate_is_one_minus_p(seed, p):
    keep = keep_mask(*_seed_offset(np.random.default_rng(seed)), 2, 4, 128, 256, _float32(p))
    n = keep.size
    assert abs(keep.mean() - (1 - p)) < 4 * np.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("causal,columns", FORMS)
def test_dropout_matches_the_reference_with_the_same_keep_mask(seed, causal, columns):
    rng = np.random.default_rng(seed)
    case = Case(batch=2, seqlen_q=77, seqlen_k=133, heads_q=4, heads_k=2, head_dim=24, causal=causal,
                columns=columns, mask_heads="hk", masked_rows=True)
    q, k, v, dout = inputs(rng, 2, 77, 133, 4, 2, 24)
    idx = random_bounds(rng, case)
    p = 0.25
    s, o = _seed_offset(rng)
    got = run(q, k, v, dout, idx, causal=causal, dropout=p,
              fixed_seed_offset=paddle.to_tensor([s, o], dtype="int64"))
    z = keep_mask(s, o, 2, 4, 77, 133, _float32(p)) / (1 - _float32(p))
    compare(got, q, k, v, dout, visible_pairs(idx, causal, 77, 133, ), what=f"dropout causal={causal} C={columns}",
            dropout_scale=z)


def test_dropout_gradients_match_finite_differences_at_a_fixed_seed(seed):
    """The backward regenerates the forward's mask: directional derivatives of sum(out * w) by
    central differences (float64 sums of the op's float32 outputs) equal <grad, direction>."""
    rng = np.random.default_rng(seed)
    q, k, v, w = inputs(rng, 1, 40, 52, 2, 1, 16)
    idx = random_bounds(rng, Case(1, 40, 52, 2, 1, 16, causal=True, columns=2))
    fixed = paddle.to_tensor(list(_seed_offset(rng)), dtype="int64")
    kw = dict(causal=True, dropout=0.4, fixed_seed_offset=fixed)
    got = run(q, k, v, w, idx, **kw)

    def loss(q_, k_, v_):
        out = flashmask_attention(*(paddle.to_tensor(x) for x in (q_, k_, v_)), paddle.to_tensor(idx), **kw)
        return float(np.sum(out.numpy().astype(np.float64) * w))

    eps = 1e-2
    for name, grad, pos in (("dq", got[2], 0), ("dk", got[3], 1), ("dv", got[4], 2)):
        direction = rng.standard_normal(grad.shape).astype(np.float32)
        plus, minus = [q, k, v], [q, k, v]
        plus[pos] = plus[pos] + eps * direction
        minus[pos] = minus[pos] - eps * direction
        numeric = (loss(*plus) - loss(*minus)) / (2 * eps)
        analytic = float(np.sum(grad.astype(np.float64) * direction))
        assert abs(numeric - analytic) <= 2e-3 * max(1.0, abs(analytic)), (name, numeric, analytic)


def test_seed_offset_follows_paddle_semantics():
    q = paddle.to_tensor(np.random.default_rng(1).standard_normal((1, 33, 2, 16)).astype(np.float32))
    paddle.seed(123)
    out1, so1 = flashmask_attention(q, q, q, dropout=0.5, return_seed_offset=True)
    out2, so2 = flashmask_attention(q, q, q, dropout=0.5, return_seed_offset=True)
    assert so1.dtype == paddle.int64 and so1.shape == [2]
    assert not np.array_equal(out1.numpy(), out2.numpy()), "two calls drew the same dropout mask"
    paddle.seed(123)  # the same seed replays the same masks
    np.testing.assert_array_equal(flashmask_attention(q, q, q, dropout=0.5).numpy(), out1.numpy())
    replay = flashmask_attention(q, q, q, dropout=0.5, fixed_seed_offset=so2)  # and so does the pair
    np.testing.assert_array_equal(replay.numpy(), out2.numpy())
    plain = flashmask_attention(q, q, q)
    np.testing.assert_array_equal(flashmask_attention(q, q, q, dropout=0.5, training=False).numpy(), plain.numpy())


def test_rng_name_draws_from_the_named_generator():
    from paddle.framework import core

    q = paddle.to_tensor(np.random.default_rng(2).standard_normal((1, 20, 1, 8)).astype(np.float32))
    core.set_random_seed_generator("flashmask_test_rng", 77)  # as fleet's RNG state tracker does
    a, so_a = flashmask_attention(q, q, q, dropout=0.5, rng_name="flashmask_test_rng", return_seed_offset=True)
    core.get_random_seed_generator("flashmask_test_rng").manual_seed(77)
    b = flashmask_attention(q, q, q, dropout=0.5, rng_name="flashmask_test_rng")
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(so_a.numpy()[0]) == 77  # the generator's seed, as Paddle reports it
    with pytest.raises(ValueError, match="rng_name"):
        flashmask_attention(q, q, q, dropout=0.5, rng_name="no_such_generator")


# ---------------------------------------------------------------------------------------------
# value head dim

@pytest.mark.parametrize("d,dv", [(48, 32), (24, 40), (192, 128)])
def test_value_head_dim_may_differ_from_the_query_head_dim(seed, d, dv):
    rng = np.random.default_rng(seed)
    case = Case(batch=1, seqlen_q=45, seqlen_k=70, heads_q=4, heads_k=2, head_dim=d, causal=False, columns=4,
                mask_heads="hq")
    q, k, v, dout = inputs(rng, 1, 45, 70, 4, 2, d, dv)
    idx = random_bounds(rng, case)
    got = run(q, k, v, dout, idx, causal=False)
    assert got[0].shape == (1, 45, 4, dv) and got[4].shape == (1, 70, 2, dv) and got[2].shape == q.shape
    compare(got, q, k, v, dout, visible_pairs(idx, False, 45, 70), what=f"D={d} Dv={dv}")
