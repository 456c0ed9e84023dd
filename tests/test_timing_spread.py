"""benchmarks/timing_spread.py's summary (no GPU): the spread of one set's windows against the spread
of the sets' medians, per (mask, S, phase), on windows drawn at random."""
from __future__ import annotations

import random
import statistics

from benchmark_modules import load

timing_spread = load("timing_spread")


def _rows(rng, masks, sets, windows):
    rows = []
    for mask in masks:
        for index in range(sets):
            rows.append({"mask": mask, "seqlen": 4099, "set": index,
                         **{phase: [{"tflops": rng.uniform(100, 700)} for _ in range(windows)]
                            for phase in timing_spread.PHASES}})
    return rows


def test_summary_against_a_direct_count():
    rng = random.Random()
    rows = _rows(rng, ["document", "causal"], sets=rng.randint(2, 6), windows=rng.randint(2, 5))
    summary = timing_spread.summarize(rows)
    assert [(s["mask"], s["phase"]) for s in summary] == [
        ("document", "fwd"), ("document", "bwd"), ("causal", "fwd"), ("causal", "bwd")]
    for s in summary:
        sets = [[w["tflops"] for w in r[s["phase"]]] for r in rows if r["mask"] == s["mask"]]
        every = sorted(v for values in sets for v in values)
        assert s["median_tflops"] == statistics.median(every)
        assert (s["min_tflops"], s["max_tflops"]) == (every[0], every[-1])
        windows = [(max(v) - min(v)) / statistics.median(v) for v in sets]
        assert abs(s["window_spread"] - sum(windows) / len(windows)) < 1e-4
        medians = [statistics.median(v) for v in sets]
        assert abs(s["set_spread"] - (max(medians) - min(medians)) / statistics.median(medians)) < 1e-4


def test_one_value_has_no_spread():
    assert timing_spread.spread([512.0]) == 0.0
    assert timing_spread.spread([400.0, 500.0, 600.0]) == 0.4
