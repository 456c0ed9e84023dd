"""Small forward + backward cases for compute-sanitizer (memcheck, racecheck) on the CUDA kernels.

    compute-sanitizer --tool memcheck python3 tools/device/sanitize_case.py

Short odd lengths, every (causal, C) form, GQA, Sq != Sk, a fully masked stretch, both dtypes and
the deterministic backward: each edge path of the kernels runs at least once. Every case is also
checked against the fp64 reference, so the script proves the kernels ran (exit 1 otherwise).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from flashmask_paddle.testing.cases import FORMS, Case, random_bounds  # noqa: E402
from flashmask_paddle.testing.torch_binding import check  # noqa: E402


def cases():
    rng = np.random.default_rng(1234)
    shapes = [  # (B, Sq, Sk, Hq, Hk, Hm, D, dtype)
        (1, 17, 17, 2, 1, 1, 64, "bf16"),
        (2, 129, 77, 4, 2, 2, 128, "fp16"),
        (1, 70, 200, 2, 2, 2, 256, "bf16"),
    ]
    for i, form in enumerate(FORMS):
        b, sq, sk, hq, hk, hm, d, dt = shapes[i % len(shapes)]
        yield Case(batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_k=hk, head_dim=d, dtype=dt,
                   causal=form[0], indices=random_bounds(rng, form, b, hm, sq, sk), seed=i,
                   deterministic=(i % 2 == 1))
    dead = random_bounds(rng, (False, 4), 1, 1, 150, 150)
    dead[..., 0], dead[..., 1] = 30, 100  # rows [30, 100) see nothing
    yield Case(batch=1, seqlen_q=150, seqlen_k=150, heads_q=2, heads_k=2, head_dim=128, dtype="bf16",
               causal=False, indices=dead, seed=99)


def main() -> int:
    n = 0
    for case in cases():
        t0 = time.time()
        try:
            err = check(case)
        except AssertionError as e:
            print(f"sanitize_case: FAILED {e}", flush=True)
            return 1
        n += 1
        worst = max(err[k] for k in ("out", "dq", "dk", "dv"))
        print(f"sanitize_case: ok {case} worst rel err {worst:.2e} ({time.time() - t0:.1f}s)", flush=True)
    print(f"sanitize_case: {n} cases OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
