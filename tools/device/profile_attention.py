"""Per-kernel GPU time of one attention fwd+bwd: ours vs FlexAttention, on e2e_h200's packed rows.

Answers "where does the time go" when a benchmark row disappoints: every CUDA kernel (and memset)
of the call, its count and its total device time, from torch.profiler. Dev tool for the H200:

  FLASHMASK_LIB=... python3 tools/device/profile_attention.py --seqlen 32768 [--impls flashmask flex]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import e2e_h200 as e2e  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=32768)
    ap.add_argument("--impls", nargs="+", default=["flashmask", "flex"])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    shape, plan = e2e.ModelShape(), e2e.RunPlan(batches=1)
    batch = e2e.make_batches(torch, shape, plan, args.seqlen, e2e.load_lengths(plan.dataset, 1),
                             "cuda", torch.bfloat16)[0]
    b, s = batch["seg_id"].shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    qkv = [torch.randn(b, s, shape.heads, shape.head_dim, device="cuda", dtype=torch.bfloat16,
                       generator=gen).requires_grad_() for _ in range(3)]
    dout = torch.randn_like(qkv[0])
    print(f"S={s} B={b} H={shape.heads} D={shape.head_dim} density={batch['density']}")
    for name in args.impls:
        impl = e2e.FlashMaskAttention(torch) if name == "flashmask" else e2e.FlexAttention(torch, True)
        entry = impl.prepare(batch)
        impl.activate(entry)

        def step():
            for t in qkv:
                t.grad = None
            impl(*qkv, entry["mask"]).backward(dout)
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.reps):
                step()
            torch.cuda.synchronize()
        print(f"\n== {name}: per-kernel device time over {args.reps} fwd+bwd calls")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
