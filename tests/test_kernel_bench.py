"""benchmarks/kernel_bench.py imports without torch and draws the masks benchmarks/README.md describes;
--rounds times a row's implementations in alternating order and reports medians (the smoke runs on
CPU torch, skipped without torch)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from flashmask_paddle import masks

_spec = importlib.util.spec_from_file_location(
    "kernel_bench", Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_bench.py")
kernel_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_bench)


def test_document_lengths_are_drawn_in_s_over_32_to_s_over_4_and_fill_s():
    rng = np.random.default_rng(0)
    for s in (1024, 8192, 32768):
        lens = kernel_bench.doc_lengths(rng, s)
        assert sum(lens) == s
        assert all(s // 32 <= n <= s // 4 for n in lens[:-1])


@pytest.mark.parametrize("name", kernel_bench.MASKS)
def test_bench_masks_have_one_row_per_batch_and_match_their_dense_picture(name):
    cm = kernel_bench.build_mask(name, 512, 3, seed=1)
    assert cm.indices.shape[:3] == (3, 1, 512) and cm.indices.dtype == np.int32
    masks.validate(cm.indices, cm.causal, 512)
    dense = masks.to_dense(cm, seqlen_q=512)
    assert int(dense.sum()) == int(np.sum(masks.count_visible(cm, seqlen_q=512)))
    assert 0 < kernel_bench.TILE and 0 < masks.tile_density(cm, seqlen_q=512) <= 1


def test_share_question_answers_do_not_see_each_other():
    cm = kernel_bench.build_mask("share_question", 1024, 1, seed=2)
    dense = masks.to_dense(cm, seqlen_q=1024)[0, 0]
    assert dense.sum() < np.tril(np.ones((1024, 1024), bool)).sum()  # sparser than causal
    assert not dense[np.triu_indices(1024, 1)].any()  # and still causal


@pytest.mark.parametrize("name", kernel_bench.MASKS)
def test_varlen_sequences_describe_exactly_the_mask_fa4_varlen_is_timed_on(name):
    s, batch = 640, 2
    docs = []
    cm = kernel_bench.build_mask(name, s, batch, seed=3, docs_out=docs)
    lens = kernel_bench.varlen_sequences(name, docs)
    if name not in kernel_bench.VARLEN_MASKS:
        assert lens is None
        return
    assert sum(lens) == batch * s
    # Block-diagonal over the packed rows, causal inside a sequence where varlen's flag says so.
    seq = np.repeat(np.arange(len(lens)), lens).reshape(batch, s)
    pos = np.arange(s)
    visible = seq[:, :, None] == seq[:, None, :]
    if kernel_bench.VARLEN_MASKS[name]:
        visible &= pos[:, None] >= pos[None, :]
    np.testing.assert_array_equal(masks.to_dense(cm, seqlen_q=s)[:, 0], visible)


def test_rounds_alternate_list_order_and_reversed_order():
    impls = ("flashmask", "flashmask:b", "flex")
    assert kernel_bench.round_order(impls, 0) == ["flashmask", "flashmask:b", "flex"]
    assert kernel_bench.round_order(impls, 1) == ["flex", "flashmask:b", "flashmask"]
    assert kernel_bench.round_order(impls, 2) == ["flashmask", "flashmask:b", "flex"]
    assert kernel_bench.round_order(impls, 3) == ["flex", "flashmask:b", "flashmask"]
    assert impls == ("flashmask", "flashmask:b", "flex")  # the row's list itself is left as it is


def _round(gpu_ms, host_ms, sm_mhz=None, power_w=None, limits=None, gpu_c=None, mem_c=None):
    clock = None if sm_mhz is None else kernel_bench.ClockSample(sm_mhz, power_w, 10, limits, gpu_c, mem_c)
    return kernel_bench.Timing(gpu_ms, host_ms), clock


def test_phase_fields_take_medians_over_rounds_and_the_mean_clock():
    results = [_round(1.00004, 0.3, 1980.0, 700.04, ["sw_power_cap"]),
               _round(1.3, 0.1, 1700.0, 690.0, None),  # a round whose NVML read no limits
               _round(1.1, 0.2, 1760.0, 650.0, [])]
    fields = kernel_bench.phase_fields("bwd", results)
    assert fields == {"bwd_ms": 1.1, "bwd_ms_rounds": [1.0, 1.3, 1.1], "bwd_host_ms": 0.2,
                      "bwd_sm_mhz": 1813, "bwd_power_w": 680.0, "bwd_clock_limits": "none"}


def test_phase_fields_average_the_temperatures_of_the_rounds_that_read_them():
    results = [_round(1.0, 0.1, 1700.0, 690.0, None, 60.0, 80.0), _round(1.2, 0.1, 1700.0, 690.0, None, 64.0),
               _round(1.1, 0.1, 1700.0, 690.0)]
    fields = kernel_bench.phase_fields("fwd", results)
    assert fields["fwd_gpu_c"] == 62.0 and fields["fwd_mem_c"] == 80.0


def test_phase_fields_of_one_round_are_the_single_timing_and_its_clock_fields():
    timing, clock = _round(0.123456, 0.05, 1712.4, 655.55, ["sw_power_cap", "sw_thermal"])
    fields = kernel_bench.phase_fields("fwd", [(timing, clock)])
    assert fields == {"fwd_ms": 0.1235, "fwd_host_ms": 0.05, **clock.fields("fwd")}
    assert fields["fwd_clock_limits"] == "sw_power_cap+sw_thermal"
    assert kernel_bench.phase_fields("fwd", [(timing, None)]) == {"fwd_ms": 0.1235, "fwd_host_ms": 0.05}


@pytest.fixture
def smoke(tmp_path, monkeypatch):
    """Runs kernel_bench.main in smoke mode (CPU torch; ours and one variant of it) with extra
    arguments; returns its JSON and the order time_round saw (impl, mask) in."""
    pytest.importorskip("torch")
    monkeypatch.setattr(kernel_bench, "RUN", kernel_bench.RUN)  # main sets it
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


def test_append_keeps_the_rows_and_commands_of_the_file_found_at_start(smoke):
    first, _ = smoke()
    both, _ = smoke("--append")
    assert both["rows"][:4] == first["rows"] and len(both["rows"]) == 8
    assert both["meta"]["command"] == first["meta"]["command"] + " ;; " + first["meta"]["command"] + " --append"
    again, _ = smoke()
    assert len(again["rows"]) == 4, "without --append the file is rewritten"


def test_timing_window_fills_short_calls_up_to_the_minimum_window_and_settles_first():
    # 0.25 ms calls: 20 ms of settling is 80 calls, 40 ms of timing 160 (more than --reps 10), and
    # the spin outlasts the host's queuing of all 240 at 0.2 ms each
    assert kernel_bench.timing_window(0.25, 0.2, 10, 20.0, 40.0) == (80, 160, 1.5 * 240 * 0.2 + 0.2)
    # long calls keep --reps and settle with one call
    settle, reps, spin = kernel_bench.timing_window(24.0, 0.3, 10, 20.0, 40.0)
    assert (settle, reps) == (1, 10) and spin == 1.5 * 11 * 0.3 + 0.2
    # the window never exceeds MAX_REPS; without settle_ms / min_window_ms it is --reps alone
    assert kernel_bench.timing_window(0.001, 0.1, 10, 0.0, 40.0)[1] == kernel_bench.MAX_REPS
    assert kernel_bench.timing_window(0.5, 0.1, 10, 0.0, 0.0)[:2] == (0, 10)


def test_kernel_breakdown_writes_its_rows_with_their_provenance(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "kernel_breakdown", Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_breakdown.py")
    breakdown = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(breakdown)
    rows = [{"mask": "causal", "seqlen": 8192, "direction": "fwd", "kernel": "k", "us_per_call": 1.5}]
    path = tmp_path / "out" / "breakdown.json"
    breakdown.write_result(path, "kernel_breakdown.py --json x", "GPU name", "2.11", rows)
    written = json.loads(path.read_text())
    assert written["rows"] == rows
    meta = written["meta"]
    assert (meta["command"], meta["device"], meta["torch"]) == ("kernel_breakdown.py --json x", "GPU name", "2.11")
    assert meta["commit"] and meta["date"].startswith("20")
