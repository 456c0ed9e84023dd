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
