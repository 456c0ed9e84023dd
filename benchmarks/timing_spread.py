"""How far one row of kernel_bench moves inside one process: our forward and backward on the same
inputs timed window after window, and the same row made again at other addresses (a spacer
allocation of random size before it, the mask plan rebuilt), with kernel_bench's timing method.

    python3 benchmarks/timing_spread.py --masks document share_question --seqlens 32768 \\
        --sets 6 --windows 3 --json benchmarks/results/timing_spread_h200.json

Per (mask, S, phase) it prints the median TFLOP/s, the spread of the windows of one set of inputs
((max - min) / median, the mean over the sets) and the spread of the sets' medians: windows
scattering as widely as sets do mean that the time moves from window to window, not with where
the tensors lie or with the process. Writes --json (every window with its SM clock, power and
temperatures, the summary, and the command, commit, device and date). Needs a CUDA device.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import kernel_bench  # noqa: E402
import kernel_impls  # noqa: E402
import kernel_masks  # noqa: E402
import kernel_timing  # noqa: E402
from flashmask_paddle.bench import provenance  # noqa: E402

PHASES = ("fwd", "bwd")


def spread(values: list[float]) -> float:
    """(max - min) / median; 0 for fewer than two values."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def time_set(torch, impl, case, windows: int, timing: argparse.Namespace) -> dict[str, list[dict]]:
    """`windows` timings of the case's forward and backward, alternating: per phase one dict per
    window (TFLOP/s, SM clock, power, GPU and HBM temperature)."""
    prepared = kernel_bench.Prepared(impl, {})
    kernel_bench.set_up(torch, prepared, case)
    if prepared.bwd is None:
        raise RuntimeError(f"backward failed: {prepared.row.get('error')}")
    got = {phase: [] for phase in PHASES}
    for _ in range(windows):
        for phase, fn in (("fwd", prepared.fwd), ("bwd", prepared.bwd)):
            with torch.no_grad() if phase == "fwd" else torch.enable_grad():
                measured, clock = kernel_timing.timed(torch, fn, timing.warmup, timing.reps)
            rates = {f"{phase}_ms": measured.gpu_ms}
            kernel_bench.add_tflops(rates, kernel_bench.forward_flops(case))
            window = {"tflops": rates[f"{phase}_tflops"], "ms": round(measured.gpu_ms, 4)}
            if clock is not None:
                window.update(sm_mhz=round(clock.sm_mhz), power_w=round(clock.power_w), gpu_c=clock.gpu_c,
                              mem_c=clock.mem_c)
            got[phase].append(window)
    return got


def summarize(rows: list[dict]) -> list[dict]:
    """Per (mask, S, phase): median TFLOP/s over every window, the mean spread of one set's windows
    and the spread of the sets' medians."""
    out = []
    for mask, seqlen in dict.fromkeys((r["mask"], r["seqlen"]) for r in rows):
        sets = [r for r in rows if r["mask"] == mask and r["seqlen"] == seqlen]
        for phase in PHASES:
            per_set = [[w["tflops"] for w in r[phase]] for r in sets]
            every = [v for values in per_set for v in values]
            out.append({"mask": mask, "seqlen": seqlen, "phase": phase, "median_tflops": statistics.median(every),
                        "min_tflops": min(every), "max_tflops": max(every),
                        "window_spread": round(statistics.mean(spread(v) for v in per_set), 4),
                        "set_spread": round(spread([statistics.median(v) for v in per_set]), 4)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seqlens", type=int, nargs="+", default=[32768])
    p.add_argument("--masks", nargs="+", default=["document", "share_question", "causal_document"],
                   choices=kernel_masks.MASKS)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--sets", type=int, default=6, help="times each row is made again at other addresses")
    p.add_argument("--windows", type=int, default=3, help="timings of each set, back to back")
    p.add_argument("--seed", type=int, default=0, help="of the spacer sizes (the inputs are kernel_bench's)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("timing_spread: needs a CUDA device", file=sys.stderr)
        return 2
    timing = kernel_bench.parse_args([])  # kernel_bench's own timing defaults
    kernel_timing.configure(kernel_timing.run_settings(torch, timing))
    impl = kernel_impls.FlashMask(torch)
    rng = random.Random(args.seed)
    rows = []
    for seqlen in args.seqlens:
        batch = max(1, args.tokens // seqlen)
        for mask in args.masks:
            for index in range(args.sets):
                # Up to 2 GiB, at 256-byte steps: shifts the inputs, the plan and the workspace.
                spacer = torch.empty(rng.randrange(1, 1 << 23) * 256, dtype=torch.uint8, device="cuda")
                case = kernel_bench.make_case(torch, mask, seqlen, batch, args.heads, args.heads, args.head_dim,
                                              torch.bfloat16, 0)
                got = time_set(torch, impl, case, args.windows, timing)
                rows.append({"mask": mask, "seqlen": seqlen, "batch": batch, "set": index, "spacer_bytes": spacer.numel(),
                             "q_address_mod_1g": case["q_bshd"].data_ptr() % (1 << 30), **got})
                print(f"{mask:16s} S={seqlen:6d} set {index}: fwd "
                      + " ".join(f"{w['tflops']:.0f}" for w in got["fwd"]) + "  bwd "
                      + " ".join(f"{w['tflops']:.0f}" for w in got["bwd"]), flush=True)
                del case, got, spacer
                torch.cuda.empty_cache()
    summary = summarize(rows)
    print(f"\n{'mask':16s} {'S':>6s} phase  median    min    max  windows  sets")
    for s in summary:
        print(f"{s['mask']:16s} {s['seqlen']:6d} {s['phase']:5s} {s['median_tflops']:7.0f} {s['min_tflops']:6.0f} "
              f"{s['max_tflops']:6.0f}  {100 * s['window_spread']:6.1f}% {100 * s['set_spread']:5.1f}%")
    if args.json:
        command = " ".join([Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else list(argv)))
        meta = {**provenance.record(command, torch.cuda.get_device_name()), "torch": torch.__version__,
                "method": f"kernel_bench's time_ms (spin kernel, settle_ms {timing.settle_ms}, min_window_ms "
                          f"{timing.min_window_ms}, warmup {timing.warmup} calls and {timing.warmup_s} s, reps "
                          f"{timing.reps}), one process; each set: the row made again after a spacer allocation, "
                          "its mask plan rebuilt, then windows of fwd and bwd alternating"}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
