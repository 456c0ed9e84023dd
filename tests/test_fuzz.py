"""`python -m flashmask_paddle.fuzz` on the CPU op: a small run passes, and a failing case is
reported with a seed that replays exactly it."""
from __future__ import annotations

import json

from flashmask_paddle import fuzz
from flashmask_paddle.testing.cases import FORMS


def test_fuzz_cpu_cases_match_reference(seed, capsys):
    assert fuzz.main(["--cases", "40", "--device", "cpu", "--seed", str(seed)]) == 0
    assert "40 passed, 0 failed" in capsys.readouterr().out


def test_fuzz_draws_every_form_and_replays_a_case_from_its_seed():
    cases = [fuzz.case_for(s, "cpu", 150) for s in range(200)]
    assert {(c.causal, c.columns) for c in cases} == set(FORMS)
    assert str(fuzz.case_for(12345, "cuda", 1000)) == str(fuzz.case_for(12345, "cuda", 1000))


def test_fuzz_reports_failures_with_replay_seeds(monkeypatch, capsys):
    def fail_on_causal(case):
        assert not case.causal, "causal case rejected"

    monkeypatch.setattr(fuzz, "_checker", lambda device: fail_on_causal)
    assert fuzz.main(["--cases", "20", "--device", "cpu", "--seed", "5"]) == 1
    out = capsys.readouterr().out
    replay = [line for line in out.splitlines() if line.startswith("replay:")]
    assert replay and "--replay" in replay[0]
    seeds = [int(s) for s in replay[0].split("--replay", 1)[1].split()]
    assert seeds and all(fuzz.case_for(s, "cpu", 150).causal for s in seeds)


def test_fuzz_splits_cases_over_processes_and_records_the_run(tmp_path):
    out = tmp_path / "fuzz.json"
    assert fuzz.main(["--cases", "12", "--device", "cpu", "--seed", "3", "--jobs", "2", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["cases"] == 12 and record["failed"] == 0 and record["failures"] == []
    assert record["command"].endswith("--jobs 2 --json " + str(out))
    assert {"commit", "device", "date"} <= record.keys()
