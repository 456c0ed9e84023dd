"""The torch binding's contract on CUDA: determinism, strided inputs, stream use, LSE output and
errors naming the argument. Skipped where torch or a CUDA device is missing."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from flashmask_paddle.testing.cases import Case, random_bounds  # noqa: E402
from flashmask_paddle.testing.torch_binding import check, poisoned_outputs  # noqa: E402

from flashmask_paddle.torch import flashmask_attention  # noqa: E402


def _inputs(b=2, sq=1000, sk=1000, hq=8, hk=2, d=128, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, generator=g)
    return q, k, v


def _grads(q, k, v, idx, causal, dout, deterministic):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with poisoned_outputs():
        out = flashmask_attention(q, k, v, idx, causal=causal, deterministic=deterministic)
        out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("how", ["argument", "env"])
def test_deterministic_backward_is_bitwise_reproducible(how, monkeypatch):
    q, k, v = _inputs(seed=1)
    idx = torch.from_numpy(random_bounds(np.random.default_rng(1), (True, 2), 2, 2, 1000, 1000)).cuda()
    dout = torch.randn_like(q)
    if how == "env":
        monkeypatch.setenv("FLASHMASK_DETERMINISTIC", "1")
    flag = how == "argument"
    first = _grads(q, k, v, idx, True, dout, flag)
    second = _grads(q, k, v, idx, True, dout, flag)
    for name, a, b in zip(("out", "dq", "dk", "dv"), first, second):
        assert torch.equal(a, b), f"{name} differs between two deterministic runs"
    assert torch.isfinite(first[1]).all()


def test_non_contiguous_inputs_match_contiguous():
    b, s, h, d = 2, 333, 4, 64
    qkv = torch.randn(b, s, 3, h, d, device="cuda", dtype=torch.bfloat16)
    q, k, v = qkv.unbind(dim=2)  # strided views with the head dim contiguous
    assert not q.is_contiguous()
    idx = torch.from_numpy(random_bounds(np.random.default_rng(2), (False, 2), b, 1, s, s)).cuda()
    strided = flashmask_attention(q, k, v, idx, causal=False)
    packed = flashmask_attention(q.contiguous(), k.contiguous(), v.contiguous(), idx, causal=False)
    assert torch.equal(strided, packed)
    transposed = flashmask_attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, idx, causal=False)
    assert torch.equal(transposed, packed)


def test_runs_on_the_current_stream():
    q, k, v = _inputs(b=1, sq=512, sk=512, hq=4, hk=4)
    ref = flashmask_attention(q, k, v, causal=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = flashmask_attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(out, ref)


def test_returns_lse_of_the_right_shape():
    q, k, v = _inputs(b=2, sq=77, sk=99, hq=4, hk=2, d=64)
    out, lse = flashmask_attention(q, k, v, causal=True, return_softmax_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (2, 4, 77) and lse.dtype == torch.float32


def test_fp16_matches_reference_with_gqa_and_per_head_masks():
    rng = np.random.default_rng(9)
    check(Case(batch=2, seqlen_q=250, seqlen_k=250, heads_q=6, heads_k=3, head_dim=128, dtype="fp16",
               causal=False, indices=random_bounds(rng, (False, 4), 2, 6, 250, 250), seed=9))


@pytest.mark.parametrize("bad, error, words", [
    ("float32", TypeError, "query dtype"),
    ("int64 indices", (TypeError, ValueError), "startend_row_indices"),
    ("bound > Sq", ValueError, "startend_row_indices"),
    ("C=4 causal", ValueError, "startend_row_indices"),
    ("heads", ValueError, "head"),
    ("cpu mask", ValueError, "startend_row_indices"),
    ("head_dim 100", ValueError, "head_dim"),  # not a multiple of 8
    ("head_dim 264", ValueError, "head_dim"),  # past 256
    ("mask slices", ValueError, "mask heads"),  # batch * mask heads past the grid's 65535
])
def test_bad_inputs_raise_naming_the_argument(bad, error, words):
    q, k, v = _inputs(b=1, sq=64, sk=64, hq=4, hk=2, d=64)
    idx = torch.full((1, 1, 64, 1), 64, dtype=torch.int32, device="cuda")
    causal = True
    if bad == "float32":
        q, k, v = q.float(), k.float(), v.float()
    elif bad == "int64 indices":
        idx = idx.long()
    elif bad == "bound > Sq":
        idx[0, 0, 5, 0] = 65
    elif bad == "C=4 causal":
        idx = torch.full((1, 1, 64, 4), 64, dtype=torch.int32, device="cuda")
    elif bad == "heads":
        k, v = k[:, :, :1].expand(1, 64, 3, 64), v[:, :, :1].expand(1, 64, 3, 64)
    elif bad == "cpu mask":
        idx = idx.cpu()
    elif bad == "mask slices":
        q, k, v = _inputs(b=32768, sq=8, sk=8, hq=2, hk=2, d=64)
        idx = torch.full((32768, 2, 8, 1), 8, dtype=torch.int32, device="cuda")
    elif bad.startswith("head_dim"):
        d = int(bad.split()[1])
        q, k, v = (torch.randn(*t.shape[:3], d, device="cuda", dtype=t.dtype) for t in (q, k, v))
    with pytest.raises(error) as info:
        flashmask_attention(q, k, v, idx, causal=causal)
    assert words in str(info.value)


@pytest.mark.parametrize("direction, view, flaw", [
    ("fwd", "k", "base"), ("fwd", "out", "stride"), ("bwd", "dout", "base"), ("bwd", "dq", "stride")])
def test_c_abi_refuses_views_the_kernels_cannot_load_naming_them(direction, view, flaw):
    """The binding hands the C ABI only 16-byte aligned views (it copies the others); another caller
    of the C ABI that does not gets an argument error naming the view, not a misaligned load."""
    import ctypes

    from flashmask_paddle.torch import _capi, _ops
    q, k, v = _inputs(b=2, sq=64, sk=64, hq=2, hk=2, d=64)
    out, lse = torch.empty_like(q), torch.empty(2, 2, 64, device="cuda")
    args = _ops._args(q, k, v, out, lse, None, True, 0.125, _ops.Extras())
    if direction == "bwd":
        args.dout, args.dq, args.dk, args.dv = (_ops._view(torch.empty_like(t)) for t in (q, q, k, v))
    good = getattr(args, view)
    bad = (good.data + 2, good.batch_stride, good.row_stride, good.head_stride) if flaw == "base" else \
        (good.data, good.batch_stride, good.row_stride + 4, good.head_stride)
    setattr(args, view, _capi.FmTensor(*bad))
    lib = _capi.load_library()
    query, run = ((lib.fm_fwd_workspace_bytes, lib.fm_fwd_cuda) if direction == "fwd"
                  else (lib.fm_bwd_workspace_bytes, lib.fm_bwd_cuda))
    ws, ws_ptr = _ops._workspace(lib, query, args, q.device)
    with pytest.raises(ValueError, match=rf"\b{view} must have a 16-byte aligned base"):
        _capi.check(lib, run(ctypes.byref(args), ws_ptr, _ops._stream(q.device)), run.__name__)
