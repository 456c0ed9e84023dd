"""A case through the Paddle op (``flashmask_paddle.flashmask_attention``), checked elementwise
against the fp64 reference. Needs paddle."""
from __future__ import annotations

import numpy as np
import paddle

from .. import flashmask_attention
from .cases import Case
from .tolerance import assert_backward_close, assert_forward_close, reference


def make_inputs(rng, case: Case):
    """numpy fp32 q, k, v, dout already rounded to case.dtype (what the op sees), plus indices."""
    def t(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return paddle.to_tensor(x).astype(case.dtype).astype("float32").numpy()

    q = t((case.batch, case.seqlen_q, case.heads_q, case.head_dim))
    k = t((case.batch, case.seqlen_k, case.heads_k, case.head_dim))
    v = t((case.batch, case.seqlen_k, case.heads_k, case.dv()))
    dout = t((case.batch, case.seqlen_q, case.heads_q, case.dv()))
    return q, k, v, dout, case.bounds(rng)


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
    f32 = lambda x: x.astype("float32").numpy()  # noqa: E731
    return f32(out), lse.numpy(), f32(tq.grad), f32(tk.grad), f32(tv.grad)


def check_forward(rng, case: Case):
    q, k, v, dout, idx = make_inputs(rng, case)
    got, want = run_op(case, q, k, v, dout, idx), reference(case, q, k, v, dout, idx)
    assert_forward_close(got, want, case)
    return got, want


def check_backward(rng, case: Case):
    q, k, v, dout, idx = make_inputs(rng, case)
    got = run_op(case, q, k, v, dout, idx)
    want = reference(case, q, k, v, dout, idx, saved_out=got[0])
    assert_backward_close(got, want, case)
    return got, want


def check(case: Case) -> None:
    """Forward and backward of one call; inputs drawn from ``case.seed``. Raises AssertionError."""
    rng = np.random.default_rng(case.seed)
    q, k, v, dout, idx = make_inputs(rng, case)
    got = run_op(case, q, k, v, dout, idx)
    assert_forward_close(got, reference(case, q, k, v, dout, idx), case)
    assert_backward_close(got, reference(case, q, k, v, dout, idx, saved_out=got[0]), case)
