"""A case through the torch binding (``flashmask_paddle.torch``) with NaN-poisoned outputs,
checked norm-wise against the fp64 reference. Needs torch (CUDA or CPU tensors)."""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..torch import flashmask_attention, set_output_allocator
from .cases import Case
from .tolerance import QUANTITIES, compare, failures, reference, reference_magnitudes


def poisoned(shape, dtype, device):
    """Allocator for outputs/workspace: NaN floats, 0xFF bytes, so unwritten elements show."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, 0xFF if dtype == torch.uint8 else -1, dtype=dtype, device=device)


@contextlib.contextmanager
def poisoned_outputs():
    old = set_output_allocator(poisoned)
    try:
        yield
    finally:
        set_output_allocator(old)


def make_inputs(case: Case, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(case.seed)
    dt = getattr(torch, case.dtype)

    def rnd(s, h, d):
        return torch.randn(case.batch, s, h, d, generator=g).to(dt).to(device)

    q, k = rnd(case.seqlen_q, case.heads_q, case.head_dim), rnd(case.seqlen_k, case.heads_k, case.head_dim)
    v, dout = rnd(case.seqlen_k, case.heads_k, case.dv()), rnd(case.seqlen_q, case.heads_q, case.dv())
    return q, k, v, dout


def run_flashmask(case: Case, q, k, v, dout, indices, device="cuda", after_forward=None, **kwargs):
    """One forward + backward through the public binding with poisoned outputs; ``kwargs`` go to
    flashmask_attention too (e.g. dropout, fixed_seed_offset). ``indices``: numpy (copied to a new
    tensor), or a tensor used as it is (so that the mask plan cached for it serves the call).
    ``after_forward()`` runs between the two passes. Returns float64 numpy (out, lse, dq, dk, dv)."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    idx = indices
    if isinstance(indices, np.ndarray):
        idx = torch.from_numpy(np.ascontiguousarray(indices)).to(device)
    with poisoned_outputs():
        out, lse = flashmask_attention(q, k, v, idx, causal=case.causal, softmax_scale=case.softmax_scale,
                                       return_softmax_lse=True, deterministic=case.deterministic, **kwargs)
        if after_forward is not None:
            after_forward()
        out.backward(dout)
    if device == "cuda":
        torch.cuda.synchronize()
    return tuple(t.detach().double().cpu().numpy() for t in (out, lse, q.grad, k.grad, v.grad))


def check(case: Case, device="cuda") -> dict:
    """Runs `case` and returns its error dict; raises AssertionError naming what is off."""
    indices = case.bounds(np.random.default_rng(case.seed))
    q, k, v, dout = make_inputs(case, device)
    return check_run(case, q, k, v, dout, indices, device)


def check_run(case: Case, q, k, v, dout, indices, device="cuda", **kwargs) -> dict:
    """`check` on given inputs; ``indices`` as for run_flashmask (numpy, a tensor or None);
    ``kwargs`` go to check_result."""
    return check_result(case, run_flashmask(case, q, k, v, dout, indices, device), q, k, v, dout, indices,
                        **kwargs)


def check_result(case: Case, got, q, k, v, dout, indices, fields=QUANTITIES) -> dict:
    """Compares ``got`` (float64 numpy out, lse, dq, dk, dv) with the fp64 reference of ``case`` on
    these inputs and ``indices`` (numpy, a tensor or None); raises AssertionError naming what of
    ``fields`` is off."""
    if isinstance(indices, torch.Tensor):
        indices = indices.cpu().numpy()
    q64, k64, v64, do64 = (t.double().cpu().numpy() for t in (q, k, v, dout))
    err = compare(got, reference(case, q64, k64, v64, do64, indices, saved_out=got[0]),
                  reference_magnitudes(case, q64, k64, v64, do64, indices, saved_out=got[0]))
    bad = failures(err, fields)
    assert not bad, f"{case}: {', '.join(bad)}"
    return err


def check_documents_one_by_one(docs, *, heads_q, heads_k, head_dim, dtype, seed, device="cuda",
                               sample: int = 4) -> dict:
    """One causal-document row of ``docs`` (token counts) through the binding, checked against the
    fp64 reference document by document: such a row is each document's causal attention, so rows of
    any length are checked at the cost of their documents (``sample`` of them: the first, the last
    and some between). Every output must be written (NaN-poisoned). Returns the worst errors."""
    from .. import masks

    s = int(sum(docs))
    idx, causal = masks.causal_document(docs)
    case = Case(batch=1, seqlen_q=s, seqlen_k=s, heads_q=heads_q, heads_k=heads_k, head_dim=head_dim,
                dtype=dtype, causal=causal, indices=np.ascontiguousarray(idx), seed=seed)
    q, k, v, dout = make_inputs(case, device)
    got = run_flashmask(case, q, k, v, dout, case.indices, device)
    unwritten = [name for name, t in zip(("out", "dq", "dk", "dv"), (got[0], *got[2:])) if not np.isfinite(t).all()]
    assert not unwritten, f"{case}: {', '.join(unwritten)} not written everywhere"
    starts = np.cumsum([0] + list(docs))
    picked = sorted({round(i * (len(docs) - 1) / max(1, sample - 1)) for i in range(sample)})
    worst: dict = {}
    for d in picked:
        a, b = int(starts[d]), int(starts[d + 1])
        doc = Case(batch=1, seqlen_q=b - a, seqlen_k=b - a, heads_q=heads_q, heads_k=heads_k, head_dim=head_dim,
                   dtype=dtype, causal=True, seed=seed)
        part = tuple(t[:, :, a:b] if i == 1 else t[:, a:b] for i, t in enumerate(got))  # lse is [B, H, S]
        q64, k64, v64, do64 = (t[:, a:b].double().cpu().numpy() for t in (q, k, v, dout))
        err = compare(part, reference(doc, q64, k64, v64, do64, None, saved_out=part[0]),
                      reference_magnitudes(doc, q64, k64, v64, do64, None, saved_out=part[0]))
        bad = failures(err)
        assert not bad, f"{case}, document {d} [{a}, {b}): {', '.join(bad)}"
        worst = {key: max(worst.get(key, 0), err[key]) for key in ("out", "dq", "dk", "dv")}
    return worst
