"""Kernel benchmark on one GPU: FlashMask (ours, via flashmask_paddle.torch) vs FlexAttention vs
cuDNN and FlashAttention-2 (torch SDPA backends, only where they can express the mask).

    python3 benchmarks/kernel_bench.py                                   # 8K + 32K, D=128, bf16, all masks
    python3 benchmarks/kernel_bench.py --seqlens 8192 --masks causal causal_document --impls flashmask flex
    python3 benchmarks/kernel_bench.py --seqlens 8192 32768 131072 --head-dims 64 128 --dtypes bf16 fp16 \\
        --heads-k 16 4

Method (DESIGN.md §7): B·S = --tokens (32K) tokens (B = 1 from 32K up), Hq = --heads (16); per row
of the matrix the same random inputs for every implementation; forward and backward timed
separately with CUDA events around each of --reps calls queued back to back (GPU time per call; the
host's launch overhead is hidden, as with triton's do_bench; the end-to-end benchmark keeps it),
median, after --warmup calls and at least --warmup-s seconds
of back-to-back calls (compilation and autotuning happen in warm-up and are reported as compile_s;
the timed warm-up brings the clocks back up after the GPU idled, e.g. through a Flex compile: the
H200 idles at 345 MHz, and a few calls of a millisecond left 5-10% between runs of the same code). Our time includes the mask preprocessing (it runs
inside every call). FlexAttention: `torch.compile(flex_attention, dynamic=False)`; its block mask
comes from `create_block_mask` over a mask_mod that looks the column bounds up in tensors (the
same dense rule as flashmask_paddle.reference), built once per mask outside the timing and
reported as block_mask_ms. TFLOP/s count exactly the visible (q, k) pairs: forward 4·D·pairs·Hq,
backward 2.5× that; the pairs and the 128×128 tile density are counted on the GPU from the dense
rule, 1024 query rows at a time, and cross-checked against masks.count_visible.

Masks (documents drawn with lengths uniform in [S/32, S/4], seeded): causal, sliding_window
(causal, window S/8: 1K at 8K), causal_document, document, share_question (each document: first
third prompt, then two answers), global_sliding_window (64 global tokens + bidirectional window
S/16 each side), prefix_lm_causal (first half bidirectional), prefix_lm_document (each document's
first half bidirectional), full.

Writes --json (rows + meta: command, commit, torch, device, date) and --png (bar chart).
Importable without torch or a GPU (the mask construction is numpy).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from flashmask_paddle import masks  # noqa: E402
from flashmask_paddle.bench import provenance  # noqa: E402

MASKS = ("causal", "sliding_window", "causal_document", "document", "share_question",
         "global_sliding_window", "prefix_lm_causal", "prefix_lm_document", "full")
DEFAULT_MASKS = MASKS[:-1]
IMPLS = ("flashmask", "flex", "cudnn", "fa2")
SDPA_MASKS = ("causal", "full")  # what cuDNN / FA2 can express without a dense mask
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


def _one_row(name: str, seqlen: int, rng: np.random.Generator) -> masks.ColumnMask:
    if name == "causal":
        return masks.causal(seqlen)
    if name == "full":
        return masks.full(seqlen)
    if name == "sliding_window":
        return masks.sliding_window(seqlen, window_left=seqlen // 8)
    if name == "global_sliding_window":
        w = seqlen // 16
        return masks.global_sliding_window(seqlen, global_tokens=64, window=(w, w))
    if name == "prefix_lm_causal":
        return masks.prefix_lm_causal(seqlen, seqlen // 2)
    docs = doc_lengths(rng, seqlen)
    if name == "causal_document":
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


def build_mask(name: str, seqlen: int, batch: int, seed: int = 0) -> masks.ColumnMask:
    """int32 [batch, 1, S, C] bounds (each batch row its own documents) and the causal flag."""
    rng = np.random.default_rng([seed, seqlen, MASKS.index(name)])
    rows = [_one_row(name, seqlen, rng) for _ in range(batch)]
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


def count_pairs_and_tiles(torch, bounds, causal: bool, seqlen_q: int, seqlen_k: int, rows: int = 1024):
    """(visible pairs summed over batch, fraction of 128x128 tiles with a visible pair)."""
    lts, lte, uts, ute = bounds
    batch = lts.shape[0]
    nk = -(-seqlen_k // TILE)
    pad = nk * TILE - seqlen_k
    cols = torch.arange(seqlen_k, device=lts.device)
    pairs = torch.zeros((), dtype=torch.int64, device=lts.device)
    tiles = torch.zeros((), dtype=torch.int64, device=lts.device)
    for r0 in range(0, seqlen_q, rows):
        r1 = min(seqlen_q, r0 + rows)
        q = torch.arange(r0, r1, device=lts.device)[None, :, None]
        vis = ~((q >= lts[:, None]) & (q < lte[:, None]) | (q >= uts[:, None]) & (q < ute[:, None]))
        if causal:
            vis &= cols[None, None, :] <= q + (seqlen_k - seqlen_q)
        pairs += vis.sum()
        nq = -(-(r1 - r0) // TILE)
        vis = torch.nn.functional.pad(vis, (0, pad, 0, nq * TILE - (r1 - r0)))
        tiles += vis.view(batch, nq, TILE, nk, TILE).any(dim=4).any(dim=2).sum()
    total_tiles = batch * (-(-seqlen_q // TILE)) * nk
    return int(pairs.item()), int(tiles.item()) / total_tiles


# ----------------------------------------------------------------------------- timing
SMOKE = False  # --smoke: CPU, fp32, host clock (checks the script's plumbing, numbers meaningless)


def sync(torch):
    if not SMOKE:
        torch.cuda.synchronize()


WARMUP_S = 0.0  # --warmup-s


def time_ms(torch, fn, warmup: int, reps: int) -> float:
    t0 = time.perf_counter()
    calls = 0
    while calls < warmup or time.perf_counter() - t0 < WARMUP_S:
        fn()
        calls += 1
        if calls % 8 == 0:
            sync(torch)  # wall time then tracks GPU time, not the launch queue
    sync(torch)
    times = []
    if SMOKE:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))
    # Calls queued back to back, one event pair around each, one sync at the end: the host runs
    # ahead, so each pair brackets the GPU time of one call and not the host's launch overhead
    # (as triton's do_bench). A sync per call put the Python side of every call (ours: argument
    # checks, workspace allocation, five launches; Flex: guards) inside the window, which on a
    # ~1 ms call moved with the host CPU by 10-20% between machines.
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    sync(torch)
    times = [start.elapsed_time(end) for start, end in events]
    return float(np.median(times))


class Impl:
    """One implementation: prepare(case) -> (fwd() -> out, bwd closure maker) for the case."""
    name = ""

    def supports(self, case) -> str | None:  # None, or why it is skipped
        return None


class FlashMask(Impl):
    name = "flashmask"

    def __init__(self, torch):
        from flashmask_paddle.torch import flashmask_attention, load_library

        load_library()
        self.torch, self.attn = torch, flashmask_attention

    def forward(self, case):
        idx = None if case["mask"] in ("causal", "full") else case["indices"]
        causal = case["causal"]
        q, k, v = case["q_bshd"], case["k_bshd"], case["v_bshd"]
        return lambda: self.attn(q, k, v, idx, causal=causal)


class Flex(Impl):
    name = "flex"

    def __init__(self, torch):
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
        """One mask_mod per shape reading bounds from buffers that are refilled in place for each
        mask, so switching masks never recompiles the kernel (only the block mask changes)."""
        torch = self.torch
        key = (case["batch"], case["seqlen"], case["seqlen"])
        if key not in self.shape_state:
            dev = case["q_bshd"].device
            buf = [torch.zeros(case["batch"], case["seqlen"], dtype=torch.int32, device=dev) for _ in range(4)]
            flag = torch.zeros((), dtype=torch.int32, device=dev)
            off = 0  # Sq == Sk in this benchmark
            lts, lte, uts, ute = buf

            def mask_mod(b, h, q_idx, kv_idx):
                lower = (q_idx >= lts[b, kv_idx]) & (q_idx < lte[b, kv_idx])
                upper = (q_idx >= uts[b, kv_idx]) & (q_idx < ute[b, kv_idx])
                hidden = (flag > 0) & (kv_idx > q_idx + off)
                return ~(lower | upper | hidden)

            self.shape_state[key] = (buf, flag, mask_mod)
        return self.shape_state[key]

    def forward(self, case):
        torch = self.torch
        buf, flag, mask_mod = self._mask_mod(case)
        for dst, src in zip(buf, case["bounds"]):
            dst.copy_(src)
        flag.fill_(int(case["causal"]))
        sync(torch)
        t0 = time.perf_counter()
        bm = self.create_block_mask(mask_mod, case["batch"], None, case["seqlen"], case["seqlen"],
                                    device=case["q_bshd"].device, BLOCK_SIZE=TILE, _compile=True)
        sync(torch)
        case["extra"]["block_mask_ms_first"] = (time.perf_counter() - t0) * 1e3
        case["extra"]["block_mask_ms"] = time_ms(
            torch, lambda: self.create_block_mask(mask_mod, case["batch"], None, case["seqlen"], case["seqlen"],
                                                  device=case["q_bshd"].device, BLOCK_SIZE=TILE, _compile=True),
            1, 3)
        q, k, v = case["q_bhsd"], case["k_bhsd"], case["v_bhsd"]
        gqa = case["heads"] != case["heads_k"]
        return lambda: self.fn(q, k, v, block_mask=bm, enable_gqa=gqa)


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


def make_impls(torch, names):
    impls = []
    for name in names:
        if name == "flashmask":
            impls.append(FlashMask(torch))
        elif name == "flex":
            impls.append(Flex(torch))
        elif name == "cudnn":
            impls.append(Sdpa(torch, "cudnn", "CUDNN_ATTENTION"))
        elif name == "fa2":
            impls.append(Sdpa(torch, "fa2", "FLASH_ATTENTION"))
        else:
            raise ValueError(f"unknown impl {name!r}; expected one of {', '.join(IMPLS)}")
    return impls


def measure(torch, impl, case, warmup, reps, row):
    """Fills row's fwd/bwd milliseconds for one implementation on one case; returns the forward
    output ([B, S, H, D]) for the cross-check, or None. A failing backward keeps the forward numbers."""
    leafs = [case[n] for n in (("q_bshd", "k_bshd", "v_bshd") if impl.name == "flashmask"
                               else ("q_bhsd", "k_bhsd", "v_bhsd"))]
    fwd = impl.forward(case)
    t0 = time.perf_counter()
    with torch.no_grad():
        fwd()
    sync(torch)
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    with torch.no_grad():
        row["fwd_ms"] = round(time_ms(torch, fwd, warmup, reps), 4)
        out = fwd()
    result = out if impl.name == "flashmask" else out.transpose(1, 2)
    dout = case["dout_bshd"] if impl.name == "flashmask" else case["dout_bhsd"]
    try:
        out = fwd()  # with autograd: the graph the backward timing replays

        def bwd():
            return torch.autograd.grad(out, leafs, dout, retain_graph=True)

        t0 = time.perf_counter()
        bwd()
        sync(torch)
        row["compile_s"] = round(row["compile_s"] + time.perf_counter() - t0, 2)
        row["bwd_ms"] = round(time_ms(torch, bwd, warmup, reps), 4)
    except Exception as e:
        row["error"] = f"backward: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    return result


def make_case(torch, mask_name, seqlen, batch, heads, heads_k, head_dim, dtype, seed):
    dev = torch.device("cpu" if SMOKE else "cuda")
    cm = build_mask(mask_name, seqlen, batch, seed)
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
            "head_dim": head_dim, "causal": cm.causal, "indices": indices, "bounds": bounds,
            "pairs": pairs, "density": density, "q_bshd": q, "k_bshd": k, "v_bshd": v, "dout_bshd": dout,
            "q_bhsd": bhsd[0], "k_bhsd": bhsd[1], "v_bhsd": bhsd[2],
            "dout_bhsd": dout.transpose(1, 2).contiguous(), "extra": {}}


# ----------------------------------------------------------------------------- report
COLUMNS = ("impl", "mask", "seqlen", "batch", "heads", "heads_k", "head_dim", "dtype", "fwd_ms", "bwd_ms",
           "fwd_tflops", "bwd_tflops", "density")


def table(rows) -> str:
    head = (f"{'impl':<10} {'mask':<22} {'S':>6} {'B':>2} {'Hq':>3} {'Hk':>3} {'D':>4} {'dtype':<5} "
            f"{'fwd_ms':>8} {'bwd_ms':>8} {'fwd_TF':>7} {'bwd_TF':>7} {'dens':>5} {'vs_flex':>11}  note")
    lines = [head, "-" * len(head)]
    flex = {(r["mask"], r["seqlen"], r["heads_k"], r["head_dim"], r["dtype"]): r for r in rows
            if r["impl"] == "flex" and r.get("fwd_ms")}
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if r.get(key) is not None else "-"
        ratio = "-"
        ref = flex.get((r["mask"], r["seqlen"], r["heads_k"], r["head_dim"], r["dtype"]))
        if ref and r.get("fwd_ms") and r["impl"] != "flex":
            bwd = (f"{ref['bwd_ms'] / r['bwd_ms']:.2f}" if ref.get("bwd_ms") and r.get("bwd_ms") else "-")
            ratio = f"{ref['fwd_ms'] / r['fwd_ms']:.2f}/{bwd}"
        note = r.get("error") or r.get("skipped") or ""
        lines.append(f"{r['impl']:<10} {r['mask']:<22} {r['seqlen']:>6} {r['batch']:>2} {r['heads']:>3} "
                     f"{r['heads_k']:>3} {r['head_dim']:>4} {r['dtype']:<5} {f('fwd_ms', '8.3f'):>8} "
                     f"{f('bwd_ms', '8.3f'):>8} {f('fwd_tflops', '7.1f'):>7} {f('bwd_tflops', '7.1f'):>7} "
                     f"{f('density', '5.3f'):>5} {ratio:>11}  {note[:60]}")
    return "\n".join(lines)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["seqlen"], r["heads_k"], r["head_dim"], r["dtype"]) for r in rows})
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
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


_PREVIOUS = None  # the --append file's content as found at start


def _write_json(args, meta, rows, wall_s):
    """Writes (or rewrites) --json with this run's rows, after those of the file found at start
    when --append; returns every row."""
    global _PREVIOUS
    args.json.parent.mkdir(parents=True, exist_ok=True)
    if _PREVIOUS is None:
        _PREVIOUS = (json.loads(args.json.read_text()) if args.append and args.json.is_file()
                     else {"meta": {}, "rows": []})
    out_meta = dict(meta, wall_s=round(wall_s, 1))
    if _PREVIOUS["meta"]:
        out_meta["command"] = _PREVIOUS["meta"]["command"] + " ;; " + meta["command"]
        out_meta["wall_s"] = round(_PREVIOUS["meta"].get("wall_s", 0) + wall_s, 1)
    every = _PREVIOUS["rows"] + rows
    args.json.write_text(json.dumps({"meta": out_meta, "rows": every}, indent=1))
    return every


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqlens", type=int, nargs="+", default=[8192, 32768])
    p.add_argument("--masks", nargs="+", default=list(DEFAULT_MASKS), choices=MASKS)
    p.add_argument("--head-dims", type=int, nargs="+", default=[128])
    p.add_argument("--dtypes", nargs="+", default=["bf16"], choices=["bf16", "fp16"])
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--heads-k", type=int, nargs="+", default=[16], help="key/value heads (GQA: 4)")
    p.add_argument("--tokens", type=int, default=32768, help="B = max(1, tokens // seqlen)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--warmup-s", type=float, default=0.3,
                   help="also keep warming up until this many seconds passed (GPU clocks)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "kernel_h200.json")
    p.add_argument("--png", type=Path, default=None, help="default: the --json path with .png")
    p.add_argument("--append", action="store_true",
                   help="add the rows to an existing --json (its meta keeps every command)")
    p.add_argument("--smoke", action="store_true", help="CPU plumbing check (fp32, tiny sizes advised)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    global SMOKE, WARMUP_S
    SMOKE = args.smoke
    WARMUP_S = 0.0 if SMOKE else args.warmup_s
    if not SMOKE and not torch.cuda.is_available():
        print("kernel_bench: needs a CUDA device (or --smoke for a CPU run of the plumbing)", file=sys.stderr)
        return 2
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if SMOKE:  # CPU: fp32, the CPU kernels, eager-compiled flex on the host; sdpa peers need CUDA
        dtypes = {name: torch.float32 for name in dtypes}
        args.impls = [i for i in args.impls if i in ("flashmask", "flex")]
    impls = make_impls(torch, args.impls)
    meta = {"command": " ".join([Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else list(argv))),
            "commit": provenance.git_commit(), "torch": torch.__version__, "device": "cpu (smoke)" if SMOKE else torch.cuda.get_device_name(),
            "date": provenance.utc_now(),
            "method": "median of reps queued back to back (GPU time per call) after warmup (calls and seconds), CUDA events; TFLOP/s over visible pairs "
                      "(fwd 4*D*pairs*Hq, bwd 2.5x); flex block mask built outside timing",
            "warmup": args.warmup, "warmup_s": WARMUP_S, "reps": args.reps, "seed": args.seed, "tokens": args.tokens}
    rows = []
    t_start = time.time()
    for seqlen in args.seqlens:
        batch = max(1, args.tokens // seqlen)
        for head_dim in args.head_dims:
            for dt_name in args.dtypes:
                for heads_k in args.heads_k:
                    for mask_name in args.masks:
                        case = make_case(torch, mask_name, seqlen, batch, args.heads, heads_k, head_dim,
                                         dtypes[dt_name], args.seed)
                        outputs = {}
                        for impl in impls:
                            row = {"impl": impl.name, "mask": mask_name, "seqlen": seqlen, "batch": batch,
                                   "heads": args.heads, "heads_k": heads_k, "head_dim": head_dim,
                                   "dtype": "fp32" if SMOKE else dt_name, "density": round(case["density"], 4),
                                   "pairs": case["pairs"]}
                            why = impl.supports(case)
                            if why:
                                row["skipped"] = why
                                rows.append(row)
                                continue
                            case["extra"] = {}
                            try:
                                outputs[impl.name] = measure(torch, impl, case, args.warmup, args.reps, row)
                            except Exception as e:  # one failing peer must not end the run
                                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                                if not SMOKE:
                                    torch.cuda.empty_cache()
                            row.update({k: round(v, 3) for k, v in case["extra"].items()})
                            flops = 4.0 * head_dim * case["pairs"] * args.heads
                            for phase, factor in (("fwd", 1.0), ("bwd", 2.5)):
                                if row.get(f"{phase}_ms"):
                                    row[f"{phase}_tflops"] = round(factor * flops / (row[f"{phase}_ms"] * 1e-3) / 1e12, 1)
                            rows.append(row)
                            print(table([row]).splitlines()[-1], flush=True)
                            _write_json(args, meta, rows, time.time() - t_start)  # survives a timeout
                        if "flashmask" in outputs and "flex" in outputs:
                            a, b = outputs["flashmask"].float(), outputs["flex"].float()
                            err = float((a - b).norm() / b.norm().clamp_min(1e-30))
                            for r in rows[-len(impls):]:
                                if r["impl"] == "flashmask":
                                    r["rel_err_vs_flex"] = round(err, 5)
                        del case, outputs
                        if not SMOKE:
                            torch.cuda.empty_cache()
    rows = _write_json(args, meta, rows, time.time() - t_start)
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
