"""How kernel_bench.py times a call: GPU time per call from CUDA events around calls queued back
to back behind a spin kernel (time_ms), or in the steady state at the power limit with the energy
per call (steady_ms, --steady-s), the GPU's clock and power sampled over each timing (timed),
mask preparations built once and timed apart (time_mask_build), the profiler's summed kernel time
(kernel_ms), and one phase's rounds folded into a row's fields (phase_fields). The run's settings
(RUN) come from the command line through configure(run_settings(torch, args)).
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple

import numpy as np

from e2e_attention import host_seconds
from flashmask_paddle.bench.gpu_clock import (ClockSample, ClockSampler, current_cuda_energy_reader, current_cuda_reader,
                                              mean_of_read)


class RunSettings(NamedTuple):
    """How this run times, from the command line (configure sets RUN)."""

    smoke: bool = False  # --smoke: CPU, fp32, host clock (checks the script's plumbing, numbers meaningless)
    warmup_s: float = 0.0  # --warmup-s
    settle_ms: float = 0.0  # --settle-ms
    min_window_ms: float = 0.0  # --min-window-ms
    kernel_time: bool = False  # --kernel-time
    steady_s: float = 0.0  # --steady-s: time in the steady state (steady_ms) instead of behind a spin
    clock_read: Callable | None = None  # the timed GPU's (SM clock, power) reader (NVML), None without it
    energy_read: Callable | None = None  # the timed GPU's energy counter (mJ, NVML), None without it


RUN = RunSettings()


def run_settings(torch, args) -> RunSettings:
    """RUN for parsed command-line arguments (parse_args)."""
    smoke = args.smoke
    return RunSettings(smoke=smoke, warmup_s=0.0 if smoke else args.warmup_s, settle_ms=args.settle_ms,
                       min_window_ms=args.min_window_ms, kernel_time=args.kernel_time and not smoke,
                       steady_s=args.steady_s, clock_read=None if smoke else current_cuda_reader(torch),
                       energy_read=None if smoke else current_cuda_energy_reader(torch))


def configure(settings: RunSettings) -> None:
    """Sets RUN, the settings every timing below reads, for the rest of the process."""
    global RUN
    RUN = settings


def sync(torch):
    if not RUN.smoke:
        torch.cuda.synchronize()


# The spin kernel's clock rate is taken at the H200's highest SM clock, so that a spin of
# ms * SPIN_CYCLES_PER_MS cycles lasts at least ms at any clock the GPU runs.
SPIN_CYCLES_PER_MS = 1_980_000
MAX_REPS = 2000  # bounds a window's host time (the spin covers it) for the shortest calls


class Timing(NamedTuple):
    """gpu_ms: median GPU time per call (steady_ms: the mean). host_ms: median unsynchronised host
    time of a warm-up call, i.e. its launch cost (or the whole call where it waits on the GPU
    itself). reps: how many timed calls the median is over. mj: the GPU's energy per timed call
    (millijoules; steady_ms where NVML counts it)."""

    gpu_ms: float
    host_ms: float
    reps: int = 0  # timed calls behind the median (0: not recorded)
    mj: float | None = None


def timing_window(call_ms: float, host_ms: float, reps: int, settle_ms: float, min_window_ms: float):
    """(untimed settle calls, timed calls, spin ms) for calls of call_ms GPU time and host_ms host
    time: settle calls of at least settle_ms, at least reps and min_window_ms of timed calls (at most
    MAX_REPS), and a spin that outlasts the host's queuing of all of them."""
    call_ms = max(call_ms, 1e-3)
    settle = int(np.ceil(settle_ms / call_ms))
    reps = int(min(max(reps, np.ceil(min_window_ms / call_ms)), MAX_REPS))
    return settle, reps, 1.5 * (settle + reps) * host_ms + 0.2


def warm_up(torch, fn, warmup: int, warmup_s: float) -> tuple[float, float]:
    """At least `warmup` calls of fn and warmup_s seconds of them, synchronised every 8 calls (so
    that wall time tracks GPU time, not the launch queue): (median host ms of a call, GPU ms per
    call estimated from the wall time of each group of 8; the host ms where there was no group)."""
    t0 = time.perf_counter()
    calls = 0
    host_s = []  # each warm-up call's host time
    group_s, t_group = [], time.perf_counter()  # wall time of each group of 8 synchronised calls
    while calls < warmup or time.perf_counter() - t0 < warmup_s:
        t_call = time.perf_counter()
        fn()
        host_s.append(time.perf_counter() - t_call)
        calls += 1
        if calls % 8 == 0:
            sync(torch)  # wall time then tracks GPU time, not the launch queue
            group_s.append(time.perf_counter() - t_group)
            t_group = time.perf_counter()
    sync(torch)
    host_ms = float(np.median(host_s)) * 1e3
    return host_ms, float(np.median(group_s)) / 8 * 1e3 if group_s else host_ms


def time_ms(torch, fn, warmup: int, reps: int, warmup_s: float = 0.0, settle_ms: float = 0.0,
            min_window_ms: float = 0.0) -> Timing:
    """fn's GPU time per call: the median of `reps` calls (at least min_window_ms of GPU work), each
    between CUDA events, after `warmup` calls and at least warmup_s seconds of warm-up."""
    host_ms, call_ms = warm_up(torch, fn, warmup, warmup_s)
    times = []
    if RUN.smoke:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return Timing(float(np.median(times)), host_ms)
    # Calls queued back to back, one event pair around each, one sync at the end, behind a spin
    # kernel that holds the GPU while the host queues them all: each pair then brackets the GPU
    # time of one call, not the host's launch overhead. Without the spin, a call whose host side
    # is about as long as its GPU time (ours: argument checks, plan look-up, workspace, five
    # launches, ~0.15-0.25 ms; FA4's and Flex's Python launchers alike) waited for its own launch:
    # 0.3 ms forwards read up to 40% slow, more so with other host threads about. A sync per call
    # (before) put the Python side of every call inside the window.
    # The spin idles the GPU, and its clock climbs back at the power limit: calls queued after it
    # without being timed (settle_ms of GPU work) bring the clock back to its loaded level first,
    # and a window of at least min_window_ms averages the power limiter's swings (short windows of
    # sub-ms calls read 5-10% apart on identical kernels).
    settle, reps, spin_ms = timing_window(call_ms, host_ms, reps, settle_ms, min_window_ms)
    torch.cuda._sleep(int(spin_ms * SPIN_CYCLES_PER_MS))
    for _ in range(settle):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    sync(torch)
    times = [start.elapsed_time(end) for start, end in events]
    return Timing(float(np.median(times)), host_ms, reps)


def time_mask_build(torch, make, extra: dict, name: str):
    """Times a mask preparation built once per mask (ours and cuDNN-frontend's plans, Flex's block
    mask) into `extra`: {name}_ms_first, the first build's wall time (synchronised; one-time set-up
    such as compilation included); {name}_ms, GPU time per build; {name}_wall_ms, wall time per
    synchronised build, host included (what a step pays that builds the mask per batch). Returns
    the first build."""
    sync(torch)
    t0 = time.perf_counter()
    built = make()
    sync(torch)
    extra[f"{name}_ms_first"] = (time.perf_counter() - t0) * 1e3
    extra[f"{name}_ms"] = time_ms(torch, make, 1, 3, RUN.warmup_s).gpu_ms
    extra[f"{name}_wall_ms"] = host_seconds(torch, make, 3) * 1e3
    return built


def kernel_ms(torch, fn, reps: int) -> float:
    """Mean per call of the summed device time of every kernel, memset and copy fn runs (CUPTI,
    torch.profiler): the GPU work alone. The event timing above also counts the gaps a call leaves
    on the GPU while its host side is still launching (a host-bound call reads slower there); this
    does not (and would double count kernels that overlap on several streams)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sync(torch)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        sync(torch)
    device_us = sum(e.device_time_total for e in prof.events() if e.device_type == DeviceType.CUDA)
    return device_us / 1e3 / reps


STEADY_MAX_REPS = 100_000  # bounds a steady window of the shortest calls


def steady_ms(torch, fn, warmup: int, reps: int, seconds: float) -> Timing:
    """fn's GPU time per call in the steady state at the power limit, where a training loop runs:
    `seconds` of calls back to back first (the clock settles wherever the power limiter holds it;
    2.5 s and 3 s gave the same times within 0.5% on an H100), then the mean over a window of at
    least `seconds` of calls (and `reps`) queued back to back between one pair of CUDA events, with
    no spin before it (an idle GPU's clock climbs, and the first calls after it run faster than a
    loaded one's), and the GPU's energy per call over that window where NVML counts it. A call whose
    host side outlasts its GPU time (host_ms above gpu_ms) leaves the GPU idle between calls: the
    window then measures the host too, as a training loop would."""
    host_ms, call_ms = warm_up(torch, fn, warmup, seconds)
    reps = int(min(max(reps, np.ceil(seconds * 1e3 / max(call_ms, 1e-3))), STEADY_MAX_REPS))
    energy = RUN.energy_read or (lambda: None)
    if RUN.smoke:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return Timing((time.perf_counter() - t0) * 1e3 / reps, host_ms, reps)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0 = energy()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    sync(torch)
    e1 = energy()
    mj = (e1 - e0) / reps if e0 is not None and e1 is not None else None
    return Timing(start.elapsed_time(end) / reps, host_ms, reps, mj)


def timed(torch, fn, warmup: int, reps: int):
    """fn timed once (steady_ms under --steady-s, else time_ms) with the GPU's clock sampled over
    its warm-up and timed calls: (Timing, ClockSample or None)."""
    with ClockSampler(RUN.clock_read) as clock:
        if RUN.steady_s:
            timing = steady_ms(torch, fn, warmup, reps, RUN.steady_s)
        else:
            timing = time_ms(torch, fn, warmup, reps, RUN.warmup_s, RUN.settle_ms, RUN.min_window_ms)
    return timing, clock.result



def mean_clock(samples) -> ClockSample | None:
    """The rounds' clock samples as one: SM clock and power the mean over the rounds that have a
    sample, temperatures over those that read them, the clock limits those of the last of them;
    None without any."""
    got = [s for s in samples if s is not None]
    if not got:
        return None
    return ClockSample(float(np.mean([s.sm_mhz for s in got])), float(np.mean([s.power_w for s in got])),
                       sum(s.count for s in got), got[-1].limits,
                       mean_of_read(s.gpu_c for s in got), mean_of_read(s.mem_c for s in got))


def phase_fields(phase: str, results) -> dict:
    """A phase's row fields from its rounds' (Timing, ClockSample): {phase}_ms and {phase}_host_ms
    the medians over the rounds, {phase}_reps the last round's timed calls (where time_ms recorded
    them), the clock fields of their mean (mean_clock) and, with more than one round,
    {phase}_ms_rounds: each round's GPU ms, in round order."""
    gpu_ms = [timing.gpu_ms for timing, _ in results]
    fields = {f"{phase}_ms": round(float(np.median(gpu_ms)), 4)}
    if len(results) > 1:
        fields[f"{phase}_ms_rounds"] = [round(ms, 4) for ms in gpu_ms]
    fields[f"{phase}_host_ms"] = round(float(np.median([timing.host_ms for timing, _ in results])), 4)
    if results[-1][0].reps:
        fields[f"{phase}_reps"] = results[-1][0].reps
    energy = [timing.mj for timing, _ in results if timing.mj is not None]
    if energy:
        fields[f"{phase}_mj"] = round(float(np.median(energy)), 2)
    clock = mean_clock([sample for _, sample in results])
    if clock is not None:
        fields.update(clock.fields(phase))
    return fields
