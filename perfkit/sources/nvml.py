"""Live GPU state from NVML (``nvidia-ml-py``, module ``pynvml``): one snapshot per call.

The NVML module is injected, like prometheus_client's ``/proc`` root: :func:`snapshot` imports
``pynvml`` only when no module is given, and tests pass a fake. A machine without a GPU, driver
or NVML library is a result, not an error::

    snap = snapshot()
    snap.available, snap.reason   # (False, 'NVML not available: NVML Shared Library Not Found')
    snap.summary()                # '2 x NVIDIA H100 80GB HBM3, util 97 % avg, memory 88 % used, ...'
    snap.table()                  # one row per GPU, units in the column names

Every per-GPU NVML call that raises an ``NVMLError`` (``Not Supported`` above all: ECC off, no
power sensor, a consumer board) leaves its field ``None`` and records why in
:attr:`GpuState.unavailable`, keyed by field name. ``nvmlShutdown`` runs whenever ``nvmlInit``
succeeded.

Units are NVML's except where the name says otherwise: memory in bytes (``*_mib`` derived),
clocks in MHz, power in W (NVML reports mW), temperature in °C, PCIe throughput in KB/s
(kilobytes per second over NVML's 20 ms sample, *not* kilobits, despite the ``kbps`` suffix).

A bundle keeps snapshots as ``gpu/nvml-<UTC yyyymmddThhmmssZ>.json`` (:meth:`GpuSnapshot.write`,
:func:`read_snapshot`).

The snapshot's data types, file and table live in :mod:`perfkit.sources.nvml_snapshot`;
they are re-exported here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from perfkit.core.frames import utc
from perfkit.sources.nvml_snapshot import (  # noqa: F401  (re-exported: perfkit.sources.nvml is the NVML source)
    CLOCK_EVENT_REASONS,
    FORMAT,
    GPU_DIR,
    MIB,
    NOT_THROTTLING,
    TABLE_SCHEMA,
    GpuProcess,
    GpuSnapshot,
    GpuState,
    _now,
    decode_clock_events,
    read_snapshot,
    snapshot_filename,
)

_ECC_FIELDS = (
    ("ecc_corrected_volatile", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
    ("ecc_uncorrected_volatile", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
    ("ecc_corrected_aggregate", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
    ("ecc_uncorrected_aggregate", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
)
_MEMORY_FIELDS = ("mem_used_bytes", "mem_total_bytes", "mem_free_bytes")


def snapshot(nvml: Any = None, *, clock: Callable[[], datetime] | None = None) -> GpuSnapshot:
    """Read every GPU's state from NVML now; never raises for a missing GPU, driver or library.

    ``nvml`` is the ``pynvml`` module (imported when None) or a stand-in with the same
    functions, constants and ``NVMLError``; ``clock`` returns the time to stamp (default: now).

    >>> snapshot(clock=lambda: datetime(2026, 11, 30, 2, tzinfo=UTC)).taken_at.isoformat()
    '2026-11-30T02:00:00+00:00'
    """
    taken_at = utc((clock or _now)()).replace(microsecond=0)
    if nvml is None:
        try:
            import pynvml
        except ImportError as err:
            reason = f"NVML not available: pynvml (nvidia-ml-py) is not installed ({err})"
            return GpuSnapshot(False, reason, taken_at=taken_at)
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError) as err:
        return GpuSnapshot(False, f"NVML not available: {_text_of(err)}", taken_at=taken_at)
    try:
        return _Reader(nvml).snapshot(taken_at)
    finally:
        # the state is already read; a failed shutdown changes nothing in it
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


_NA: Any = object()  # sentinel: the NVML call failed (the reason is recorded)


class _Reader:
    """NVML calls that record failures instead of raising them."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        errors: list[type[BaseException]] = [nvml.NVMLError]
        # pynvml's unversioned wrappers raise this (not an NVMLError) against an older driver
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        if isinstance(mismatch, type) and issubclass(mismatch, BaseException):
            errors.append(mismatch)
        self.errors = tuple(errors)
        not_found = getattr(nvml, "NVMLError_FunctionNotFound", None)
        self.not_found: tuple[type[BaseException], ...] = (not_found,) if isinstance(not_found, type) else ()

    def call(self, unavailable: dict[str, str], fields: str | tuple[str, ...], fn: str, *args: Any) -> Any:
        """``nvml.<fn>(*args)``, or :data:`_NA` with the reason stored under each of ``fields``."""
        func = getattr(self.nvml, fn, None)
        if func is None:
            reason = f"not in this pynvml ({fn})"
        else:
            try:
                return func(*args)
            except self.errors as err:
                reason = f"{_text_of(err)} ({fn})"
        for name in (fields,) if isinstance(fields, str) else fields:
            unavailable[name] = reason
        return _NA

    def snapshot(self, taken_at: datetime) -> GpuSnapshot:
        na: dict[str, str] = {}
        driver = self.call(na, "driver_version", "nvmlSystemGetDriverVersion")
        cuda = self.call(na, "cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
        version = self.call(na, "nvml_version", "nvmlSystemGetNVMLVersion")
        snap = GpuSnapshot(
            True,
            taken_at=taken_at,
            driver_version=None if driver is _NA else _text(driver),
            cuda_driver_version=None if cuda is _NA else f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}",
            nvml_version=None if version is _NA else _text(version),
            unavailable=na,
        )
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
        except self.errors as err:
            snap.available, snap.reason = False, f"NVML could not count GPUs: {_text_of(err)}"
            return snap
        if count == 0:
            snap.available, snap.reason = False, "no GPU visible to NVML"
            return snap
        snap.gpus = [self.gpu(i) for i in range(count)]
        return snap

    def gpu(self, index: int) -> GpuState:
        nvml = self.nvml
        na: dict[str, str] = {}
        g = GpuState(index, unavailable=na)
        h = self.call(na, "handle", "nvmlDeviceGetHandleByIndex", index)
        if h is _NA:
            return g

        g.name = _opt(self.call(na, "name", "nvmlDeviceGetName", h), _text)
        g.uuid = _opt(self.call(na, "uuid", "nvmlDeviceGetUUID", h), _text)
        pci = self.call(na, "pci_bus_id", "nvmlDeviceGetPciInfo", h)
        g.pci_bus_id = None if pci is _NA else _text(pci.busId)

        util = self.call(na, ("util_pct", "mem_util_pct"), "nvmlDeviceGetUtilizationRates", h)
        if util is not _NA:
            g.util_pct, g.mem_util_pct = int(util.gpu), int(util.memory)

        mem = _NA
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        if v2 is not None:
            # v2 excludes driver-reserved memory from "used"; older drivers lack it, v1 follows
            mem = self.call({}, (), "nvmlDeviceGetMemoryInfo", h, v2)
        if mem is _NA:
            mem = self.call(na, _MEMORY_FIELDS, "nvmlDeviceGetMemoryInfo", h)
        if mem is not _NA:
            g.mem_used_bytes, g.mem_total_bytes, g.mem_free_bytes = (
                int(mem.used),
                int(mem.total),
                int(mem.free),
            )
            reserved = getattr(mem, "reserved", None)
            g.mem_reserved_bytes = None if reserved is None else int(reserved)

        sm, mclk = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
        g.sm_clock_mhz = _opt(self.call(na, "sm_clock_mhz", "nvmlDeviceGetClockInfo", h, sm), int)
        g.sm_clock_max_mhz = _opt(self.call(na, "sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", h, sm), int)
        g.mem_clock_mhz = _opt(self.call(na, "mem_clock_mhz", "nvmlDeviceGetClockInfo", h, mclk), int)
        g.mem_clock_max_mhz = _opt(
            self.call(na, "mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", h, mclk), int
        )

        g.throttle_mask, g.throttle_api = self.clock_events(h, na)

        power = self.call(na, "power_w", "nvmlDeviceGetPowerUsage", h)
        g.power_w = None if power is _NA else int(power) / 1000  # mW
        limit = self.call(na, "power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h)
        g.power_limit_w = None if limit is _NA else int(limit) / 1000  # mW
        g.temp_c = _opt(
            self.call(na, "temp_c", "nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU), int
        )

        self.ecc(h, g, na)

        tx, rx = nvml.NVML_PCIE_UTIL_TX_BYTES, nvml.NVML_PCIE_UTIL_RX_BYTES
        g.pcie_tx_kbps = _opt(self.call(na, "pcie_tx_kbps", "nvmlDeviceGetPcieThroughput", h, tx), int)
        g.pcie_rx_kbps = _opt(self.call(na, "pcie_rx_kbps", "nvmlDeviceGetPcieThroughput", h, rx), int)

        procs = self.call(na, "processes", "nvmlDeviceGetComputeRunningProcesses", h)
        if procs is not _NA:
            g.processes = [
                GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                for p in procs
            ]
        return g

    def clock_events(self, h: Any, na: dict[str, str]) -> tuple[int | None, str | None]:
        """The clock-event bitmask: the current API, else the pre-"ClocksEvent" one."""
        fn = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return int(fn(h)), "ClocksEvent"
            except self.not_found:
                pass  # the driver predates the rename; the old name below still answers
            except self.errors as err:
                na["throttle_reasons"] = f"{_text_of(err)} (nvmlDeviceGetCurrentClocksEventReasons)"
                return None, None
        mask = self.call(na, "throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return (None, None) if mask is _NA else (int(mask), "ClocksThrottle")

    def ecc(self, h: Any, g: GpuState, na: dict[str, str]) -> None:
        nvml = self.nvml
        mode = self.call(na, "ecc_mode", "nvmlDeviceGetEccMode", h)
        if mode is not _NA:
            g.ecc_mode = "enabled" if mode[0] == nvml.NVML_FEATURE_ENABLED else "disabled"
        if g.ecc_mode == "disabled":
            for name, _, _ in _ECC_FIELDS:
                na[name] = "Not Supported (ECC disabled)"
            return
        for name, error_type, counter in _ECC_FIELDS:
            args = (h, getattr(nvml, error_type), getattr(nvml, counter))
            count = self.call(na, name, "nvmlDeviceGetTotalEccErrors", *args)
            setattr(g, name, None if count is _NA else int(count))


def _opt(value: Any, convert: Callable[[Any], Any]) -> Any:
    return None if value is _NA else convert(value)


def _text(value: Any) -> str:
    """pynvml gives ``str`` for most strings but ``bytes`` for struct fields such as ``busId``."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _text_of(err: BaseException) -> str:
    try:
        return str(err) or type(err).__name__
    except Exception:  # pynvml's __str__ asks the library for unknown codes, which can fail too
        return type(err).__name__
