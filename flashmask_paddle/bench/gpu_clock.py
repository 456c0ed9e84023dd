"""The GPU's SM clock and power draw while a timed loop runs, sampled through NVML.

Kernels that keep an H200 busy run at its power limit, where it lowers the clock; a kernel that
spends more energy per FLOP (instructions, shared memory and DRAM traffic) then runs at a lower
clock than another doing the same work. The kernel benchmark records each timing's mean clock and
power so that a table can tell a slower kernel from a slower clock.

Standard library only (ctypes over the driver's ``libnvidia-ml.so.1``; the H200 scripts import it
beside torch). Where NVML is missing or refuses, the sampler yields nothing and the benchmark
records no clock.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable

__all__ = ["ClockSample", "ClockSampler", "current_cuda_reader", "nvml_reader"]

PERIOD_S = 0.02
_NVML_CLOCK_SM = 1  # nvmlClockType_t


class ClockSample:
    """Mean SM clock (MHz) and power draw (W) over the samples of one window, and their count."""

    def __init__(self, sm_mhz: float, power_w: float, count: int):
        self.sm_mhz, self.power_w, self.count = sm_mhz, power_w, count

    @classmethod
    def of(cls, samples) -> ClockSample | None:
        if not samples:
            return None
        return cls(sum(s[0] for s in samples) / len(samples), sum(s[1] for s in samples) / len(samples),
                   len(samples))

    def fields(self, prefix: str) -> dict:
        return {f"{prefix}_sm_mhz": round(self.sm_mhz), f"{prefix}_power_w": round(self.power_w, 1)}


def nvml_reader(gpu_uuid: str | None) -> Callable[[], tuple[float, float] | None] | None:
    """A function returning the GPU's (SM clock MHz, power W) now (None when NVML refuses that
    read), or None without NVML. The GPU is named by its UUID ("GPU-..."), as
    CUDA_VISIBLE_DEVICES may renumber it; NVML's GPU 0 otherwise."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    handle = ctypes.c_void_p()
    if lib.nvmlInit_v2() != 0:
        return None
    found = gpu_uuid is not None and lib.nvmlDeviceGetHandleByUUID(gpu_uuid.encode(), ctypes.byref(handle)) == 0
    if not found and lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
        return None
    mhz, milliwatts = ctypes.c_uint(), ctypes.c_uint()

    def read() -> tuple[float, float] | None:
        if (lib.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_SM, ctypes.byref(mhz)) != 0
                or lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts)) != 0):
            return None
        return float(mhz.value), milliwatts.value / 1000.0

    return read


def current_cuda_reader(torch) -> Callable[[], tuple[float, float] | None] | None:
    """nvml_reader of torch's current CUDA device (its UUID from torch), None without CUDA or NVML."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return nvml_reader(f"GPU-{props.uuid}" if hasattr(props, "uuid") else None)


class ClockSampler:
    """``with ClockSampler(read) as s: ...`` calls ``read()`` when the block starts and every
    PERIOD_S on a thread of its own while it runs; ``s.result`` is then the ClockSample of the
    reads that returned a value, or None (no NVML, no such read)."""

    def __init__(self, read: Callable[[], tuple[float, float] | None] | None, period_s: float = PERIOD_S):
        self.read, self.period_s, self.result = read, period_s, None
        self._samples, self._stop, self._thread = [], threading.Event(), None

    def _run(self):
        while True:
            sample = self.read()
            if sample is not None:
                self._samples.append(sample)
            if self._stop.wait(self.period_s):
                return

    def __enter__(self):
        if self.read is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.result = ClockSample.of(self._samples)
        return False

    def fields(self, prefix: str) -> dict:
        """The result's fields named after `prefix` (ClockSample.fields), none without a result."""
        return self.result.fields(prefix) if self.result is not None else {}
