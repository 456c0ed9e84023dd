"""benchmarks/ab_libraries.py: process order, merging, medians and ratios, and its argument errors,
with a stand-in for kernel_bench.py (no GPU) whose TFLOP/s depend on the library and the round."""
from __future__ import annotations

import json

import pytest

from benchmark_modules import load

ab_libraries = load("ab_libraries")
kernel_bench = load("kernel_bench")

# Writes one row per mask given after --masks; fwd TFLOP/s = the library file's number + the count
# of processes before this one (so rounds differ), bwd = half of it. Logs the library it ran on.
STUB = '''
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--json") + 1]
masks = []
if "--masks" in args:
    for a in args[args.index("--masks") + 1:]:
        if a.startswith("--"):
            break
        masks.append(a)
lib = os.environ["FLASHMASK_LIB"]
base = float(open(lib).read())
log = os.path.join(os.path.dirname(__file__), "order.log")
before = len(open(log).read().split()) if os.path.exists(log) else 0
open(log, "a").write(os.path.basename(lib) + os.environ.get("STUB_TAG", "") + " ")
if base == -2:
    import time
    time.sleep(60)
if base < 0:
    print("stub: failing on purpose", file=sys.stderr)
    sys.exit(3)
rows = [{"impl": "flashmask", "mask": m, "seqlen": 8192, "heads": 16, "heads_k": 16, "head_dim": 128,
         "dtype": "bf16", "fwd_tflops": base + before, "bwd_tflops": (base + before) / 2} for m in masks]
json.dump({"meta": {"device": "stub GPU", "command": " ".join(args)}, "rows": rows}, open(out, "w"))
'''


@pytest.fixture
def stub(tmp_path):
    script = tmp_path / "bench_stub.py"
    script.write_text(STUB)
    libs = {}
    for name, value in (("a", "100"), ("b", "120"), ("bad", "-1"), ("hangs", "-2")):
        libs[name] = tmp_path / f"lib_{name}.so"
        libs[name].write_text(value)
    return script, libs, tmp_path / "order.log"


def test_processes_alternate_and_the_summary_has_medians_and_ratios(stub, tmp_path):
    script, libs, log = stub
    out = tmp_path / "ab.json"
    assert ab_libraries.main(["--lib", f"a={libs['a']}", "--lib", f"b={libs['b']}", "--rounds", "3",
                              "--json", str(out), "--bench", str(script), "--",
                              "--masks", "causal", "document"]) == 0
    assert log.read_text().split() == ["lib_a.so", "lib_b.so", "lib_b.so", "lib_a.so", "lib_a.so", "lib_b.so"]
    result = json.loads(out.read_text())
    assert len(result["rows"]) == 12 and {r["library"] for r in result["rows"]} == {"a", "b"}
    assert result["meta"]["order"] == ["0:a", "0:b", "1:b", "1:a", "2:a", "2:b"]
    assert result["meta"]["libraries"]["b"]["bytes"] == 3 and len(result["meta"]["libraries"]["b"]["sha256"]) == 64
    assert result["meta"]["device"] == "stub GPU"
    by_mask = {e["mask"]: e for e in result["summary"]}
    assert set(by_mask) == {"causal", "document"}
    # a ran as processes 0, 3, 4 -> 100, 103, 104; b as 1, 2, 5 -> 121, 122, 125
    e = by_mask["document"]
    assert e["fwd_tflops_a_rounds"] == [100.0, 103.0, 104.0] and e["fwd_tflops_a"] == 103.0
    assert e["fwd_tflops_b"] == 122.0 and e["bwd_tflops_b"] == 61.0
    assert e["fwd_ratio_b"] == pytest.approx(122 / 103, abs=1e-4)
    assert e["bwd_ratio_b"] == pytest.approx(61 / 51.5, abs=1e-4)
    # each round of b against the same round of a: processes 1 / 0, 2 / 3, 5 / 4
    assert e["fwd_ratio_b_rounds"] == pytest.approx([121 / 100, 122 / 103, 125 / 104], abs=1e-4)
    assert e["bwd_ratio_b_rounds"] == e["fwd_ratio_b_rounds"]
    row = next(line for line in ab_libraries.table(result["summary"], ["a", "b"]).splitlines() if "document" in line)
    span = f"{min(e['fwd_ratio_b_rounds']):.3f}-{max(e['fwd_ratio_b_rounds']):.3f}"
    assert row.endswith(f"rounds: b fwd {span}, b bwd {span}") and span == "1.185-1.210"


def test_a_failing_process_is_listed_with_its_output_and_the_others_still_run(stub, tmp_path):
    script, libs, log = stub
    out = tmp_path / "x.json"
    assert ab_libraries.main(["--lib", f"a={libs['a']}", "--lib", f"bad={libs['bad']}", "--json", str(out),
                              "--bench", str(script), "--", "--masks", "causal"]) == 1
    assert log.read_text().split() == ["lib_a.so", "lib_bad.so", "lib_bad.so", "lib_a.so"]
    result = json.loads(out.read_text())
    assert result["meta"]["complete"] is True
    assert [(f["library"], f["round"]) for f in result["meta"]["failed"]] == [("bad", 0), ("bad", 1)]
    assert "exited with 3" in result["meta"]["failed"][0]["error"]
    assert "failing on purpose" in result["meta"]["failed"][0]["error"]
    (e,) = result["summary"]
    assert e["fwd_tflops_a_rounds"] == [100.0, 103.0] and "fwd_tflops_bad" not in e and "fwd_ratio_bad" not in e


def test_a_process_past_the_timeout_is_killed_and_listed(stub, tmp_path):
    script, libs, _ = stub
    out = tmp_path / "x.json"
    assert ab_libraries.main(["--lib", f"a={libs['a']}", "--lib", f"hangs={libs['hangs']}", "--rounds", "1",
                              "--timeout", "2", "--json", str(out), "--bench", str(script), "--",
                              "--masks", "causal"]) == 1
    result = json.loads(out.read_text())
    (failure,) = result["meta"]["failed"]
    assert failure["library"] == "hangs" and "timed out after 2 s" in failure["error"]
    assert {r["library"] for r in result["rows"]} == {"a"}


def test_the_json_holds_every_finished_process_when_a_run_is_stopped(stub, tmp_path, monkeypatch):
    """Rewritten after each process: a run stopped from outside (here: during its third process)
    keeps the first two, marked incomplete."""
    script, libs, _ = stub
    out = tmp_path / "x.json"
    real, calls = ab_libraries.run_bench, []

    def stopped_at_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(ab_libraries, "run_bench", stopped_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        ab_libraries.main(["--lib", f"a={libs['a']}", "--lib", f"b={libs['b']}", "--json", str(out),
                           "--bench", str(script), "--", "--masks", "causal"])
    result = json.loads(out.read_text())
    assert result["meta"]["complete"] is False and result["meta"]["failed"] == []
    assert [(r["library"], r["round"]) for r in result["rows"]] == [("a", 0), ("b", 0)]


def test_env_makes_one_library_a_build_of_its_own(stub, tmp_path):
    """--env NAME:VAR=VALUE reaches only NAME's processes: the same library twice, one under a
    switch, alternating like two libraries."""
    script, libs, log = stub
    out = tmp_path / "ab.json"
    assert ab_libraries.main(["--lib", f"plain={libs['a']}", "--lib", f"switched={libs['a']}",
                              "--env", "switched:STUB_TAG=+on", "--rounds", "2", "--json", str(out),
                              "--bench", str(script), "--", "--masks", "causal"]) == 0
    assert log.read_text().split() == ["lib_a.so", "lib_a.so+on", "lib_a.so+on", "lib_a.so"]
    result = json.loads(out.read_text())
    assert result["meta"]["libraries"]["switched"]["env"] == {"STUB_TAG": "+on"}
    assert result["meta"]["libraries"]["plain"]["env"] == {}
    (e,) = result["summary"]
    # plain ran as processes 0 and 3 (100, 103), switched as 1 and 2 (101, 102)
    assert e["fwd_tflops_plain_rounds"] == [100.0, 103.0] and e["fwd_tflops_switched_rounds"] == [101.0, 102.0]


# kernel_bench in one process: a row per mask for each --variant NAME:FLASHMASK_LIB=PATH[,VAR=V]
# (round r's fwd TFLOP/s = the library file's number + r, plus 1000 for a variant with a switch;
# forward FLOPs 1 TFLOP, so ms = 1000 / TFLOP/s; bwd as fwd), a peer row per mask for each
# implementation the last --impls names (as argparse reads it), and its arguments in args.json.
# With STUB_FAIL set it exits 3 once the first mask's rows are written.
STUB_IN_PROCESS = '''
import json, os, statistics, sys
args = sys.argv[1:]
out = args[args.index("--json") + 1]
json.dump(args, open(os.path.join(os.path.dirname(__file__), "args.json"), "w"))
def values(flag):
    if flag not in args:
        return []
    got = []
    for a in args[len(args) - args[::-1].index(flag):]:
        if a.startswith("--"):
            break
        got.append(a)
    return got
rounds = int(values("--rounds")[0])
variants = [args[i + 1] for i, a in enumerate(args) if a == "--variant"]
rows = []
for mask in values("--masks"):
    if rows and os.environ.get("STUB_FAIL"):
        sys.exit(3)
    for spec in variants:
        name, _, env = spec.partition(":")
        settings = dict(kv.split("=", 1) for kv in env.split(","))
        base = float(open(settings.pop("FLASHMASK_LIB")).read()) + (1000 if settings else 0)
        row = {"impl": "flashmask:" + name, "mask": mask, "seqlen": 8192, "heads": 16, "heads_k": 16,
               "head_dim": 128, "dtype": "bf16"}
        for phase in ("fwd", "bwd"):
            times = [1000 / (base + r) for r in range(rounds)]
            row[phase + "_ms"] = statistics.median(times)
            row[phase + "_tflops"] = 1000 / row[phase + "_ms"]
            if rounds > 1:
                row[phase + "_ms_rounds"] = times
        rows.append(row)
    for impl in values("--impls"):
        rows.append({"impl": impl, "mask": mask, "seqlen": 8192, "heads": 16, "heads_k": 16, "head_dim": 128,
                     "dtype": "bf16", "fwd_ms": 1.0, "fwd_tflops": 1000.0})
    json.dump({"meta": {"device": "stub GPU"}, "rows": rows}, open(out, "w"))
'''


def test_in_process_times_every_library_as_a_variant_and_writes_a_row_per_round(stub, tmp_path):
    _, libs, _ = stub
    script = tmp_path / "bench_in_process.py"
    script.write_text(STUB_IN_PROCESS)
    out = tmp_path / "ab.json"
    assert ab_libraries.main(["--lib", f"a={libs['a']}", "--lib", f"b={libs['b']}", "--lib", f"b0={libs['b']}",
                              "--env", "b0:FLASHMASK_X=0", "--rounds", "3", "--in-process", "--json", str(out),
                              "--bench", str(script), "--", "--impls", "flashmask", "flex", "--masks",
                              "causal", "document"]) == 0
    args = json.loads((tmp_path / "args.json").read_text())
    assert kernel_bench.parse_args(args).impls == ["flex"], "plain ours is dropped, the peer stays"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--variant"] == [
        f"a:FLASHMASK_LIB={libs['a'].resolve()}", f"b:FLASHMASK_LIB={libs['b'].resolve()}",
        f"b0:FLASHMASK_LIB={libs['b'].resolve()},FLASHMASK_X=0"]
    assert args[args.index("--rounds") + 1] == "3"
    result = json.loads(out.read_text())
    assert result["meta"]["in_process"] is True and result["meta"]["failed"] == []
    ours = [(r["library"], r["round"], r["mask"]) for r in result["rows"] if r["library"] != "peers"]
    assert sorted(ours) == sorted((n, rnd, m) for n in ("a", "b", "b0") for rnd in range(3)
                                  for m in ("causal", "document"))
    assert all(r["impl"] == "flex" for r in result["rows"] if r["library"] == "peers")
    by_mask = {e["mask"]: e for e in result["summary"]}
    assert set(by_mask) == {"causal", "document"} and all(e["impl"] == "flashmask" for e in by_mask.values())
    e = by_mask["document"]
    assert e["fwd_tflops_a_rounds"] == [100.0, 101.0, 102.0] and e["fwd_tflops_a"] == 101.0
    assert e["bwd_tflops_b_rounds"] == [120.0, 121.0, 122.0] and e["fwd_tflops_b0"] == 1121.0
    assert e["fwd_ratio_b"] == pytest.approx(121 / 101, abs=1e-4)
    assert e["fwd_ratio_b_rounds"] == pytest.approx([120 / 100, 121 / 101, 122 / 102], abs=1e-4)


def test_in_process_keeps_the_rows_of_a_run_that_fails_part_way(stub, tmp_path, monkeypatch):
    _, libs, _ = stub
    script = tmp_path / "bench_in_process.py"
    script.write_text(STUB_IN_PROCESS)
    monkeypatch.setenv("STUB_FAIL", "1")
    out = tmp_path / "ab.json"
    assert ab_libraries.main(["--lib", f"a={libs['a']}", "--lib", f"b={libs['b']}", "--in-process",
                              "--json", str(out), "--bench", str(script), "--", "--impls", "flashmask",
                              "--masks", "causal", "document"]) == 1
    result = json.loads(out.read_text())
    assert "exited with 3" in result["meta"]["failed"][0]["error"]
    (e,) = result["summary"]
    assert e["mask"] == "causal" and e["fwd_tflops_a_rounds"] == [100.0, 101.0] and e["fwd_ratio_b"] > 1


@pytest.mark.parametrize("argv, message", [
    (["--lib", "a=LIB_A"], "at least two"),
    (["--lib", "a=LIB_A", "--lib", "a=LIB_B"], "names must differ"),
    (["--lib", "a=LIB_A", "--lib", "b=/nonexistent/lib.so"], "no such file"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--rounds", "0"], "at least 1"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--", "--json", "x.json"], "--json"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--", "--png=x.png"], "--png"),
    (["--lib", "nopath", "--lib", "b=LIB_B"], "NAME=PATH"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--env", "c:X=1"], "no --lib named 'c'"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--env", "b:X"], "NAME:VAR=VALUE"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--env", "b:FLASHMASK_LIB=x.so"], "comes from --lib"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--in-process", "--env", "b:CUDA_X=1"], "only FLASHMASK_*"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--in-process", "--", "--rounds", "3"], "sets it from --rounds"),
    (["--lib", "a=LIB_A", "--lib", "b=LIB_B", "--in-process", "--", "--variant", "x:FLASHMASK_Y=1"],
     "sets it from --rounds"),
])
def test_argument_errors_name_the_argument(stub, tmp_path, capsys, argv, message):
    _, libs, _ = stub
    argv = [a.replace("LIB_A", str(libs["a"])).replace("LIB_B", str(libs["b"])) for a in argv]
    with pytest.raises(SystemExit):
        ab_libraries.main(["--json", str(tmp_path / "x.json")] + argv)
    assert message in capsys.readouterr().err
