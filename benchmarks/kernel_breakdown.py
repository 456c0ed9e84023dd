"""Where the GPU time of one FlashMask call goes: every kernel of a forward and of a backward call
(mask preprocessing, main kernel, dQ conversion, ...) with its device time per call, from the
PyTorch profiler, on kernel_bench's inputs.

    python3 benchmarks/kernel_breakdown.py --seqlens 8192 32768 --masks causal causal_document

Prints one table per (mask, S, direction) and writes --json (rows + the command, commit, device
and date). Needs a CUDA device.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import kernel_bench  # noqa: E402
import kernel_impls  # noqa: E402
import kernel_masks  # noqa: E402
from flashmask_paddle.bench import provenance  # noqa: E402


def profile(torch, fn, calls: int) -> dict[str, float]:
    """Device microseconds per call of each kernel launched by fn (name -> us)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type.name == "CUDA":
            per_kernel[event.name] += event.device_time / calls
    return dict(per_kernel)


def write_result(path: Path, command: str, device: str, torch_version: str, rows: list[dict]) -> None:
    """The rows with where they came from (command, commit, device, date, torch) as JSON."""
    meta = {**provenance.record(command, device), "torch": torch_version}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seqlens", type=int, nargs="+", default=[8192, 32768])
    p.add_argument("--masks", nargs="+", default=["causal", "causal_document", "share_question"],
                   choices=kernel_masks.MASKS)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("kernel_breakdown: needs a CUDA device", file=sys.stderr)
        return 2
    impl = kernel_impls.FlashMask(torch)
    rows = []
    for seqlen in args.seqlens:
        batch = max(1, args.tokens // seqlen)
        for mask in args.masks:
            case = kernel_bench.make_case(torch, mask, seqlen, batch, args.heads, args.heads, args.head_dim,
                                          torch.bfloat16, 0)
            fwd = impl.forward(case)
            out = fwd()
            leafs = [case[n] for n in ("q_bshd", "k_bshd", "v_bshd")]
            with torch.no_grad():
                fwd_times = profile(torch, fwd, args.calls)
            bwd_times = profile(torch, lambda: torch.autograd.grad(out, leafs, case["dout_bshd"], retain_graph=True),
                                args.calls)
            for direction, times in (("fwd", fwd_times), ("bwd", bwd_times)):
                total = sum(times.values())
                print(f"\n{mask} S={seqlen} B={batch} {direction}: {total:.1f} us per call")
                for name, us in sorted(times.items(), key=lambda kv: -kv[1]):
                    print(f"  {us:9.1f} us {100 * us / total:5.1f}%  {name[:110]}")
                    rows.append({"mask": mask, "seqlen": seqlen, "batch": batch, "direction": direction,
                                 "kernel": name, "us_per_call": round(us, 2)})
            del case, out
    if args.json:
        command = " ".join([Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else list(argv)))
        write_result(args.json, command, torch.cuda.get_device_name(), torch.__version__, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
