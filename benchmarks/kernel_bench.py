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
H200 idles at 345 MHz, and a few calls of a millisecond left 5-10% between runs of the same code). Our time includes the mask preprocessing (it runs
inside every call). Every implementation of a row is set up (first calls, compile_s) before any is
timed; --rounds N then times them N times, in list order in even rounds and reversed in odd ones
(ABBA), and reports the medians over the rounds (per-round GPU times as fwd_ms_rounds,
bwd_ms_rounds): timed one after the other, always in the same order, identical configurations
drifted up to 5% apart as the GPU heats up at its power limit. --kernel-time adds each call's
summed kernel time from torch.profiler, in one pass after the rounds (GPU work only: a call whose
host side launches slower than its kernels run reads faster there). Each timing also records the
GPU's mean SM clock and power draw over its warm-up and timed calls, what held the clock down, and
the GPU's and its HBM's temperatures where the driver reports them (fwd_sm_mhz, fwd_power_w,
fwd_clock_limits, fwd_gpu_c, fwd_mem_c, bwd_...; NVML read every 20 ms; over --rounds, the mean
and the last round's limits): at the power limit the clock
drops, so a kernel's energy per FLOP shows in its time. FlexAttention: `torch.compile(flex_attention, dynamic=False)`; its block mask
comes from `create_block_mask` over a mask_mod that looks the column bounds up in tensors (the
same dense rule as flashmask_paddle.reference), built once per mask outside the timing and
reported as block_mask_ms. TFLOP/s count exactly the visible (q, k) pairs: forward 4·D·pairs·Hq,
backward 2.5× that; the pairs and the 128×128 tile density are counted on the GPU from the dense
rule, 1024 query rows at a time, and cross-checked against masks.count_visible.

Masks (documents drawn with lengths uniform in [S/32, S/4], seeded): causal, sliding_window
(causal, window S/8: 1K at 8K), causal_document, document, share_question (each document: first
third prompt, then two answers), global_sliding_window (64 global tokens + bidirectional window
S/16 each side), prefix_lm_causal (first half bidirectional), prefix_lm_document (each document's
first half bidirectional), short_documents (causal documents of lognormal lengths around 350
tokens, SFT-like), full.

Writes --json (rows + meta: command, commit, torch, device, date) and --png (bar chart).
Importable without torch or a GPU (the mask construction is numpy).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from e2e_attention import host_seconds  # noqa: E402
from flashmask_paddle import masks  # noqa: E402
from flashmask_paddle.bench import provenance  # noqa: E402
from flashmask_paddle.bench.gpu_clock import ClockSample, ClockSampler, current_cuda_reader, mean_of_read  # noqa: E402

MASKS = ("causal", "sliding_window", "causal_document", "document", "share_question",
         "global_sliding_window", "prefix_lm_causal", "prefix_lm_document", "short_documents", "full")
DEFAULT_MASKS = MASKS[:-1]
# Peers, strongest first: cuDNN-frontend's interval-mask flex_attention, FlashAttention-4 varlen
# (document masks; causal and full as one sequence per row), FlexAttention on FlashAttention-4
# (BACKEND="FLASH"), Triton FlexAttention, cuDNN and FlashAttention-2 SDPA (causal / full only).
IMPLS = ("flashmask", "cudnnflex", "fa4varlen", "flexfa4", "flex", "cudnn", "fa2")
PEERS = IMPLS[1:]
SDPA_MASKS = ("causal", "full")  # what cuDNN / FA2 can express without a dense mask
# Masks FA4 varlen runs without any mask, as sequences packed by cu_seqlens -> its causal flag.
VARLEN_MASKS = {"causal_document": True, "document": False, "short_documents": True,
                "causal": True, "full": False}
TILE = 128


# ----------------------------------------------------------------------------- masks (numpy)
def doc_lengths(rng: np.random.Generator, seqlen: int) -> list[int]:
    """Document lengths uniform in [S/32, S/4] until S is filled (the last one truncated)."""
    lo, hi = max(1, seqlen // 32), max(1, seqlen // 4)
    lens, left = [], seqlen
    while left > 0:
        n = min(left, int(rng.integers(lo, hi + 1)))
        lens.append(n)
        left -= n
    return lens


def short_doc_lengths(rng: np.random.Generator, seqlen: int) -> list[int]:
    """SFT-like documents: lognormal lengths around 350 tokens (16 at least) until S is filled."""
    lens, left = [], seqlen
    while left > 0:
        n = min(left, max(16, int(round(rng.lognormal(np.log(350.0), 0.6)))))
        lens.append(n)
        left -= n
    return lens


def _one_row(name: str, seqlen: int, rng: np.random.Generator, docs_out: list | None = None) -> masks.ColumnMask:
    if name in ("causal", "full"):  # one document: the whole row (FA4 varlen's sequence)
        if docs_out is not None:
            docs_out.append([seqlen])
        return masks.causal(seqlen) if name == "causal" else masks.full(seqlen)
    if name == "sliding_window":
        return masks.sliding_window(seqlen, window_left=seqlen // 8)
    if name == "global_sliding_window":
        w = seqlen // 16
        return masks.global_sliding_window(seqlen, global_tokens=64, window=(w, w))
    if name == "prefix_lm_causal":
        return masks.prefix_lm_causal(seqlen, seqlen // 2)
    docs = short_doc_lengths(rng, seqlen) if name == "short_documents" else doc_lengths(rng, seqlen)
    if docs_out is not None:
        docs_out.append(docs)
    if name in ("causal_document", "short_documents"):
        return masks.causal_document(docs)
    if name == "document":
        return masks.document(docs)
    if name == "prefix_lm_document":
        return masks.prefix_lm_document(docs, [d // 2 for d in docs])
    if name == "share_question":
        groups = []
        for d in docs:
            prompt = max(1, d // 3)
            rest = d - prompt
            groups.append((prompt, [a for a in (rest - rest // 2, rest // 2) if a > 0]))
        return masks.pack_share_question([groups], seqlen)
    raise ValueError(f"unknown mask {name!r}; expected one of {', '.join(MASKS)}")


def varlen_sequences(name: str, docs: list[list[int]]) -> list[int] | None:
    """The sequence lengths FA4 varlen packs (cu_seqlens) for mask `name`, from the documents
    build_mask reported per row (a causal or full row is one document: FA4's own causal /
    non-causal kernels); None where varlen cannot express the mask."""
    if name not in VARLEN_MASKS:
        return None
    return [n for row in docs for n in row] if docs else None


def build_mask(name: str, seqlen: int, batch: int, seed: int = 0, docs_out: list | None = None) -> masks.ColumnMask:
    """int32 [batch, 1, S, C] bounds (each batch row its own documents) and the causal flag; the
    document lengths of each row go to docs_out when given (the varlen peers need them)."""
    rng = np.random.default_rng([seed, seqlen, MASKS.index(name)])
    rows = [_one_row(name, seqlen, rng, docs_out) for _ in range(batch)]
    return masks.ColumnMask(np.ascontiguousarray(np.concatenate([r.indices for r in rows], axis=0)),
                            rows[0].causal)


# ----------------------------------------------------------------------------- dense rule (torch)
def four_bounds(torch, indices, causal: bool, seqlen_q: int):
    """(lts, lte, uts, ute) int32 [B, Sk] on indices' device: every (causal, C) form normalised the
    way paddle_ops/include/flashmask/mask.h does (absent intervals empty)."""
    idx = indices[:, 0]  # [B, Sk, C]; the benchmark's masks have Hm = 1
    c = idx.shape[-1]
    full, zero = torch.full_like(idx[..., 0], seqlen_q), torch.zeros_like(idx[..., 0])
    lts = idx[..., 0]
    lte = idx[..., 1] if (c == 4 or (causal and c == 2)) else full
    uts = idx[..., 2] if c == 4 else zero
    ute = idx[..., 3] if c == 4 else (idx[..., 1] if (not causal and c == 2) else zero)
    return [t.contiguous() for t in (lts, lte, uts, ute)]


def visible_rows(torch, bounds, causal: bool, r0: int, r1: int, seqlen_q: int, seqlen_k: int):
    """bool [B, r1 - r0, Sk]: which keys query rows r0 .. r1-1 see (the dense rule)."""
    lts, lte, uts, ute = bounds
    q = torch.arange(r0, r1, device=lts.device)[None, :, None]
    vis = ~((q >= lts[:, None]) & (q < lte[:, None]) | (q >= uts[:, None]) & (q < ute[:, None]))
    if causal:
        vis &= torch.arange(seqlen_k, device=lts.device)[None, None, :] <= q + (seqlen_k - seqlen_q)
    return vis


def count_pairs_and_tiles(torch, bounds, causal: bool, seqlen_q: int, seqlen_k: int, rows: int = 1024):
    """(visible pairs summed over batch, fraction of 128x128 tiles with a visible pair)."""
    lts, lte, uts, ute = bounds
    batch = lts.shape[0]
    nk = -(-seqlen_k // TILE)
    pad = nk * TILE - seqlen_k
    pairs = torch.zeros((), dtype=torch.int64, device=lts.device)
    tiles = torch.zeros((), dtype=torch.int64, device=lts.device)
    for r0 in range(0, seqlen_q, rows):
        r1 = min(seqlen_q, r0 + rows)
        vis = visible_rows(torch, bounds, causal, r0, r1, seqlen_q, seqlen_k)
        pairs += vis.sum()
        nq = -(-(r1 - r0) // TILE)
        vis = torch.nn.functional.pad(vis, (0, pad, 0, nq * TILE - (r1 - r0)))
        tiles += vis.view(batch, nq, TILE, nk, TILE).any(dim=4).any(dim=2).sum()
    total_tiles = batch * (-(-seqlen_q // TILE)) * nk
    return int(pairs.item()), int(tiles.item()) / total_tiles


def row_intervals(torch, bounds, causal: bool, seqlen_q: int, seqlen_k: int, rows: int = 1024):
    """The same mask row-wise, as cuDNN-frontend's flex_attention takes it: int32 [1, nfunc, B*Sq]
    with, per query row, visible keys [0, F0) U [F1, F2) U ... (unused intervals empty at Sk), as
    few as the mask needs: nfunc = 2 * (most visible runs in a row) - 1 where every row's first
    run starts at key 0 (causal, prefix-LM), else + 1 with F0 = 0. Built from the dense rule, rows
    at a time, on the bounds' device."""
    lts, lte, uts, ute = bounds
    batch = lts.shape[0]
    chunks, most = [], 1
    for r0 in range(0, seqlen_q, rows):
        r1 = min(seqlen_q, r0 + rows)
        vis = visible_rows(torch, bounds, causal, r0, r1, seqlen_q, seqlen_k)
        edges = torch.nn.functional.pad(vis.to(torch.int8), (1, 1)).diff(dim=-1)  # +-1 where a run starts/ends
        b, r, c = torch.nonzero(edges, as_tuple=True)  # row-major: each row's edges ascending
        key = b * (r1 - r0) + r
        count = torch.bincount(key, minlength=batch * (r1 - r0))
        rank = torch.arange(key.numel(), device=key.device) - (torch.cumsum(count, 0) - count)[key]
        chunks.append((r0, r1, key, rank, c.to(torch.int32)))
        most = max(most, int(count.max().item()) // 2)
    out = torch.full((batch, seqlen_q, 2 * most + 1), seqlen_k, dtype=torch.int32, device=lts.device)
    out[..., 0] = 0
    for r0, r1, key, rank, c in chunks:
        part = torch.full((batch * (r1 - r0), 2 * most + 1), seqlen_k, dtype=torch.int32, device=lts.device)
        part[:, 0] = 0
        part[key, rank + 1] = c
        out[:, r0:r1] = part.view(batch, r1 - r0, -1)
    first_start, first_end = out[..., 1], out[..., 2]
    if bool(((first_start == 0) | (first_start == seqlen_k)).all()):  # [0, F0) is the first run
        out = out[..., 2:].clone()
        out[..., 0] = torch.where(first_start == 0, first_end, torch.zeros_like(first_end))
    return out.reshape(batch * seqlen_q, -1).t().contiguous()[None]


# ----------------------------------------------------------------------------- timing
class RunSettings(NamedTuple):
    """How this run times, from the command line (main sets RUN)."""

    smoke: bool = False  # --smoke: CPU, fp32, host clock (checks the script's plumbing, numbers meaningless)
    warmup_s: float = 0.0  # --warmup-s
    settle_ms: float = 0.0  # --settle-ms
    min_window_ms: float = 0.0  # --min-window-ms
    kernel_time: bool = False  # --kernel-time
    clock_read: Callable | None = None  # the timed GPU's (SM clock, power) reader (NVML), None without it


RUN = RunSettings()


def run_settings(torch, args) -> RunSettings:
    """RUN for parsed command-line arguments (parse_args)."""
    smoke = args.smoke
    return RunSettings(smoke=smoke, warmup_s=0.0 if smoke else args.warmup_s, settle_ms=args.settle_ms,
                       min_window_ms=args.min_window_ms, kernel_time=args.kernel_time and not smoke,
                       clock_read=None if smoke else current_cuda_reader(torch))


def sync(torch):
    if not RUN.smoke:
        torch.cuda.synchronize()


# The spin kernel's clock rate is taken at the H200's highest SM clock, so that a spin of
# ms * SPIN_CYCLES_PER_MS cycles lasts at least ms at any clock the GPU runs.
SPIN_CYCLES_PER_MS = 1_980_000
MAX_REPS = 2000  # bounds a window's host time (the spin covers it) for the shortest calls


class Timing(NamedTuple):
    """gpu_ms: median GPU time per call. host_ms: median unsynchronised host time of a warm-up
    call, i.e. its launch cost (or the whole call where it waits on the GPU itself). reps: how many
    timed calls the median is over."""

    gpu_ms: float
    host_ms: float
    reps: int = 0  # timed calls behind the median (0: not recorded)


def timing_window(call_ms: float, host_ms: float, reps: int, settle_ms: float, min_window_ms: float):
    """(untimed settle calls, timed calls, spin ms) for calls of call_ms GPU time and host_ms host
    time: settle calls of at least settle_ms, at least reps and min_window_ms of timed calls (at most
    MAX_REPS), and a spin that outlasts the host's queuing of all of them."""
    call_ms = max(call_ms, 1e-3)
    settle = int(np.ceil(settle_ms / call_ms))
    reps = int(min(max(reps, np.ceil(min_window_ms / call_ms)), MAX_REPS))
    return settle, reps, 1.5 * (settle + reps) * host_ms + 0.2


def time_ms(torch, fn, warmup: int, reps: int, warmup_s: float = 0.0, settle_ms: float = 0.0,
            min_window_ms: float = 0.0) -> Timing:
    """fn's GPU time per call: the median of `reps` calls (at least min_window_ms of GPU work), each
    between CUDA events, after `warmup` calls and at least warmup_s seconds of warm-up."""
    t0 = time.perf_counter()
    calls = 0
    host_s = []  # each warm-up call's host time
    group_s, t_group = [], time.perf_counter()  # wall time of each group of 8 synchronised calls
    while calls < warmup or time.perf_counter() - t0 < warmup_s:
        t_call = time.perf_counter()
        fn()
        host_s.append(time.perf_counter() - t_call)
        calls += 1
        if calls % 8 == 0:
            sync(torch)  # wall time then tracks GPU time, not the launch queue
            group_s.append(time.perf_counter() - t_group)
            t_group = time.perf_counter()
    sync(torch)
    host_ms = float(np.median(host_s)) * 1e3
    times = []
    if RUN.smoke:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return Timing(float(np.median(times)), host_ms)
    # Calls queued back to back, one event pair around each, one sync at the end, behind a spin
    # kernel that holds the GPU while the host queues them all: each pair then brackets the GPU
    # time of one call, not the host's launch overhead. Without the spin, a call whose host side
    # is about as long as its GPU time (ours: argument checks, plan look-up, workspace, five
    # launches, ~0.15-0.25 ms; FA4's and Flex's Python launchers alike) waited for its own launch:
    # 0.3 ms forwards read up to 40% slow, more so with other host threads about. A sync per call
    # (before) put the Python side of every call inside the window.
    # The spin idles the GPU, and its clock climbs back at the power limit: calls queued after it
    # without being timed (settle_ms of GPU work) bring the clock back to its loaded level first,
    # and a window of at least min_window_ms averages the power limiter's swings (short windows of
    # sub-ms calls read 5-10% apart on identical kernels).
    call_ms = float(np.median(group_s)) / 8 * 1e3 if group_s else host_ms
    settle, reps, spin_ms = timing_window(call_ms, host_ms, reps, settle_ms, min_window_ms)
    torch.cuda._sleep(int(spin_ms * SPIN_CYCLES_PER_MS))
    for _ in range(settle):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    sync(torch)
    times = [start.elapsed_time(end) for start, end in events]
    return Timing(float(np.median(times)), host_ms, reps)


def time_mask_build(torch, make, extra: dict, name: str):
    """Times a mask preparation built once per mask (ours and cuDNN-frontend's plans, Flex's block
    mask) into `extra`: {name}_ms_first, the first build's wall time (synchronised; one-time set-up
    such as compilation included); {name}_ms, GPU time per build; {name}_wall_ms, wall time per
    synchronised build, host included (what a step pays that builds the mask per batch). Returns
    the first build."""
    sync(torch)
    t0 = time.perf_counter()
    built = make()
    sync(torch)
    extra[f"{name}_ms_first"] = (time.perf_counter() - t0) * 1e3
    extra[f"{name}_ms"] = time_ms(torch, make, 1, 3, RUN.warmup_s).gpu_ms
    extra[f"{name}_wall_ms"] = host_seconds(torch, make, 3) * 1e3
    return built


def kernel_ms(torch, fn, reps: int) -> float:
    """Mean per call of the summed device time of every kernel, memset and copy fn runs (CUPTI,
    torch.profiler): the GPU work alone. The event timing above also counts the gaps a call leaves
    on the GPU while its host side is still launching (a host-bound call reads slower there); this
    does not (and would double count kernels that overlap on several streams)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sync(torch)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        sync(torch)
    device_us = sum(e.device_time_total for e in prof.events() if e.device_type == DeviceType.CUDA)
    return device_us / 1e3 / reps


class Impl:
    """One implementation: forward(case) -> a closure running the forward on the case's inputs
    (autograd-aware: the backward is timed through torch.autograd.grad on its output)."""
    name = ""
    layout = "bhsd"  # which of the case's q/k/v/dout layouts it takes ("bshd" or "bhsd")

    def supports(self, case) -> str | None:  # None, or why it is skipped
        return None


class FlashMask(Impl):
    """Ours. A variant ("flashmask:NAME", --variant) runs the same library with FLASHMASK_*
    switches set around each of its calls (the launchers read them at every launch), so that
    kernel choices are compared in one process on the same inputs."""
    layout = "bshd"

    def __init__(self, torch, name: str = "flashmask", env: dict | None = None):
        from flashmask_paddle.torch import clear_mask_plans, flashmask_attention, load_library, prepare_mask_plan

        load_library()
        self.torch, self.attn, self.name, self.env = torch, flashmask_attention, name, env or {}
        self.clear_plans, self.prepare_plan = clear_mask_plans, prepare_mask_plan

    def wrap(self, fn):
        if not self.env:
            return fn

        def run():
            saved = {k: os.environ.get(k) for k in self.env}
            os.environ.update(self.env)
            try:
                return fn()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

        return run

    def forward(self, case):
        idx = None if case["mask"] in ("causal", "full") else case["indices"]
        causal = case["causal"]
        q, k, v = case["q_bshd"], case["k_bshd"], case["v_bshd"]
        # The mask plan (forward and backward), built once per mask and reused by the timed calls,
        # as cuDNN-frontend's plan and Flex's block mask are: its build time is reported apart.
        make = self.wrap(lambda: (self.clear_plans(),
                                  self.prepare_plan(q, k, v, idx, causal=causal, dropout=case["dropout"])))
        time_mask_build(self.torch, make, case["extra"], "mask_plan")
        if not case["dropout"]:
            return self.wrap(lambda: self.attn(q, k, v, idx, causal=causal))
        # A fixed [seed, offset]: every variant drops the same elements, so outputs stay comparable.
        seed_offset = self.torch.tensor([case["seed"], 0], dtype=self.torch.int64)
        return self.wrap(lambda: self.attn(q, k, v, idx, causal=causal, dropout=case["dropout"],
                                           fixed_seed_offset=seed_offset))


def is_ours(impl_name: str) -> bool:
    return impl_name == "flashmask" or impl_name.startswith("flashmask:")


def parse_variant(spec: str) -> tuple[str, dict]:
    """'NAME:KEY=VALUE,KEY=VALUE' -> ('flashmask:NAME', {KEY: VALUE})."""
    name, _, assignments = spec.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if a)
    if not name or not env or not all(k.startswith("FLASHMASK_") for k in env):
        raise ValueError(f"--variant {spec!r}: expected NAME:FLASHMASK_X=V[,FLASHMASK_Y=W]")
    return f"flashmask:{name}", env


class Flex(Impl):
    """FlexAttention, Triton (flex) or FlashAttention-4 (flexfa4: kernel_options BACKEND=FLASH)."""

    def __init__(self, torch, name: str = "flex", kernel_options: dict | None = None):
        self.name, self.kernel_options = name, kernel_options
        import torch._dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        for knob in ("cache_size_limit", "accumulated_cache_size_limit", "recompile_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 4096)
        # The backward timing replays one graph (retain_graph=True); compiled graphs that donate
        # their saved buffers refuse that (seen at 32K on torch 2.11), so no donation.
        import torch._functorch.config
        if hasattr(torch._functorch.config, "donated_buffer"):
            torch._functorch.config.donated_buffer = False
        # _compile=True builds the block mask without materialising S x S (needed at 128K); torch
        # 2.11 marks the flag deprecated in favour of torch.compile(create_block_mask), same result
        warnings.filterwarnings("ignore", message="_compile flag on create_block_mask")
        self.torch, self.create_block_mask = torch, create_block_mask
        self.fn = torch.compile(flex_attention, dynamic=False)
        self.shape_state = {}  # (B, Sq, Sk) -> (bound buffers, mask_mod): one compile per shape

    def _mask_mod(self, case):
        """One mask_mod per (shape, causal) reading bounds from buffers that are refilled in place
        for each mask, so switching masks never recompiles the kernel (only the block mask changes).
        Plain tensor indexing and comparisons only, which the FLASH backend can trace too (no
        Python scalars or 0-d flags inside). Sq == Sk in this benchmark: causal is kv <= q."""
        torch = self.torch
        key = (case["batch"], case["seqlen"], case["seqlen"], case["causal"])
        if key not in self.shape_state:
            dev = case["q_bshd"].device
            buf = [torch.zeros(case["batch"], case["seqlen"], dtype=torch.int32, device=dev) for _ in range(4)]
            lts, lte, uts, ute = buf

            def visible(b, h, q_idx, kv_idx):
                lower = (q_idx >= lts[b, kv_idx]) & (q_idx < lte[b, kv_idx])
                upper = (q_idx >= uts[b, kv_idx]) & (q_idx < ute[b, kv_idx])
                return ~(lower | upper)

            def visible_causal(b, h, q_idx, kv_idx):
                return visible(b, h, q_idx, kv_idx) & (kv_idx <= q_idx)

            self.shape_state[key] = (buf, visible_causal if case["causal"] else visible)
        return self.shape_state[key]

    def forward(self, case):
        torch = self.torch
        buf, mask_mod = self._mask_mod(case)
        for dst, src in zip(buf, case["bounds"]):
            dst.copy_(src)
        bm = time_mask_build(
            torch, lambda: self.create_block_mask(mask_mod, case["batch"], None, case["seqlen"], case["seqlen"],
                                                  device=case["q_bshd"].device, BLOCK_SIZE=TILE, _compile=True),
            case["extra"], "block_mask")
        q, k, v = case["q_bhsd"], case["k_bhsd"], case["v_bhsd"]
        gqa, options = case["heads"] != case["heads_k"], self.kernel_options
        if options is None:
            return lambda: self.fn(q, k, v, block_mask=bm, enable_gqa=gqa)
        return lambda: self.fn(q, k, v, block_mask=bm, enable_gqa=gqa, kernel_options=options)


class CudnnFlex(Impl):
    """cuDNN-frontend's interval-mask flex_attention: the mask as per-row visible key intervals
    (row_intervals), compiled once per mask into a plan by create_mask_plan (timed apart as
    mask_plan_ms, as Flex's block mask), then flex_attn_func(q, k, v, mask_plan=plan) on BSHD."""
    name = "cudnnflex"
    layout = "bshd"

    def __init__(self, torch):
        from cudnn.flex_attention import create_mask_plan, flex_attn_func

        self.torch, self.create_mask_plan, self.attn = torch, create_mask_plan, flex_attn_func

    def forward(self, case):
        torch = self.torch
        q, k, v = case["q_bshd"], case["k_bshd"], case["v_bshd"]
        funcs = row_intervals(torch, case["bounds"], case["causal"], case["seqlen"], case["seqlen"])
        case["extra"]["mask_nfunc"] = funcs.shape[1]
        plan = time_mask_build(torch, lambda: self.create_mask_plan(funcs, q, k, v, build_backward=True),
                               case["extra"], "mask_plan")
        return lambda: self.attn(q, k, v, mask_plan=plan)


class Fa4Varlen(Impl):
    """FlashAttention-4 flash_attn_varlen_func over the documents as cu_seqlens (document masks;
    causal and full rows as one sequence each): no mask at all, the ceiling a mask must reach."""
    name = "fa4varlen"
    layout = "bshd"

    def __init__(self, torch):
        from flash_attn.cute import flash_attn_varlen_func

        self.torch, self.attn = torch, flash_attn_varlen_func

    def supports(self, case):
        if varlen_sequences(case["mask"], case["docs"]) is None:
            return "not a document, causal or full mask"
        return None

    def forward(self, case):
        torch = self.torch
        b, s, h, d = case["q_bshd"].shape
        lens = varlen_sequences(case["mask"], case["docs"])
        cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=case["q_bshd"].device)
        q, k, v = (case[n].view(b * s, -1, d) for n in ("q_bshd", "k_bshd", "v_bshd"))
        causal, longest = VARLEN_MASKS[case["mask"]], max(lens)

        def run():
            r = self.attn(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                          max_seqlen_k=longest, causal=causal)
            out = r[0] if isinstance(r, tuple) else r
            return out.view(b, s, h, d)

        return run


class Sdpa(Impl):
    def __init__(self, torch, name: str, backend: str):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.torch, self.name = torch, name
        self.backend, self.sdpa_kernel = getattr(SDPBackend, backend), sdpa_kernel

    def supports(self, case):
        if case["mask"] not in SDPA_MASKS:
            return "mask not expressible without a dense mask"
        return None

    def forward(self, case):
        F = self.torch.nn.functional
        q, k, v = case["q_bhsd"], case["k_bhsd"], case["v_bhsd"]
        causal, gqa = case["mask"] == "causal", case["heads"] != case["heads_k"]

        def run():
            with self.sdpa_kernel(self.backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        return run


def make_impls(torch, names, variants=()):
    impls = [FlashMask(torch, *parse_variant(spec)) for spec in variants]  # after ours, before the peers
    for name in names:
        if name == "flashmask":
            impls.insert(0, FlashMask(torch))
        elif name == "cudnnflex":
            impls.append(CudnnFlex(torch))
        elif name == "fa4varlen":
            impls.append(Fa4Varlen(torch))
        elif name == "flexfa4":
            impls.append(Flex(torch, "flexfa4", {"BACKEND": "FLASH"}))
        elif name == "flex":
            impls.append(Flex(torch))
        elif name == "cudnn":
            impls.append(Sdpa(torch, "cudnn", "CUDNN_ATTENTION"))
        elif name == "fa2":
            impls.append(Sdpa(torch, "fa2", "FLASH_ATTENTION"))
        else:
            raise ValueError(f"unknown impl {name!r}; expected one of {', '.join(IMPLS)}")
    return impls


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


def set_up(torch, p: Prepared, case) -> None:
    """Everything of p's implementation on the case but the timed passes: builds the forward (a
    peer's mask preparation is timed there, once per row, into case["extra"]), runs it once
    (compile_s: compilation and autotuning), keeps its output for the cross-check, then builds the
    backward on an autograd forward and runs it once. A failing forward raises; a failing backward
    keeps the forward (bwd None, the row's error says why)."""
    impl, row = p.impl, p.row
    leafs = [case[f"{n}_{impl.layout}"] for n in ("q", "k", "v")]
    fwd = impl.forward(case)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = fwd()
    sync(torch)
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    p.fwd, p.output = fwd, out if impl.layout == "bshd" else out.transpose(1, 2)
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


def timed(torch, fn, warmup: int, reps: int):
    """fn timed once (time_ms) with the GPU's clock sampled over its warm-up and timed calls:
    (Timing, ClockSample or None)."""
    with ClockSampler(RUN.clock_read) as clock:
        timing = time_ms(torch, fn, warmup, reps, RUN.warmup_s, RUN.settle_ms, RUN.min_window_ms)
    return timing, clock.result


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


def mean_clock(samples) -> ClockSample | None:
    """The rounds' clock samples as one: SM clock and power the mean over the rounds that have a
    sample, temperatures over those that read them, the clock limits those of the last of them;
    None without any."""
    got = [s for s in samples if s is not None]
    if not got:
        return None
    return ClockSample(float(np.mean([s.sm_mhz for s in got])), float(np.mean([s.power_w for s in got])),
                       sum(s.count for s in got), got[-1].limits,
                       mean_of_read(s.gpu_c for s in got), mean_of_read(s.mem_c for s in got))


def phase_fields(phase: str, results) -> dict:
    """A phase's row fields from its rounds' (Timing, ClockSample): {phase}_ms and {phase}_host_ms
    the medians over the rounds, {phase}_reps the last round's timed calls (where time_ms recorded
    them), the clock fields of their mean (mean_clock) and, with more than one round,
    {phase}_ms_rounds: each round's GPU ms, in round order."""
    gpu_ms = [timing.gpu_ms for timing, _ in results]
    fields = {f"{phase}_ms": round(float(np.median(gpu_ms)), 4)}
    if len(results) > 1:
        fields[f"{phase}_ms_rounds"] = [round(ms, 4) for ms in gpu_ms]
    fields[f"{phase}_host_ms"] = round(float(np.median([timing.host_ms for timing, _ in results])), 4)
    if results[-1][0].reps:
        fields[f"{phase}_reps"] = results[-1][0].reps
    clock = mean_clock([sample for _, sample in results])
    if clock is not None:
        fields.update(clock.fields(phase))
    return fields


def record(torch, p: Prepared, reps: int) -> None:
    """Writes p's rounds into its row (phase_fields), then --kernel-time's pass, once per phase
    after the rounds. A failing forward pass raises; a failing backward one keeps the forward."""
    p.row.update(phase_fields("fwd", p.rounds["fwd"]))
    if RUN.kernel_time:
        with torch.no_grad():
            p.row["fwd_kernel_ms"] = round(kernel_ms(torch, p.fwd, reps), 4)
    if p.bwd is None:
        return
    p.row.update(phase_fields("bwd", p.rounds["bwd"]))
    if RUN.kernel_time:
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
    if not RUN.smoke:
        torch.cuda.empty_cache()


def prepare(torch, impl, case, row: dict, dropout: float) -> Prepared:
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
        set_up(torch, p, case)
    except Exception as e:
        drop(torch, p, e)
    p.extra = case["extra"]
    return p


def cross_check(prepared) -> None:
    """Every other implementation's forward output against ours (variants too), as the row's
    rel_err_vs_flashmask."""
    ours = next((p.output for p in prepared if p.impl.name == "flashmask" and p.output is not None), None)
    if ours is None:
        return
    ours = ours.float()
    for p in prepared:
        if p.impl.name != "flashmask" and p.output is not None:
            theirs = p.output.float()
            err = float((ours - theirs).norm() / theirs.norm().clamp_min(1e-30))
            p.row["rel_err_vs_flashmask"] = round(err, 5)


def forward_flops(case) -> float:
    """The forward's FLOPs over the case's visible pairs (the backward's: 2.5x, add_tflops)."""
    return 4.0 * case["head_dim"] * case["pairs"] * case["heads"]


def add_tflops(row: dict, flops: float) -> None:
    """The row's TFLOP/s for each time it has (fwd/bwd, event and kernel time): forward `flops`,
    backward 2.5x that."""
    for phase, factor in (("fwd", 1.0), ("bwd", 2.5)):
        for timing in ("", "kernel_"):
            if row.get(f"{phase}_{timing}ms"):
                seconds = row[f"{phase}_{timing}ms"] * 1e-3
                row[f"{phase}_{timing}tflops"] = round(factor * flops / seconds / 1e12, 1)


def bench_case(torch, impls, case, base: dict, args, done) -> None:
    """One row of the matrix: every implementation set up on the case first (prepare, list order),
    then timed --rounds times, round r in round_order(..., r) (the median over the rounds reported:
    no implementation is always timed first, or last, as the GPU warms up at its power limit); each
    one's row completed (record, mask preparation times, TFLOP/s) and handed to done(row) in list
    order, skipped rows included, once every output has been checked against ours (cross_check), so
    that each row written carries its rel_err_vs_flashmask. Everything set up here, autograd graphs
    included, is released on return."""
    prepared = [prepare(torch, impl, case, {"impl": impl.name, **base}, args.dropout) for impl in impls]
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
    dev = torch.device("cpu" if RUN.smoke else "cuda")
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
COLUMNS = ("impl", "mask", "seqlen", "batch", "heads", "heads_k", "head_dim", "dtype", "fwd_ms", "bwd_ms",
           "fwd_tflops", "bwd_tflops", "density")


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
    fig, axes = plt.subplots(len(groups), 2, figsize=(16, 3.6 * len(groups)), squeeze=False)
    for gi, (s, hk, d, dt) in enumerate(groups):
        sel = [r for r in rows if (r["seqlen"], r["heads_k"], r["head_dim"], r["dtype"]) == (s, hk, d, dt)]
        mask_names = [m for m in MASKS if any(r["mask"] == m for r in sel)]
        for ci, key in enumerate(("fwd_tflops", "bwd_tflops")):
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


class ResultFile:
    """--json: rewritten with every row so far after each row set (what a timeout leaves), after
    the rows of the file found at start with --append."""

    def __init__(self, path: Path, append: bool):
        self.path = path
        self.previous = json.loads(path.read_text()) if append and path.is_file() else {"meta": {}, "rows": []}

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
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--variant", action="append", default=[], metavar="NAME:FLASHMASK_X=V,...",
                   help="also time ours with these FLASHMASK_* switches, as impl 'flashmask:NAME' (repeatable)")
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
    p.add_argument("--kernel-time", action="store_true",
                   help="also the summed kernel time per call from torch.profiler (fwd_kernel_ms, "
                        "bwd_kernel_ms and their TFLOP/s; not with --smoke)")
    p.add_argument("--smoke", action="store_true", help="CPU plumbing check (fp32, tiny sizes advised)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    global RUN
    smoke = args.smoke
    if not smoke and not torch.cuda.is_available():
        print("kernel_bench: needs a CUDA device (or --smoke for a CPU run of the plumbing)", file=sys.stderr)
        return 2
    RUN = run_settings(torch, args)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if smoke:  # CPU: fp32, the CPU kernels, eager-compiled flex on the host; sdpa peers need CUDA
        dtypes = {name: torch.float32 for name in dtypes}
        args.impls = [i for i in args.impls if i in ("flashmask", "flex")]
    impls = make_impls(torch, args.impls, args.variant)
    command = " ".join([Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else list(argv)))
    meta = {**provenance.record(command, "cpu (smoke)" if smoke else torch.cuda.get_device_name()),
            "torch": torch.__version__,
            "method": "median of reps queued back to back behind a spin kernel that holds the GPU while the host queues them (GPU time per call), "
                      "untimed calls of settle_ms GPU time between the spin and the timed ones, at least min_window_ms of timed calls, "
                      "after warmup (calls and seconds), CUDA events; TFLOP/s over visible pairs "
                      "(fwd 4*D*pairs*Hq, bwd 2.5x); flex block mask built outside timing",
            "kernel_time": RUN.kernel_time, "warmup": args.warmup, "warmup_s": RUN.warmup_s, "reps": args.reps,
            "settle_ms": RUN.settle_ms, "min_window_ms": RUN.min_window_ms, "rounds": args.rounds, "seed": args.seed, "tokens": args.tokens}
    if args.rounds > 1:
        meta["method"] += (f"; {args.rounds} rounds per row, the implementations timed in alternating order "
                           "(list order in even rounds, reversed in odd ones: ABBA), median over the rounds")
    rows = []
    t_start = time.time()
    result = ResultFile(args.json, args.append)

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
                        case = make_case(torch, mask_name, seqlen, batch, args.heads, heads_k, head_dim,
                                         dtypes[dt_name], args.seed, args.dropout)
                        base = {"mask": mask_name, "seqlen": seqlen, "batch": batch, "heads": args.heads,
                                "heads_k": heads_k, "head_dim": head_dim,
                                "dtype": "fp32" if smoke else dt_name, "density": round(case["density"], 4),
                                "pairs": case["pairs"]}
                        if args.dropout:
                            base["dropout"] = args.dropout
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
