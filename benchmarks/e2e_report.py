"""The end-to-end benchmark's results: the printed table, the bar (ours against each configuration's
best peer, every peer's mask cost counted), the chart, the JSON report, and merging the reports of
several runs into one."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

from e2e_attention import IMPLS
from kernel_masks import LONG_DOCS
from flashmask_paddle.bench import provenance


def seq_label(seqlen: int) -> str:
    return f"{seqlen // 1024}K" if seqlen % 1024 == 0 else str(seqlen)


def table(results, scale_rows) -> str:
    head = (f"{'config':<15} {'attention':<10} {'step ms':>9} {'tok/s':>9} {'mask ms':>8} {'attn%':>6} "
            f"{'attn ms':>9} {'attn TF/s':>9} {'peak GB':>8} {'loss0':>7} {'out err':>8}")
    lines = [head, "-" * len(head)]
    for r in results:
        for name, m in r["impls"].items():
            if "step_s" not in m:
                lines.append(f"{r['name']:<15} {name:<10} {m.get('error') or m.get('skipped')}"[:160])
                continue
            peak = m["peak_mem_bytes"] / 2**30 if m["peak_mem_bytes"] else float("nan")
            lines.append(
                f"{r['name']:<15} {name:<10} {m['step_s'] * 1e3:9.1f} {m['tokens_per_s']:9.0f} "
                f"{m['mask_build_s'] * 1e3:8.2f} {100 * m['attn_share']:5.1f}% {m['attn_fwd_bwd_s'] * 1e3:9.2f} "
                f"{m['attn_tflops_fwd_bwd']:9.1f} {peak:8.1f} {m['first_loss']:7.4f} "
                f"{m['attn_out_rel_err_vs_first']:8.1e}")
        if "best_peer" in r:
            h = r.get("head_to_head")
            paired = (f", head to head {h['paired_speedup_median']:.3f}x (IQR {h['paired_speedup_q1_q3'][0]:.3f}-"
                      f"{h['paired_speedup_q1_q3'][1]:.3f}, {h['pairs']} ABBA pairs)") if h else ""
            lines.append(f"{'':<15} ours vs best peer {r['best_peer']}: step "
                         f"{r['speedup_vs_best_peer_sequential']:.3f}x sequential{paired}")
    if scale_rows:
        lines += ["", f"{'scale row':<10} {'attention':<10} {'fwd TF/s':>9} {'bwd TF/s':>9} {'peak GB':>8}"]
        for row in scale_rows:
            for name, m in row["impls"].items():
                if "fwd_s" in m:
                    lines.append(f"{seq_label(row['seqlen']):<10} {name:<10} {m['fwd_tflops']:9.1f} "
                                 f"{m['bwd_tflops']:9.1f} {(m['peak_mem_bytes'] or 0) / 2**30:8.1f}")
                else:
                    lines.append(f"{seq_label(row['seqlen']):<10} {name:<10} {m.get('error') or m.get('skipped')}"[:160])
    return "\n".join(lines)


def best_peer(impls: dict) -> str | None:
    """The peer with the fastest training step among those that ran and whose attention output
    matched ours; None if there is none."""
    ok = {n: m for n, m in impls.items() if n != "flashmask" and "step_s" in m and m.get("output_matches", True)}
    return min(ok, key=lambda n: ok[n]["step_s"]) if ok else None


def bar_check(results, scale_rows) -> dict:
    """The issue's bar: per configuration, ours against the best peer with every peer's mask cost
    counted (the head-to-head median where it ran, else the sequential ratio); the scale rows'
    largest length each attention ran."""
    configs = []
    for r in results:
        peers = [n for n, m in r["impls"].items() if n != "flashmask" and "step_s" in m]
        wrong = [n for n in peers if not r["impls"][n].get("output_matches", True)]
        h = r.get("head_to_head")
        configs.append({
            "name": r["name"], "seqlen": r["seqlen"], "peers": peers, "peers_with_wrong_output": wrong,
            "best_peer": r.get("best_peer"),
            "speedup_vs_best_peer": h["paired_speedup_median"] if h else r.get("speedup_vs_best_peer_sequential"),
            "speedup_from": "head_to_head" if h else "sequential", "mask_cost_counted": True,
        })
    largest = {}
    for row in scale_rows or []:
        for name, m in row["impls"].items():
            if "fwd_s" in m:
                largest[name] = max(largest.get(name, 0), row["seqlen"])
    return {"configs": configs,
            "all_at_least_best_peer": bool(configs) and all((c["speedup_vs_best_peer"] or 0) >= 1.0 for c in configs),
            "scale_largest_row": largest}


def plot(report, png_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    results, scale_rows = report["results"], report.get("scale_rows") or []
    colors = dict(zip(IMPLS, ("tab:blue", "tab:orange", "tab:green", "tab:olive", "tab:red", "tab:purple")))
    fig, axes = plt.subplots(1, 2 if scale_rows else 1, figsize=(14 if scale_rows else 8, 4.2), squeeze=False)
    ax, width = axes[0][0], 0.8 / len(IMPLS)
    for i, name in enumerate(IMPLS):
        pts = [(j + (i - len(IMPLS) / 2 + 0.5) * width, r["impls"][name]["tokens_per_s"] /
                r["impls"]["flashmask"]["tokens_per_s"])
               for j, r in enumerate(results) if "step_s" in r["impls"].get(name, {})
               and "step_s" in r["impls"].get("flashmask", {})]
        if pts:
            ax.bar([x for x, _ in pts], [y for _, y in pts], width, label=name, color=colors[name])
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(results)), [r["name"] for r in results], fontsize=8)
    ax.set_title("training tokens/s relative to ours (mask built in every step)", fontsize=10)
    ax.legend(fontsize=7)
    if scale_rows:
        ax = axes[0][1]
        for i, name in enumerate(IMPLS):
            pts = [(j + (i - len(IMPLS) / 2 + 0.5) * width, row["impls"][name]["bwd_tflops"])
                   for j, row in enumerate(scale_rows) if "fwd_s" in row["impls"].get(name, {})]
            if pts:
                ax.bar([x for x, _ in pts], [y for _, y in pts], width, label=name, color=colors[name])
        ax.set_xticks(range(len(scale_rows)), [seq_label(r["seqlen"]) for r in scale_rows])
        hq, hk = scale_rows[0]["heads"]
        ax.set_title(f"one causal-document row: backward TFLOP/s (GQA {hq}:{hk})", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(f"packed causal documents, {report['dtype']} — {report['device']}, torch {report['torch']}, "
                 f"commit {str(report['commit'])[:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)


def make_report(torch, argv, plan, dtype, results, scale_rows, t_start, smoke) -> dict:
    cuda = torch.cuda.is_available()
    return {
        "benchmark": "e2e_h200", "command": "python " + " ".join([sys.argv[0]] + (argv or sys.argv[1:])),
        "commit": provenance.git_commit(), "date": provenance.utc_now(),
        # a prebuilt library may come from another commit than this script: say which
        "flashmask_lib": os.environ.get("FLASHMASK_LIB"),
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "smoke": smoke,
        "plan": asdict(plan), "long_document_lengths": list(LONG_DOCS),
        "counting": "tokens/s = real (non-padding) tokens per step / median step time, the step "
                    "including the attention's mask preparation for its batch; attention FLOPs = "
                    "4*D*pairs*H fwd, 2.5x that bwd, over exactly the visible pairs",
        "wall_s": time.monotonic() - t_start, "results": results, "scale_rows": scale_rows,
        "bar": bar_check(results, scale_rows),
    }


def write_report(report: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")


def merge_scale_row(earlier: dict | None, later: dict) -> dict:
    """One scale row from two runs of the same length: per attention the later run's entry, unless
    it failed where the earlier one measured."""
    if earlier is None:
        return later
    impls = dict(earlier["impls"])
    for name, m in later["impls"].items():
        if "fwd_s" in m or "fwd_s" not in impls.get(name, {}):
            impls[name] = m
    return dict(later, impls=impls)


def merge(paths, out: Path, plot_png: bool = True, note: str | None = None) -> dict:
    """One report from several runs: their configurations and scale rows in order (a later run's
    configuration of the same name replaces an earlier one; scale rows merge per attention), the
    bar over all, every run's command, commit and date kept under `runs` (a merged report's own
    runs kept as they are), and `note` (which build each row comes from) when given."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    results, scale = {}, {}
    for r in reports:
        results.update({c["name"]: c for c in r["results"]})
        for row in r.get("scale_rows") or []:
            scale[row["seqlen"]] = merge_scale_row(scale.get(row["seqlen"]), row)
    merged = dict(reports[-1], results=list(results.values()), scale_rows=[scale[s] for s in sorted(scale)])
    if note is not None:
        merged["note"] = note
    # A report that is itself a merge contributes the runs it was joined from.
    merged["runs"] = [run for r in reports
                      for run in r.get("runs") or [{k: r.get(k) for k in ("command", "commit", "date", "device", "wall_s")}]]
    merged["command"] = "python benchmarks/e2e_h200.py --merge " + " ".join(str(p) for p in paths)
    merged["bar"] = bar_check(merged["results"], merged["scale_rows"])
    write_report(merged, out)
    if plot_png:
        plot(merged, out.with_suffix(".png"))
    print(table(merged["results"], merged["scale_rows"]))
    return merged
