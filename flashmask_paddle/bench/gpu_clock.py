"""The GPU's SM clock, power draw and temperatures while a timed loop runs, sampled through NVML.

Kernels that keep an H200 busy run at its power limit, where it lowers the clock; a kernel that
spends more energy per FLOP (instructions, shared memory and DRAM traffic) then runs at a lower
clock than another doing the same work. The kernel benchmark records each timing's mean clock and
power, and what held the clock down (NVML's clock event reasons, e.g. ``sw_power_cap``), so that a
table can tell a slower kernel from a slower clock. Power is NVML's instantaneous reading where the
driver has it: the default one averages over about a second, longer than a timed loop. The GPU's
and its memory's (HBM) temperatures come with each sample where the driver reports them: hot HBM
is refreshed more often and gives less bandwidth at the same clock, which no clock reason shows.
The GPU's energy counter (``nvml_energy_reader``) gives the energy a window of calls spent, the
measure of a kernel at the power limit: there the limiter holds the power, so the kernel that spends
fewer joules per call runs more calls per second.

Standard library only (ctypes over the driver's ``libnvidia-ml.so.1``; the H200 scripts import it
beside torch). Where NVML is missing or refuses, the sampler yields nothing and the benchmark
records no clock.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable, NamedTuple, Optional  # aliases below: Python 3.9 has no X | None at run time

__all__ = ["CLOCK_LIMITS", "ClockSample", "ClockSampler", "Sample", "current_cuda_energy_reader", "current_cuda_reader",
           "mean_of_read", "nvml_energy_reader", "nvml_reader"]

PERIOD_S = 0.02
_NVML_CLOCK_SM = 1  # nvmlClockType_t
_NVML_FI_DEV_POWER_INSTANT = 186  # nvmlFieldValue_t field ids: power (mW), HBM temperature (C)
_NVML_FI_DEV_MEMORY_TEMP = 82
_NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t


class Sample(NamedTuple):
    """One read: SM clock (MHz), power (W), nvmlClocksEventReasons bits, GPU and HBM temperature
    (C); the last three None where the driver did not give them."""
    sm_mhz: float
    power_w: float
    reasons: Optional[int] = None
    gpu_c: Optional[float] = None
    mem_c: Optional[float] = None


Reader = Callable[[], Optional[Sample]]
# nvmlClocksEventReasons bits, and the names a table shows; GPU idle is left out (a sample between
# two launches is not a limit).
CLOCK_LIMITS = {0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock",
                0x200: "board_limit"}


class _Value(ctypes.Union):
    _fields_ = [("d", ctypes.c_double), ("ui", ctypes.c_uint), ("ul", ctypes.c_ulong),
                ("ull", ctypes.c_ulonglong), ("sll", ctypes.c_longlong), ("si", ctypes.c_int), ("us", ctypes.c_ushort)]


class _FieldValue(ctypes.Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", _Value)]


# _Value's member for each nvmlValueType_t (0 double, 1 uint, 2 ulong, 3 ulonglong, 4 longlong, 5 int,
# 6 ushort).
_VALUE_MEMBERS = {0: "d", 1: "ui", 2: "ul", 3: "ull", 4: "sll", 5: "si", 6: "us"}


def _field_number(field: _FieldValue) -> float:
    return float(getattr(field.value, _VALUE_MEMBERS.get(field.valueType, "ui")))


def mean_of_read(values) -> float | None:
    """The mean of the values that were read (not None), None where none was."""
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


class ClockSample:
    """Mean SM clock (MHz) and power draw (W) over the samples of one window, their count, the
    clock limits (CLOCK_LIMITS names) active in at least half of them, and the mean GPU and HBM
    temperatures (C) of the samples that have them (limits and temperatures None: not read)."""

    def __init__(self, sm_mhz: float, power_w: float, count: int, limits: list[str] | None = None,
                 gpu_c: float | None = None, mem_c: float | None = None):
        self.sm_mhz, self.power_w, self.count, self.limits = sm_mhz, power_w, count, limits
        self.gpu_c, self.mem_c = gpu_c, mem_c

    @classmethod
    def of(cls, samples) -> ClockSample | None:
        if not samples:
            return None
        samples = [Sample(*s) for s in samples]
        n = len(samples)
        bits = [s.reasons for s in samples if s.reasons is not None]
        limits = None
        if bits:
            limits = [name for bit, name in CLOCK_LIMITS.items() if 2 * sum(1 for b in bits if b & bit) >= len(bits)]
        return cls(sum(s.sm_mhz for s in samples) / n, sum(s.power_w for s in samples) / n, n, limits,
                   mean_of_read(s.gpu_c for s in samples), mean_of_read(s.mem_c for s in samples))

    def fields(self, prefix: str) -> dict:
        out = {f"{prefix}_sm_mhz": round(self.sm_mhz), f"{prefix}_power_w": round(self.power_w, 1)}
        if self.limits is not None:
            out[f"{prefix}_clock_limits"] = "+".join(self.limits) or "none"
        for name, value in (("gpu_c", self.gpu_c), ("mem_c", self.mem_c)):
            if value is not None:
                out[f"{prefix}_{name}"] = round(value, 1)
        return out


def _nvml_device(gpu_uuid: str | None):
    """(NVML library, device handle) of the GPU named by its UUID ("GPU-...", as
    CUDA_VISIBLE_DEVICES may renumber it; NVML's GPU 0 otherwise), or None without NVML."""
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
    return lib, handle


def nvml_reader(gpu_uuid: str | None) -> Reader | None:
    """A function returning the GPU's Sample now (None when NVML refuses the clock or power read),
    or None without NVML (the GPU as _nvml_device names it)."""
    device = _nvml_device(gpu_uuid)
    if device is None:
        return None
    lib, handle = device
    mhz, milliwatts, reasons, celsius = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong(), ctypes.c_uint()
    power_field = _FieldValue(fieldId=_NVML_FI_DEV_POWER_INSTANT)
    mem_field = _FieldValue(fieldId=_NVML_FI_DEV_MEMORY_TEMP)
    reasons_of = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)

    def field_value(field: _FieldValue) -> float | None:
        field.nvmlReturn = 1
        if lib.nvmlDeviceGetFieldValues(handle, 1, ctypes.byref(field)) == 0 and field.nvmlReturn == 0:
            return _field_number(field)
        return None

    def power_w() -> float | None:
        milliwatts_now = field_value(power_field)
        if milliwatts_now is not None:
            return milliwatts_now / 1000.0
        if lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts)) == 0:
            return milliwatts.value / 1000.0
        return None

    def gpu_c() -> float | None:
        if lib.nvmlDeviceGetTemperature(handle, _NVML_TEMPERATURE_GPU, ctypes.byref(celsius)) == 0:
            return float(celsius.value)
        return None

    def mem_c() -> float | None:
        return field_value(mem_field) or None  # 0 where the board has no HBM sensor

    def read() -> Sample | None:
        if lib.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_SM, ctypes.byref(mhz)) != 0:
            return None
        watts = power_w()
        if watts is None:
            return None
        bits = reasons.value if reasons_of is not None and reasons_of(handle, ctypes.byref(reasons)) == 0 else None
        return Sample(float(mhz.value), watts, bits, gpu_c(), mem_c())

    return read


def nvml_energy_reader(gpu_uuid: str | None) -> Callable[[], Optional[float]] | None:
    """A function returning the GPU's energy counter now in millijoules (NVML's total energy since
    the driver loaded; None when NVML refuses the read), or None without NVML. The difference of
    two reads is the energy spent between them, whatever the power limiter did meanwhile."""
    device = _nvml_device(gpu_uuid)
    if device is None:
        return None
    lib, handle = device
    millijoules = ctypes.c_ulonglong()

    def read() -> float | None:
        if lib.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(millijoules)) != 0:
            return None
        return float(millijoules.value)

    return read


def _cuda_uuid(torch) -> str | None:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"GPU-{props.uuid}" if hasattr(props, "uuid") else None


def current_cuda_reader(torch) -> Reader | None:
    """nvml_reader of torch's current CUDA device (its UUID from torch), None without CUDA or NVML."""
    return nvml_reader(_cuda_uuid(torch)) if torch.cuda.is_available() else None


def current_cuda_energy_reader(torch) -> Callable[[], Optional[float]] | None:
    """nvml_energy_reader of torch's current CUDA device, None without CUDA or NVML."""
    return nvml_energy_reader(_cuda_uuid(torch)) if torch.cuda.is_available() else None


class ClockSampler:
    """``with ClockSampler(read) as s: ...`` calls ``read()`` when the block starts and every
    PERIOD_S on a thread of its own while it runs; ``s.result`` is then the ClockSample of the
    reads that returned a value, or None (no NVML, no such read)."""

    def __init__(self, read: Reader | None, period_s: float = PERIOD_S):
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
