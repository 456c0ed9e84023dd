"""The CPU op's dQ, dK, dV (through Paddle autograd) against the fp64 reference: every mask form,
odd lengths, Sq != Sk, GQA reductions, every Hm, head dims, dtypes, fully masked rows."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashmask_paddle.testing.cases import (FORMS, Case, draw_case, dtype_sweep_case, every_dtype_and_head_dim,
                                            form_shape_cases)
from flashmask_paddle.testing.paddle_op import check_backward


@pytest.mark.parametrize("case", form_shape_cases())
def test_gradients_match_reference_for_every_form_and_shape(rng, case):
    check_backward(rng, case)


@every_dtype_and_head_dim
def test_gradients_match_reference_for_every_dtype_and_head_dim(rng, dtype, head_dim):
    check_backward(rng, dtype_sweep_case(rng, dtype, head_dim, mask_heads="hq"))


@pytest.mark.parametrize("heads_q,heads_k", [(4, 4), (4, 1), (8, 2)])
def test_gqa_key_value_gradients_sum_over_the_group(rng, heads_q, heads_k):
    for hm in ("1", "hk", "hq"):
        check_backward(rng, Case(2, 70, 90, heads_q, heads_k, 16, causal=True, columns=2, mask_heads=hm))


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_gradients_match_reference_on_random_shapes(data):
    case, rng = draw_case(data, max_len=140)
    check_backward(rng, case)


@pytest.mark.parametrize("causal,columns", [f for f in FORMS if f[1]])
def test_fully_masked_rows_have_zero_query_gradient(rng, causal, columns):
    case = Case(1, 90, 75, 2, 1, 32, causal=causal, columns=columns, mask_heads="1", masked_rows=True)
    (_, _, dq, dk, dv), (_, want_lse, *_) = check_backward(rng, case)
    rows = np.isneginf(want_lse)
    assert rows.any()
    assert (dq.transpose(0, 2, 1, 3)[rows] == 0).all()
    assert np.isfinite(dk).all() and np.isfinite(dv).all()


def test_query_rows_that_see_no_key_give_zero_gradients_everywhere(rng):
    """All rows masked (causal, LTS = 0 in every column): out 0, grads exactly 0, no NaN."""
    case = Case(1, 33, 40, 2, 1, 16, causal=True, columns=1)
    from flashmask_paddle.testing.paddle_op import make_inputs, run_op

    q, k, v, dout, _ = make_inputs(rng, case)
    out, lse, dq, dk, dv = run_op(case, q, k, v, dout, np.zeros((1, 1, 40, 1), np.int32))
    assert (out == 0).all() and np.isneginf(lse).all()
    assert (dq == 0).all() and (dk == 0).all() and (dv == 0).all()


def test_backward_is_bitwise_deterministic(rng):
    """dK/dV are reduced over GQA groups without atomics and dQ in a separate pass: repeated runs
    (different thread interleavings) must agree bit for bit."""
    from flashmask_paddle.testing.paddle_op import make_inputs, run_op

    case = Case(2, 200, 190, 8, 2, 32, causal=False, columns=4, mask_heads="hq")
    q, k, v, dout, idx = make_inputs(rng, case)
    first = run_op(case, q, k, v, dout, idx)
    for _ in range(2):
        for a, b in zip(first, run_op(case, q, k, v, dout, idx)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fused_dq_mb", ["0", "256"])
def test_both_dq_paths_match_reference(rng, monkeypatch, fused_dq_mb):
    """dQ is accumulated in per-thread buffers when they fit (FLASHMASK_CPU_FUSED_DQ_MB, default
    256) and in a second pass otherwise; both must match the reference."""
    monkeypatch.setenv("FLASHMASK_CPU_FUSED_DQ_MB", fused_dq_mb)
    for causal, columns in FORMS:
        check_backward(rng, Case(2, 131, 77, 4, 2, 24, causal=causal, columns=columns, mask_heads="hk",
                                 masked_rows=columns > 0))
