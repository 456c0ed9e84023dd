"""Mask plans of the Paddle op (flashmask_paddle/_plans.py, _plan_cache.py) on CPU: which plans a
call builds, when it reuses them and when it builds new ones, and that they reach the op. The plans'
contents are the CUDA kernels' (tests/gpu/test_mask_plans.py runs them through the torch binding);
here a stand-in builder records each build, and the op itself runs on CPU without them."""
from __future__ import annotations

import gc

import numpy as np
import paddle
import pytest

from flashmask_paddle import _ops, _plans, cached_plan_count, clear_mask_plans, flashmask_attention, masks
from flashmask_paddle import prepare_mask_plan
from flashmask_paddle._plan_cache import PlanCache
from tensor_standin import STAMP, StandInTensor as _Tensorish


def _cache(**kwargs) -> PlanCache:
    return PlanCache(STAMP, **kwargs)


def test_cache_builds_once_per_mask_stamp_and_plan_id():
    cache, builds = _cache(), []

    def build(tag):
        return lambda: builds.append(tag) or tag

    mask = _Tensorish()
    assert cache.get_or_build(mask, None, "fwd", build("a")) == "a"
    assert cache.get_or_build(mask, None, "fwd", build("b")) == "a"
    assert cache.get_or_build(mask, None, "bwd", build("c")) == "c"
    assert len(cache) == 2
    mask.version += 1
    assert cache.get_or_build(mask, None, "fwd", build("d")) == "d", "an in-place write rebuilds"
    assert len(cache) == 1, "the old version's plans are dropped"
    mask.pointer += 256
    assert cache.get_or_build(mask, None, "fwd", build("e")) == "e", "new storage rebuilds"
    del mask
    gc.collect()
    assert len(cache) == 0, "a mask's plans go with the mask"
    assert builds == ["a", "c", "d", "e"]


def test_cache_tells_a_new_block_mask_from_a_gone_one_in_its_memory():
    """A new block mask may take the memory of the previous one (version 0 on both): its plans
    must still be new."""
    cache, mask = _cache(), _Tensorish()
    first = _Tensorish(0x2000)
    assert cache.get_or_build(mask, first, "fwd", lambda: "a") == "a"
    del first
    gc.collect()
    second = _Tensorish(0x2000)  # its own storage
    assert cache.get_or_build(mask, second, "fwd", lambda: "b") == "b"
    assert cache.get_or_build(mask, None, "fwd", lambda: "c") == "c"
    second.version += 1
    assert cache.get_or_build(mask, second, "fwd", lambda: "d") == "d", "a block mask's in-place write rebuilds"


def test_cache_serves_a_live_alias_of_a_mask_until_either_is_written():
    """Reentrant recompute re-runs a layer on detached copies of its inputs: same memory, same
    version counter, new objects."""
    cache, mask, block = _cache(), _Tensorish(), _Tensorish(0x2000, (1, 1, 1, 1))
    assert cache.get_or_build(mask, block, "fwd", lambda: "a") == "a"
    assert cache.get_or_build(mask.alias(), block.alias(), "fwd", lambda: "b") == "a"
    assert cache.get_or_build(mask.alias(), None, "fwd", lambda: "c") == "c", "without the block mask: other plans"
    assert cache.get_or_build(mask, block, "fwd", lambda: "d") == "a", "the alias's own entry left the mask's"
    copy = mask.alias()
    copy.version += 1  # written through the copy (the version counter is shared: the mask's moves too)
    mask.version += 1
    assert cache.get_or_build(copy, block, "fwd", lambda: "e") == "e"
    other_layout = _Tensorish(mask.pointer, (1, 1, 2, 8))
    assert cache.get_or_build(other_layout, block, "fwd", lambda: "f") == "f", "same memory, other layout"


def test_cache_keeps_one_entry_per_mask_tensor_as_its_storage_moves():
    """A mask whose storage is swapped without an in-place version bump (torch's ``x.data = y``) is
    a new mask; back at its first memory (refilled meanwhile) it is new again."""
    cache, mask = _cache(), _Tensorish(0x1000)
    assert cache.get_or_build(mask, None, "fwd", lambda: "a") == "a"
    for step, pointer in enumerate((0x2000, 0x3000, 0x1000)):
        mask.pointer = pointer
        assert cache.get_or_build(mask, None, "fwd", lambda step=step: step) == step
    assert len(cache) == 1


def test_cache_does_not_serve_another_wrapper_of_a_live_masks_buffer():
    """torch.from_numpy or DLPack on one buffer again: same address, a storage and version counter
    of its own, so a refill of the buffer between the two wrappers is not seen as a write."""
    cache, mask = _cache(), _Tensorish()
    cache.get_or_build(mask, None, "fwd", lambda: "a")
    assert cache.get_or_build(mask.wrapper(), None, "fwd", lambda: "b") == "b"


def test_cache_finds_the_mask_for_its_copies_after_another_copys_entry_is_gone():
    cache, mask, block = _cache(), _Tensorish(), _Tensorish(0x2000, (1, 1, 1, 1))
    cache.get_or_build(mask, None, "fwd", lambda: "a")
    other = mask.alias()
    cache.get_or_build(other, block, "fwd", lambda: "b")  # another entry at the mask's place
    del other
    gc.collect()
    for _ in range(3):
        assert cache.get_or_build(mask.alias(), None, "fwd", lambda: pytest.fail("rebuilt")) == "a"


def test_cache_does_not_serve_a_new_tensor_in_the_memory_of_one_that_is_gone():
    cache, mask = _cache(), _Tensorish()
    cache.get_or_build(mask, None, "fwd", lambda: "a")
    successor = mask.wrapper()  # the allocator hands the freed memory to a new tensor, version 0
    del mask
    gc.collect()
    assert cache.get_or_build(successor, None, "fwd", lambda: "b") == "b"


def test_cache_does_not_serve_an_alias_of_a_mask_that_moved():
    cache, mask = _cache(), _Tensorish()
    cache.get_or_build(mask, None, "fwd", lambda: "a")
    left_behind = mask.alias()
    mask.pointer += 4096  # the mask's storage was replaced; its old memory may hold anything
    assert cache.get_or_build(left_behind, None, "fwd", lambda: "b") == "b"


def test_cache_forgets_one_mask_or_block_mask_on_request():
    cache = _cache()
    one, two, block = _Tensorish(0x1000), _Tensorish(0x2000), _Tensorish(0x3000)
    cache.get_or_build(one, None, "fwd", lambda: 1)
    cache.get_or_build(two, block, "fwd", lambda: 2)
    cache.clear(one)
    assert len(cache) == 1
    cache.clear(block)
    assert len(cache) == 0
    cache.get_or_build(one, None, "fwd", lambda: 1)
    one.pointer = 0x4000  # moved since: its old plans are still its own to drop
    cache.clear(one)
    assert len(cache) == 0


def test_cache_keeps_the_last_maskless_plans():
    cache = _cache(maskless_kept=3)
    for i in range(5):
        cache.get_or_build(None, None, i, lambda i=i: i)
    assert len(cache) == 3
    cache.get_or_build(None, None, 2, lambda: pytest.fail("plan 2 should still be cached"))
    cache.get_or_build(None, None, 5, lambda: 5)  # evicts the least recently used, plan 3
    built = []
    cache.get_or_build(None, None, 3, lambda: built.append(3) or 3)
    assert built == [3]


@pytest.fixture
def recorded(monkeypatch):
    """Plans on for CPU tensors, built by a stand-in that records each build; records the plans
    each op call was handed (the CPU op then runs without them)."""
    builds, handed = [], []

    def build_plan(q, k, v, indices, block_mask, causal, dropout, deterministic, backward):
        assert paddle.in_dynamic_mode() and isinstance(q, paddle.Tensor), "a plan built from a static graph"
        builds.append(("bwd" if backward else "fwd", None if indices is None else id(indices)))
        return paddle.zeros([256 + len(builds)], dtype="uint8")

    real_attn = _ops.flashmask_attn

    def attn(*args, fwd_plan=None, bwd_plan=None):
        handed.append((fwd_plan, bwd_plan))
        return real_attn(*args)

    monkeypatch.setattr(_plans, "plans_enabled", lambda q: paddle.in_dynamic_mode())
    monkeypatch.setattr(_plans, "_device_and_stream", lambda q: (0, 0))
    monkeypatch.setattr(_ops, "build_plan", build_plan)
    monkeypatch.setattr(_ops, "flashmask_attn", attn)
    clear_mask_plans()
    yield builds, handed
    clear_mask_plans()


def _qkv(seed, s=96, grad=True):
    rng = np.random.default_rng(seed)
    out = [paddle.to_tensor(rng.standard_normal((1, s, 2, 16)).astype(np.float32)) for _ in range(3)]
    for t in out:
        t.stop_gradient = not grad
    return out


def _doc_mask(lengths=(40, 30, 26)):
    return paddle.to_tensor(masks.causal_document(list(lengths))[0])


def test_layers_with_one_mask_share_its_plans_forward_and_backward(recorded):
    builds, handed = recorded
    idx = _doc_mask()
    for layer in range(4):
        q, k, v = _qkv(layer)
        flashmask_attention(q, k, v, idx, causal=True).sum().backward()
        assert q.grad is not None
    assert sorted(b[0] for b in builds) == ["bwd", "fwd"], "one plan per direction for all layers"
    fwd, bwd = handed[0]
    assert fwd is not None and bwd is not None
    assert all(h[0] is fwd and h[1] is bwd for h in handed)
    assert cached_plan_count() == 2


def test_recomputed_layers_share_the_plans_of_their_mask(recorded):
    """Reentrant recompute hands each layer, and its re-run in the backward, a detached copy of the
    mask: the copies find the mask's plans."""
    from paddle.distributed.fleet.utils import recompute

    builds, handed = recorded
    idx = _doc_mask()
    hidden = _qkv(0)[0]
    for _ in range(3):
        hidden = recompute(lambda x, mask: flashmask_attention(x, x * 0.5, x * 0.25, mask, causal=True),
                           hidden, idx, use_reentrant=True)
    hidden.sum().backward()
    assert sorted(b[0] for b in builds) == ["bwd", "fwd"], "one plan per direction for every layer and re-run"
    assert len(handed) == 6 and len({id(h[0]) for h in handed}) == 1


def test_no_backward_plan_without_gradients(recorded):
    builds, handed = recorded
    idx = _doc_mask()
    q, k, v = _qkv(0, grad=False)
    flashmask_attention(q, k, v, idx, causal=True)
    with paddle.no_grad():
        q, k, v = _qkv(1)
        flashmask_attention(q, k, v, idx, causal=True)
    assert [b[0] for b in builds] == ["fwd"]
    assert all(h[1] is None for h in handed)


def test_a_new_mask_version_shape_or_setting_gets_new_plans(recorded, monkeypatch):
    builds, _ = recorded
    idx = _doc_mask()
    q, k, v = _qkv(0, grad=False)
    flashmask_attention(q, k, v, idx, causal=True)
    idx[0, 0, 0, 0] = 39  # an in-place write: a new version of the mask
    flashmask_attention(q, k, v, idx, causal=True)
    assert len(builds) == 2
    flashmask_attention(q, k, v, _doc_mask((50, 46)), causal=True)  # another mask tensor
    assert len(builds) == 3
    flashmask_attention(q, k, v, idx, causal=True, dropout=0.1)
    assert len(builds) == 4, "dropout changes the backward's tile shape, so it keys the plan"
    monkeypatch.setenv("FLASHMASK_SM90_PAYLOAD_TILES", "2")  # a kernel switch: another layout
    flashmask_attention(q, k, v, idx, causal=True)
    assert len(builds) == 5
    q2, k2, v2 = _qkv(1, s=80, grad=False)
    flashmask_attention(q2, k2, v2, paddle.to_tensor(masks.causal_document([40, 40])[0]), causal=True)
    assert len(builds) == 6
    flashmask_attention(q, k, v, idx, causal=True)  # as two calls ago: cached
    assert len(builds) == 6


def test_plans_go_with_their_mask(recorded):
    builds, _ = recorded
    q, k, v = _qkv(0)
    idx = _doc_mask()
    flashmask_attention(q, k, v, idx, causal=True)
    assert cached_plan_count() == 2
    del idx
    gc.collect()
    assert cached_plan_count() == 0


def test_calls_without_a_mask_and_window_calls_reuse_plans(recorded):
    builds, _ = recorded
    for seed in range(3):
        q, k, v = _qkv(seed, grad=False)
        flashmask_attention(q, k, v, causal=True)
        flashmask_attention(q, k, v, window_size=16, causal=True)
    assert [b[0] for b in builds] == ["fwd", "fwd"], "one plan for plain causal, one for the window"
    assert builds[0][1] is None and builds[1][1] is not None


def test_prepare_mask_plan_builds_what_calls_then_reuse(recorded):
    builds, handed = recorded
    q, k, v = _qkv(0)
    idx = _doc_mask()
    nbytes = prepare_mask_plan(q, k, v, idx, causal=True)
    assert len(builds) == 2 and nbytes == (256 + 1) + (256 + 2)
    assert prepare_mask_plan(q, k, v, idx, causal=True, backward=False) == 256 + 1
    flashmask_attention(q, k, v, idx, causal=True).sum().backward()
    assert len(builds) == 2
    with pytest.raises(ValueError, match="startend_row_indices"):
        prepare_mask_plan(q, k, v, paddle.full([1, 1, 96, 1], 97, dtype="int32"), causal=True)


def test_no_plans_on_cpu_or_when_switched_off(monkeypatch):
    q, k, v = _qkv(0)
    assert not _plans.plans_enabled(q)
    assert prepare_mask_plan(q, k, v, _doc_mask(), causal=True) == 0
    assert _plans.plans_for(q, k, v, None, None, True, 0.0, False, True) == (None, None)


def test_the_ops_refuse_plans_for_cpu_tensors():
    q, k, v = _qkv(0)
    idx = _doc_mask()
    plan = paddle.zeros([256], dtype="uint8")
    with pytest.raises(Exception, match="mask plans are built for GPU tensors only"):
        _ops.flashmask_attn(q, k, v, idx, None, None, True, 0.25, fwd_plan=plan)
    with pytest.raises(Exception, match="mask plans are for GPU tensors"):
        _ops.build_plan(q, k, v, idx, None, True, 0.0, False, False)


def test_clear_mask_plans_after_a_refill_that_paddle_does_not_version(recorded):
    """Paddle 3.3's copy_ leaves a tensor's version (and storage) as they were: the call cannot
    tell the refill, and clear_mask_plans(mask) makes it build and check again."""
    builds, _ = recorded
    q, k, v = _qkv(0, grad=False)
    idx = _doc_mask()
    flashmask_attention(q, k, v, idx, causal=True)
    idx.copy_(_doc_mask((20, 76)), False)
    flashmask_attention(q, k, v, idx, causal=True)
    assert len(builds) == 1, "copy_ bumps the version now: the limitation in the docs can go"
    clear_mask_plans(idx)
    flashmask_attention(q, k, v, idx, causal=True)
    assert len(builds) == 2
    idx.copy_(paddle.full([1, 1, 96, 1], 97, dtype="int32"), False)  # out of [0, Sq]
    clear_mask_plans(idx)
    with pytest.raises(ValueError, match="startend_row_indices"):
        flashmask_attention(q, k, v, idx, causal=True)


@pytest.mark.parametrize("min_graph_size", [0, 10])
def test_to_static_with_sot_matches_eager(recorded, min_graph_size):
    """paddle.jit.to_static's default (SOT) runs the function as written: into a static graph
    (no plans then: the stand-in builder asserts eager tensors), or eagerly where SOT leaves a
    graph this small to dygraph."""
    from paddle.jit.sot.utils import min_graph_size_guard

    idx = _doc_mask()

    def layer(q, k, v, idx):
        return flashmask_attention(q, k, v, idx, causal=True) * 2.0

    q, k, v = _qkv(3)
    with min_graph_size_guard(min_graph_size):
        static = paddle.jit.to_static(layer)
        out = static(q, k, v, idx)
    out.sum().backward()
    grads = [t.grad.numpy() for t in (q, k, v)]
    q2, k2, v2 = [paddle.to_tensor(t.numpy(), stop_gradient=False) for t in (q, k, v)]
    eager = layer(q2, k2, v2, idx)
    eager.sum().backward()
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6, atol=1e-6)
    for got, want in zip(grads, (q2.grad, k2.grad, v2.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
