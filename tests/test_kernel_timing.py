"""benchmarks/kernel_timing.py: one phase's rounds folded into a row's fields, the timing window
(settle calls, timed calls, spin) for calls of a given length, and the steady-state window (mean
time and energy per call)."""
from __future__ import annotations

import time
import types

import pytest
from benchmark_modules import load

kernel_timing = load("kernel_timing")


def _round(gpu_ms, host_ms, sm_mhz=None, power_w=None, limits=None, gpu_c=None, mem_c=None):
    clock = None if sm_mhz is None else kernel_timing.ClockSample(sm_mhz, power_w, 10, limits, gpu_c, mem_c)
    return kernel_timing.Timing(gpu_ms, host_ms), clock


def test_phase_fields_take_medians_over_rounds_and_the_mean_clock():
    results = [_round(1.00004, 0.3, 1980.0, 700.04, ["sw_power_cap"]),
               _round(1.3, 0.1, 1700.0, 690.0, None),  # a round whose NVML read no limits
               _round(1.1, 0.2, 1760.0, 650.0, [])]
    fields = kernel_timing.phase_fields("bwd", results)
    assert fields == {"bwd_ms": 1.1, "bwd_ms_rounds": [1.0, 1.3, 1.1], "bwd_host_ms": 0.2,
                      "bwd_sm_mhz": 1813, "bwd_power_w": 680.0, "bwd_clock_limits": "none"}


def test_phase_fields_average_the_temperatures_of_the_rounds_that_read_them():
    results = [_round(1.0, 0.1, 1700.0, 690.0, None, 60.0, 80.0), _round(1.2, 0.1, 1700.0, 690.0, None, 64.0),
               _round(1.1, 0.1, 1700.0, 690.0)]
    fields = kernel_timing.phase_fields("fwd", results)
    assert fields["fwd_gpu_c"] == 62.0 and fields["fwd_mem_c"] == 80.0


def test_phase_fields_of_one_round_are_the_single_timing_and_its_clock_fields():
    timing, clock = _round(0.123456, 0.05, 1712.4, 655.55, ["sw_power_cap", "sw_thermal"])
    fields = kernel_timing.phase_fields("fwd", [(timing, clock)])
    assert fields == {"fwd_ms": 0.1235, "fwd_host_ms": 0.05, **clock.fields("fwd")}
    assert fields["fwd_clock_limits"] == "sw_power_cap+sw_thermal"
    assert kernel_timing.phase_fields("fwd", [(timing, None)]) == {"fwd_ms": 0.1235, "fwd_host_ms": 0.05}


def test_timing_window_fills_short_calls_up_to_the_minimum_window_and_settles_first():
    # 0.25 ms calls: 20 ms of settling is 80 calls, 40 ms of timing 160 (more than --reps 10), and
    # the spin outlasts the host's queuing of all 240 at 0.2 ms each
    assert kernel_timing.timing_window(0.25, 0.2, 10, 20.0, 40.0) == (80, 160, 1.5 * 240 * 0.2 + 0.2)
    # long calls keep --reps and settle with one call
    settle, reps, spin = kernel_timing.timing_window(24.0, 0.3, 10, 20.0, 40.0)
    assert (settle, reps) == (1, 10) and spin == 1.5 * 11 * 0.3 + 0.2
    # the window never exceeds MAX_REPS; without settle_ms / min_window_ms it is --reps alone
    assert kernel_timing.timing_window(0.001, 0.1, 10, 0.0, 40.0)[1] == kernel_timing.MAX_REPS
    assert kernel_timing.timing_window(0.5, 0.1, 10, 0.0, 0.0)[:2] == (0, 10)


class _FakeCudaTorch:
    """Just what steady_ms touches of torch: events whose elapsed time is set by the test, and a
    synchronize."""

    def __init__(self, window_ms):
        class Event:
            def __init__(self, enable_timing):
                assert enable_timing

            def record(self):
                pass

            def elapsed_time(self, other):
                return window_ms

        self.cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None)


def test_steady_window_is_the_mean_per_call_with_the_energy_it_spent(monkeypatch):
    calls = []
    energy = iter([1_000.0, 1_000.0 + 400 * 3.5])  # mJ read before and after the window
    run = kernel_timing.RunSettings(steady_s=0.01, energy_read=lambda: next(energy))
    monkeypatch.setattr(kernel_timing, "RUN", run)
    timing = kernel_timing.steady_ms(_FakeCudaTorch(window_ms=800.0), lambda: calls.append(1), warmup=2, reps=400,
                                     seconds=0.0)
    # no warm-up time asked: the warm-up is the 2 calls, the window the 400 reps (more than 0 s of calls)
    assert len(calls) == 2 + 400 and timing.reps == 400
    assert timing.gpu_ms == pytest.approx(2.0) and timing.mj == pytest.approx(3.5)


def test_steady_window_lasts_at_least_the_asked_seconds_and_has_no_energy_without_nvml(monkeypatch):
    monkeypatch.setattr(kernel_timing, "RUN", kernel_timing.RunSettings(steady_s=0.05, smoke=True))
    calls = []

    def call():
        calls.append(1)
        time.sleep(0.001)

    timing = kernel_timing.steady_ms(None, call, warmup=1, reps=3, seconds=0.05)
    # ~1 ms calls: the 50 ms warm-up estimates the call, the window then takes ~50 of them, not 3
    assert 20 <= timing.reps <= 60 and timing.mj is None
    assert 1.0 <= timing.gpu_ms < 10.0  # each call sleeps 1 ms


def test_phase_fields_carry_the_median_energy_of_the_rounds_that_read_it():
    results = [(kernel_timing.Timing(1.0, 0.1, 100, 700.0), None), (kernel_timing.Timing(1.1, 0.1, 100, 760.0), None),
               (kernel_timing.Timing(1.2, 0.1, 100, None), None)]
    assert kernel_timing.phase_fields("fwd", results)["fwd_mj"] == 730.0
    assert "fwd_mj" not in kernel_timing.phase_fields("fwd", [(kernel_timing.Timing(1.0, 0.1), None)])
