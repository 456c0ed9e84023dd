"""Shared by tests/gpu and tools/device/sanitize_case.py: random inputs, fuzzed bounds, poisoned
outputs, one call of the torch binding (forward + backward) and its comparison with the fp64
reference (flashmask_paddle.reference, numpy on the CPU). Needs torch; not a test module.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from flashmask_paddle import reference
from flashmask_paddle.torch import flashmask_attention, set_output_allocator

# (causal, C) forms of docs/MASKS_AND_API.md, plus C=None (no startend_row_indices).
FORMS = [(False, None), (True, None), (True, 1), (True, 2), (False, 2), (False, 4)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
GPU_DTYPES = ["bf16", "fp16"]
REL_TOL = 1e-2  # ‖x − ref‖ / ‖ref‖ for out, dq, dk, dv (bf16 operands, fp32 accumulation)
LSE_TOL = 2e-2  # max |lse − ref| over finite rows (natural log)


def form_id(form) -> str:
    causal, c = form
    return f"{'causal' if causal else 'full'}-C{c if c else 0}"


def fuzz_bounds(rng: np.random.Generator, form, batch: int, mask_heads: int, seqlen_q: int,
                seqlen_k: int) -> np.ndarray | None:
    """Random valid int32 [B, Hm, Sk, C] bounds for `form`, or None for C=None.

    Values are piecewise constant over random runs of columns with per-column jitter, so that tile
    classification sees fully masked, partial and unmasked tiles; a few bounds sit on 0 and Sq.
    """
    _, c = form
    if c is None:
        return None
    shape = (batch, mask_heads, seqlen_k)

    def draw():
        base = rng.integers(0, seqlen_q + 1, size=shape)
        run = max(1, int(rng.integers(1, 97)))
        blocky = np.repeat(base[..., ::run], run, axis=-1)[..., :seqlen_k]
        jitter = rng.integers(-3, 4, size=shape) * (rng.random(shape) < 0.3)
        vals = np.clip(blocky + jitter, 0, seqlen_q)
        edge = rng.random(shape)
        vals = np.where(edge < 0.05, 0, np.where(edge > 0.95, seqlen_q, vals))
        return vals

    cols = [draw() for _ in range(c)]
    if c == 2 and form[0]:  # causal (LTS, LTE): LTS <= LTE
        cols = [np.minimum(cols[0], cols[1]), np.maximum(cols[0], cols[1])]
    if c == 4:  # (LTS, LTE, UTS, UTE): LTS <= LTE, UTS <= UTE
        cols = [np.minimum(cols[0], cols[1]), np.maximum(cols[0], cols[1]),
                np.minimum(cols[2], cols[3]), np.maximum(cols[2], cols[3])]
    return np.stack(cols, axis=-1).astype(np.int32)


@dataclass
class Case:
    batch: int = 2
    seqlen_q: int = 129
    seqlen_k: int = 129
    heads_q: int = 2
    heads_k: int = 2
    head_dim: int = 128
    dtype: str = "bf16"
    causal: bool = False
    indices: np.ndarray | None = None  # int32 [B, Hm, Sk, C]
    softmax_scale: float | None = None
    deterministic: bool = False
    seed: int = 0


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
    dt = DTYPES[case.dtype]

    def rnd(s, h):
        return torch.randn(case.batch, s, h, case.head_dim, generator=g).to(dt).to(device)

    q, k, v = rnd(case.seqlen_q, case.heads_q), rnd(case.seqlen_k, case.heads_k), rnd(case.seqlen_k, case.heads_k)
    dout = rnd(case.seqlen_q, case.heads_q)
    return q, k, v, dout


def run_flashmask(case: Case, q, k, v, dout, device="cuda"):
    """One forward + backward through the public binding with poisoned outputs.
    Returns float64 numpy (out, lse, dq, dk, dv)."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    idx = None if case.indices is None else torch.from_numpy(case.indices).to(device)
    with poisoned_outputs():
        out, lse = flashmask_attention(q, k, v, idx, causal=case.causal, softmax_scale=case.softmax_scale,
                                       return_softmax_lse=True, deterministic=case.deterministic)
        out.backward(dout)
    if device == "cuda":
        torch.cuda.synchronize()
    return tuple(t.detach().double().cpu().numpy() for t in (out, lse, q.grad, k.grad, v.grad))


def run_reference(case: Case, q, k, v, dout, saved_out=None):
    """fp64 reference on exactly the (rounded) inputs the kernel saw. `saved_out`: the kernel's own
    (rounded) forward output, which its backward reads in D = rowsum(dO * O), as the reference's
    backward then does too (reference.attention_backward's `out`): without it, rows that see one or
    two keys turn the bf16 rounding of O into a ~1e-2 dS error that is not the kernel's (seen on
    the H200: Sq=129 > Sk=17 causal, dq 1.2e-2)."""
    q64, k64, v64, do64 = (t.double().cpu().numpy() for t in (q, k, v, dout))
    visible = reference.visible_pairs(case.indices, case.causal, case.seqlen_q, case.seqlen_k)
    out, lse = reference.attention_forward(q64, k64, v64, visible, case.softmax_scale)
    dq, dk, dv = reference.attention_backward(q64, k64, v64, visible, do64, case.softmax_scale, out=saved_out)
    return out, lse, dq, dk, dv


def rel_err(x: np.ndarray, ref: np.ndarray) -> float:
    """‖x − ref‖ / ‖ref‖ (absolute norm when ref is all zero); inf when x has a NaN/inf."""
    if not np.all(np.isfinite(x)):
        return float("inf")
    denom = np.linalg.norm(ref)
    num = np.linalg.norm(x - ref)
    return float(num / denom) if denom > 0 else float(num)


def compare(got, want) -> dict:
    """Errors of one case: relative errors of out/dq/dk/dv, the LSE error, and exactness checks of
    the fully masked rows/columns (output 0, LSE -inf, gradients 0)."""
    out, lse, dq, dk, dv = got
    r_out, r_lse, r_dq, r_dk, r_dv = want
    err = {"out": rel_err(out, r_out), "dq": rel_err(dq, r_dq), "dk": rel_err(dk, r_dk),
           "dv": rel_err(dv, r_dv)}
    finite = np.isfinite(r_lse)
    if np.isnan(lse).any():
        err["lse"] = float("inf")
    else:
        err["lse"] = float(np.max(np.abs(lse[finite] - r_lse[finite]), initial=0.0))
    dead_rows = ~finite  # [B, Hq, Sq]
    err["lse_dead_not_-inf"] = int(np.sum(dead_rows & ~(np.isneginf(lse))))
    dead_rows_bshd = dead_rows.transpose(0, 2, 1)  # [B, Sq, Hq]
    err["out_dead_nonzero"] = int(np.sum(np.any(out != 0, axis=-1) & dead_rows_bshd))
    err["dq_dead_nonzero"] = int(np.sum(np.any(dq != 0, axis=-1) & dead_rows_bshd))
    dead_cols = np.all(r_dk == 0, axis=-1) & np.all(r_dv == 0, axis=-1)  # keys no query sees
    err["dkdv_dead_nonzero"] = int(np.sum((np.any(dk != 0, axis=-1) | np.any(dv != 0, axis=-1)) & dead_cols))
    return err


def failures(err: dict) -> list[str]:
    bad = [f"{k}={err[k]:.3g}" for k in ("out", "dq", "dk", "dv") if not err[k] <= REL_TOL]
    if not err["lse"] <= LSE_TOL:
        bad.append(f"lse={err['lse']:.3g}")
    bad += [f"{k}={err[k]}" for k in err if k.endswith("nonzero") or k.endswith("-inf") if err[k]]
    return bad


def check(case: Case, device="cuda") -> dict:
    """Runs `case` and returns its error dict; raises AssertionError naming what is off."""
    q, k, v, dout = make_inputs(case, device)
    got = run_flashmask(case, q, k, v, dout, device)
    err = compare(got, run_reference(case, q, k, v, dout, saved_out=got[0]))
    bad = failures(err)
    assert not bad, f"{case_str(case)}: {', '.join(bad)}"
    return err


def case_str(case: Case) -> str:
    c = 0 if case.indices is None else case.indices.shape[-1]
    hm = 0 if case.indices is None else case.indices.shape[1]
    return (f"B={case.batch} Sq={case.seqlen_q} Sk={case.seqlen_k} Hq={case.heads_q} Hk={case.heads_k} "
            f"Hm={hm} D={case.head_dim} {case.dtype} causal={case.causal} C={c} seed={case.seed}")
