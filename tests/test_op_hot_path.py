"""What a training step needs from the call itself: no host read of a reused mask tensor,
paddle.jit.to_static(full_graph=True) tracing, and Paddle's deterministic switch."""
from __future__ import annotations

import numpy as np
import paddle
import pytest

from flashmask_paddle import _ops, flashmask_attention, masks


@pytest.fixture
def numpy_reads(monkeypatch):
    """Counts paddle.Tensor.numpy calls (each a device->host copy on GPU)."""
    calls = []
    original = paddle.Tensor.numpy

    def counting(self, *args, **kwargs):
        calls.append(tuple(self.shape))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(paddle.Tensor, "numpy", counting)
    return calls


def _qkv(rng, sq=300, sk=300):
    return [paddle.to_tensor(rng.standard_normal(s).astype(np.float32))
            for s in ((1, sq, 2, 16), (1, sk, 2, 16), (1, sk, 2, 16))]


def test_a_reused_mask_tensor_is_read_back_once(numpy_reads):
    q, k, v = _qkv(np.random.default_rng(0))
    idx = paddle.to_tensor(masks.causal_document([100, 120, 80])[0])
    block = paddle.ones([1, 1, 3, 3], dtype="int32")
    first = flashmask_attention(q, k, v, idx, causal=True, block_mask=block)
    assert sorted(numpy_reads) == sorted([tuple(idx.shape), tuple(block.shape)])
    numpy_reads.clear()
    for _ in range(3):
        again = flashmask_attention(q, k, v, idx, causal=True, block_mask=block)
    assert numpy_reads == [], "a second call with the same mask tensors read them back"
    np.testing.assert_array_equal(first.numpy(), again.numpy())


def test_an_in_place_change_of_the_mask_is_checked_again(numpy_reads):
    q, k, v = _qkv(np.random.default_rng(1), 20, 20)
    idx = paddle.full([1, 1, 20, 1], 20, dtype="int32")
    flashmask_attention(q, k, v, idx, causal=True)
    idx[0, 0, 3, 0] = 21  # out of [0, Sq]
    with pytest.raises(ValueError, match="startend_row_indices"):
        flashmask_attention(q, k, v, idx, causal=True)


def test_recompute_reads_the_mask_back_once_and_keeps_the_gradients(numpy_reads):
    """Reentrant recompute re-runs each layer on detached copies of its inputs (the mask too): the
    copies share the mask's memory and version, so its value check is not repeated per layer."""
    from paddle.distributed.fleet.utils import recompute

    idx = paddle.to_tensor(masks.causal_document([100, 120, 80])[0])
    x0 = np.random.default_rng(4).standard_normal((1, 300, 2, 16)).astype(np.float32)

    def layer(x, mask):
        return flashmask_attention(x, x * 0.5, x * 0.25, mask, causal=True)

    grads = []
    for recomputed in (True, False):
        x = paddle.to_tensor(x0)
        x.stop_gradient = False
        hidden = x
        for _ in range(3):
            hidden = recompute(layer, hidden, idx, use_reentrant=True) if recomputed else layer(hidden, idx)
        hidden.sum().backward()
        if recomputed:
            assert numpy_reads == [tuple(idx.shape)], "the mask or a copy of it was read back again"
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6, atol=1e-6)


def test_a_write_through_a_detached_copy_of_the_mask_is_checked_again(numpy_reads):
    q, k, v = _qkv(np.random.default_rng(5), 20, 20)
    idx = paddle.full([1, 1, 20, 1], 20, dtype="int32")
    flashmask_attention(q, k, v, idx, causal=True)
    copy = idx.detach()
    copy[0, 0, 3, 0] = 21  # out of [0, Sq]
    with pytest.raises(ValueError, match="startend_row_indices"):
        flashmask_attention(q, k, v, idx, causal=True)


def test_check_bounds_switch_skips_the_host_read(numpy_reads, monkeypatch):
    monkeypatch.setenv("FLASHMASK_CHECK_BOUNDS", "0")
    q, k, v = _qkv(np.random.default_rng(2), 20, 20)
    flashmask_attention(q, k, v, paddle.full([1, 1, 20, 1], 20, dtype="int32"), causal=True)
    assert numpy_reads == []


def test_to_static_full_graph_matches_eager_forward_and_backward():
    rng = np.random.default_rng(3)
    idx = paddle.to_tensor(masks.causal_document([50, 37, 43])[0])

    def step(q, k, v, idx):
        return flashmask_attention(q, k, v, idx, causal=True)

    static_step = paddle.jit.to_static(step, full_graph=True)
    data = [rng.standard_normal((1, 130, 2, 16)).astype(np.float32) for _ in range(3)]
    results = []
    for fn in (step, static_step):
        q, k, v = (paddle.to_tensor(x) for x in data)
        for t in (q, k, v):
            t.stop_gradient = False
        out = fn(q, k, v, idx)
        out.sum().backward()
        results.append([out.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()])
    for eager, static in zip(*results):
        np.testing.assert_allclose(static, eager, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["paddle_flag", "env_yes", "off"])
def test_deterministic_mode_reaches_the_op(monkeypatch, how):
    seen = []
    real = _ops.flashmask_attn

    def spy(*args, **kwargs):
        seen.append(args[-1])
        return real(*args, **kwargs)

    monkeypatch.setattr(_ops, "flashmask_attn", spy)
    monkeypatch.delenv("FLASHMASK_DETERMINISTIC", raising=False)
    if how == "paddle_flag":  # a CPU-only paddle has no cuDNN flags: stand in for a GPU build's
        real_get = paddle.get_flags
        monkeypatch.setattr(paddle, "get_flags", lambda names: {"FLAGS_cudnn_deterministic": True}
                            if names == ["FLAGS_cudnn_deterministic"] else real_get(names))
    elif how == "env_yes":
        monkeypatch.setenv("FLASHMASK_DETERMINISTIC", "yes")
    q = paddle.ones([1, 8, 1, 8])
    flashmask_attention(q, q, q)
    assert seen == [how != "off"]
