"""End-to-end training throughput on the H200: packed FlashMask against the strongest peers, each
peer's mask built per batch inside the timed step.

No Paddle GPU wheel runs on the H200 (docs/ARCHITECTURE.md), so this is plain PyTorch: a decoder
stack written here (RMSNorm, RoPE restarting in every document, SwiGLU, bf16, AdamW) trains on rows
packed from documents; every row is a causal-document mask (a token sees the earlier tokens of its
own document; a row's padding tail is one more segment, its labels ignored), so every attention
computes the same function. The attentions and how each builds its mask: benchmarks/e2e_attention.py
(flashmask, dense SDPA, Triton FlexAttention, FlexAttention on FlashAttention-4, FlashAttention-4
varlen, cuDNN-frontend flex_attention).

Configurations (CONFIGS; --configs picks some):
  32k_short      32K-token rows of real short SFT documents (GSM8K and hh-rlhf token counts,
                 benchmarks/data/doc_lengths.json), a Llama-2-7B-shaped stack (32 heads of 128)
  8k_short       the same in four 8K rows per step
  128k_long      one 128K-token row of long documents, lengths uniform in [8K, 64K] tokens (a
                 long-context corpus: books, code files), where attention dominates the step
  32k_short_gqa  (a) with Llama-3-8B's attention and MLP (32 query / 8 key-value heads, MLP 14336)
  128k_long_gqa  (c) with the same
The 128K configurations run 2 decoder layers instead of 4 (activations of 4 layers plus the
logits would not fit in 141 GB), and dense SDPA runs only up to 32K (its S x S mask: 16 GB at 128K).

Per configuration and attention: real tokens per second (padding excluded) over the median step,
whose timing includes the attention's mask preparation for that batch (as training pays it); the
mask build time alone; attention fwd and fwd+bwd alone (mask prebuilt); the attention share of the
step; peak memory; mask bytes; the first loss (all must agree) and the attention output against
ours. Then ours and the best peer of the configuration head to head: alternating step by step in
one training run, ABBA order, so that drift falls on both; the bar reads that median paired ratio.

Scale rows (--scale): attention alone (fwd + bwd, GQA 16:4, D = 128) on single causal-document
rows of 1M, 2M and 4M tokens (long documents as above): TFLOP/s over the visible pairs and peak
memory, for ours and every peer that fits.

  python benchmarks/e2e_h200.py                      # every configuration, then the scale rows
  python benchmarks/e2e_h200.py --configs 32k_short --impls flashmask flexfa4 fa4varlen
  python benchmarks/e2e_h200.py --smoke              # tiny CPU run: checks the script end to end
  python benchmarks/e2e_h200.py --replot results.json

The configurations: e2e_config.py; the batches: e2e_data.py; the decoder: e2e_model.py; the table,
bar, chart and merging of reports: e2e_report.py. This file times the steps and the attention alone.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from e2e_attention import IMPLS, host_seconds, make_attention  # noqa: E402
from e2e_config import (CONFIGS, OUTPUT_REL_TOL, SCALE_HEADS, SCALE_ROWS, Config, ModelShape,  # noqa: E402
                        RunPlan, smoke_configs)
from e2e_data import load_lengths, long_lengths, make_batches, pack_rows, segment_arrays  # noqa: E402
from e2e_model import build_model  # noqa: E402
from e2e_report import best_peer, make_report, merge, plot, seq_label, table, write_report  # noqa: E402
from kernel_masks import LONG_DOCS  # noqa: E402
from flashmask_paddle.bench.gpu_clock import ClockSampler, current_cuda_reader  # noqa: E402


# ----------------------------------------------------------------------------------------------
# Timing and one configuration
# ----------------------------------------------------------------------------------------------
def timed(torch, fn) -> float:
    """Seconds of one call of `fn` (CUDA events on the GPU, a host clock on the CPU)."""
    if torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def peak_memory(torch) -> int | None:
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None


def reset_peak(torch):
    if torch.cuda.is_available():
        gc.collect()  # a previous attention's graphs and plans hold device memory until collected
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()



def progress_bar(desc, total):
    """A tqdm bar on a terminal; nothing in logs (a log keeps only the results, not the progress redraws)."""
    if not sys.stderr.isatty():
        return lambda done, total: None
    try:
        from tqdm import tqdm
        bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr)

        def update(done, _total):
            bar.update(done - bar.n)
            if done == _total:
                bar.close()
        return update
    except ImportError:
        return lambda done, total: None



def attention_inputs(torch, b, s, heads, kv_heads, head_dim, device, dtype, seed=1):
    gen = torch.Generator(device=device).manual_seed(seed)
    mk = lambda h: torch.randn(b, s, h, head_dim, device=device, dtype=dtype, generator=gen)  # noqa: E731
    q, k, v = (mk(h).requires_grad_() for h in (heads, kv_heads, kv_heads))
    return q, k, v, mk(heads)


def attention_alone(torch, impl, batches, shape: ModelShape, dtype, device, reps):
    """Median seconds of attention fwd and of fwd + bwd on the step's shapes, masks prebuilt, the
    batches rotating; the last output too. The forward records autograd, as in training, so a
    compiled peer compiles once (fwd + bwd) and not again for an inference-only graph."""
    b, s = batches[0]["seg_id"].shape
    q, k, v, dout = attention_inputs(torch, b, s, shape.heads, shape.kv_heads, shape.head_dim, device, dtype)
    fwd, fwd_bwd, mask_bytes, holder = [], [], [], {}
    for rep in range(len(batches) + reps):  # one untimed call per batch: compiles, allocates
        for t in (q, k, v):
            t.grad = None
        # Built (untimed) right before its call, never ahead: a peer's mask may read state that the
        # next prepare() refills (Flex's mask_mod reads a segment-id buffer at run time).
        mask = impl.prepare(batches[rep % len(batches)])
        t_f = timed(torch, lambda: holder.__setitem__("out", impl(q, k, v, mask)))
        t_b = timed(torch, lambda: holder["out"].backward(dout))
        if rep < len(batches):
            mask_bytes.append(impl.mask_bytes(mask))
        else:
            fwd.append(t_f)
            fwd_bwd.append(t_f + t_b)
    return (statistics.median(fwd), statistics.median(fwd_bwd), holder["out"].detach().float(),
            statistics.mean(mask_bytes))


def fresh_start(torch, model, init_state):
    """The initial weights back in `model` and a new optimizer over them: every training run of
    this benchmark starts from the same state."""
    model.load_state_dict(init_state)
    return torch.optim.AdamW(model.parameters(), lr=1e-5, fused=torch.cuda.is_available())


def train_step(torch, model, opt, batch):
    """Seconds and loss of one training step with model.attention on this batch, its mask built
    inside the step."""
    holder = {}

    def step():
        mask = model.attention.prepare(batch)
        loss = model(batch["ids"], batch["rope"], mask, batch["labels"])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        holder["loss"] = loss
    t = timed(torch, step)
    return t, float(holder["loss"].detach())


def train_steps(torch, model, opt, batches, warmup, steps, progress):
    """Step times (seconds) of the timed steps and the loss of the very first step."""
    times, first_loss = [], None
    for i in range(warmup + steps):
        t, loss = train_step(torch, model, opt, batches[i % len(batches)])
        first_loss = loss if first_loss is None else first_loss
        if i >= warmup:
            times.append(t)
        progress(i + 1, warmup + steps)
    return times, first_loss


def head_to_head(torch, model, init_state, pair, batches, pairs):
    """Two attentions alternating step by step in one training run, in ABBA order, so that clock,
    thermal and allocator drift fall on both alike; one untimed pair first. Returns each one's
    step times and the per-pair ratios b / a (> 1: a is faster)."""
    a, b = pair
    opt = fresh_start(torch, model, init_state)
    times = {a.name: [], b.name: []}
    for k in range(pairs + 1):
        step_in_pair = {}
        for impl in ((a, b) if k % 2 == 0 else (b, a)):
            model.attention = impl
            step_in_pair[impl.name], _ = train_step(torch, model, opt, batches[k % len(batches)])
        if k > 0:
            for name, t in step_in_pair.items():
                times[name].append(t)
    del opt
    model.load_state_dict(init_state)
    return times, [tb / ta for ta, tb in zip(times[a.name], times[b.name])]


def burn_in(torch, model, init_state, impl, batches, steps):
    """Untimed training steps before the first timed attention of a configuration. Without them the
    attention measured first ran ~0.5% slower per step than the same attention measured second
    (H200, 2026-11-29), the size of the differences this benchmark has to resolve."""
    if steps <= 0:
        return
    opt = fresh_start(torch, model, init_state)
    model.attention = impl
    train_steps(torch, model, opt, batches, steps, 0, lambda *a: None)
    del opt
    model.load_state_dict(init_state)


def run_config(torch, config: Config, plan: RunPlan, impls, short_lengths, device, dtype, scale,
               deadline, log, save, clock_read=None):
    """Every attention on one configuration, then ours against its best peer head to head;
    `save(result)` after each, so a run cut off by a time limit keeps what it measured.
    `clock_read` (gpu_clock.current_cuda_reader): the GPU's clock and power over each one's timed steps."""
    shape = config.shape
    batches = make_batches(torch, config, plan, short_lengths, device, dtype, scale)
    rows = batches[0]["seg_id"].shape[0]
    real = statistics.mean(bt["real_tokens"] for bt in batches)
    pairs = statistics.mean(bt["pairs"] for bt in batches)  # per head, summed over the rows
    result = {"name": config.name, "seqlen": config.seqlen, "rows": rows, "shape": asdict(shape),
              "docs": config.docs, "real_tokens_per_step": real, "padding_share": 1 - real / (rows * config.seqlen),
              "docs_per_step": statistics.mean(bt["docs"] for bt in batches),
              "visible_pair_share": pairs / (rows * config.seqlen ** 2), "impls": {}}
    flop_fwd = 4 * shape.head_dim * pairs * shape.heads  # over exactly the visible pairs
    torch.manual_seed(plan.seed)
    model = build_model(torch, shape, device, dtype)
    init_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    result["parameters"] = sum(p.numel() for p in model.parameters())
    mine = [i for i in impls if i.name == "flashmask" or i.name in config.peers]
    if mine:
        burn_in(torch, model, init_state, mine[0], batches, plan.burn_in)
    ref_out = None
    for impl in mine:
        if time.monotonic() > deadline:
            result["impls"][impl.name] = {"skipped": "time budget spent"}
            continue
        try:
            reset_peak(torch)
            t_f, t_fb, out, mask_bytes = attention_alone(torch, impl, batches, shape, dtype, device, plan.attn_reps)
            build = statistics.median(host_seconds(torch, lambda bt=bt: impl.prepare(bt), 2) for bt in batches)
            ref_out = out if ref_out is None else ref_out
            rel = float((out - ref_out).norm() / ref_out.norm())
            del out
            opt = fresh_start(torch, model, init_state)
            model.attention = impl
            reset_peak(torch)
            bar = progress_bar(f"{config.name} {impl.name}", plan.warmup + plan.steps)
            with ClockSampler(clock_read) as clock:
                times, loss0 = train_steps(torch, model, opt, batches, plan.warmup, plan.steps, bar)
            step = statistics.median(times)
            entry = result["impls"][impl.name] = {
                "step_s": step, "step_s_all": times, "tokens_per_s": real / step,
                "mask_build_s": build, "mask_build_share": build / step, "mask_bytes": mask_bytes,
                "attn_fwd_s": t_f, "attn_fwd_bwd_s": t_fb, "attn_share": min(1.0, shape.layers * t_fb / step),
                "attn_tflops_fwd": flop_fwd / t_f / 1e12, "attn_tflops_fwd_bwd": 3.5 * flop_fwd / t_fb / 1e12,
                "peak_mem_bytes": peak_memory(torch), "first_loss": loss0, "attn_out_rel_err_vs_first": rel,
                "output_matches": rel <= OUTPUT_REL_TOL,
            }
            entry.update(clock.fields("step"))
            if rel > OUTPUT_REL_TOL:
                log(f"  {config.name}: {impl.name} attention output differs from {mine[0].name}'s (rel err {rel:.1e} > "
                    f"{OUTPUT_REL_TOL}): left out of the best-peer choice")
            if hasattr(impl, "builder_of"):
                entry["block_mask_builder"] = impl.builder_of(batches[0]["seg_id"])
            log(f"  {config.name}: {impl.name} step {step * 1e3:.1f} ms ({real / step:.0f} tok/s), mask "
                f"{build * 1e3:.2f} ms, attn fwd+bwd {t_fb * 1e3:.2f} ms, rel err {rel:.1e}, loss {loss0:.4f}")
            del opt
        except Exception as exc:  # a missing peer or an OOM must not lose the other results
            result["impls"][impl.name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            log(f"  {config.name}: {impl.name} FAILED: {type(exc).__name__}: {exc}"[:300])
        reset_peak(torch)
        save(result)
    best = best_peer(result["impls"])
    if "step_s" in result["impls"].get("flashmask", {}) and best is not None:
        result["best_peer"] = best
        result["speedup_vs_best_peer_sequential"] = (result["impls"][best]["step_s"] /
                                                     result["impls"]["flashmask"]["step_s"])
        by_name = {i.name: i for i in mine}
        if plan.h2h_pairs > 0 and time.monotonic() < deadline:
            times, ratios = head_to_head(torch, model, init_state, (by_name["flashmask"], by_name[best]),
                                         batches, plan.h2h_pairs)
            q1, med, q3 = np.percentile(ratios, [25, 50, 75])
            result["head_to_head"] = {
                "rival": best, "pairs": len(ratios), "order": "ABBA, one untimed pair first",
                "flashmask_step_s": statistics.median(times["flashmask"]),
                "rival_step_s": statistics.median(times[best]),
                "paired_speedup_median": float(med), "paired_speedup_q1_q3": [float(q1), float(q3)],
                "pairs_flashmask_faster": sum(r > 1.0 for r in ratios),
            }
            log(f"  {config.name}: head to head vs {best}: step speedup median {med:.3f} "
                f"(IQR {q1:.3f}-{q3:.3f}) over {len(ratios)} pairs")
        save(result)
    del model, init_state
    reset_peak(torch)
    return result


# ----------------------------------------------------------------------------------------------
# Scale rows: attention alone on one very long causal-document row
# ----------------------------------------------------------------------------------------------
def scale_one(torch, name, batch, pairs, heads, head_dim, device, dtype, reps):
    """Attention alone (fwd, then bwd) on one scale row; its tensors are freed on return."""
    s = batch["seg_id"].shape[1]
    impl = make_attention(torch, name, heads=heads[0], heads_k=heads[1], head_dim=head_dim, dtype=dtype)
    q, k, v, dout = attention_inputs(torch, 1, s, heads[0], heads[1], head_dim, device, dtype)
    build = host_seconds(torch, lambda: impl.prepare(batch), 1)
    mask = impl.prepare(batch)
    holder, fwd, bwd = {}, [], []
    for rep in range(1 + reps):  # one untimed call
        for t in (q, k, v):
            t.grad = None
        t_f = timed(torch, lambda: holder.__setitem__("out", impl(q, k, v, mask)))
        t_b = timed(torch, lambda: holder["out"].backward(dout))
        if rep:
            fwd.append(t_f)
            bwd.append(t_b)
    flop = 4 * head_dim * pairs * heads[0]
    t_f, t_b = statistics.median(fwd), statistics.median(bwd)
    return {"fwd_s": t_f, "bwd_s": t_b, "fwd_tflops": flop / t_f / 1e12, "bwd_tflops": 2.5 * flop / t_b / 1e12,
            "mask_build_s": build, "peak_mem_bytes": peak_memory(torch)}


def run_scale(torch, names, device, dtype, log, save, seqlens=SCALE_ROWS, heads=SCALE_HEADS, head_dim=128,
              scale: int = 1, reps: int = 2):
    """Single causal-document rows of long documents: attention alone for every attention that
    fits (an out-of-memory or a peer's limit is recorded and the others go on)."""
    rows = []
    for s in seqlens:
        rng = np.random.default_rng([7, s])
        packed, pad = pack_rows(long_lengths(rng, scale, count=max(16, 4 * s * scale // LONG_DOCS[0])), s, 1, rng)
        seg_id, _, _ = segment_arrays(packed, pad, s)
        batch = {"seg_id": torch.from_numpy(seg_id).to(device), "doc_lengths": packed}
        pairs = sum(n * (n + 1) // 2 for n in packed[0])
        row = {"seqlen": s, "heads": list(heads), "head_dim": head_dim, "docs": len(packed[0]),
               "visible_pairs_per_head": pairs, "impls": {}}
        for name in names:
            if name == "dense":
                row["impls"][name] = {"skipped": "an S x S mask"}
                continue
            reset_peak(torch)
            try:
                m = row["impls"][name] = scale_one(torch, name, batch, pairs, heads, head_dim, device, dtype, reps)
                log(f"  scale {seq_label(s)}: {name} fwd {m['fwd_tflops']:.0f} / bwd {m['bwd_tflops']:.0f} "
                    f"TFLOP/s, peak {(m['peak_mem_bytes'] or 0) / 2**30:.1f} GiB")
            except Exception as exc:  # noqa: BLE001
                row["impls"][name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                log(f"  scale {seq_label(s)}: {name} FAILED: {type(exc).__name__}: {exc}"[:200])
            reset_peak(torch)
        rows.append(row)
        save(rows)
    return rows


# ----------------------------------------------------------------------------------------------
# The attentions a configuration runs
# ----------------------------------------------------------------------------------------------
def make_impls(torch, config: Config, names, dtype, log) -> list:
    """The attentions of `names` that `config` runs (ours and its peers) and that load here."""
    shape, impls = config.shape, []
    for name in names:
        if name != "flashmask" and name not in config.peers:
            continue
        try:
            impls.append(make_attention(torch, name, heads=shape.heads, heads_k=shape.kv_heads,
                                        head_dim=shape.head_dim, dtype=dtype))
        except Exception as exc:  # a peer not installed here (or FlexAttention on a CPU)
            log(f"{config.name}: {name} unavailable: {type(exc).__name__}: {exc}"[:200])
    dense = next((i for i in impls if i.name == "dense"), None)
    if dense is not None and torch.cuda.is_available():
        pick_dense_backend(torch, dense, log)
    return impls


def pick_dense_backend(torch, dense, log):
    """Keeps the faster masked SDPA backend (cuDNN or memory-efficient) at a 4K probe, fwd+bwd."""
    from torch.nn.attention import SDPBackend
    s, h, d = 4096, 32, 128
    q, k, v = (torch.randn(1, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    mask = torch.ones(s, s, dtype=torch.bool, device="cuda").tril_()[None, None]
    best = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        dense.backends = [backend]
        try:
            def run():
                dense(q, k, v, mask).sum().backward()
            run()
            t = statistics.median(timed(torch, run) for _ in range(3))
            log(f"dense probe {backend.name}: {t * 1e3:.2f} ms fwd+bwd at 4K")
            if best is None or t < best[0]:
                best = (t, backend)
        except Exception as exc:
            log(f"dense probe {backend.name} failed: {type(exc).__name__}: {exc}")
    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    if best:  # the faster first; the other stays as a fallback for shapes the first rejects
        order.remove(best[1])
        order.insert(0, best[1])
    dense.backends = order


# ----------------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (fp32; the GPU-only peers skipped)")
    p.add_argument("--configs", nargs="+", help=f"default: all of {', '.join(CONFIGS)}")
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    p.add_argument("--scale", choices=("on", "off", "only"), default="on", help="the scale rows (default on)")
    p.add_argument("--scale-seqlens", type=int, nargs="+", help="default 1M 2M 4M")
    p.add_argument("--steps", type=int)
    p.add_argument("--warmup", type=int)
    p.add_argument("--attn-reps", type=int, help="timed attention-alone calls (default 5)")
    p.add_argument("--h2h-pairs", type=int, help="ours vs the best peer, interleaved step pairs (default 12; 0: none)")
    p.add_argument("--dataset", choices=("mix", "gsm8k", "hh_rlhf"))
    p.add_argument("--time-budget-s", type=float, default=1e9,
                   help="skip the remaining attentions once this many seconds have passed")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "e2e_h200.json")
    p.add_argument("--replot", type=Path, help="only redraw the PNG of this JSON")
    p.add_argument("--merge", type=Path, nargs="+",
                   help="only join these JSONs (runs of some configurations each, e.g. one per time-limited "
                        "job) into --out, the bar recomputed over all")
    p.add_argument("--note", help="with --merge: a note kept in the report (e.g. which build each row is)")
    p.add_argument("--no-plot", action="store_true", help="JSON only (redraw later with --replot)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.replot:
        plot(json.loads(args.replot.read_text()), args.replot.with_suffix(".png"))
        return 0
    if args.merge:
        merge(args.merge, args.out, plot_png=not args.no_plot, note=args.note)
        return 0
    t_start = time.monotonic()
    deadline = t_start + args.time_budget_s
    import torch

    plan = RunPlan()
    configs = smoke_configs(plan) if args.smoke else dict(CONFIGS)
    for key in ("steps", "warmup", "attn_reps", "h2h_pairs", "dataset"):
        if getattr(args, key) is not None:
            setattr(plan, key, getattr(args, key))
    if args.configs:
        unknown = [c for c in args.configs if c not in configs]
        if unknown:
            print(f"--configs: unknown {unknown}; choose from {sorted(configs)}", file=sys.stderr)
            return 2
        configs = {c: configs[c] for c in args.configs}
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("no CUDA device: the real run needs the H200; use --smoke on a CPU", file=sys.stderr)
        return 2
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    scale = 16 if args.smoke else 1
    short_lengths = load_lengths(plan.dataset, scale=scale)

    def log(msg):
        print(f"[{time.monotonic() - t_start:6.1f}s] {msg}", flush=True)

    clock_read = current_cuda_reader(torch)

    results, scale_rows = [], []

    def save(partial=None) -> dict:
        """The report so far, on disk (a run cut off by a time limit keeps what it measured)."""
        report = make_report(torch, argv, plan, dtype, results + ([partial] if partial else []), scale_rows,
                             t_start, args.smoke)
        write_report(report, args.out)
        return report

    def save_scale(rows):
        scale_rows[:] = rows
        save()

    if args.scale != "only":
        for config in configs.values():
            impls = make_impls(torch, config, args.impls, dtype, log)
            log(f"{config.name}: {config.seqlen // 1024}K rows, {max(1, config.tokens_per_step // config.seqlen)} "
                f"per step, {config.shape.heads}/{config.shape.kv_heads} heads, {config.shape.layers} layers, "
                f"{config.docs} documents")
            results.append(run_config(torch, config, plan, impls, short_lengths, device, dtype, scale, deadline,
                                      log, save, clock_read))
            save()
    if args.scale != "off" and time.monotonic() < deadline:
        seqlens = args.scale_seqlens or ([4096, 8192] if args.smoke else list(SCALE_ROWS))
        heads = (4, 2) if args.smoke else SCALE_HEADS
        run_scale(torch, args.impls, device, dtype, log, save_scale, seqlens=seqlens, heads=heads,
                  head_dim=16 if args.smoke else 128, scale=scale)
    report = save()
    if not args.no_plot:
        plot(report, args.out.with_suffix(".png"))
    print(table(results, scale_rows))
    print("bar:", json.dumps(report["bar"]))
    log(f"wrote {args.out}" + ("" if args.no_plot else f" and {args.out.with_suffix('.png')}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
