"""benchmarks/kernel_bench.py imports without torch; --rounds times a row's implementations in
alternating order and reports medians, and the rows are written with their cross-check (the smoke
runs on CPU torch, skipped without torch)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from benchmark_modules import load

kernel_bench = load("kernel_bench")
kernel_timing = load("kernel_timing")


def test_rounds_alternate_list_order_and_reversed_order():
    impls = ("flashmask", "flashmask:b", "flex")
    assert kernel_bench.round_order(impls, 0) == ["flashmask", "flashmask:b", "flex"]
    assert kernel_bench.round_order(impls, 1) == ["flex", "flashmask:b", "flashmask"]
    assert kernel_bench.round_order(impls, 2) == ["flashmask", "flashmask:b", "flex"]
    assert kernel_bench.round_order(impls, 3) == ["flex", "flashmask:b", "flashmask"]
    assert impls == ("flashmask", "flashmask:b", "flex")  # the row's list itself is left as it is


@pytest.fixture
def smoke(tmp_path, monkeypatch):
    """Runs kernel_bench.main in smoke mode (CPU torch; ours and one variant of it) with extra
    arguments; returns its JSON and the order time_round saw (impl, mask) in."""
    pytest.importorskip("torch")
    monkeypatch.setattr(kernel_timing, "RUN", kernel_timing.RUN)  # main sets it
    timed, time_round = [], kernel_bench.time_round

    def recording(torch, p, warmup, reps):
        timed.append((p.impl.name, p.row["mask"]))
        time_round(torch, p, warmup, reps)

    monkeypatch.setattr(kernel_bench, "time_round", recording)

    def run(*args):
        out = tmp_path / "kernel.json"
        assert kernel_bench.main(["--smoke", "--tokens", "256", "--seqlens", "128", "--heads", "2",
                                  "--heads-k", "2", "--head-dims", "32", "--masks", "causal", "causal_document",
                                  "--impls", "flashmask", "--variant", "b:FLASHMASK_MASK_PLAN=0",
                                  "--warmup", "1", "--reps", "3", "--json", str(out),
                                  "--png", str(tmp_path / "kernel.png"), *args]) == 0
        return json.loads(out.read_text()), timed

    run.timed = timed
    return run


def test_rounds_time_each_row_in_abba_order_and_report_the_median(smoke):
    result, timed = smoke("--rounds", "2")
    assert result["meta"]["rounds"] == 2 and "alternating order" in result["meta"]["method"]
    a, b = "flashmask", "flashmask:b"
    assert timed == [(a, "causal"), (b, "causal"), (b, "causal"), (a, "causal"),
                     (a, "causal_document"), (b, "causal_document"), (b, "causal_document"), (a, "causal_document")]
    rows = result["rows"]
    assert [(r["impl"], r["mask"]) for r in rows] == [(a, "causal"), (b, "causal"), (a, "causal_document"),
                                                      (b, "causal_document")]
    for r in rows:
        assert "error" not in r, r
        for phase in ("fwd", "bwd"):
            per_round = r[f"{phase}_ms_rounds"]
            assert len(per_round) == 2 and all(ms > 0 for ms in per_round)
            assert r[f"{phase}_ms"] == pytest.approx(float(np.median(per_round)), abs=1e-4)
    assert all(r["rel_err_vs_flashmask"] < 1e-5 for r in rows if r["impl"] == b)


def test_rows_are_written_with_their_cross_check(smoke, monkeypatch):
    """Each JSON write during the run (what a timeout leaves) already has the written rows' error
    against ours: rows are handed on only after their row set's outputs were compared."""
    writes, write = [], kernel_bench.ResultFile.write

    def recording(self, meta, rows, wall_s):
        writes.append([dict(r) for r in rows])
        return write(self, meta, rows, wall_s)

    monkeypatch.setattr(kernel_bench.ResultFile, "write", recording)
    smoke()
    during_run = writes[:-1]  # the last write is the final one
    assert len(during_run) == 4
    for rows in during_run:
        assert all("rel_err_vs_flashmask" in r for r in rows if r["impl"] == "flashmask:b"), rows


def test_one_round_rows_carry_no_per_round_fields(smoke):
    result, timed = smoke()
    assert result["meta"]["rounds"] == 1 and "alternating" not in result["meta"]["method"]
    assert len(timed) == 4 and len(result["rows"]) == 4
    for r in result["rows"]:
        assert r["fwd_ms"] > 0 and r["bwd_ms"] > 0 and r["fwd_host_ms"] > 0
        assert not [key for key in r if key.endswith("_rounds")], r


def test_forward_only_times_no_backward(smoke):
    result, timed = smoke("--forward-only", "--rounds", "2")
    assert result["meta"]["forward_only"] is True and len(timed) == 8
    for r in result["rows"]:
        assert "error" not in r, r
        assert r["fwd_ms"] > 0 and len(r["fwd_ms_rounds"]) == 2 and "fwd_tflops" in r
        assert not [key for key in r if key.startswith("bwd_")], r


def test_a_variant_on_another_build_runs_in_the_same_process_without_plain_ours(smoke, tmp_path):
    """--impls with no names and --variant NAME:FLASHMASK_LIB=PATH: only the variants run, one of
    them on a copy of the library; the first variant is the others' cross-check reference."""
    import shutil

    from flashmask_paddle.torch import load_library

    copy = tmp_path / "copy" / "libflashmask.so"
    copy.parent.mkdir()
    shutil.copy(load_library().fm_path, copy)
    result, timed = smoke("--impls", "--variant", f"copy:FLASHMASK_LIB={copy}", "--rounds", "2")
    assert [impl for impl, _ in timed[:4]] == ["flashmask:b", "flashmask:copy", "flashmask:copy", "flashmask:b"]
    rows = {(r["impl"], r["mask"]): r for r in result["rows"]}
    assert set(rows) == {(impl, mask) for impl in ("flashmask:b", "flashmask:copy")
                         for mask in ("causal", "causal_document")}
    for (impl, _), r in rows.items():
        assert "error" not in r and len(r["bwd_ms_rounds"]) == 2, r
        assert ("rel_err_vs_flashmask" in r) == (impl == "flashmask:copy")
        if impl == "flashmask:copy":
            assert r["rel_err_vs_flashmask"] < 1e-6


def test_tflops_and_gflop_per_joule_count_the_backward_at_two_and_a_half_times_the_forward():
    row = {"fwd_ms": 2.0, "bwd_ms": 5.0, "fwd_mj": 1000.0, "bwd_mj": 2000.0, "fwd_kernel_ms": 1.0}
    kernel_bench.add_tflops(row, 1e12)
    assert row["fwd_tflops"] == 500.0 and row["bwd_tflops"] == 500.0 and row["fwd_kernel_tflops"] == 1000.0
    assert row["fwd_gflop_per_j"] == 1000.0 and row["bwd_gflop_per_j"] == 1250.0


def test_steady_state_timing_is_recorded_in_the_method(smoke):
    result, _ = smoke("--steady-s", "0.01", "--forward-only")
    assert result["meta"]["steady_s"] == 0.01 and result["meta"]["method"].startswith("steady state")
    assert all(r["fwd_reps"] >= 3 and "fwd_mj" not in r for r in result["rows"])  # no NVML on the CPU


def test_nothing_to_time_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        kernel_bench.parse_args(["--impls"])
    assert "nothing to time" in capsys.readouterr().err


def test_append_keeps_the_rows_and_commands_of_the_file_found_at_start(smoke):
    first, _ = smoke()
    both, _ = smoke("--append")
    assert both["rows"][:4] == first["rows"] and len(both["rows"]) == 8
    assert both["meta"]["command"] == first["meta"]["command"] + " ;; " + first["meta"]["command"] + " --append"
    again, _ = smoke()
    assert len(again["rows"]) == 4, "without --append the file is rewritten"


def test_resume_skips_complete_cases_and_drops_the_rows_of_partial_ones(tmp_path):
    def row(impl, mask, **kw):
        return {"impl": impl, "mask": mask, "seqlen": 8192, "batch": 4, "heads": 16, "heads_k": 16,
                "head_dim": 128, "dtype": "bf16", "fwd_ms": 1.0, **kw}
    rows = [row("flashmask", "causal"), row("cudnnflex", "causal", error="oom"),
            row("flashmask", "document"), row("flashmask", "document", dropout=0.1)]
    path = tmp_path / "kernel.json"
    path.write_text(json.dumps({"meta": {"command": "kernel_bench.py"}, "rows": rows}))
    result = kernel_bench.ResultFile(path, append=True)
    impls = ["flashmask", "cudnnflex"]
    assert result.resume(kernel_bench.case_key(row("x", "causal")), impls), "a failed row counts as done"
    assert not result.resume(kernel_bench.case_key(row("x", "document")), impls)
    assert result.previous["rows"] == rows[:2] + rows[3:], "only the partial case's rows go"
    assert result.resume(kernel_bench.case_key(row("x", "document", dropout=0.1)), ["flashmask"])
    assert not result.resume(kernel_bench.case_key(row("x", "full")), impls)


def test_resume_finishes_a_run_cut_short_without_measuring_a_case_twice(smoke, tmp_path):
    """A run stopped inside its second case (one of its two rows written): --resume skips the first
    case, measures the second again in place of its partial row, and leaves one row per case and
    implementation."""
    first, _ = smoke()
    assert [r["mask"] for r in first["rows"]] == ["causal", "causal", "causal_document", "causal_document"]
    cut = dict(first, rows=first["rows"][:3])
    (tmp_path / "kernel.json").write_text(json.dumps(cut))
    before = len(smoke.timed)
    resumed, timed = smoke("--resume")
    assert {mask for _, mask in timed[before:]} == {"causal_document"}, "the complete case is not timed again"
    assert resumed["rows"][:2] == first["rows"][:2]
    def measured(result):
        return sorted((r["impl"], r["mask"]) for r in result["rows"])
    assert measured(resumed) == measured(first)
    done, timed_again = smoke("--resume")
    assert len(timed_again) == len(timed), "nothing is left to time"
    assert len(done["rows"]) == 4


def test_kernel_breakdown_writes_its_rows_with_their_provenance(tmp_path):
    breakdown = load("kernel_breakdown")
    rows = [{"mask": "causal", "seqlen": 8192, "direction": "fwd", "kernel": "k", "us_per_call": 1.5}]
    path = tmp_path / "out" / "breakdown.json"
    breakdown.write_result(path, "kernel_breakdown.py --json x", "GPU name", "2.11", rows)
    written = json.loads(path.read_text())
    assert written["rows"] == rows
    meta = written["meta"]
    assert (meta["command"], meta["device"], meta["torch"]) == ("kernel_breakdown.py --json x", "GPU name", "2.11")
    assert meta["commit"] and meta["date"].startswith("20")
