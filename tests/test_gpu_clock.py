"""The benchmarks' GPU clock sampler: a reader called on a thread while a block runs, its samples
averaged; NVML absent (the CPU machines) gives no reader and no result."""
from __future__ import annotations

import threading
import time
import types

import pytest

from flashmask_paddle.bench.gpu_clock import (CLOCK_LIMITS, ClockSample, ClockSampler, current_cuda_energy_reader,
                                              current_cuda_reader, nvml_energy_reader, nvml_reader)


def test_samples_are_averaged_into_named_fields():
    sample = ClockSample.of([(1755.0, 612.3, None), (1725.0, 640.1, None)])
    assert sample.count == 2
    assert sample.sm_mhz == pytest.approx(1740.0)
    assert sample.power_w == pytest.approx(626.2)
    assert sample.fields("bwd") == {"bwd_sm_mhz": 1740, "bwd_power_w": 626.2}  # no reasons read: no limits
    assert ClockSample.of([]) is None


def test_temperatures_are_the_mean_of_the_samples_that_read_them():
    samples = [(1700.0, 690.0, None, 61.0, 78.0), (1710.0, 688.0, None, 63.0, None),  # HBM not read
               (1720.0, 695.0)]  # a read with neither
    sample = ClockSample.of(samples)
    assert sample.count == 3
    assert sample.gpu_c == pytest.approx(62.0)
    assert sample.mem_c == pytest.approx(78.0)
    assert sample.fields("bwd") == {"bwd_sm_mhz": 1710, "bwd_power_w": 691.0, "bwd_gpu_c": 62.0, "bwd_mem_c": 78.0}
    no_temperatures = ClockSample.of([(1700.0, 690.0, None, None, None)])
    assert no_temperatures.gpu_c is None and no_temperatures.mem_c is None
    assert set(no_temperatures.fields("fwd")) == {"fwd_sm_mhz", "fwd_power_w"}


def test_clock_limits_are_the_reasons_of_at_least_half_the_samples():
    power_cap = next(bit for bit, name in CLOCK_LIMITS.items() if name == "sw_power_cap")
    thermal = next(bit for bit, name in CLOCK_LIMITS.items() if name == "hw_thermal")
    idle = 0x1  # not a limit: left out even where every sample has it
    samples = [(1700.0, 690.0, power_cap | idle), (1710.0, 688.0, power_cap | thermal | idle),
               (1980.0, 300.0, idle), (1720.0, 695.0, None)]  # None: a read without the reasons
    sample = ClockSample.of(samples)
    assert sample.count == 4
    assert sample.limits == ["sw_power_cap"]  # 2 of the 3 read; hw_thermal 1 of 3
    assert sample.fields("fwd")["fwd_clock_limits"] == "sw_power_cap"
    assert ClockSample.of([(1980.0, 300.0, idle)]).fields("fwd")["fwd_clock_limits"] == "none"


def test_sampler_reads_at_the_start_and_then_periodically_until_the_block_ends():
    values = iter([(1980.0, 150.0, None), None] + [(1700.0, 690.0, None)] * 10_000)  # None: a refused read
    calls, threads = [], set()

    def read():
        calls.append(time.perf_counter())
        threads.add(threading.get_ident())
        return next(values)

    with ClockSampler(read, period_s=0.01) as sampler:
        time.sleep(0.2)
    n = len(calls)
    time.sleep(0.05)
    assert len(calls) == n  # stopped with the block
    assert 3 <= n <= 30  # ~20 at 10 ms over 0.2 s; a loaded machine reads fewer
    assert len(threads) == 1 and threading.get_ident() not in threads  # on a thread of its own
    assert sampler.result.count == n - 1
    assert sampler.result.sm_mhz == pytest.approx((1980.0 + 1700.0 * (n - 2)) / (n - 1))
    assert sampler.fields("fwd") == sampler.result.fields("fwd")


def test_without_nvml_there_is_no_reader_and_no_result():
    read = nvml_reader("GPU-00000000-0000-0000-0000-000000000000")
    if read is not None:
        pytest.skip("NVML present: this checks the machines without a GPU driver")
    with ClockSampler(read) as sampler:
        pass
    assert sampler.result is None
    assert sampler.fields("fwd") == {}


def test_without_nvml_there_is_no_energy_reader():
    if nvml_reader(None) is not None:
        pytest.skip("NVML present: this checks the machines without a GPU driver")
    assert nvml_energy_reader("GPU-00000000-0000-0000-0000-000000000000") is None


def test_no_reader_for_a_torch_without_cuda():
    no_cuda = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    assert current_cuda_reader(no_cuda) is None
    assert current_cuda_energy_reader(no_cuda) is None
