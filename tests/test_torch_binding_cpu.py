"""The torch binding on CPU tensors (the CPU kernels through the same C ABI): proves the binding's
argument passing, allocation and autograd wiring without a GPU. Needs torch only (skipped in CI,
where torch is not installed)."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flashmask_paddle.testing.cases import FORMS, Case, form_id, random_bounds  # noqa: E402
from flashmask_paddle.testing.torch_binding import check  # noqa: E402

SEED = int(os.environ.get("FLASHMASK_TEST_SEED") or random.randrange(1 << 30))


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("form", FORMS, ids=form_id)
def test_cpu_binding_matches_reference(form, dtype):
    rng = np.random.default_rng(SEED)
    sq, sk = 37, 53
    check(Case(batch=2, seqlen_q=sq, seqlen_k=sk, heads_q=4, heads_k=2, head_dim=32, dtype=dtype,
               causal=form[0], indices=random_bounds(rng, form, 2, 2, sq, sk), seed=SEED), device="cpu")


def test_cpu_binding_returns_lse_shape_and_dtype():
    from flashmask_paddle.torch import flashmask_attention

    q, k, v = (torch.randn(1, 20, 2, 16, dtype=torch.float32) for _ in range(3))
    out, lse = flashmask_attention(q, k, v, causal=True, return_softmax_lse=True)
    assert out.dtype == torch.float32 and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 20)


def test_reentrant_checkpoint_checks_the_mask_once_and_keeps_the_gradients(monkeypatch):
    """torch's reentrant checkpoint re-runs each layer on detached copies of its inputs, the mask
    too: the copies share its memory and version counter, so its values are checked once; a write
    through a copy is checked again."""
    from torch.utils.checkpoint import checkpoint

    from flashmask_paddle import _validate, masks
    from flashmask_paddle.torch import flashmask_attention

    checks = []
    real_check = _validate.check_indices_values
    monkeypatch.setattr(_validate, "check_indices_values", lambda *a: checks.append(1) or real_check(*a))
    idx = torch.from_numpy(masks.causal_document([40, 37, 23])[0])
    x0 = torch.from_numpy(np.random.default_rng(SEED).standard_normal((1, 100, 2, 16)).astype(np.float32))

    def layer(x, mask):
        return flashmask_attention(x, x * 0.5, x * 0.25, mask, causal=True)

    grads = []
    for recompute in (True, False):
        x = x0.clone().requires_grad_(True)
        hidden = x
        for _ in range(3):
            hidden = checkpoint(layer, hidden, idx, use_reentrant=True) if recompute else layer(hidden, idx)
        hidden.sum().backward()
        grads.append(x.grad)
    assert len(checks) == 1, "the mask or a copy of it was checked again"
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)
    copy = idx.detach()
    copy[0, 0, 3, 0] = 101  # out of [0, Sq]
    with pytest.raises(ValueError, match="startend_row_indices"):
        layer(x0, idx)


def test_a_mask_made_in_inference_mode_is_accepted():
    """Inference tensors have no version counter (reading one raised before): such a mask is
    checked on every call instead of once."""
    from flashmask_paddle import masks
    from flashmask_paddle.torch import flashmask_attention

    with torch.inference_mode():
        idx = torch.from_numpy(masks.causal_document([30, 20])[0]).clone()
    x = torch.randn(1, 50, 2, 16)
    plain = flashmask_attention(x, x, x, torch.from_numpy(masks.causal_document([30, 20])[0]), causal=True)
    for _ in range(2):
        torch.testing.assert_close(flashmask_attention(x, x, x, idx, causal=True), plain, rtol=0, atol=0)


def test_a_mask_view_written_between_the_passes_keeps_the_forwards_mask():
    """A batch-expanded mask (a view the kernels read a copy of) written in place after the
    forward: the backward runs on the forward's copy, as autograd's saved values do."""
    from flashmask_paddle.testing.torch_binding import check_result, make_inputs, run_flashmask

    rng = np.random.default_rng(SEED)
    case = Case(batch=2, seqlen_q=45, seqlen_k=45, heads_q=4, heads_k=2, head_dim=32, dtype="float32",
                causal=True, columns=2, mask_heads="hk", seed=SEED)
    row = torch.from_numpy(case.bounds(rng)[:1])
    idx = row.expand(case.batch, *row.shape[1:])
    first = idx.numpy().copy()
    inputs = make_inputs(case, "cpu")
    got = run_flashmask(case, *inputs, idx, device="cpu",
                        after_forward=lambda: row.copy_(torch.from_numpy(case.bounds(rng)[:1])))
    assert not np.array_equal(first, idx.numpy()), "the write changed nothing"
    check_result(case, got, *inputs, first)


def test_using_library_runs_a_block_and_its_backward_on_another_build(tmp_path, monkeypatch):
    """Two builds at two paths load as two copies in one process; the calls inside a using_library
    block go to its build, and the backward of a forward made there too, though it runs after the
    block (autograd may run it on another thread, which the block does not reach)."""
    import shutil

    from flashmask_paddle.torch import _ops, flashmask_attention, load_library, using_library

    default = load_library()
    other = tmp_path / "other" / "libflashmask.so"
    other.parent.mkdir()
    shutil.copy(default.fm_path, other)
    ran = []
    real_forward, real_backward = _ops.forward, _ops.backward
    monkeypatch.setattr(_ops, "forward", lambda *a: ran.append(("fwd", a[-1].fm_path)) or real_forward(*a))
    monkeypatch.setattr(_ops, "backward", lambda *a: ran.append(("bwd", a[-1].fm_path)) or real_backward(*a))
    q, k, v = (torch.randn(1, 29, 2, 16, dtype=torch.float32, requires_grad=True) for _ in range(3))
    expected = flashmask_attention(q, k, v, causal=True)
    with using_library(other) as lib:
        assert lib is not default and load_library() is lib and lib.fm_path == str(other.resolve())
        out = flashmask_attention(q, k, v, causal=True)
    assert load_library() is default
    grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    expected_grads = torch.autograd.grad(expected, (q, k, v), torch.ones_like(out))
    assert ran == [("fwd", default.fm_path), ("fwd", lib.fm_path), ("bwd", lib.fm_path), ("bwd", default.fm_path)]
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    with pytest.raises(ValueError, match="not a file"):
        with using_library(tmp_path / "missing.so"):
            pass
