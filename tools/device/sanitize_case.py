"""Small forward + backward cases for compute-sanitizer (memcheck, racecheck) on the CUDA kernels.

    compute-sanitizer --tool memcheck python3 tools/device/sanitize_case.py

Short odd lengths, every (causal, C) form, GQA, Sq != Sk, a fully masked stretch, both dtypes, the
deterministic backward, padded head dims with Dv != D, dropout, the backward's mask payloads running
out (one slot per list; none, with dropout) and one row longer than 64K tokens (the forward's tile
order for long rows): each edge path of the kernels runs at least once. Every case is also checked
against the fp64 reference (dropout: with the same Philox keep mask), so the script proves the
kernels ran (exit 1 otherwise).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

# Square index masks take the backward's document-aligned key blocks at every head dim, not only
# where they are the default (D = 128), so that each head dim's code for them runs here.
os.environ.setdefault("FLASHMASK_BWD_DOCUMENT_BLOCKS", "1")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # philox_numpy: the keep mask, independently of the kernels

from flashmask_paddle import masks  # noqa: E402
from flashmask_paddle.testing.cases import FORMS, Case, random_bounds  # noqa: E402
from flashmask_paddle.testing.tolerance import compare, failures, reference  # noqa: E402
from flashmask_paddle.testing.torch_binding import (  # noqa: E402
    check, check_documents_one_by_one, make_inputs, run_flashmask)


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
    # D = 64 over three 128-row steps and three key blocks: the backward's dS exchange buffers and
    # dQ staging reused step after step.
    yield Case(batch=1, seqlen_q=300, seqlen_k=270, heads_q=4, heads_k=2, head_dim=64, dtype="fp16",
               causal=False, indices=random_bounds(rng, FORMS[4], 1, 2, 300, 270), seed=160)
    # Eight query heads per K/V head: packed into the forward's tile rows (16 positions per tile).
    yield Case(batch=2, seqlen_q=101, seqlen_k=90, heads_q=16, heads_k=2, head_dim=128, dtype="bf16", causal=True,
               indices=random_bounds(rng, (True, 2), 2, 2, 101, 90), seed=150)
    # Causal without indices over 8K rows: the 128-row forward's persistent CTAs (sm90::fwd_shape).
    yield Case(batch=1, seqlen_q=8192 + 77, seqlen_k=8192 + 77, heads_q=2, heads_k=1, head_dim=128, dtype="bf16",
               causal=True, seed=170)
    # Head dim 64, causal over 8K rows with four query heads per K / V head (one head per tile:
    # causal attention without indices is not packed): the 192-row forward's persistent CTAs, more
    # tiles (176) than CTAs, so that the Q ring wraps between tiles.
    yield Case(batch=1, seqlen_q=8192 + 77, seqlen_k=8192 + 77, heads_q=4, heads_k=1, head_dim=64, dtype="bf16",
               causal=True, seed=175)
    # Head dim 64, dense: the 192-row forward (three consumer warpgroups), three tiles, Sq != Sk.
    yield Case(batch=1, seqlen_q=450, seqlen_k=333, heads_q=4, heads_k=2, head_dim=64, dtype="bf16",
               causal=False, seed=180)
    # Packed documents: the backward's document-aligned key blocks (at every head dim here, see the
    # top), some ending before the next block's keys (dK / dV stored without TMA), at D = 128 (128
    # keys) and D = 256 (64 keys).
    docs = masks.pack_documents([[140, 30, 200, 9, 133], [300, 190]], 521)
    for i, d in enumerate((128, 256)):
        yield Case(batch=2, seqlen_q=521, seqlen_k=521, heads_q=4, heads_k=2, head_dim=d, dtype="bf16",
                   causal=True, indices=docs.indices, seed=190 + i, deterministic=i == 1)
    for i, (d, dv) in enumerate([(96, 40), (192, 128), (40, 256)]):  # padded columns, Dv != D
        yield Case(batch=1, seqlen_q=131, seqlen_k=75, heads_q=4, heads_k=2, head_dim=d, head_dim_v=dv,
                   dtype="bf16", causal=i % 2 == 0, indices=random_bounds(rng, FORMS[i], 1, 2, 131, 75),
                   seed=200 + i, deterministic=i == 1)


def check_dropout(case: Case, p: float = 0.25, device: str = "cuda") -> dict:
    """`case` with dropout at a fixed seed: forward and gradients against fp64 with the keep mask."""
    import torch
    from philox_numpy import keep_mask

    indices = case.bounds(np.random.default_rng(case.seed))
    q, k, v, dout = make_inputs(case, device)
    seed, offset = 12345 + case.seed, 678
    got = run_flashmask(case, q, k, v, dout, indices, device, dropout=p,
                        fixed_seed_offset=torch.tensor([seed, offset], dtype=torch.int64))
    pf = float(np.float32(p))
    z = keep_mask(seed, offset, case.batch, case.heads_q, case.seqlen_q, case.seqlen_k, pf) / (1 - pf)
    q64, k64, v64, do64 = (t.double().cpu().numpy() for t in (q, k, v, dout))
    err = compare(got, reference(case, q64, k64, v64, do64, indices, saved_out=got[0], dropout_scale=z))
    bad = failures(err)
    assert not bad, f"{case} dropout {p}: {', '.join(bad)}"
    return err


def dropout_cases():
    rng = np.random.default_rng(4321)
    dims_forms = [(128, 128, FORMS[0]), (96, 64, FORMS[4]), (64, 64, FORMS[2]), (256, 256, FORMS[5])]
    for i, (d, dv, form) in enumerate(dims_forms):
        yield Case(batch=2, seqlen_q=97, seqlen_k=143, heads_q=4, heads_k=2, head_dim=d, head_dim_v=dv,
                   dtype="bf16", causal=form[0], indices=random_bounds(rng, form, 2, 2, 97, 143),
                   seed=300 + i, deterministic=i == 1)


def with_payload_slots(run, slots: int):
    """`run` with `slots` backward mask-payload slots per (mask slice, key block) list: with 1,
    partial tiles masked from the plan's payloads and from the payload writer warp's in one CTA;
    with 0, every masked tile from the writer's."""
    def run_with_slots(case: Case) -> dict:
        os.environ["FLASHMASK_SM90_BWD_PAYLOAD_TILES"] = str(slots)
        try:
            return run(case)
        finally:
            del os.environ["FLASHMASK_SM90_BWD_PAYLOAD_TILES"]
    return run_with_slots


def one_payload_slot_cases():
    """Mask heads = Hk, and per-query-head masks with 8 query heads per KV head (the payload writer
    reads every head's list before its walk, behind the consumers)."""
    rng = np.random.default_rng(5678)
    for i, (d, form, heads_q, heads_k, mask_heads) in enumerate(
            [(128, FORMS[3], 4, 2, 2), (64, FORMS[5], 4, 2, 2), (128, FORMS[4], 8, 1, 8)]):
        yield Case(batch=2, seqlen_q=333, seqlen_k=290, heads_q=heads_q, heads_k=heads_k, head_dim=d, dtype="bf16",
                   causal=form[0], indices=random_bounds(rng, form, 2, mask_heads, 333, 290), seed=500 + i,
                   deterministic=i == 1)


def check_long_row(case: Case) -> dict:
    """`case`'s shape as one causal-document row of 700-token documents, longer than 64K tokens:
    the sm90 forward's tile order for rows whose K and V outgrow L2 (fwd_tile_order.cuh), checked
    document by document."""
    docs = [700] * (case.seqlen_q // 700) + ([case.seqlen_q % 700] if case.seqlen_q % 700 else [])
    return check_documents_one_by_one(docs, heads_q=case.heads_q, heads_k=case.heads_k, head_dim=case.head_dim,
                                      dtype=case.dtype, seed=case.seed, sample=2)


def main() -> int:
    n = 0
    long_row = Case(batch=1, seqlen_q=65536 + 333, seqlen_k=65536 + 333, heads_q=2, heads_k=1, head_dim=128,
                    dtype="bf16", causal=True, seed=400)
    runs = ([(check, c) for c in cases()] + [(check_dropout, c) for c in dropout_cases()] +
            [(with_payload_slots(check, 1), c) for c in one_payload_slot_cases()] +
            [(with_payload_slots(check_dropout, 0), next(dropout_cases()))] + [(check_long_row, long_row)])
    for run, case in runs:
        t0 = time.time()
        try:
            err = run(case)
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
