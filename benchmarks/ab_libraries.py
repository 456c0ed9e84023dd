"""A/B of library builds: benchmarks/kernel_bench.py in one process per (round, library), the
libraries alternating (list order in even rounds, reversed in odd ones: ABBA), every row labelled
with its library, and per row of the matrix the median TFLOP/s of each library over the rounds and
its ratio to the first library's.

    python3 benchmarks/ab_libraries.py --lib main=build_main/libflashmask.so \\
        --lib new=build/flashmask/libflashmask.so --rounds 2 \\
        --json benchmarks/results/kernel_h200_X_ab.json -- --impls flashmask --seqlens 8192 --masks causal

Everything after ``--`` goes to kernel_bench.py (not --json, --png or --append: each process writes
its own). By default each (round, library) is a process of its own (FLASHMASK_LIB), the processes
alternating; ``--env NAME:VAR=VALUE`` sets a variable in build NAME's processes, so that one library
under a kernel switch is a build of its own (``--lib pool0=LIB --env pool0:FLASHMASK_X=0`` beside
``--lib default=LIB``). ``--in-process`` instead runs one kernel_bench process that times every
build as a variant of ours (``--variant NAME:FLASHMASK_LIB=PATH``, its --env set around its calls),
the builds alternating window by window (its ``--rounds``, ABBA): no process start per round, and
the windows compared lie seconds apart. Either way the order alternates because the same kernel
on the same inputs moves 3-6% from one timing window to the next under the GPU's power cap
(benchmarks/README.md, timing spread), so a one-sided order would read as a difference.

The JSON holds the command, the libraries (path, size, SHA-256), each process's kernel_bench meta,
the rows (one per ``library`` and ``round``) and the summary. It is rewritten after every process
(``meta.complete`` false until the last), so a run stopped from outside keeps what it measured; a
process that fails or outlives ``--timeout`` is listed in ``meta.failed`` with its output's tail,
the others still run, and the exit status is 1 (``--in-process`` keeps the rows its one process
wrote before it failed).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import kernel_bench  # noqa: E402  (its row_key: what one row of the matrix is; its SOURCES; its parser)
from flashmask_paddle.bench import provenance  # noqa: E402

KERNEL_BENCH = REPO / "benchmarks" / "kernel_bench.py"
# The fields a summary entry repeats from its rows (the table prints them).
DESCRIBING = ("impl", "mask", "seqlen", "heads", "heads_k", "head_dim", "dtype", "dropout")
PHASES = ("fwd", "bwd")
OWN_OUTPUTS = ("--json", "--png", "--append")


def parse_lib(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--lib {spec!r}: expected NAME=PATH")
    return name, Path(path)


def parse_env(spec: str) -> tuple[str, str, str]:
    name, sep, assignment = spec.partition(":")
    var, eq, value = assignment.partition("=")
    if not sep or not name or not eq or not var:
        raise argparse.ArgumentTypeError(f"--env {spec!r}: expected NAME:VAR=VALUE")
    return name, var, value


def gives(bench_args: list[str], flag: str) -> bool:
    """Whether kernel_bench's arguments set `flag` ("--flag V..." or "--flag=V")."""
    return any(a == flag or a.startswith(flag + "=") for a in bench_args)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", type=parse_lib, action="append", required=True, metavar="NAME=PATH",
                   help="a library build to time (at least two; the first is the baseline of the ratios)")
    p.add_argument("--env", type=parse_env, action="append", default=[], metavar="NAME:VAR=VALUE",
                   help="an environment variable of build NAME's processes (--in-process: set around its "
                        "calls; FLASHMASK_* only) (repeatable)")
    p.add_argument("--rounds", type=int, default=2,
                   help="processes per library, alternating (ABBA); --in-process: timing windows per library")
    p.add_argument("--in-process", action="store_true",
                   help="every library in one kernel_bench process, alternating window by window")
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per kernel_bench process")
    p.add_argument("--bench", type=Path, default=KERNEL_BENCH, help=argparse.SUPPRESS)  # tests
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then kernel_bench.py's arguments")
    args = p.parse_args(argv)
    if args.bench_args[:1] == ["--"]:
        args.bench_args = args.bench_args[1:]
    names = [name for name, _ in args.lib]
    if len(names) < 2:
        p.error("--lib: give at least two libraries to compare")
    if len(set(names)) != len(names):
        p.error(f"--lib: library names must differ, got {names}")
    for name, path in args.lib:
        if not path.is_file():
            p.error(f"--lib {name}={path}: no such file")
    args.envs = {name: {} for name in names}
    for name, var, value in args.env:
        if name not in args.envs:
            p.error(f"--env {name}:{var}={value}: no --lib named {name!r}")
        if var == "FLASHMASK_LIB":
            p.error(f"--env {name}:{var}: the library comes from --lib")
        args.envs[name][var] = value
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    for flag in OWN_OUTPUTS:
        if gives(args.bench_args, flag):
            p.error(f"kernel_bench argument {flag}: each process writes its own output, leave it out")
    if args.in_process:
        for flag in ("--rounds", "--variant"):
            if gives(args.bench_args, flag):
                p.error(f"kernel_bench argument {flag}: --in-process sets it from --rounds and --lib")
        for name, env in args.envs.items():
            for var, value in env.items():
                if not var.startswith("FLASHMASK_") or "," in value:
                    p.error(f"--env {name}:{var}={value}: --in-process sets only FLASHMASK_* variables "
                            "(without commas) around a build's calls")
    return args


def process_order(names: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, library) in the order the processes run: list order in even rounds, reversed in odd."""
    return [(r, name) for r in range(rounds) for name in (names if r % 2 == 0 else names[::-1])]


def describe(path: Path) -> dict:
    data = path.read_bytes()
    return {"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def run_bench(bench: Path, bench_args: list[str], lib: Path | None, out: Path, timeout: float,
              extra_env: dict | None = None) -> dict:
    """One kernel_bench process on `lib` (with `extra_env` set); returns its JSON. Raises
    RuntimeError with the log's tail."""
    env = dict(os.environ, **(extra_env or {}))
    if lib is not None:  # None: --in-process, the builds are kernel_bench's variants
        env["FLASHMASK_LIB"] = str(lib.resolve())
    cmd = [sys.executable, str(bench), *bench_args, "--json", str(out), "--png", str(out.with_suffix(".png"))]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not out.is_file():
        tail = (proc.stdout + proc.stderr)[-2000:]
        with_env = "".join(f" {k}={v}" for k, v in (extra_env or {}).items())
        raise RuntimeError(f"kernel_bench on {lib or 'every library'}{with_env} exited with {proc.returncode}:\n{tail}")
    return json.loads(out.read_text())


def in_process_args(bench_args: list[str], names: list[str], paths: dict, envs: dict, rounds: int) -> list[str]:
    """kernel_bench's arguments for --in-process: each library a variant of ours (flashmask:NAME)
    under its --env, the plain flashmask implementation dropped from --impls (the peers named there
    stay; a later --impls replaces an earlier one), and --rounds."""
    impls = kernel_bench.parse_args(bench_args).impls if gives(bench_args, "--impls") else ["flashmask"]
    args = [*bench_args, "--impls", *[impl for impl in impls if impl != "flashmask"]]
    for name in names:
        env = "".join(f",{var}={value}" for var, value in envs[name].items())
        args += ["--variant", f"{name}:FLASHMASK_LIB={paths[name].resolve()}{env}"]
    return args + ["--rounds", str(rounds)]


def rows_per_round(result: dict, names: list[str]) -> list[dict]:
    """An --in-process run's rows as the processes' would be: one per (library, round) for each of
    ours (impl flashmask, labelled with its library), its times and TFLOP/s those of the round."""
    rows = []
    for r in result["rows"]:
        name = r["impl"].partition(":")[2]
        if not r["impl"].startswith("flashmask:") or name not in names:
            rows.append(dict(r, library="peers", round=0))
            continue
        per_round = {phase: r.get(f"{phase}_ms_rounds") or ([r[f"{phase}_ms"]] if r.get(f"{phase}_ms") else [])
                     for phase in PHASES}
        for rnd in range(max(len(times) for times in per_round.values()) or 1):
            row = {k: v for k, v in r.items() if not k.endswith("_rounds")}
            row.update(impl="flashmask", library=name, round=rnd)
            for phase, times in per_round.items():
                if rnd < len(times):
                    row[f"{phase}_ms"] = times[rnd]
                    row[f"{phase}_tflops"] = round(r[f"{phase}_tflops"] * r[f"{phase}_ms"] / times[rnd], 1)
            rows.append(row)
    return rows


def summarize(rows: list[dict], names: list[str]) -> list[dict]:
    """Per row of the matrix: each library's median TFLOP/s over its rounds and the ratio to the
    first library's median (absent where a library has no time for that phase), and the ratio of
    each round to the first library's same round (ratio_NAME_rounds): rounds run next to each other
    (ABBA), so how far these scatter is the noise a ratio must clear."""
    groups: dict = {}  # (impl, kernel_bench.row_key) -> library -> rows
    for r in rows:
        groups.setdefault((r["impl"], kernel_bench.row_key(r)), {}).setdefault(r["library"], []).append(r)
    summary = []
    for by_lib in groups.values():
        if not any(name in by_lib for name in names):  # an --in-process run's peers: not an A/B row
            continue
        first = next(iter(by_lib.values()))[0]
        entry = {k: first[k] for k in DESCRIBING if k in first}
        for phase in PHASES:
            medians, by_round = {}, {}
            for name in names:
                by_round[name] = {r["round"]: r[f"{phase}_tflops"] for r in by_lib.get(name, [])
                                  if r.get(f"{phase}_tflops")}
                values = list(by_round[name].values())
                if values:
                    medians[name] = statistics.median(values)
                    entry[f"{phase}_tflops_{name}"] = round(medians[name], 1)
                    entry[f"{phase}_tflops_{name}_rounds"] = [round(v, 1) for v in values]
            base = medians.get(names[0])
            for name in names[1:]:
                if base and name in medians:
                    entry[f"{phase}_ratio_{name}"] = round(medians[name] / base, 4)
                    paired = [v / by_round[names[0]][rnd] for rnd, v in by_round[name].items()
                              if rnd in by_round[names[0]]]
                    if paired:
                        entry[f"{phase}_ratio_{name}_rounds"] = [round(v, 4) for v in paired]
        summary.append(entry)
    return summary


def table(summary: list[dict], names: list[str]) -> str:
    head = f"{'impl':<18} {'mask':<22} {'S':>6} {'Hk':>3} {'D':>4} {'dtype':<5}"
    for name in names:
        head += f" {name + ' fwd/bwd':>18}"
    lines = [head]
    for e in summary:
        line = f"{e['impl']:<18} {e['mask']:<22} {e['seqlen']:>6} {e['heads_k']:>3} {e['head_dim']:>4} {e['dtype']:<5}"
        for i, name in enumerate(names):
            cell = "/".join(f"{e[f'{ph}_tflops_{name}']:.0f}" if f"{ph}_tflops_{name}" in e else "-" for ph in PHASES)
            if i:
                cell += " (" + "/".join(f"{e[f'{ph}_ratio_{name}']:.3f}" if f"{ph}_ratio_{name}" in e else "-"
                                        for ph in PHASES) + ")"
            line += f" {cell:>18}"
        spans = []
        for name in names[1:]:
            for ph in PHASES:
                paired = e.get(f"{ph}_ratio_{name}_rounds", [])
                if len(paired) > 1:
                    spans.append(f"{name} {ph} {min(paired):.3f}-{max(paired):.3f}")
        lines.append(line + ("  rounds: " + ", ".join(spans) if spans else ""))
    return "\n".join(lines)


def write_result(args, argv, names: list[str], paths: dict, rows: list[dict], metas: list[dict],
                 failed: list[dict], complete: bool) -> list[dict]:
    """Writes the JSON of the processes run so far; returns its summary."""
    summary = summarize(rows, names)
    device = metas[0].get("device", "unknown") if metas else "unknown"
    meta = provenance.record("ab_libraries.py " + " ".join(argv), device,
                             dirty_paths=["benchmarks/ab_libraries.py", *kernel_bench.SOURCES])
    order = [f"{r}:{n}" for r, n in process_order(names, args.rounds)]
    if args.in_process:
        order = ["in one process, per row: " + " ".join(order)]
    meta.update(rounds=args.rounds, in_process=args.in_process, order=order,
                libraries={name: dict(describe(paths[name]), env=args.envs[name]) for name in names},
                processes=metas, failed=failed, complete=complete)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1) + "\n")
    return summary


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    names = [name for name, _ in args.lib]
    paths = dict(args.lib)
    if args.in_process:
        return run_in_process(args, argv, names, paths)
    rows, metas, failed = [], [], []
    order = process_order(names, args.rounds)
    with tempfile.TemporaryDirectory(prefix="ab_libraries_") as tmp:
        for i, (rnd, name) in enumerate(order):
            try:
                result = run_bench(args.bench, args.bench_args, paths[name], Path(tmp) / f"run{i}_{name}.json",
                                   args.timeout, args.envs[name])
            except RuntimeError as e:
                error = str(e)
            except subprocess.TimeoutExpired as e:
                error = f"kernel_bench on {paths[name]} timed out after {e.timeout:g} s"
            else:
                metas.append(dict(result["meta"], library=name, round=rnd))
                rows += [dict(r, library=name, round=rnd) for r in result["rows"]]
                print(f"ab_libraries: round {rnd} {name}: {len(result['rows'])} rows", flush=True)
                error = None
            if error is not None:
                failed.append({"library": name, "round": rnd, "error": error[-2000:]})
                print(f"ab_libraries: round {rnd} {name} failed: {error}", file=sys.stderr, flush=True)
            summary = write_result(args, argv, names, paths, rows, metas, failed, complete=i + 1 == len(order))
    print(table(summary, names))
    print(f"wrote {args.json}" + (f" ({len(failed)} of {len(order)} processes failed)" if failed else ""))
    return 1 if failed else 0


def run_in_process(args, argv, names: list[str], paths: dict) -> int:
    """--in-process: one kernel_bench process timing every library (in_process_args)."""
    rows, metas, failed = [], [], []
    bench_args = in_process_args(args.bench_args, names, paths, args.envs, args.rounds)
    with tempfile.TemporaryDirectory(prefix="ab_libraries_") as tmp:
        out = Path(tmp) / "run.json"
        try:
            result = run_bench(args.bench, bench_args, None, out, args.timeout)
            error = None
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            error = str(e) if isinstance(e, RuntimeError) else f"kernel_bench timed out after {e.timeout:g} s"
            # kernel_bench rewrites its JSON after every row: keep the rows a failed run finished
            result = json.loads(out.read_text()) if out.is_file() else None
        if result is not None:
            metas.append(result["meta"])
            rows = rows_per_round(result, names)
    if error is not None:
        failed.append({"library": "all", "round": 0, "error": error[-2000:]})
        print(f"ab_libraries: the in-process run failed: {error}", file=sys.stderr, flush=True)
    summary = write_result(args, argv, names, paths, rows, metas, failed, complete=True)
    print(table(summary, names))
    print(f"wrote {args.json}" + (" (the run failed)" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
