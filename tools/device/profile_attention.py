"""Per-kernel GPU time of one attention fwd+bwd on e2e_h200's packed rows: ours and any peer.

Answers "where does the time go" when a benchmark row disappoints: every CUDA kernel (and memset)
of a call, its count and its total device time, from torch.profiler. The rows are those of an
e2e_h200 configuration (real SFT documents, or the long-document lengths), the attention shapes
its model's (heads, kv heads, head dim). Dev tool for the H200:

  FLASHMASK_LIB=... python3 tools/device/profile_attention.py --config 128k_long --impls flashmask fa4varlen

Under Nsight Compute, `--reps 1 --warmup 1` keeps the number of launches small (ncu's
--launch-skip then counts from the first call of each attention).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from e2e_attention import IMPLS, make_attention  # noqa: E402
from e2e_config import CONFIGS, RunPlan  # noqa: E402
from e2e_data import load_lengths, make_batches  # noqa: E402
from e2e_h200 import attention_inputs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="32k_short")
    ap.add_argument("--impls", nargs="+", choices=IMPLS, default=["flashmask", "fa4varlen"])
    ap.add_argument("--warmup", type=int, default=2, help="untimed fwd+bwd calls (compiles, allocates)")
    ap.add_argument("--reps", type=int, default=3, help="profiled fwd+bwd calls")
    ap.add_argument("--rows", type=int, default=14, help="kernels listed per attention")
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    config, plan = CONFIGS[args.config], RunPlan(batches=1)
    shape = config.shape
    batch = make_batches(torch, config, plan, load_lengths(plan.dataset, 1), "cuda", torch.bfloat16, 1)[0]
    b, s = batch["seg_id"].shape
    q, k, v, dout = attention_inputs(torch, b, s, shape.heads, shape.kv_heads, shape.head_dim, "cuda",
                                     torch.bfloat16)
    print(f"{config.name}: B={b} S={s} H={shape.heads} Hk={shape.kv_heads} D={shape.head_dim} "
          f"documents={batch['docs']} visible pairs per head={batch['pairs']}")
    for name in args.impls:
        impl = make_attention(torch, name, heads=shape.heads, heads_k=shape.kv_heads, head_dim=shape.head_dim,
                              dtype=torch.bfloat16)
        mask = impl.prepare(batch)

        def step():
            for t in (q, k, v):
                t.grad = None
            impl(q, k, v, mask).backward(dout)

        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.reps):
                step()
            torch.cuda.synchronize()
        print(f"\n== {name}: per-kernel device time over {args.reps} fwd+bwd calls")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
