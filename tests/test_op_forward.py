"""The CPU op's forward output and LSE against the fp64 reference, for every mask form, odd
lengths, Sq != Sk, GQA, every Hm, head dims and dtypes; fully masked rows; tile skipping."""
from __future__ import annotations

import numpy as np
import paddle
import pytest
from hypothesis import given, settings, strategies as st

from flashmask_paddle.testing.cases import (FORMS, Case, draw_case, dtype_sweep_case, every_dtype_and_head_dim,
                                            form_shape_cases)
from flashmask_paddle.testing.paddle_op import check_forward, make_inputs, run_op
from flashmask_paddle.testing.tolerance import TOL, reference
from flashmask_paddle import flashmask_attention


@pytest.mark.parametrize("case", form_shape_cases())
def test_forward_matches_reference_for_every_form_and_shape(rng, case):
    check_forward(rng, case)


@every_dtype_and_head_dim
def test_forward_matches_reference_for_every_dtype_and_head_dim(rng, dtype, head_dim):
    check_forward(rng, dtype_sweep_case(rng, dtype, head_dim, mask_heads="hk"))


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_forward_matches_reference_on_random_shapes(data):
    """Hypothesis over shapes, forms, GQA, Hm, dtype, masked rows and softmax_scale."""
    case, rng = draw_case(data)
    check_forward(rng, case)


@pytest.mark.parametrize("causal,columns", [f for f in FORMS if f[1]])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fully_masked_rows_give_zero_output_and_minus_inf_lse(rng, causal, columns, dtype):
    case = Case(2, 97, 70, 2, 1, 32, causal=causal, columns=columns, mask_heads="hq",
                masked_rows=True, dtype=dtype)
    (out, lse, *_), (want_out, want_lse, *_) = check_forward(rng, case)
    rows = np.isneginf(want_lse)  # [B, Hq, Sq]
    assert rows.any(), "the case must contain fully masked rows"
    out_rows = out.transpose(0, 2, 1, 3)[rows]  # [n, D]
    assert (out_rows == 0).all(), "fully masked rows must give exactly 0"
    assert np.isneginf(lse[rows]).all()


def test_causal_with_more_queries_than_keys_masks_leading_rows(rng):
    """Bottom-right alignment: with Sq > Sk, query i sees keys j <= i + Sk - Sq, so the first
    Sq - Sk rows see nothing."""
    case = Case(1, 100, 37, 2, 2, 16, causal=True, columns=0)
    (out, lse, *_), _ = check_forward(rng, case)
    assert np.isneginf(lse[:, :, :63]).all() and np.isfinite(lse[:, :, 63:]).all()
    assert (out[:, :63] == 0).all()


@pytest.mark.parametrize("scale", [0.05, 0.7, 2.0])
def test_softmax_scale_is_honoured(rng, scale):
    for causal, columns in [(True, 2), (False, 0)]:
        check_forward(rng, Case(1, 45, 77, 2, 1, 24, causal=causal, columns=columns, softmax_scale=scale))


def test_default_softmax_scale_is_inverse_sqrt_head_dim(rng):
    case = Case(1, 30, 30, 2, 2, 36, causal=False, columns=0)  # full attention: every row sees 30 keys
    q, k, v, dout, idx = make_inputs(rng, case)
    default = run_op(case, q, k, v, dout, idx)[0]
    case.softmax_scale = 36 ** -0.5
    explicit = run_op(case, q, k, v, dout, idx)[0]
    np.testing.assert_array_equal(default, explicit)
    case.softmax_scale = 0.5  # and a different scale really changes the result
    assert np.abs(run_op(case, q, k, v, dout, idx)[0] - default).max() > 1e-3


def test_fully_masked_tiles_are_skipped(rng):
    """Keys 0..127 are masked for every query (whole 64- or 128-wide key blocks), and hold NaN.
    A kernel that skips fully masked tiles never reads them; one that multiplies masked
    probabilities (0) by NaN values would return NaN."""
    sq, sk, d = 150, 200, 32
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, sq, 2, d), (1, sk, 2, d), (1, sk, 2, d)))
    idx = np.sort(rng.integers(0, sq + 1, size=(1, 1, sk, 1)), axis=2).astype(np.int32)
    idx[:, :, :128] = 0  # LTS = 0: the whole column is masked
    k_nan, v_nan = k.copy(), v.copy()
    k_nan[:, :128] = np.nan
    v_nan[:, :128] = np.nan
    tq, tk, tv = (paddle.to_tensor(x, stop_gradient=False) for x in (q, k_nan, v_nan))
    out = flashmask_attention(tq, tk, tv, paddle.to_tensor(idx), causal=True)
    out.sum().backward()
    case = Case(1, sq, sk, 2, 2, d, causal=True, columns=1)
    want_out, _, want_dq, want_dk, want_dv = reference(case, q, k, v, np.ones_like(q), idx)
    got = out.numpy()
    assert np.isfinite(got).all(), "NaN keys in fully masked tiles leaked into the output"
    np.testing.assert_allclose(got, want_out, atol=TOL["float32"], rtol=TOL["float32"])
    np.testing.assert_allclose(tq.grad.numpy(), want_dq, atol=TOL["float32"], rtol=TOL["float32"])
    np.testing.assert_allclose(tk.grad.numpy()[:, 128:], want_dk[:, 128:], atol=TOL["float32"], rtol=TOL["float32"])
    assert (tv.grad.numpy()[:, :128] == 0).all()


@pytest.mark.parametrize("dtype,values", [
    ("float16", [0.0, -0.0, 2.0 ** -24, -(2.0 ** -20), 6.1e-5, 0.333251953125, -1.0, 1024.5, 65504.0, -65504.0]),
    # (the unnormalised fp32 accumulator, as in FlashAttention, limits |v| to ~FLT_MAX / Sk)
    ("bfloat16", [0.0, 2.0 ** -130, -(2.0 ** -126), 0.333984375, -1.0, 2.0 ** 100, -1.5 * 2.0 ** 99, 1.5]),
])
def test_half_precision_values_survive_the_kernel_exactly(rng, dtype, values):
    """When every key carries the same value vector, out = that vector (softmax weights sum to 1),
    so representable fp16/bf16 values, subnormals and the largest finite ones included, must come
    back bit-exact: checks the kernel's own fp16/bf16 conversions both ways."""
    d = len(values)
    vals = paddle.to_tensor(np.array(values, np.float32)).astype(dtype)
    v = paddle.to_tensor(np.tile(np.array(values, np.float32).reshape(1, 1, 1, d), (1, 37, 1, 1))).astype(dtype)
    q = paddle.to_tensor(rng.standard_normal((1, 29, 1, d)).astype(np.float32)).astype(dtype)
    k = paddle.to_tensor(rng.standard_normal((1, 37, 1, d)).astype(np.float32)).astype(dtype)
    out = flashmask_attention(q, k, v, causal=False)
    got = out.astype("float32").numpy()
    want = np.broadcast_to(vals.astype("float32").numpy(), got.shape)
    np.testing.assert_array_equal(got, want)


def test_non_contiguous_inputs_give_the_same_result_as_contiguous_ones(rng):
    """Transposed ([B, H, S, D] -> [B, S, H, D]) and sliced views are made contiguous by the op."""
    x = paddle.to_tensor(rng.standard_normal((2, 3, 41, 16)).astype(np.float32))
    y = paddle.to_tensor(rng.standard_normal((2, 41, 3, 32)).astype(np.float32))
    q, k, v = x.transpose([0, 2, 1, 3]), y[:, :, :, :16], y[:, :, :, 16:]
    assert not q.is_contiguous() and not k.is_contiguous()
    idx = paddle.to_tensor(np.sort(rng.integers(0, 42, (2, 1, 41, 2)), axis=-1).astype(np.int32))
    views = flashmask_attention(q, k, v, idx, causal=True)
    dense = flashmask_attention(q.contiguous(), k.contiguous(), v.contiguous(), idx, causal=True)
    np.testing.assert_array_equal(views.numpy(), dense.numpy())
