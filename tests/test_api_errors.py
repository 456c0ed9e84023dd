"""flashmask_attention's argument checks (each bad input raises the right error, naming the
argument) and its return conventions (Paddle 3.3's)."""
from __future__ import annotations

import numpy as np
import paddle
import pytest

from flashmask_paddle import flashmask_attention
from flashmask_paddle.reference import attention_forward, visible_pairs

B, SQ, SK, HQ, HK, D = 2, 12, 10, 4, 2, 16


def qkv(dtype="float32", sq=SQ, sk=SK, hq=HQ, hk=HK, d=D):
    rng = np.random.default_rng(0)
    return [paddle.to_tensor(rng.standard_normal(s).astype("float32")).astype(dtype)
            for s in ((B, sq, hq, d), (B, sk, hk, d), (B, sk, hk, d))]


def indices(shape=(B, 1, SK, 1), value=3, dtype="int32"):
    return paddle.to_tensor(np.full(shape, value)).astype(dtype)


@pytest.mark.parametrize("make_args,kwargs,error,words", [
    # startend_row_indices layout
    (lambda: (*qkv(), indices(dtype="int64")), dict(causal=True), TypeError, ["startend_row_indices", "int32", "int64"]),
    (lambda: (*qkv(), indices(shape=(B, SK, 1))), dict(causal=True), ValueError, ["startend_row_indices", "rank 4"]),
    (lambda: (*qkv(), indices(shape=(1, 1, SK, 1))), dict(causal=True), ValueError, ["shape[0]", "batch", f"{B}", "got 1"]),
    (lambda: (*qkv(), indices(shape=(B, 1, SK + 1, 1))), dict(causal=True), ValueError, ["shape[2]", "seqlen_k", f"{SK}"]),
    (lambda: (*qkv(), indices(shape=(B, 3, SK, 1))), dict(causal=True), ValueError, ["mask heads", "got 3"]),
    (lambda: (*qkv(), indices(shape=(B, 1, SK, 3))), dict(causal=False), ValueError, ["C", "got 3"]),
    (lambda: (*qkv(), indices(shape=(B, 1, SK, 4))), dict(causal=True), ValueError, ["causal=True", "C=4"]),
    (lambda: (*qkv(), indices(shape=(B, 1, SK, 1))), dict(causal=False), ValueError, ["causal=False", "C=1"]),
    # bound values (checked by flashmask_paddle.masks.validate)
    (lambda: (*qkv(), indices(value=SQ + 1)), dict(causal=True), ValueError, ["LTS", f"{SQ + 1}", "seqlen_q"]),
    (lambda: (*qkv(), indices(value=-1)), dict(causal=True), ValueError, ["LTS", "-1"]),
    (lambda: (*qkv(), paddle.to_tensor(np.tile(np.array([5, 2], np.int32), (B, 1, SK, 1)))),
     dict(causal=True), ValueError, ["LTS > LTE"]),
    (lambda: (*qkv(), paddle.to_tensor(np.tile(np.array([0, 0, 6, 2], np.int32), (B, 1, SK, 1)))),
     dict(causal=False), ValueError, ["UTS > UTE"]),
    # query/key/value
    (lambda: (qkv()[0][0], *qkv()[1:]), {}, ValueError, ["query", "rank 4"]),
    (lambda: (qkv()[0], qkv()[1], qkv(sk=SK + 1)[2]), {}, ValueError, ["value", "shape of key"]),
    (lambda: (qkv()[0], *qkv(d=D * 2)[1:]), {}, ValueError, ["head_dim", f"{D}", f"{2 * D}"]),
    (lambda: (qkv(hq=3, hk=3)[0], *qkv(hk=2)[1:]), {}, ValueError, ["num_heads", "multiple", "got 3"]),
    (lambda: (paddle.ones([B, SQ, HQ, D], dtype="int32"), *qkv()[1:]), {}, TypeError, ["query dtype", "int32"]),
    (lambda: (qkv("float16")[0], *qkv()[1:]), {}, TypeError, ["key dtype", "float16", "float32"]),
    (lambda: (qkv()[0].numpy(), *qkv()[1:]), {}, TypeError, ["query", "paddle.Tensor"]),
    # other arguments
    (lambda: (*qkv(), indices()), dict(causal=True, window_size=2), ValueError, ["window_size", "startend_row_indices"]),
    (lambda: qkv(), dict(window_size=-1), ValueError, ["window_size", "-1"]),
    (lambda: qkv(), dict(window_size=(1, 2, 3)), TypeError, ["window_size"]),
    (lambda: qkv(), dict(softmax_scale="0.1"), TypeError, ["softmax_scale"]),
    (lambda: qkv(), dict(softmax_scale=float("nan")), ValueError, ["softmax_scale", "finite"]),
    (lambda: qkv(), dict(dropout=1.5), ValueError, ["dropout", "[0, 1)"]),
    (lambda: qkv(), dict(causal="yes"), TypeError, ["causal", "bool"]),
    (lambda: qkv(), dict(return_seed_offset=True, fixed_seed_offset=paddle.zeros([3], "int64")),
     ValueError, ["fixed_seed_offset", "[2]"]),
])
def test_bad_input_raises_an_error_naming_the_argument(make_args, kwargs, error, words):
    with pytest.raises(error) as info:
        flashmask_attention(*make_args(), **kwargs)
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


def test_dropout_is_not_applied_outside_training():
    out = flashmask_attention(*qkv(), dropout=0.1, training=False)  # inference: no dropout, as Paddle
    np.testing.assert_array_equal(out.numpy(), flashmask_attention(*qkv()).numpy())


def test_return_conventions_follow_paddle():
    q, k, v = qkv()
    out = flashmask_attention(q, k, v)
    assert isinstance(out, paddle.Tensor) and out.shape == q.shape
    out_lse = flashmask_attention(q, k, v, return_softmax_lse=True)
    assert isinstance(out_lse, list) and len(out_lse) == 2
    assert out_lse[1].shape == [B, HQ, SQ] and out_lse[1].dtype == paddle.float32
    out_seed = flashmask_attention(q, k, v, return_seed_offset=True)
    assert len(out_seed) == 2 and out_seed[1].dtype == paddle.int64 and out_seed[1].shape == [2]
    assert (out_seed[1].numpy() == 0).all()
    assert out_seed[1].place.is_cpu_place()  # on the host, like a pair dropout draws
    triple = flashmask_attention(q, k, v, return_softmax_lse=True, return_seed_offset=True,
                                 fixed_seed_offset=paddle.to_tensor([7, 9], dtype="int64"))
    assert len(triple) == 3 and triple[2].numpy().tolist() == [7, 9]
    assert triple[2].place.is_cpu_place()
    np.testing.assert_array_equal(triple[0].numpy(), out.numpy())


def _window_visible(sq, sk, left, right, causal):
    """Paddle's window definition, written out: query i (aligned to key i + Sk - Sq) sees keys
    [i - left, i] when causal, [i - left, i + right] otherwise."""
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    vis = (j >= i - left) & (j <= (i if causal else i + right))
    return vis[None, None]


@pytest.mark.parametrize("window,causal", [(3, True), (3, False), ((2, 5), False), ((4, 1), True), (0, True)])
@pytest.mark.parametrize("sq,sk", [(70, 70), (33, 80)])
def test_window_size_gives_sliding_window_attention(window, causal, sq, sk):
    rng = np.random.default_rng(sq * 31 + sk)
    q = rng.standard_normal((B, sq, HQ, D)).astype("float32")
    k = rng.standard_normal((B, sk, HK, D)).astype("float32")
    v = rng.standard_normal((B, sk, HK, D)).astype("float32")
    out, lse = flashmask_attention(*(paddle.to_tensor(x) for x in (q, k, v)), causal=causal,
                                   window_size=window, return_softmax_lse=True)
    left, right = (window, window) if isinstance(window, int) else window
    want_out, want_lse = attention_forward(q, k, v, _window_visible(sq, sk, left, right, causal))
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-4, rtol=1e-4)


def test_indices_shared_by_all_heads_equal_per_head_copies():
    """Hm = 1 broadcast equals the same bounds repeated per query head (Hm = Hq)."""
    q, k, v = qkv()
    rng = np.random.default_rng(3)
    idx = np.sort(rng.integers(0, SQ + 1, (B, 1, SK, 1)), axis=2).astype(np.int32)
    one = flashmask_attention(q, k, v, paddle.to_tensor(idx), causal=True)
    per_head = flashmask_attention(q, k, v, paddle.to_tensor(np.repeat(idx, HQ, axis=1)), causal=True)
    np.testing.assert_array_equal(one.numpy(), per_head.numpy())
    vis = visible_pairs(idx, True, SQ, SK)
    np.testing.assert_allclose(one.numpy(), attention_forward(q.numpy(), k.numpy(), v.numpy(), vis)[0],
                               atol=1e-4, rtol=1e-4)


def test_missing_op_library_names_the_install_command(monkeypatch, tmp_path):
    from flashmask_paddle import _ops

    monkeypatch.setenv("FLASHMASK_OPS_LIBRARY", str(tmp_path / "nowhere" / "flashmask_ops.so"))
    with pytest.raises(ImportError, match="python setup_ops.py install"):
        _ops.find_library()


def test_tests_use_a_compiled_library_found_by_the_loader():
    """The op under test is the one `python setup_ops.py install` put in site-packages (or an
    in-place build next to the sources); report which."""
    from flashmask_paddle import _ops

    path = _ops.library_path()
    assert path.endswith(_ops.LIBRARY_NAME)


@pytest.mark.parametrize("make,message", [
    (lambda q: (q, q, q, paddle.zeros([1, 1, 7, 1], "int32"), True), "[B, Hm, Sk, C]"),
    (lambda q: (q, q, q, paddle.zeros([1, 1, 8, 1], "int64"), True), "int32"),
    (lambda q: (q, q, q, paddle.zeros([1, 1, 8, 4], "int32"), True), "C in"),
    (lambda q: (q, q, q, paddle.zeros([1, 5, 8, 1], "int32"), True), "heads"),
    (lambda q: (q, paddle.ones([1, 8, 3, 16]), paddle.ones([1, 8, 3, 16]), None, True), "multiple"),
    (lambda q: (q, q, paddle.ones([1, 9, 2, 16]), None, False), "shapes differ"),
])
def test_the_op_itself_refuses_layouts_that_would_read_out_of_bounds(make, message):
    """The compiled op is callable without the Python API: it must check what keeps the kernel
    in bounds on its own."""
    from flashmask_paddle import _ops

    q = paddle.ones([1, 8, 2, 16])
    with pytest.raises(Exception, match="flashmask_attn") as info:
        q_, k_, v_, idx, causal = make(q)
        _ops.flashmask_attn(q_, k_, v_, idx, None, None, causal, 0.25)
    assert message in str(info.value)
