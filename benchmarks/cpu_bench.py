"""CPU benchmark: flashmask_paddle's op vs Paddle's CPU ``scaled_dot_product_attention`` with a
dense boolean mask, on a causal-document mask. Not a test.

    python benchmarks/cpu_bench.py [--seqlen 4096 --heads 8 --head-dim 64 --docs 8 --repeats 3]

Both run in this process, on the same fp32 inputs, with the same number of threads (our
OpenMP kernel and Paddle's MKL math both get every core), one after the other with a pause between
(so neither runs next to the other's spinning idle threads); median of ``--repeats`` after a warm-up. The dense mask is an explicit bool
``[1, 1, S, S]`` built once outside the timing: with ``is_causal=True`` Paddle's CPU path ignores
``attn_mask``, and the causal triangle is part of the document mask anyway. Our time
includes argument validation (bound values are read back once per call). Prints a table and
writes ``benchmarks/results/cpu_bench.json`` (command, commit, machine, date, timings, speedup).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import paddle
import paddle.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from flashmask_paddle import _ops, flashmask_attention, masks  # noqa: E402
from flashmask_paddle.bench import provenance  # noqa: E402

# What this benchmark measures: a change here outside a commit marks the result's commit -dirty.
MEASURED = ["paddle_ops/cpu", "paddle_ops/include", "paddle_ops/paddle/flashmask_op.cc",
            "flashmask_paddle/api.py", "flashmask_paddle/_ops.py", "benchmarks/cpu_bench.py"]


def timed(fn, repeats: int) -> list[float]:
    # Let the other implementation's idle OpenMP threads go to sleep first: Paddle's Intel OpenMP
    # spins 200 ms (KMP_BLOCKTIME) after each parallel region, which would steal our cores.
    time.sleep(0.5)
    fn()  # warm-up (allocations, op loading, MKL thread pool)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--docs", type=int, default=8, help="equal-length documents in the causal-document mask")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "cpu_bench.json"))
    args = ap.parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(args.threads)
    b, s, h, d = args.batch, args.seqlen, args.heads, args.head_dim
    doc_lens = [s // args.docs] * args.docs
    doc_lens[-1] += s - sum(doc_lens)
    mask = masks.causal_document(doc_lens)
    indices = np.ascontiguousarray(np.broadcast_to(mask.indices, (b,) + mask.indices.shape[1:]))
    visible = masks.to_dense(mask)  # bool [1, 1, S, S], True = attend
    pairs = int(visible.sum())
    fwd_flops = 4.0 * d * pairs * h * b

    rng = np.random.default_rng(0)
    q, k, v, dout = (paddle.to_tensor(rng.standard_normal((b, s, h, d)).astype("float32")) for _ in range(4))
    idx_t = paddle.to_tensor(indices)
    dense_mask = paddle.to_tensor(visible)

    def ours(backward: bool):
        qq, kk, vv = (t.detach() for t in (q, k, v))
        for t in (qq, kk, vv):
            t.stop_gradient = not backward
        out = flashmask_attention(qq, kk, vv, idx_t, causal=mask.causal)
        if backward:
            out.backward(dout)
        return out

    def dense(backward: bool):
        qq, kk, vv = (t.detach() for t in (q, k, v))
        for t in (qq, kk, vv):
            t.stop_gradient = not backward
        out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=dense_mask, is_causal=False,
                                             training=backward)
        if backward:
            out.backward(dout)
        return out

    max_diff = float(np.abs(ours(False).numpy() - dense(False).numpy()).max())
    rows = []
    for label, backward in (("forward", False), ("forward+backward", True)):
        t_ours = timed(lambda: ours(backward), args.repeats)
        t_dense = timed(lambda: dense(backward), args.repeats)
        m_ours, m_dense = statistics.median(t_ours), statistics.median(t_dense)
        flops = fwd_flops * (3.5 if backward else 1.0)  # bwd = 2.5x fwd (benchmarks/README.md)
        rows.append({
            "pass": label,
            "flashmask_ms": round(m_ours * 1e3, 2), "flashmask_runs_ms": [round(t * 1e3, 2) for t in t_ours],
            "paddle_sdpa_dense_mask_ms": round(m_dense * 1e3, 2),
            "paddle_sdpa_runs_ms": [round(t * 1e3, 2) for t in t_dense],
            "speedup": round(m_dense / m_ours, 2),
            "flashmask_gflops_on_visible_pairs": round(flops / m_ours / 1e9, 2),
        })

    print(f"B={b} S={s} H={h} D={d} fp32, causal document mask ({args.docs} docs), "
          f"visible pairs {pairs} ({pairs / s / s:.1%} of S^2), threads={args.threads}")
    print(f"max |ours - paddle sdpa| on the output: {max_diff:.2e}")
    print(f"{'pass':<18}{'flashmask (ms)':>16}{'paddle sdpa + mask (ms)':>26}{'speedup':>10}")
    for r in rows:
        print(f"{r['pass']:<18}{r['flashmask_ms']:>16.1f}{r['paddle_sdpa_dense_mask_ms']:>26.1f}{r['speedup']:>9.1f}x")

    result = {
        "benchmark": "cpu flashmask op vs paddle scaled_dot_product_attention with dense bool mask",
        **provenance.record("python " + " ".join([os.path.relpath(__file__, ROOT)] + (argv if argv is not None else sys.argv[1:])),
                            provenance.cpu_name(), dirty_paths=MEASURED),
        "machine": {"cpu": provenance.cpu_name(), "cores": os.cpu_count(), "threads": args.threads,
                    "load_average_at_start": os.getloadavg()[0], "platform": platform.platform()},
        "software": {"paddle": paddle.__version__, "python": platform.python_version(),
                     "op_library": _ops.library_path()},
        "config": {"batch": b, "seqlen": s, "heads": h, "head_dim": d, "dtype": "float32",
                   "mask": f"causal_document {doc_lens}", "visible_pairs": pairs,
                   "repeats": args.repeats, "statistic": "median after one warm-up"},
        "max_abs_diff_vs_paddle": max_diff,
        "results": rows,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
