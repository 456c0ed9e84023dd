"""benchmarks/kernel_timing.py: one phase's rounds folded into a row's fields, and the timing window
(settle calls, timed calls, spin) for calls of a given length."""
from __future__ import annotations

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
