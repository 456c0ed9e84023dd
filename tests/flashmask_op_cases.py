"""Random cases for the op tests: inputs, random valid bounds for every (causal, C) form, and the
comparison against the fp64 reference (flashmask_paddle.reference).

Bounds are drawn here directly from the definition of each form (docs/MASKS_AND_API.md), independent of
flashmask_paddle.masks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle

from flashmask_paddle import flashmask_attention
from flashmask_paddle.reference import attention_backward, attention_forward, visible_pairs

# (causal, C); C=0 means startend_row_indices=None.
FORMS = [(True, 0), (False, 0), (True, 1), (True, 2), (False, 2), (False, 4)]

# (B, Sq, Sk, Hq, Hk, Hm, D): lengths that are no multiple of any block, Sq < Sk, Sq > Sk,
# GQA 1:1, 4:1 and all-to-one, every mask-head broadcast.
SHAPES = [
    (1, 17, 17, 2, 2, "hq", 16),
    (2, 65, 129, 4, 1, "1", 32),
    (1, 129, 63, 4, 2, "hk", 80),
    (1, 1, 65, 2, 1, "hq", 16),
    (2, 63, 1, 3, 3, "hk", 24),
]

# Tolerances vs the fp64 reference on the same (rounded) inputs: |a - b| <= tol * max(1, max|b|)
# elementwise + tol * |b|. fp16/bf16 are dominated by rounding the stored result (2^-11, 2^-8).
# Gradients get more room for the rounding of dQ/dK/dV and of P; the rounding of the saved output O
# (read by D = rowsum(dO * O), as in every FlashAttention backward) is given to the reference too.
TOL = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}
TOL_GRAD = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2.5e-2}


@dataclass
class Case:
    batch: int = 1
    seqlen_q: int = 17
    seqlen_k: int = 17
    heads_q: int = 2
    heads_k: int = 1
    head_dim: int = 16
    causal: bool = False
    columns: int = 0          # C; 0: no startend_row_indices
    mask_heads: str = "1"     # "1", "hk" or "hq"
    dtype: str = "float32"
    masked_rows: bool = False  # force a band of fully masked query rows
    softmax_scale: float | None = None

    def hm(self) -> int:
        return {"1": 1, "hk": self.heads_k, "hq": self.heads_q}[self.mask_heads]


def form_shape_cases() -> list:
    """Every (causal, C) form on every SHAPES entry, as pytest params with readable ids."""
    import pytest

    return [pytest.param(Case(b, sq, sk, hq, hk, d, causal=causal, columns=columns, mask_heads=hm),
                         id=f"causal{int(causal)}_C{columns}-B{b}_Sq{sq}_Sk{sk}_Hq{hq}_Hk{hk}_Hm{hm}_D{d}")
            for causal, columns in FORMS for b, sq, sk, hq, hk, hm, d in SHAPES]


def dtype_sweep_case(rng, dtype: str, head_dim: int, mask_heads: str) -> Case:
    """The dtype x head-dim sweeps' case: odd lengths (Sq 67, Sk 131), GQA 4:2, a random form."""
    causal, columns = FORMS[int(rng.integers(len(FORMS)))]
    return Case(1, 67, 131, 4, 2, head_dim, causal=causal, columns=columns, mask_heads=mask_heads, dtype=dtype)


def draw_case(data, max_len: int = 150) -> tuple[Case, np.random.Generator]:
    """A hypothesis-drawn case over shapes, forms, GQA, Hm, dtype, masked rows and scale, plus the
    numpy generator for its values (seeded from hypothesis, so a failure replays)."""
    from hypothesis import strategies as st

    heads_k = data.draw(st.integers(1, 3))
    case = Case(
        batch=data.draw(st.integers(1, 2)),
        seqlen_q=data.draw(st.integers(1, max_len)),
        seqlen_k=data.draw(st.integers(1, max_len)),
        heads_k=heads_k,
        heads_q=heads_k * data.draw(st.sampled_from([1, 2, 4])),
        head_dim=data.draw(st.sampled_from([8, 16, 40, 64])),
        mask_heads=data.draw(st.sampled_from(["1", "hk", "hq"])),
        dtype=data.draw(st.sampled_from(["float32", "float32", "float16", "bfloat16"])),
        masked_rows=data.draw(st.booleans()),
        softmax_scale=data.draw(st.sampled_from([None, 0.3, 1.5])),
    )
    case.causal, case.columns = data.draw(st.sampled_from(FORMS))
    return case, np.random.default_rng(data.draw(st.integers(0, 2**63)))


def random_bounds(rng, case: Case) -> np.ndarray | None:
    """int32 [B, Hm, Sk, C] valid for (causal, C): mixes sorted columns (document-like structure,
    many whole tiles masked/unmasked), unsorted ones (partial tiles), fully masked columns."""
    if case.columns == 0:
        return None
    sq, shape = case.seqlen_q, (case.batch, case.hm(), case.seqlen_k)

    def draw():
        x = rng.integers(0, sq + 1, size=shape)
        if rng.random() < 0.5:
            x = np.sort(x, axis=-1)
        return x

    def interval():
        a, b = draw(), draw()
        return np.minimum(a, b), np.maximum(a, b)

    if case.causal and case.columns == 1:
        cols = [draw()]
    elif case.causal:
        cols = list(interval())
    elif case.columns == 2:
        cols = [draw(), draw()]  # LTS, UTE: any values; UTE > LTS masks the whole column
    else:
        lts, lte = interval()
        uts, ute = interval()
        cols = [lts, lte, uts, ute]
    idx = np.stack(cols, axis=-1)
    if case.seqlen_k > 2:  # a few fully masked columns
        j = rng.integers(0, case.seqlen_k)
        if case.causal or case.columns == 2:
            idx[:, :, j, 0] = 0
            if case.causal and case.columns == 2:
                idx[:, :, j, 1] = sq
        else:
            idx[:, :, j, :2] = (0, sq)
    if case.masked_rows:
        a = int(rng.integers(0, sq))
        b = int(rng.integers(a + 1, sq + 1))
        idx[..., 0] = np.minimum(idx[..., 0], a)  # LTS <= a in every column
        if case.columns == 4 or (case.causal and case.columns == 2):
            idx[..., 1] = np.maximum(idx[..., 1], b)  # LTE >= b: rows [a, b) masked everywhere
    return idx.astype(np.int32)


def make_inputs(rng, case: Case):
    """numpy fp32 q, k, v, dout already rounded to case.dtype (what the op sees), plus indices."""
    def t(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return paddle.to_tensor(x).astype(case.dtype).astype("float32").numpy()

    q = t((case.batch, case.seqlen_q, case.heads_q, case.head_dim))
    k = t((case.batch, case.seqlen_k, case.heads_k, case.head_dim))
    v = t((case.batch, case.seqlen_k, case.heads_k, case.head_dim))
    dout = t((case.batch, case.seqlen_q, case.heads_q, case.head_dim))
    return q, k, v, dout, random_bounds(rng, case)


def run_op(case: Case, q, k, v, dout, idx):
    """Our op through the public API: (out, lse, dq, dk, dv) as fp32 numpy."""
    tq, tk, tv = (paddle.to_tensor(x).astype(case.dtype) for x in (q, k, v))
    for t in (tq, tk, tv):
        t.stop_gradient = False
    tidx = None if idx is None else paddle.to_tensor(idx)
    out, lse = flashmask_attention(tq, tk, tv, tidx, causal=case.causal, return_softmax_lse=True,
                                   softmax_scale=case.softmax_scale)
    assert out.dtype == tq.dtype and lse.dtype == paddle.float32
    out.backward(paddle.to_tensor(dout).astype(case.dtype))
    f32 = lambda x: x.astype("float32").numpy()
    return f32(out), lse.numpy(), f32(tq.grad), f32(tk.grad), f32(tv.grad)


def reference(case: Case, q, k, v, dout, idx, saved_out=None):
    """fp64 out, lse, dq, dk, dv; ``saved_out`` is the op's rounded output, used by the gradients'
    D = rowsum(dO * O) exactly as the kernel uses it (see reference.attention_backward)."""
    vis = visible_pairs(idx, case.causal, case.seqlen_q, case.seqlen_k)
    out, lse = attention_forward(q, k, v, vis, case.softmax_scale)
    dq, dk, dv = attention_backward(q, k, v, vis, dout, case.softmax_scale, out=saved_out)
    return out, lse, dq, dk, dv


def max_error(actual, expected) -> float:
    """Largest |a - b| / max(1, max|b|) (the scale the tolerances are stated in)."""
    return float(np.max(np.abs(actual - expected), initial=0.0) / max(1.0, float(np.max(np.abs(expected), initial=0.0))))


# Worst error seen per dtype and quantity in this session (printed by conftest's terminal summary).
WORST: dict[str, dict[str, float]] = {}


def record(dtype: str, name: str, error: float) -> None:
    per_dtype = WORST.setdefault(dtype, {})
    per_dtype[name] = max(per_dtype.get(name, 0.0), error)


def assert_close(name, actual, expected, tol, case):
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    assert np.isfinite(actual).all(), f"{name}: non-finite values for {case}"
    record(case.dtype, name, max_error(actual, expected))
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    bad = np.abs(actual - expected) > tol * scale + tol * np.abs(expected)
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        raise AssertionError(f"{name} differs at {i}: got {actual[i]}, want {expected[i]} "
                             f"(max error {max_error(actual, expected):.3g}, tol {tol}) for {case}")


def assert_lse(actual, expected, tol, case):
    masked = np.isinf(expected)
    assert (np.isneginf(actual) == masked).all(), f"lse: -inf pattern differs from the reference for {case}"
    assert_close("lse", np.where(masked, 0, actual), np.where(masked, 0, expected), tol, case)


def check_forward(rng, case: Case):
    q, k, v, dout, idx = make_inputs(rng, case)
    got, want = run_op(case, q, k, v, dout, idx), reference(case, q, k, v, dout, idx)
    tol = TOL[case.dtype]
    assert_close("out", got[0], want[0], tol, case)
    assert_lse(got[1], want[1], tol, case)
    return got, want


def check_backward(rng, case: Case):
    q, k, v, dout, idx = make_inputs(rng, case)
    got = run_op(case, q, k, v, dout, idx)
    want = reference(case, q, k, v, dout, idx, saved_out=got[0])
    tol = TOL_GRAD[case.dtype]
    for name, a, b in zip(("dq", "dk", "dv"), got[2:], want[2:]):
        assert_close(name, a, b, tol, case)
    return got, want
