"""The fp64 reference of a case and the two ways a result is compared with it.

- Elementwise (the CPU op, whose every element is checked): ``|a - b| <= tol * max(1, max|b|) +
  tol * |b|`` with ``TOL`` for out / LSE and ``TOL_GRAD`` for dQ / dK / dV. fp16 / bf16 are
  dominated by rounding the stored result (2^-11, 2^-8); gradients get more room for the rounding
  of dQ / dK / dV and of P.
- Norm-wise (the CUDA kernels, bf16 / fp16 operands with fp32 accumulation): ``‖x − ref‖ / ‖ref‖ <=
  REL_TOL`` for out, dq, dk, dv, ``max |lse − ref| <= LSE_TOL`` over finite rows, and exactness on
  fully masked rows and columns (output 0, LSE -inf, gradients 0). For dq and dk the denominator
  is at least ``GRAD_FLOOR`` times the norm of the gradient's cancellation-free size
  (``reference.gradient_magnitudes``): where the softmax saturates, ``dP - D`` cancels, the exact
  gradient falls to ~1e-8 of its terms and float32 rounding alone (~1e-7 of them) is 100% of it.

Both give the reference the kernel's own rounded output O for D = rowsum(dO * O), as every
FlashAttention backward reads it (reference.attention_backward's ``out``): without it, rows that
see one or two keys turn the bf16 rounding of O into a ~1e-2 dS error that is not the kernel's.
"""
from __future__ import annotations

import numpy as np

from .. import reference as _reference
from .cases import Case

TOL = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}
TOL_GRAD = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2.5e-2}
REL_TOL = 1e-2
GRAD_FLOOR = 1e-4
LSE_TOL = 2e-2
QUANTITIES = ("out", "lse", "dq", "dk", "dv")


def _fp64_problem(case: Case, q, k, v, dout, idx):
    """The case's inputs in float64 and its visible pairs."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    return q, k, v, dout, _reference.visible_pairs(idx, case.causal, case.seqlen_q, case.seqlen_k)


def reference(case: Case, q, k, v, dout, idx, saved_out=None, dropout_scale=None):
    """fp64 (out, lse, dq, dk, dv) on exactly the (rounded) inputs the kernel saw; with dropout, its
    keep factors ``dropout_scale`` [B, Hq, Sq, Sk] (keep / (1 - p))."""
    q, k, v, dout, vis = _fp64_problem(case, q, k, v, dout, idx)
    out, lse = _reference.attention_forward(q, k, v, vis, case.softmax_scale, dropout_scale=dropout_scale)
    dq, dk, dv = _reference.attention_backward(q, k, v, vis, dout, case.softmax_scale, out=saved_out,
                                               dropout_scale=dropout_scale)
    return out, lse, dq, dk, dv


def reference_magnitudes(case: Case, q, k, v, dout, idx, saved_out=None):
    """fp64 cancellation-free sizes (dq_mag, dk_mag) of the case's gradients (see ``compare``)."""
    q, k, v, dout, vis = _fp64_problem(case, q, k, v, dout, idx)
    return _reference.gradient_magnitudes(q, k, v, vis, dout, case.softmax_scale, out=saved_out)


# ---- elementwise ------------------------------------------------------------------------------

def max_error(actual, expected) -> float:
    """Largest |a - b| / max(1, max|b|) (the scale the elementwise tolerances are stated in)."""
    return float(np.max(np.abs(actual - expected), initial=0.0) / max(1.0, float(np.max(np.abs(expected), initial=0.0))))


# Worst elementwise error seen per dtype and quantity in this process (conftest prints it).
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


def assert_forward_close(got, want, case):
    assert_close("out", got[0], want[0], TOL[case.dtype], case)
    assert_lse(got[1], want[1], TOL[case.dtype], case)


def assert_backward_close(got, want, case):
    for name, a, b in zip(("dq", "dk", "dv"), got[2:], want[2:]):
        assert_close(name, a, b, TOL_GRAD[case.dtype], case)


# ---- norm-wise --------------------------------------------------------------------------------

def rel_err(x: np.ndarray, ref: np.ndarray, floor: float = 0.0) -> float:
    """‖x − ref‖ / max(‖ref‖, floor) (absolute norm when both are zero); inf when x has a NaN/inf."""
    if not np.all(np.isfinite(x)):
        return float("inf")
    denom = max(float(np.linalg.norm(ref)), floor)
    num = np.linalg.norm(x - ref)
    return float(num / denom) if denom > 0 else float(num)


def compare(got, want, magnitudes=None) -> dict:
    """Errors of one case: relative errors of out/dq/dk/dv, the LSE error, and exactness checks of
    the fully masked rows/columns (output 0, LSE -inf, gradients 0). ``magnitudes``: the
    ``(dq_mag, dk_mag)`` of ``reference_magnitudes``, which floor the dq / dk denominators."""
    out, lse, dq, dk, dv = got
    r_out, r_lse, r_dq, r_dk, r_dv = want
    floor_dq, floor_dk = (0.0, 0.0) if magnitudes is None else (
        GRAD_FLOOR * float(np.linalg.norm(m)) for m in magnitudes)
    err = {"out": rel_err(out, r_out), "dq": rel_err(dq, r_dq, floor_dq), "dk": rel_err(dk, r_dk, floor_dk),
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


def failures(err: dict, fields=QUANTITIES) -> list[str]:
    """What of ``compare``'s errors in ``fields`` is over the norm-wise tolerances, and any output
    left unwritten or nonzero where nothing is visible (empty: the case passed)."""
    bad = [f"{k}={err[k]:.3g}" for k in ("out", "dq", "dk", "dv") if k in fields and not err[k] <= REL_TOL]
    if "lse" in fields and not err["lse"] <= LSE_TOL:
        bad.append(f"lse={err['lse']:.3g}")
    bad += [f"{k}={err[k]}" for k in err if k.endswith("nonzero") or k.endswith("-inf") if err[k]]
    return bad
