"""The torch binding's block_mask, dropout and value head dim (Dv != D), on CPU tensors (the CPU
kernels through the C ABI) and on CUDA where a GPU is present, against the fp64 reference; and the
clear errors for what the CUDA kernels do not take. Needs torch only."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flashmask_paddle.testing.cases import random_bounds as fuzz_bounds  # noqa: E402
from flashmask_paddle.testing.tolerance import compare, failures  # noqa: E402

from flashmask_paddle import reference  # noqa: E402
from flashmask_paddle.torch import flashmask_attention  # noqa: E402

SEED = int(os.environ.get("FLASHMASK_TEST_SEED") or random.randrange(1 << 30))
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _inputs(rng, b, sq, sk, hq, hk, d, dv, dtype, device):
    def t(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype).to(device)
    return t(b, sq, hq, d), t(b, sk, hk, d), t(b, sk, hk, dv), t(b, sq, hq, dv)


def _run(q, k, v, dout, idx, **kwargs):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out, lse = flashmask_attention(q, k, v, idx, return_softmax_lse=True, **kwargs)
    out.backward(dout)
    return tuple(t.detach().double().cpu().numpy() for t in (out, lse, q.grad, k.grad, v.grad))


def _reference(q, k, v, dout, visible, saved_out, dropout_scale=None):
    q64, k64, v64, do64 = (t.double().cpu().numpy() for t in (q, k, v, dout))
    out, lse = reference.attention_forward(q64, k64, v64, visible, dropout_scale=dropout_scale)
    grads = reference.attention_backward(q64, k64, v64, visible, do64, out=saved_out, dropout_scale=dropout_scale)
    return (out, lse) + grads


def _block_visible(bm, sq, sk):
    return np.repeat(np.repeat(bm.astype(bool), 128, axis=2), 128, axis=3)[:, :, :sq, :sk]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", [(True, 1), (True, 2), (False, 2), (False, 4)])
def test_block_mask_matches_reference(device, form):
    rng = np.random.default_rng(SEED)
    b, sq, sk, hq, hk, d = 2, 300, 270, 4, 2, 64 if device == "cuda" else 32
    dtype = torch.bfloat16
    q, k, v, dout = _inputs(rng, b, sq, sk, hq, hk, d, d, dtype, device)
    idx = fuzz_bounds(rng, form, b, hk, sq, sk)
    bm = (rng.random((b, hk, 3, 3)) < 0.6).astype(np.int32)
    bm[:, :, 1, :] = 0  # fully masked query rows
    got = _run(q, k, v, dout, torch.from_numpy(idx).to(device), causal=form[0],
               block_mask=torch.from_numpy(bm).to(device))
    visible = reference.visible_pairs(idx, form[0], sq, sk) & _block_visible(bm, sq, sk)
    bad = failures(compare(got, _reference(q, k, v, dout, visible, got[0])))
    assert not bad, f"{device} form={form} seed={SEED}: {bad}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("path", ["sm80", "sm90"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("deterministic", [False, True])
def test_block_mask_on_every_cuda_path(monkeypatch, path, head_dim, deterministic):
    """Every CUDA tile walk (forward block lists, portable dK/dV and dQ kernels, Hopper backward)
    skips the masked blocks; FLASHMASK_FORCE_PATH=sm90 needs an sm_90 device."""
    if path == "sm90" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper path needs compute capability 9.0")
    monkeypatch.setenv("FLASHMASK_FORCE_PATH", path)
    rng = np.random.default_rng(SEED + head_dim)
    b, sq, sk, hq, hk = 1, 520, 390, 4, 2
    q, k, v, dout = _inputs(rng, b, sq, sk, hq, hk, head_dim, head_dim, torch.bfloat16, "cuda")
    form = (False, 4)
    idx = fuzz_bounds(rng, form, b, hq, sq, sk)
    bm = (rng.random((b, hq, 5, 4)) < 0.5).astype(np.int32)
    bm[:, :, 2, :] = 0
    got = _run(q, k, v, dout, torch.from_numpy(idx).cuda(), causal=False,
               block_mask=torch.from_numpy(bm).cuda(), deterministic=deterministic)
    visible = reference.visible_pairs(idx, False, sq, sk) & _block_visible(bm, sq, sk)
    bad = failures(compare(got, _reference(q, k, v, dout, visible, got[0])))
    assert not bad, f"{path} D={head_dim} deterministic={deterministic} seed={SEED}: {bad}"


def test_dropout_and_value_head_dim_on_cpu_match_reference():
    from philox_numpy import keep_mask

    rng = np.random.default_rng(SEED)
    b, sq, sk, hq, hk, d, dv, p = 1, 65, 90, 4, 2, 48, 32, 0.3
    q, k, v, dout = _inputs(rng, b, sq, sk, hq, hk, d, dv, torch.float32, "cpu")
    seed, offset = (int(x) for x in rng.integers(0, 2 ** 62, 2))
    got = _run(q, k, v, dout, None, causal=True, dropout=p,
               fixed_seed_offset=torch.tensor([seed, offset], dtype=torch.int64))
    pf = float(np.float32(p))
    z = keep_mask(seed, offset, b, hq, sq, sk, pf) / (1 - pf)
    visible = reference.visible_pairs(None, True, sq, sk)
    bad = failures(compare(got, _reference(q, k, v, dout, visible, got[0], dropout_scale=z)))
    assert not bad, f"seed={SEED}: {bad}"


def test_a_reused_mask_tensor_is_checked_once(monkeypatch):
    from flashmask_paddle import _validate

    calls = []
    real = _validate.check_indices_values
    monkeypatch.setattr(_validate, "check_indices_values", lambda *a: calls.append(1) or real(*a))
    q = torch.randn(1, 40, 2, 16)
    idx = torch.full((1, 1, 40, 1), 40, dtype=torch.int32)
    for _ in range(3):
        flashmask_attention(q, q, q, idx, causal=True)
    assert calls == [1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("path", ["sm80", "sm90"])
def test_cuda_dropout_keeps_exactly_the_philox_pattern(monkeypatch, path):
    """q = 0 (uniform weights) and one-hot values (Dv = Sk = 64): out[b, i, h, j] = Z_bhij / Sk spells
    out the keep mask element by element, the same elements as the CPU kernels' (one Philox stream,
    flashmask/dropout.h), on each path forced (sm90 forced off Hopper runs the portable kernels)."""
    from philox_numpy import keep_mask

    monkeypatch.setenv("FLASHMASK_FORCE_PATH", path)
    rng = np.random.default_rng(SEED)
    b, sq, sk, hq, hk, p = 2, 70, 64, 4, 2, 0.3
    seed, offset = (int(x) for x in rng.integers(0, 2 ** 62, 2))
    q = torch.zeros(b, sq, hq, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hk, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.eye(sk, device="cuda", dtype=torch.bfloat16)[None, :, None, :].expand(b, sk, hk, sk).contiguous()
    out = flashmask_attention(q, k, v, dropout=p, fixed_seed_offset=torch.tensor([seed, offset], dtype=torch.int64))
    got = out.float().cpu().numpy().transpose(0, 2, 1, 3)  # [B, Hq, Sq, Sk]
    pf = float(np.float32(p))
    keep = keep_mask(seed, offset, b, hq, sq, sk, pf)
    np.testing.assert_array_equal(got > 0, keep)
    np.testing.assert_allclose(got[keep], 1.0 / ((1 - pf) * sk), rtol=1e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("path,payload_tiles", [("sm80", "8"), ("sm90", "8"), ("sm90", "0")])
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic_dq", "deterministic"])
@pytest.mark.parametrize("dims", [(64, 64), (128, 128), (256, 256), (96, 40)], ids=lambda d: f"D{d[0]}-Dv{d[1]}")
@pytest.mark.parametrize("form", [(True, 1), (False, 4)])
@pytest.mark.parametrize("sk", [211, 181])
def test_cuda_dropout_matches_reference_with_the_same_keep_mask(form, sk, dims, deterministic, path, payload_tiles,
                                                               monkeypatch):
    """Forward and gradients with dropout on CUDA against fp64 with the same keep mask (Z = keep /
    (1 - p)): every head-dim instantiation and a padded one with Dv != D, GQA, Sq != Sk, masks with
    partial tiles, both dQ modes, each path forced (deterministic dropout backward: portable); the
    Hopper backward's partial tiles masked from the plan's payloads and, with 0 slots, from the
    payload writer's. Sk = 181: causal key block 128 first shows at row 104, so the Hopper
    backward's tiles from each key block's first row (96) are not the fixed ones (64); the keep bits
    must follow the absolute row."""
    from philox_numpy import keep_mask

    monkeypatch.setenv("FLASHMASK_FORCE_PATH", path)
    monkeypatch.setenv("FLASHMASK_SM90_BWD_PAYLOAD_TILES", payload_tiles)

    rng = np.random.default_rng(SEED + dims[0] + dims[1])
    (d, dv), (b, sq, hq, hk, p) = dims, (2, 157, 4, 2, 0.2)
    q, k, v, dout = _inputs(rng, b, sq, sk, hq, hk, d, dv, torch.bfloat16, "cuda")
    idx = fuzz_bounds(rng, form, b, hk, sq, sk)
    seed, offset = (int(x) for x in rng.integers(0, 2 ** 62, 2))
    got = _run(q, k, v, dout, torch.from_numpy(idx).cuda(), causal=form[0], dropout=p, deterministic=deterministic,
               fixed_seed_offset=torch.tensor([seed, offset], dtype=torch.int64))
    pf = float(np.float32(p))
    z = keep_mask(seed, offset, b, hq, sq, sk, pf) / (1 - pf)
    visible = reference.visible_pairs(idx, form[0], sq, sk)
    bad = failures(compare(got, _reference(q, k, v, dout, visible, got[0], dropout_scale=z)))
    assert not bad, (f"form={form} sk={sk} dims={dims} deterministic={deterministic} path={path} "
                     f"payload_tiles={payload_tiles} seed={SEED}: {bad}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kwargs,shapes,words", [
    ({}, (100, 100), ["head_dim", "(100, 100)", "multiple of 8"]),
    ({}, (192, 264), ["head_dim", "(192, 264)", "from 32 to 256"]),
])
def test_cuda_refuses_what_its_kernels_lack_with_a_clear_error(kwargs, shapes, words):
    d, dv = shapes
    q, k = torch.randn(1, 64, 2, d, device="cuda", dtype=torch.bfloat16), torch.randn(1, 64, 2, d, device="cuda",
                                                                                      dtype=torch.bfloat16)
    v = torch.randn(1, 64, 2, dv, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError) as info:
        flashmask_attention(q, k, v, **kwargs)
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"
