"""Kernel benchmark on one GPU: FlashMask (ours, via flashmask_paddle.torch) vs the strongest peers
(IMPLS): cuDNN-frontend's interval-mask flex_attention, FlashAttention-4 varlen (document masks, and
causal / full as one sequence per row: FA4's own kernels), FlexAttention on FlashAttention-4 and on
Triton, cuDNN and FlashAttention-2 (torch SDPA backends, only where they can express the mask).
Peers' mask plans / block masks are built once per mask and reported apart (mask_plan_ms,
block_mask_ms); --variant times ours under other kernel switches.

    python3 benchmarks/kernel_bench.py                                   # 8K + 32K, D=128, bf16, all masks
    python3 benchmarks/kernel_bench.py --seqlens 8192 --masks causal causal_document --impls flashmask flex
    python3 benchmarks/kernel_bench.py --seqlens 8192 32768 131072 --head-dims 64 128 --dtypes bf16 fp16 \\
        --heads-k 16 4

Method (benchmarks/README.md): B·S = --tokens (32K) tokens (B = 1 from 32K up), Hq = --heads (16); per row
of the matrix the same random inputs for every implementation; forward and backward timed
separately with CUDA events around each of --reps calls queued back to back behind a spin kernel
(GPU time per call; the host's launch overhead is hidden; the end-to-end benchmark keeps it),
median, after --warmup calls and at least --warmup-s seconds
of back-to-back calls (compilation and autotuning happen in warm-up and are reported as compile_s;
the timed warm-up brings the clocks back up after the GPU idled, e.g. through a Flex compile: the
H200 idles at 345 MHz, and a few calls of a millisecond left 5-10% between runs of the same code). Our mask
plan, like the peers' plans and block masks, is built once per mask and reported apart (mask_plan_ms);
--variant NAME:FLASHMASK_MASK_PLAN=0 times ours preprocessing its mask inside every call, --variant
NAME:FLASHMASK_LIB=PATH ours on another build in the same process (a build's A/B with no process
between its windows: ab_libraries.py --in-process). Every implementation of a row is set up (first
calls, compile_s) before any is timed; --rounds N then times them N times, in list order in even
rounds and reversed in odd ones (ABBA), and reports the medians over the rounds (per-round GPU
times as fwd_ms_rounds, bwd_ms_rounds): timed one after the other, always in the same order, identical configurations
drifted up to 5% apart as the GPU heats up at its power limit. --kernel-time adds each call's
summed kernel time from torch.profiler, in one pass after the rounds (GPU work only: a call whose
host side launches slower than its kernels run reads faster there). Each timing also records the
GPU's mean SM clock and power draw over its warm-up and timed calls, what held the clock down, and
the GPU's and its HBM's temperatures where the driver reports them (fwd_sm_mhz, fwd_power_w,
fwd_clock_limits, fwd_gpu_c, fwd_mem_c, bwd_...; NVML read every 20 ms; over --rounds, the mean
and the last round's limits): at the power limit the clock
drops, so a kernel's energy per FLOP shows in its time. --steady-s S times the steady state at the
power limit instead (kernel_timing.steady_ms), what a training loop runs in: S seconds of calls back
to back, then the mean GPU time per call over a window of at least S seconds of calls, no spin
before it (the spin idles the GPU and the clock climbs), and the GPU's energy per call over the
window (fwd_mj, bwd_mj; GFLOP per joule fwd_gflop_per_j, bwd_gflop_per_j). FlexAttention: `torch.compile(flex_attention, dynamic=False)`; its block mask
comes from `create_block_mask` over a mask_mod that looks the column bounds up in tensors (the
same dense rule as flashmask_paddle.reference), built once per mask outside the timing and
reported as block_mask_ms. TFLOP/s count exactly the visible (q, k) pairs: forward 4·D·pairs·Hq,
backward 2.5× that; the pairs and the 128×128 tile density are counted on the GPU from the dense
rule, 1024 query rows at a time, and cross-checked against masks.count_visible.

Masks: kernel_masks.py (every type drawn from seeded documents; the dense rule on the device).
The implementations: kernel_impls.py. How a call is timed: kernel_timing.py. This file runs the
matrix (set-up, rounds, cross-check, rows) and writes the results.

Writes --json (rows + meta: command, commit, torch, device, date) and --png (bar chart).
Importable without torch or a GPU (the mask construction is numpy).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import kernel_timing  # noqa: E402  (kernel_timing.RUN: the run's settings, set by main)
from flashmask_paddle import masks  # noqa: E402
from flashmask_paddle.bench import provenance  # noqa: E402
from kernel_impls import IMPLS, FlashMask, is_ours, make_impls  # noqa: E402
from kernel_masks import DEFAULT_MASKS, MASKS, build_mask, count_pairs_and_tiles, four_bounds  # noqa: E402
from kernel_timing import kernel_ms, phase_fields, run_settings, sync, timed  # noqa: E402

# The benchmark's code, relative to the repository root (a result's commit is "-dirty" when they differ).
SOURCES = tuple(f"benchmarks/{name}.py" for name in ("kernel_bench", "kernel_impls", "kernel_masks", "kernel_timing"))


def error_text(e: Exception, width: int) -> str:
    """An exception as a row's error: its type and the first line of its message, cut at width."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:width] if str(e) else ''}"


def note_backward_error(row: dict, e: Exception) -> None:
    """A failing backward in the row's error; the forward's numbers stay."""
    row["error"] = f"backward: {error_text(e, 160)}"


def round_order(items, r: int) -> list:
    """The order round r times a row's implementations in: list order in even rounds, reversed in
    odd ones (ABBA over two rounds), so that no implementation always runs first or last."""
    return list(items) if r % 2 == 0 else list(reversed(items))


class Prepared:
    """One implementation set up on one case (set_up): its row, its forward and backward callables
    (None once dropped: skipped, failed, or a failing backward), the forward output ([B, S, H, D])
    for the cross-check, the times of its mask preparation (extra), and per phase each round's
    (Timing, ClockSample or None)."""

    def __init__(self, impl, row: dict):
        self.impl, self.row = impl, row
        self.fwd = self.bwd = self.output = None
        self.extra = {}
        self.rounds = {"fwd": [], "bwd": []}


def set_up(torch, p: Prepared, case, backward: bool = True) -> None:
    """Everything of p's implementation on the case but the timed passes: builds the forward (a
    peer's mask preparation is timed there, once per row, into case["extra"]), runs it once
    (compile_s: compilation and autotuning), keeps its output for the cross-check, then, unless
    `backward` is off (--forward-only), builds the backward on an autograd forward and runs it once.
    A failing forward raises; a failing backward keeps the forward (bwd None, the row's error says
    why)."""
    impl, row = p.impl, p.row
    leafs = [case[f"{n}_{impl.layout}"] for n in ("q", "k", "v")]
    fwd = impl.forward(case)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = fwd()
    sync(torch)
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    p.fwd, p.output = fwd, out if impl.layout == "bshd" else out.transpose(1, 2)
    if not backward:
        return
    dout = case[f"dout_{impl.layout}"]
    try:
        out = fwd()  # with autograd: the graph the backward timing replays

        def bwd():
            return torch.autograd.grad(out, leafs, dout, retain_graph=True)

        if isinstance(impl, FlashMask):
            bwd = impl.wrap(bwd)

        t0 = time.perf_counter()
        bwd()
        sync(torch)
        row["compile_s"] = round(row["compile_s"] + time.perf_counter() - t0, 2)
        p.bwd = bwd
    except Exception as e:
        note_backward_error(row, e)



def time_round(torch, p: Prepared, warmup: int, reps: int) -> None:
    """One round of p: its forward timed, then its backward, into p.rounds. A failing forward
    raises; a failing backward drops the backward (its earlier rounds too) and keeps the forward."""
    with torch.no_grad():
        p.rounds["fwd"].append(timed(torch, p.fwd, warmup, reps))
    if p.bwd is None:
        return
    try:
        p.rounds["bwd"].append(timed(torch, p.bwd, warmup, reps))
    except Exception as e:
        note_backward_error(p.row, e)
        p.bwd, p.rounds["bwd"] = None, []



def record(torch, p: Prepared, reps: int) -> None:
    """Writes p's rounds into its row (phase_fields), then --kernel-time's pass, once per phase
    after the rounds. A failing forward pass raises; a failing backward one keeps the forward."""
    p.row.update(phase_fields("fwd", p.rounds["fwd"]))
    if kernel_timing.RUN.kernel_time:
        with torch.no_grad():
            p.row["fwd_kernel_ms"] = round(kernel_ms(torch, p.fwd, reps), 4)
    if p.bwd is None:
        return
    p.row.update(phase_fields("bwd", p.rounds["bwd"]))
    if kernel_timing.RUN.kernel_time:
        try:
            p.row["bwd_kernel_ms"] = round(kernel_ms(torch, p.bwd, reps), 4)
        except Exception as e:
            note_backward_error(p.row, e)


def drop(torch, p: Prepared, e: Exception) -> None:
    """p failed (one failing peer must not end the run): its error in the row, and it leaves the
    remaining rounds and the cross-check."""
    p.row["error"] = error_text(e, 200)
    p.fwd = p.bwd = p.output = None
    p.rounds = {"fwd": [], "bwd": []}
    if not kernel_timing.RUN.smoke:
        torch.cuda.empty_cache()


def prepare(torch, impl, case, row: dict, dropout: float, backward: bool = True) -> Prepared:
    """impl set up on the case (set_up), unless it cannot run it (row's skipped says why) or its
    set-up fails (row's error); the times of its mask preparation are kept either way."""
    p = Prepared(impl, row)
    why = impl.supports(case)
    if not why and dropout and not is_ours(impl.name):
        why = "dropout: ours only"
    if why:
        row["skipped"] = why
        return p
    case["extra"] = {}
    try:
        set_up(torch, p, case, backward)
    except Exception as e:
        drop(torch, p, e)
    p.extra = case["extra"]
    return p


def cross_check(prepared) -> None:
    """Every other implementation's forward output against ours (the first of ours in the row:
    plain flashmask, else the first --variant), as the row's rel_err_vs_flashmask."""
    reference = next((p for p in prepared if is_ours(p.impl.name) and p.output is not None), None)
    if reference is None:
        return
    ours = reference.output.float()
    for p in prepared:
        if p is not reference and p.output is not None:
            theirs = p.output.float()
            err = float((ours - theirs).norm() / theirs.norm().clamp_min(1e-30))
            p.row["rel_err_vs_flashmask"] = round(err, 5)


def forward_flops(case) -> float:
    """The forward's FLOPs over the case's visible pairs (the backward's: 2.5x, add_tflops)."""
    return 4.0 * case["head_dim"] * case["pairs"] * case["heads"]


def add_tflops(row: dict, flops: float) -> None:
    """The row's TFLOP/s for each time it has (fwd/bwd, event and kernel time), and its GFLOP per
    joule where it has the energy per call: forward `flops`, backward 2.5x that."""
    for phase, factor in (("fwd", 1.0), ("bwd", 2.5)):
        for timing in ("", "kernel_"):
            if row.get(f"{phase}_{timing}ms"):
                seconds = row[f"{phase}_{timing}ms"] * 1e-3
                row[f"{phase}_{timing}tflops"] = round(factor * flops / seconds / 1e12, 1)
        if row.get(f"{phase}_mj"):
            row[f"{phase}_gflop_per_j"] = round(factor * flops / (row[f"{phase}_mj"] * 1e-3) / 1e9, 1)


def bench_case(torch, impls, case, base: dict, args, done) -> None:
    """One row of the matrix: every implementation set up on the case first (prepare, list order),
    then timed --rounds times, round r in round_order(..., r) (the median over the rounds reported:
    no implementation is always timed first, or last, as the GPU warms up at its power limit); each
    one's row completed (record, mask preparation times, TFLOP/s) and handed to done(row) in list
    order, skipped rows included, once every output has been checked against ours (cross_check), so
    that each row written carries its rel_err_vs_flashmask. Everything set up here, autograd graphs
    included, is released on return."""
    prepared = [prepare(torch, impl, case, {"impl": impl.name, **base}, args.dropout, not args.forward_only)
                for impl in impls]
    for r in range(args.rounds):
        live = [p for p in prepared if p.fwd is not None]  # neither skipped nor failed
        for p in round_order(live, r):
            try:
                time_round(torch, p, args.warmup, args.reps)
            except Exception as e:
                drop(torch, p, e)
    flops = forward_flops(case)
    for p in prepared:
        if "skipped" not in p.row:
            if p.fwd is not None:
                try:
                    record(torch, p, args.reps)
                except Exception as e:
                    drop(torch, p, e)
            p.row.update({k: round(v, 3) for k, v in p.extra.items()})
            add_tflops(p.row, flops)
    cross_check(prepared)
    for p in prepared:
        done(p.row)


def make_case(torch, mask_name, seqlen, batch, heads, heads_k, head_dim, dtype, seed, dropout=0.0):
    dev = torch.device("cpu" if kernel_timing.RUN.smoke else "cuda")
    docs = []
    cm = build_mask(mask_name, seqlen, batch, seed, docs)
    indices = torch.from_numpy(cm.indices).to(dev)
    bounds = four_bounds(torch, indices, cm.causal, seqlen)
    pairs, density = count_pairs_and_tiles(torch, bounds, cm.causal, seqlen, seqlen)
    expected = int(np.sum(masks.count_visible(cm, seqlen_q=seqlen)))
    if pairs != expected:
        raise AssertionError(f"{mask_name}@{seqlen}: GPU pair count {pairs} != masks.count_visible {expected}")
    g = torch.Generator(device=dev).manual_seed(seed)

    def rnd(h):
        t = torch.randn(batch, seqlen, h, head_dim, device=dev, dtype=dtype, generator=g)
        return t.requires_grad_(True)

    q, k, v, dout = rnd(heads), rnd(heads_k), rnd(heads_k), rnd(heads).detach()
    bhsd = [t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v)]
    return {"mask": mask_name, "seqlen": seqlen, "batch": batch, "heads": heads, "heads_k": heads_k,
            "head_dim": head_dim, "causal": cm.causal, "dropout": dropout, "seed": seed, "indices": indices,
            "bounds": bounds, "docs": docs, "pairs": pairs, "density": density,
            "q_bshd": q, "k_bshd": k, "v_bshd": v, "dout_bshd": dout,
            "q_bhsd": bhsd[0], "k_bhsd": bhsd[1], "v_bhsd": bhsd[2],
            "dout_bhsd": dout.transpose(1, 2).contiguous(), "extra": {}}


# ----------------------------------------------------------------------------- report
def row_key(r):
    return (r["mask"], r["seqlen"], r["heads_k"], r["head_dim"], r["dtype"], r.get("dropout", 0.0))


def best_peers(rows) -> dict:
    """Per (mask, S, Hk, D, dtype): {"fwd": (peer, ms), "bwd": (peer, ms)}, the fastest peer each way."""
    best: dict = {}
    for r in rows:
        if is_ours(r["impl"]):
            continue
        for phase in ("fwd", "bwd"):
            ms = r.get(f"{phase}_ms")
            slot = best.setdefault(row_key(r), {})
            if ms and (phase not in slot or ms < slot[phase][1]):
                slot[phase] = (r["impl"], ms)
    return best


def table(rows) -> str:
    head = (f"{'impl':<16} {'mask':<22} {'S':>6} {'B':>2} {'Hq':>3} {'Hk':>3} {'D':>4} {'dtype':<5} "
            f"{'fwd_ms':>8} {'bwd_ms':>8} {'fwd_TF':>7} {'bwd_TF':>7} {'dens':>5} {'vs_best':>11}  note")
    lines = [head, "-" * len(head)]
    best = best_peers(rows)
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if r.get(key) is not None else "-"
        ratio = "-"
        ref = best.get(row_key(r))
        if is_ours(r["impl"]) and ref:
            ratio = "/".join(f"{ref[p][1] / r[f'{p}_ms']:.2f}" if ref.get(p) and r.get(f"{p}_ms") else "-"
                             for p in ("fwd", "bwd"))
        note = r.get("error") or r.get("skipped") or ""
        if r.get("fwd_sm_mhz") or r.get("bwd_sm_mhz"):
            limits = sorted({r.get(f"{p}_clock_limits") for p in ("fwd", "bwd")} - {None, "none"})
            hbm = f" HBM {f('fwd_mem_c', '.0f')}/{f('bwd_mem_c', '.0f')} C" if r.get("fwd_mem_c") or r.get("bwd_mem_c") else ""
            note = (f"{r.get('fwd_sm_mhz', '-')}/{r.get('bwd_sm_mhz', '-')} MHz{hbm}"
                    f"{' ' + ','.join(limits) if limits else ''} {note}")
        if r.get("fwd_kernel_tflops") or r.get("bwd_kernel_tflops"):
            note = f"kernel TF {f('fwd_kernel_tflops', '.1f')}/{f('bwd_kernel_tflops', '.1f')} {note}"
        if is_ours(r["impl"]) and ref:
            note = f"best {ref.get('fwd', ('-',))[0]}/{ref.get('bwd', ('-',))[0]} {note}"
        lines.append(f"{r['impl']:<16} {r['mask']:<22} {r['seqlen']:>6} {r['batch']:>2} {r['heads']:>3} "
                     f"{r['heads_k']:>3} {r['head_dim']:>4} {r['dtype']:<5} {f('fwd_ms', '8.3f'):>8} "
                     f"{f('bwd_ms', '8.3f'):>8} {f('fwd_tflops', '7.1f'):>7} {f('bwd_tflops', '7.1f'):>7} "
                     f"{f('density', '5.3f'):>5} {ratio:>11}  {note[:80]}")
    return "\n".join(lines)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["seqlen"], r["heads_k"], r["head_dim"], r["dtype"]) for r in rows})
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    keys = [k for k in ("fwd_tflops", "bwd_tflops") if any(r.get(k) for r in rows)] or ["fwd_tflops"]
    fig, axes = plt.subplots(len(groups), len(keys), figsize=(8 * len(keys), 3.6 * len(groups)), squeeze=False)
    for gi, (s, hk, d, dt) in enumerate(groups):
        sel = [r for r in rows if (r["seqlen"], r["heads_k"], r["head_dim"], r["dtype"]) == (s, hk, d, dt)]
        mask_names = [m for m in MASKS if any(r["mask"] == m for r in sel)]
        for ci, key in enumerate(keys):
            ax = axes[gi][ci]
            width = 0.8 / max(1, len(impls))
            for ii, impl in enumerate(impls):
                vals = [next((r.get(key) or 0 for r in sel if r["impl"] == impl and r["mask"] == m), 0)
                        for m in mask_names]
                ax.bar(np.arange(len(mask_names)) + ii * width, vals, width, label=impl)
            ax.set_xticks(np.arange(len(mask_names)) + width * (len(impls) - 1) / 2)
            ax.set_xticklabels(mask_names, rotation=25, ha="right", fontsize=8)
            ax.set_ylabel("TFLOP/s (visible pairs)")
            ax.set_title(f"{key.split('_')[0]}  S={s} Hq=16 Hk={hk} D={d} {dt}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            if gi == 0 and ci == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def case_key(r: dict) -> tuple:
    """What one case of the matrix is, whichever implementation's row r is (--resume)."""
    return (r["mask"], r["seqlen"], r["batch"], r["heads"], r["heads_k"], r["head_dim"], r["dtype"],
            r.get("dropout", 0.0))


class ResultFile:
    """--json: rewritten with every row so far after each row set (what a timeout leaves), after
    the rows of the file found at start with --append."""

    def __init__(self, path: Path, append: bool):
        self.path = path
        self.previous = json.loads(path.read_text()) if append and path.is_file() else {"meta": {}, "rows": []}

    def resume(self, key: tuple, impl_names: list) -> bool:
        """--resume: whether the file found at start holds a row of every implementation of case
        `key` (a failed or skipped one counts: it would fail again); a case cut short by a timeout
        loses its rows there, to be measured again."""
        rows = [r for r in self.previous["rows"] if case_key(r) == key]
        if {r["impl"] for r in rows} >= set(impl_names):
            return True
        self.previous["rows"] = [r for r in self.previous["rows"] if case_key(r) != key]
        return False

    def write(self, meta: dict, rows: list, wall_s: float) -> list:
        """Writes the run's rows after the previous ones; returns them all."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        out_meta = dict(meta, wall_s=round(wall_s, 1))
        if self.previous["meta"]:
            out_meta["command"] = self.previous["meta"]["command"] + " ;; " + meta["command"]
            out_meta["wall_s"] = round(self.previous["meta"].get("wall_s", 0) + wall_s, 1)
        every = self.previous["rows"] + rows
        self.path.write_text(json.dumps({"meta": out_meta, "rows": every}, indent=1))
        return every


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqlens", type=int, nargs="+", default=[8192, 32768])
    p.add_argument("--masks", nargs="+", default=list(DEFAULT_MASKS), choices=MASKS)
    p.add_argument("--head-dims", type=int, nargs="+", default=[128])
    p.add_argument("--dtypes", nargs="+", default=["bf16"], choices=["bf16", "fp16"])
    p.add_argument("--impls", nargs="*", default=list(IMPLS), choices=IMPLS,
                   help="none: the --variant implementations alone")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:FLASHMASK_X=V,...",
                   help="also time ours with these FLASHMASK_* switches, as impl 'flashmask:NAME' (repeatable); "
                        "FLASHMASK_LIB=PATH: on that build of the library, in this process")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--heads-k", type=int, nargs="+", default=[16], help="key/value heads (GQA: 4)")
    p.add_argument("--tokens", type=int, default=32768, help="B = max(1, tokens // seqlen)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--warmup-s", type=float, default=0.3,
                   help="also keep warming up until this many seconds passed (GPU clocks)")
    p.add_argument("--reps", type=int, default=10,
                   help="timed calls per timing, at least (see --min-window-ms)")
    p.add_argument("--min-window-ms", type=float, default=40.0,
                   help="more timed calls where --reps of them would take less GPU time than this")
    p.add_argument("--settle-ms", type=float, default=20.0,
                   help="GPU time of untimed calls queued between the spin and the timed ones")
    p.add_argument("--steady-s", type=float, default=0.0,
                   help="time in the steady state at the power limit instead: this many seconds of calls back to "
                        "back, then the mean over a window of at least as long, no spin, with the GPU's energy per "
                        "call (fwd_mj, bwd_mj); replaces --warmup-s, --settle-ms and --min-window-ms")
    p.add_argument("--rounds", type=int, default=1,
                   help="time each row's implementations this many times, in list order then reversed "
                        "(ABBA), and report the median (per-round times as fwd_ms_rounds, bwd_ms_rounds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dropout", type=float, default=0.0,
                   help="attention dropout in training, ours only (the peers are skipped): fixed seed per row")
    p.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "kernel_h200.json")
    p.add_argument("--png", type=Path, default=None, help="default: the --json path with .png")
    p.add_argument("--append", action="store_true",
                   help="add the rows to an existing --json (its meta keeps every command)")
    p.add_argument("--resume", action="store_true",
                   help="--append, skipping the cases the --json already has a row of every implementation "
                        "of: the same command again finishes a run that a time limit cut short")
    p.add_argument("--kernel-time", action="store_true",
                   help="also the summed kernel time per call from torch.profiler (fwd_kernel_ms, "
                        "bwd_kernel_ms and their TFLOP/s; not with --smoke)")
    p.add_argument("--forward-only", action="store_true",
                   help="time the forward alone (a forward kernel's A/B in less GPU time); rows carry no bwd fields")
    p.add_argument("--smoke", action="store_true", help="CPU plumbing check (fp32, tiny sizes advised)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.steady_s < 0:
        p.error("--steady-s must be at least 0")
    if not args.impls and not args.variant:
        p.error("--impls: nothing to time (name an implementation or give a --variant)")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    smoke = args.smoke
    if not smoke and not torch.cuda.is_available():
        print("kernel_bench: needs a CUDA device (or --smoke for a CPU run of the plumbing)", file=sys.stderr)
        return 2
    kernel_timing.configure(run_settings(torch, args))
    run = kernel_timing.RUN
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if smoke:  # CPU: fp32, the CPU kernels, eager-compiled flex on the host; sdpa peers need CUDA
        dtypes = {name: torch.float32 for name in dtypes}
        args.impls = [i for i in args.impls if i in ("flashmask", "flex")]
    impls = make_impls(torch, args.impls, args.variant)
    command = " ".join([Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else list(argv)))
    if run.steady_s:
        timing = (f"steady state at the power limit: {run.steady_s} s of calls back to back, then the mean GPU time "
                  f"per call over a window of at least {run.steady_s} s of calls queued back to back between one "
                  "pair of CUDA events (no spin), the GPU's energy per call over that window (NVML, fwd_mj / bwd_mj)")
    else:
        timing = ("median of reps queued back to back behind a spin kernel that holds the GPU while the host queues "
                  "them (GPU time per call), untimed calls of settle_ms GPU time between the spin and the timed ones, "
                  "at least min_window_ms of timed calls, after warmup (calls and seconds), CUDA events")
    counted = "TFLOP/s over visible pairs (fwd 4*D*pairs*Hq, bwd 2.5x)" + (" and GFLOP per joule" if run.steady_s else "")
    meta = {**provenance.record(command, "cpu (smoke)" if smoke else torch.cuda.get_device_name()),
            "torch": torch.__version__,
            "method": f"{timing}; {counted}; flex block mask built outside timing",
            "kernel_time": run.kernel_time, "warmup": args.warmup, "warmup_s": run.warmup_s, "reps": args.reps,
            "settle_ms": run.settle_ms, "min_window_ms": run.min_window_ms, "rounds": args.rounds, "seed": args.seed, "tokens": args.tokens,
            "forward_only": args.forward_only}
    if run.steady_s:
        meta["steady_s"] = run.steady_s
    if args.rounds > 1:
        meta["method"] += (f"; {args.rounds} rounds per row, the implementations timed in alternating order "
                           "(list order in even rounds, reversed in odd ones: ABBA), median over the rounds")
    rows = []
    t_start = time.time()
    result = ResultFile(args.json, args.append or args.resume)
    impl_names = [impl.name for impl in impls]

    def done(row):
        rows.append(row)
        if "skipped" not in row:
            print(table([row]).splitlines()[-1], flush=True)
            result.write(meta, rows, time.time() - t_start)  # survives a timeout

    for seqlen in args.seqlens:
        batch = max(1, args.tokens // seqlen)
        for head_dim in args.head_dims:
            for dt_name in args.dtypes:
                for heads_k in args.heads_k:
                    for mask_name in args.masks:
                        key = {"mask": mask_name, "seqlen": seqlen, "batch": batch, "heads": args.heads,
                               "heads_k": heads_k, "head_dim": head_dim, "dtype": "fp32" if smoke else dt_name}
                        if args.dropout:
                            key["dropout"] = args.dropout
                        if args.resume and result.resume(case_key(key), impl_names):
                            print(f"kernel_bench: {mask_name} S={seqlen} Hk={heads_k} D={head_dim} {key['dtype']}: "
                                  f"in {args.json} already (--resume)", flush=True)
                            continue
                        case = make_case(torch, mask_name, seqlen, batch, args.heads, heads_k, head_dim,
                                         dtypes[dt_name], args.seed, args.dropout)
                        base = {**key, "density": round(case["density"], 4), "pairs": case["pairs"]}
                        bench_case(torch, impls, case, base, args, done)
                        del case
                        if not smoke:
                            torch.cuda.empty_cache()
    rows = result.write(meta, rows, time.time() - t_start)
    print()
    print(table(rows))
    png = args.png or args.json.with_suffix(".png")
    try:
        plot(rows, png)
    except Exception as e:  # the JSON is what matters; say why the chart is missing
        print(f"kernel_bench: chart not written: {e}", file=sys.stderr)
    print(f"wrote {args.json} and {png} ({time.time() - t_start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
