"""``flashmask-bench e2e RECIPE.yaml [key=value ...]``: end-to-end training throughput of a recipe.

Runs ``--warmup`` + ``--steps`` training steps of the recipe (through its task's ``build_trainer``,
the recipe framework of :mod:`flashmask_paddle.train`) once per mode:

  flashmask  packed rows, our op on the column-wise mask (``attention=flashmask data.packing=true``)
  dense      the same packed rows through an explicit N x N bool mask (``attention=dense``: the
             integration's dense path, the mask built by ``masks.to_dense``)
  padding    one document per row, right-padded (``data.packing=false``), our op

and reports, per mode: tokens/s over REAL tokens (documents, not padding; benchmarks/README.md), median step
time (``--warmup`` steps excluded), peak memory (device memory on a GPU; host RSS on a CPU, sampled
during the steps), mask bytes per step, first/last loss; plus the speedups of flashmask over the
two others. Prints a table, writes JSON and a PNG chart (``--out``, default
``benchmarks/results/e2e_cpu.json`` or ``e2e_gpu.json``).

By default each mode runs in its own process, so one mode's memory does not inflate the next
one's peak; ``--in-process`` runs them in this process (faster, for smoke tests; memory numbers then
carry the previous modes' allocator caches).

Examples::

    flashmask-bench e2e recipes/sft.yaml data.max_length=2048 train.per_device_train_batch_size=2
    flashmask-bench e2e recipes/sft.yaml --modes flashmask dense --steps 3 --warmup 1
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import plotting, provenance

__all__ = ["MODES", "main", "run_mode", "summarize", "table", "plot"]

# mode -> recipe overrides that define it (applied after the user's overrides)
MODES = {
    "flashmask": ["attention=flashmask", "data.packing=true"],
    "dense": ["attention=dense", "data.packing=true"],
    "padding": ["attention=flashmask", "data.packing=false"],
}
_RESULT_TAG = "@@e2e-result "


def _trainer_builder(task: str):
    """The task's ``build_trainer(cfg) -> (trainer, stats)`` (module named by the train CLI)."""
    from flashmask_paddle.train.cli import TASKS

    if task not in TASKS:
        raise ValueError(f"recipe task must be one of {', '.join(TASKS)}, got {task!r}")
    module = importlib.import_module(TASKS[task].split(":")[0])
    build = getattr(module, "build_trainer", None)
    if build is None:
        raise ValueError(f"task {task!r} ({module.__name__}) has no build_trainer(cfg); "
                         "flashmask-bench e2e needs one to run steps of it")
    return build


class _RssSampler:
    """Peak host RSS while running: a daemon thread reads /proc every `period` seconds."""

    def __init__(self, period: float = 0.02):
        import psutil

        self._proc, self._period = psutil.Process(), period
        self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self._period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def _on_gpu() -> bool:
    import paddle

    return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def _sync():
    import paddle

    if _on_gpu():
        paddle.device.synchronize()


def _step_timer(total_steps: int, progress):
    """A TrainerCallback recording the wall time of every optimizer step (synchronised on GPU)."""
    from paddlenlp.trainer import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._t0 = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            _sync()
            self._t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            _sync()
            self.times.append(time.perf_counter() - self._t0)
            progress(1)

    return StepTimer()


def _count_inputs(trainer, attention: str, record: list):
    """Wraps ``trainer.compute_loss`` to record, per training batch, real tokens, mask bytes, loss."""
    original = trainer.compute_loss

    def counted(model, inputs, return_outputs=False):
        training = model.training
        if training:
            idx = inputs.get("attn_mask_startend_row_indices")
            if "num_tokens" in inputs:
                tokens = int(inputs["num_tokens"].sum())
            else:  # a collator without the bookkeeping: count positions that are not padding
                tokens = int((inputs["labels"] != -100).astype("int64").sum())
            mask_bytes = 0
            if idx is not None:
                b, hm, s = idx.shape[0], idx.shape[1], idx.shape[2]
                # dense: the integration materialises a bool [B, Hm, S, S] from the indices
                mask_bytes = b * hm * s * s if attention == "dense" else int(idx.numel()) * 4
            record.append({"tokens": tokens, "rows": int(inputs["input_ids"].shape[0]),
                           "seqlen": int(inputs["input_ids"].shape[1]), "mask_bytes": mask_bytes})
        out = original(model, inputs, return_outputs=return_outputs)
        if training:
            loss = out[0] if isinstance(out, (tuple, list)) else out
            record[-1]["loss"] = float(loss)  # after the forward: the step timer syncs anyway
        return out

    trainer.compute_loss = counted


def run_mode(recipe: str, overrides, mode: str, steps: int, warmup: int, progress=lambda n: None) -> dict:
    """Trains ``warmup + steps`` steps of ``recipe`` in ``mode``; returns the measurements."""
    import paddle

    from flashmask_paddle.train.config import load_config
    from flashmask_paddle.train.integration import flashmask_enabled

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    with tempfile.TemporaryDirectory(prefix="flashmask-e2e-") as out_dir:
        fixed = [f"train.max_steps={warmup + steps}", "train.save_steps=1000000000",
                 "train.logging_steps=1000000000", "train.disable_tqdm=true",
                 f"train.output_dir={out_dir}", "train.resume=false"]
        cfg = load_config(recipe, list(overrides) + MODES[mode] + fixed)
        trainer, stats = _trainer_builder(cfg.task)(cfg)
        timer = _step_timer(warmup + steps, progress)
        trainer.add_callback(timer)
        batches = []
        _count_inputs(trainer, cfg.attention, batches)
        gpu = _on_gpu()
        if gpu:
            paddle.device.cuda.empty_cache()
            if hasattr(paddle.device.cuda, "reset_max_memory_allocated"):
                paddle.device.cuda.reset_max_memory_allocated()
        with flashmask_enabled(cfg.attention), _RssSampler() as rss:
            rss_start = rss.peak
            t0 = time.perf_counter()
            trainer.train()
            wall = time.perf_counter() - t0
    timed = timer.times[warmup:]
    if len(timed) < 1:
        raise RuntimeError(f"mode {mode}: only {len(timer.times)} steps ran, expected {warmup + steps}; "
                           "is the dataset large enough?")
    gas = cfg.train.gradient_accumulation_steps  # micro-batches per optimizer step
    micro = batches[warmup * gas:(warmup + len(timed)) * gas]
    step_s = statistics.median(timed)
    tokens = sum(b["tokens"] for b in micro) / len(timed)
    rows, seqlen = micro[0]["rows"] * gas, micro[0]["seqlen"]
    return {
        "mode": mode, "attention": cfg.attention, "packing": cfg.data.packing,
        "steps": len(timed), "warmup": warmup, "step_s": step_s, "step_s_all": timed,
        "tokens_per_s": tokens / step_s, "real_tokens_per_step": tokens,
        "rows_per_step": rows, "seqlen": seqlen, "padding_share": 1 - tokens / (rows * seqlen),
        "mask_bytes_per_step": statistics.mean(b["mask_bytes"] for b in micro),  # one micro-batch
        "peak_mem_bytes": (paddle.device.cuda.max_memory_allocated() if gpu else rss.peak),
        "mem_kind": "device (max_memory_allocated)" if gpu else "host RSS (sampled, whole process)",
        "rss_at_train_start": None if gpu else rss_start,
        "train_wall_s": wall, "losses": [b.get("loss") for b in batches],
        "pack_stats": dict(stats.__dict__) if hasattr(stats, "__dict__") else str(stats),
        "config": cfg.to_dict(),
    }


def _run_isolated(recipe, overrides, mode, steps, warmup) -> dict:
    """``run_mode`` in a fresh interpreter (clean peak memory); its stderr is passed through."""
    cmd = [sys.executable, "-m", "flashmask_paddle.bench.e2e", recipe, *overrides, "--modes", mode,
           "--steps", str(steps), "--warmup", str(warmup), "--worker"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(_RESULT_TAG):
            return json.loads(line[len(_RESULT_TAG):])
    tail = "\n".join(proc.stdout.splitlines()[-20:])
    raise RuntimeError(f"mode {mode}: worker exited with status {proc.returncode} and no result; "
                       f"end of its output:\n{tail}")


def summarize(results: dict) -> dict:
    """Speedups of flashmask (tokens/s and step time) over the other modes present."""
    out = {}
    fm = results.get("flashmask", {})
    for other, r in results.items():
        if other != "flashmask" and "tokens_per_s" in r and "tokens_per_s" in fm:
            out[f"tokens_per_s_vs_{other}"] = fm["tokens_per_s"] / r["tokens_per_s"]
            out[f"step_time_vs_{other}"] = r["step_s"] / fm["step_s"]
    return out


def table(report: dict) -> str:
    head = (f"{'mode':<10} {'rows x S':>10} {'step ms':>9} {'eff. tok/s':>11} {'pad %':>6} "
            f"{'peak MB':>9} {'mask KB/step':>13} {'loss':>8}")
    lines = [head, "-" * len(head)]
    for mode, r in report["results"].items():
        if "step_s" not in r:
            lines.append(f"{mode:<10} {r.get('error', '?')[:100]}")
            continue
        loss = f"{r['losses'][-1]:.4f}" if r.get("losses") else "-"
        lines.append(f"{mode:<10} {r['rows_per_step']:>4} x {r['seqlen']:<4} {r['step_s'] * 1e3:9.1f} "
                     f"{r['tokens_per_s']:11.1f} {100 * r['padding_share']:5.1f}% "
                     f"{r['peak_mem_bytes'] / 2**20:9.1f} {r['mask_bytes_per_step'] / 2**10:13.1f} {loss:>8}")
    for key, val in report["speedup"].items():
        lines.append(f"flashmask {key.replace('_', ' ')}: {val:.2f}x")
    lines.append("eff. tok/s: effective tokens per second, real (document) tokens only, padding excluded: "
                 "what PaddleNLP's benchmark mode reports as Effective_Tokens_per_second")
    return "\n".join(lines)


def plot(report: dict, png: Path) -> None:
    plt = plotting.pyplot()

    done = {m: r for m, r in report["results"].items() if "step_s" in r}
    names = list(done)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    panels = (("real tokens/s", [done[m]["tokens_per_s"] for m in names]),
              ("step time (ms)", [done[m]["step_s"] * 1e3 for m in names]),
              (f"peak memory (MB, {report['mem_kind']})", [done[m]["peak_mem_bytes"] / 2**20 for m in names]))
    colors = {"flashmask": "tab:blue", "dense": "tab:orange", "padding": "tab:gray"}
    for ax, (title, vals) in zip(axes, panels):
        ax.bar(names, vals, color=[colors.get(m, "tab:green") for m in names])
        ax.set_title(title, fontsize=9)
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    cfg = next(iter(done.values()))["config"] if done else {}
    m = cfg.get("model", {})
    fig.suptitle(f"flashmask-bench e2e: {cfg.get('task', '?')} recipe, {m.get('num_hidden_layers')} layers "
                 f"hidden {m.get('hidden_size')}, rows of {cfg.get('data', {}).get('max_length')} tokens — "
                 f"{report['device']}", fontsize=9)
    plotting.save_png(fig, png, dpi=110)


def _device_name() -> str:
    if _on_gpu():
        import paddle

        return paddle.device.cuda.get_device_name()
    return f"CPU: {provenance.cpu_name()} ({os.cpu_count()} cores)"


def _progress_bar(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return (lambda n: None), (lambda: None)
    bar = tqdm(total=total, desc="e2e steps", unit="step", file=sys.stderr)
    return bar.update, bar.close


def parse_args(argv):
    p = argparse.ArgumentParser(prog="flashmask-bench e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help="YAML recipe (e.g. recipes/sft.yaml)")
    p.add_argument("overrides", nargs="*", help="recipe overrides key=value (e.g. data.max_length=2048)")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--steps", type=int, default=5, help="timed steps per mode (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--out", type=Path, help="JSON path (PNG beside it); default "
                                            "benchmarks/results/e2e_{cpu,gpu}.json")
    p.add_argument("--in-process", action="store_true",
                   help="run every mode in this process (faster; memory peaks less clean)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error(f"--steps must be >= 1 and --warmup >= 0, got {args.steps} and {args.warmup}")
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        p.error(f"overrides must be key=value, got {bad}")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:  # one mode for _run_isolated: the result on stdout, behind a tag
        result = run_mode(args.recipe, args.overrides, args.modes[0], args.steps, args.warmup)
        print(_RESULT_TAG + json.dumps(result, default=str), flush=True)
        return 0
    from flashmask_paddle.train.config import ConfigError, load_config

    try:
        load_config(args.recipe, args.overrides)  # fail fast on a bad recipe, before any training
    except ConfigError as e:
        print(f"flashmask-bench e2e: error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    load_start = os.getloadavg()[0]  # CPU timings on a shared host: record how shared it was
    results = {}
    update, close = _progress_bar(len(args.modes) * (args.steps + args.warmup)) if args.in_process else (
        None, None)
    for mode in args.modes:
        try:
            if args.in_process:
                results[mode] = run_mode(args.recipe, args.overrides, mode, args.steps, args.warmup, update)
            else:
                results[mode] = _run_isolated(args.recipe, args.overrides, mode, args.steps, args.warmup)
        except Exception as exc:  # keep the other modes' results
            results[mode] = {"mode": mode, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"flashmask-bench e2e: mode {mode} failed: {exc}", file=sys.stderr)
    if close:
        close()
    import paddle

    gpu = _on_gpu()
    report = {
        "benchmark": "flashmask-bench e2e",
        **provenance.record("flashmask-bench e2e " + " ".join(sys.argv[2:] if argv is None else argv),
                            _device_name()),
        "paddle": paddle.__version__,
        "mem_kind": "device memory" if gpu else "host RSS",
        "counting": "tokens/s = real (document) tokens per step / median step time; padding excluded",
        "wall_s": time.perf_counter() - t0, "cpu_count": os.cpu_count(),
        "load_avg_1min": {"start": load_start, "end": os.getloadavg()[0]},
        "results": results, "speedup": summarize(results),
    }
    out = args.out or Path("benchmarks/results") / ("e2e_gpu.json" if gpu else "e2e_cpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    if not args.no_plot:
        plot(report, out.with_suffix(".png"))
    print(table(report))
    print(f"wrote {out}" + ("" if args.no_plot else f" and {out.with_suffix('.png')}"))
    return 0 if all("step_s" in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
