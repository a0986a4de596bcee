"""An NVML snapshot as data: :class:`GpuSnapshot`, :class:`GpuState`, :class:`GpuProcess`, the
clock-event reason bits, the one-row-per-GPU table (:data:`TABLE_SCHEMA`), the one-line summary,
and the snapshot file a bundle keeps (``gpu/nvml-<UTC yyyymmddThhmmssZ>.json``:
:meth:`GpuSnapshot.write`, :func:`read_snapshot`).

Reading NVML is :func:`perfkit.sources.nvml.snapshot`, which re-exports these names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, overload

import polars as pl

from perfkit.core.frames import iso, utc
from perfkit.errors import BundleError

#: the ``format`` key of a snapshot file; bumped when the layout changes incompatibly
FORMAT = "perfkit.nvml/1"
#: a bundle's folder for GPU snapshots
GPU_DIR = "gpu"
MIB = 1024 * 1024

#: clock-event (formerly "clock-throttle") reason bits with NVML's names in snake case:
#: ``nvmlClocksEventReasonSwPowerCap = 0x4`` → ``sw_power_cap``. The last two exist only as
#: ``nvmlClocksThrottleReason*`` constants.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
    ("board_limit", 0x200),
    ("reliability", 0x400),
)
#: reasons that are not throttling under load; :meth:`GpuSnapshot.summary` leaves them out
NOT_THROTTLING = frozenset({"gpu_idle"})

# GpuState's fields by JSON type, for GpuState.from_dict
_INT_FIELDS = (
    "util_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "mem_free_bytes",
    "mem_reserved_bytes",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_mhz",
    "mem_clock_max_mhz",
    "throttle_mask",
    "temp_c",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
)
_TEXT_FIELDS = ("name", "uuid", "pci_bus_id", "throttle_api", "ecc_mode")

#: :meth:`GpuSnapshot.table`'s columns
TABLE_SCHEMA: dict[str, pl.DataType] = {
    "gpu": pl.Int64(),  # NVML index (dcgm-exporter's ``gpu`` label)
    "name": pl.Utf8(),
    "uuid": pl.Utf8(),
    "pci_bus_id": pl.Utf8(),
    "util_pct": pl.Int64(),  # % of the sample period a kernel was running (not SM occupancy)
    "mem_util_pct": pl.Int64(),  # % of the sample period device memory was read or written
    "mem_used_mib": pl.Float64(),
    "mem_total_mib": pl.Float64(),
    "mem_free_mib": pl.Float64(),
    "sm_clock_mhz": pl.Int64(),
    "sm_clock_max_mhz": pl.Int64(),
    "mem_clock_mhz": pl.Int64(),
    "mem_clock_max_mhz": pl.Int64(),
    "power_w": pl.Float64(),
    "power_limit_w": pl.Float64(),
    "temp_c": pl.Int64(),
    "throttle_reasons": pl.Utf8(),  # comma-separated words; "" when none
    "ecc_corrected_volatile": pl.Int64(),
    "ecc_uncorrected_volatile": pl.Int64(),
    "ecc_corrected_aggregate": pl.Int64(),
    "ecc_uncorrected_aggregate": pl.Int64(),
    "pcie_tx_kbps": pl.Int64(),  # KB/s, as NVML reports
    "pcie_rx_kbps": pl.Int64(),
    "n_processes": pl.Int64(),
    "processes": pl.Utf8(),  # "pid (used MiB), ..."
    "unavailable": pl.Utf8(),  # comma-separated names of fields NVML did not give
}


def decode_clock_events(mask: int) -> list[str]:
    """The reason words set in a clock-event/throttle bitmask, in bit order.

    >>> decode_clock_events(0x4 | 0x8)
    ['sw_power_cap', 'hw_slowdown']

    Bits NVML does not define yet come out as ``unknown_0x<bit>``.
    """
    words = [word for word, bit in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for _, bit in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            words.append(f"unknown_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return words


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU; ``used_memory_bytes`` is None where NVML cannot say (WDDM, MIG)."""

    pid: int
    used_memory_bytes: int | None = None

    @property
    def used_memory_mib(self) -> float | None:
        return None if self.used_memory_bytes is None else self.used_memory_bytes / MIB


@dataclass
class GpuState:
    """One GPU as NVML saw it. A field NVML could not give is None and named in ``unavailable``."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    util_pct: int | None = None
    mem_util_pct: int | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    mem_free_bytes: int | None = None
    mem_reserved_bytes: int | None = None  # only from nvmlDeviceGetMemoryInfo v2
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    throttle_mask: int | None = None  # raw clock-event bitmask
    throttle_api: str | None = None  # "ClocksEvent" (current) or "ClocksThrottle" (older NVML)
    power_w: float | None = None
    power_limit_w: float | None = None  # enforced limit
    temp_c: int | None = None
    ecc_mode: str | None = None  # "enabled" / "disabled"
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    pcie_tx_kbps: int | None = None  # KB/s
    pcie_rx_kbps: int | None = None  # KB/s
    processes: list[GpuProcess] | None = None
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def mem_used_mib(self) -> float | None:
        return _mib(self.mem_used_bytes)

    @property
    def mem_total_mib(self) -> float | None:
        return _mib(self.mem_total_bytes)

    @property
    def mem_free_mib(self) -> float | None:
        return _mib(self.mem_free_bytes)

    @property
    def throttle_reasons(self) -> list[str] | None:
        """The decoded clock-event reasons, or None when NVML did not report them."""
        return None if self.throttle_mask is None else decode_clock_events(self.throttle_mask)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; adds the derived MiB values and reason words for readers of the file."""
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "util_pct": self.util_pct,
            "mem_util_pct": self.mem_util_pct,
            "mem_used_bytes": self.mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "mem_free_bytes": self.mem_free_bytes,
            "mem_reserved_bytes": self.mem_reserved_bytes,
            "mem_used_mib": self.mem_used_mib,
            "mem_total_mib": self.mem_total_mib,
            "mem_free_mib": self.mem_free_mib,
            "sm_clock_mhz": self.sm_clock_mhz,
            "sm_clock_max_mhz": self.sm_clock_max_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "mem_clock_max_mhz": self.mem_clock_max_mhz,
            "throttle_mask": self.throttle_mask,
            "throttle_api": self.throttle_api,
            "throttle_reasons": self.throttle_reasons,
            "power_w": self.power_w,
            "power_limit_w": self.power_limit_w,
            "temp_c": self.temp_c,
            "ecc_mode": self.ecc_mode,
            "ecc_corrected_volatile": self.ecc_corrected_volatile,
            "ecc_uncorrected_volatile": self.ecc_uncorrected_volatile,
            "ecc_corrected_aggregate": self.ecc_corrected_aggregate,
            "ecc_uncorrected_aggregate": self.ecc_uncorrected_aggregate,
            "pcie_tx_kbps": self.pcie_tx_kbps,
            "pcie_rx_kbps": self.pcie_rx_kbps,
            "processes": None
            if self.processes is None
            else [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes} for p in self.processes],
            "unavailable": dict(self.unavailable),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuState:
        """Inverse of :meth:`to_dict` (derived keys are ignored); ValueError names a bad key."""
        _require_mapping(data, "gpu")
        processes = data.get("processes")
        if processes is not None:
            if not isinstance(processes, list):
                raise ValueError("'processes' must be a list or null")
            processes = [
                GpuProcess(
                    _int(_require_mapping(p, "process"), "pid", required=True),
                    _int(p, "used_memory_bytes"),
                )
                for p in processes
            ]
        unavailable = data.get("unavailable") or {}
        _require_mapping(unavailable, "unavailable")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in unavailable.items()):
            raise ValueError("'unavailable' must map field names to reasons")
        index = _int(data, "index", required=True)
        ints: dict[str, Any] = {k: _int(data, k) for k in _INT_FIELDS}
        texts: dict[str, Any] = {k: _str(data, k) for k in _TEXT_FIELDS}
        return cls(
            index=index,
            **ints,
            **texts,
            power_w=_float(data, "power_w"),
            power_limit_w=_float(data, "power_limit_w"),
            processes=processes,
            unavailable=dict(unavailable),
        )


@dataclass
class GpuSnapshot:
    """The GPUs NVML sees at ``taken_at``, or ``available=False`` and the ``reason`` why none.

    ``taken_at`` (UTC, whole seconds) does not take part in ``==``: two snapshots of the same
    state compare equal. ``unavailable`` holds system-level fields (driver, CUDA, NVML versions)
    NVML did not give.
    """

    available: bool
    reason: str | None = None
    gpus: list[GpuState] = field(default_factory=list)
    taken_at: datetime = field(default_factory=lambda: _now().replace(microsecond=0), compare=False)
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "12.8", the newest CUDA the driver supports
    nvml_version: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "taken_at": iso(self.taken_at),
            "available": self.available,
            "reason": self.reason,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "nvml_version": self.nvml_version,
            "unavailable": dict(self.unavailable),
            "gpus": [g.to_dict() for g in self.gpus],
        }

    def to_json(self) -> str:
        """Strict JSON (no NaN), times as UTC ISO 8601 with a trailing Z."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuSnapshot:
        """Inverse of :meth:`to_dict`; ValueError names what is wrong."""
        _require_mapping(data, "snapshot")
        if data.get("format") != FORMAT:
            raise ValueError(f"'format' is {data.get('format')!r}, expected {FORMAT!r}")
        available = data.get("available")
        if not isinstance(available, bool):
            raise ValueError("'available' must be true or false")
        taken_at = data.get("taken_at")
        if not isinstance(taken_at, str):
            raise ValueError("'taken_at' must be an ISO 8601 time")
        gpus = data.get("gpus")
        if not isinstance(gpus, list):
            raise ValueError("'gpus' must be a list")
        unavailable = data.get("unavailable") or {}
        _require_mapping(unavailable, "unavailable")
        return cls(
            available=available,
            reason=_str(data, "reason"),
            gpus=[GpuState.from_dict(g) for g in gpus],
            taken_at=utc(taken_at),
            driver_version=_str(data, "driver_version"),
            cuda_driver_version=_str(data, "cuda_driver_version"),
            nvml_version=_str(data, "nvml_version"),
            unavailable={str(k): str(v) for k, v in unavailable.items()},
        )

    def table(self) -> pl.DataFrame:
        """One row per GPU with :data:`TABLE_SCHEMA`; no rows when NVML was unavailable."""
        rows = [_row(g) for g in self.gpus]
        data = {name: [r[name] for r in rows] for name in TABLE_SCHEMA}
        return pl.DataFrame(data, schema=TABLE_SCHEMA)

    def summary(self) -> str:
        """One line: GPU models, mean utilisation, memory used, throttling; or the reason NVML gave nothing.

        e.g. ``4 x NVIDIA H100 80GB HBM3, util 97 % avg, memory 88 % used, throttled: sw_power_cap on GPU 2``
        """
        if not self.available:
            return self.reason or "GPU state unavailable"
        models: dict[str, int] = {}
        for g in self.gpus:
            key = g.name or "unknown GPU"
            models[key] = models.get(key, 0) + 1
        parts = [", ".join(f"{n} x {name}" for name, n in models.items())]

        utils = [g.util_pct for g in self.gpus if g.util_pct is not None]
        parts.append(f"util {sum(utils) / len(utils):.0f} % avg" if utils else "util n/a")

        sized = [g for g in self.gpus if g.mem_used_bytes is not None and g.mem_total_bytes]
        if sized:
            used = sum(g.mem_used_bytes or 0 for g in sized)
            total = sum(g.mem_total_bytes or 0 for g in sized)
            parts.append(f"memory {100 * used / total:.0f} % used")
        else:
            parts.append("memory n/a")

        throttled = []
        for g in self.gpus:
            words = [w for w in g.throttle_reasons or [] if w not in NOT_THROTTLING]
            if words:
                throttled.append(f"{', '.join(words)} on GPU {g.index}")
        if throttled:
            parts.append("throttled: " + "; ".join(throttled))
        elif all(g.throttle_mask is None for g in self.gpus):
            parts.append("throttle reasons n/a")
        else:
            parts.append("not throttled")
        return ", ".join(parts)

    def write(self, path: str | Path) -> Path:
        """Write :meth:`to_json` and return the file written.

        A ``path`` ending in ``.json`` is the file itself; anything else is a bundle folder, and the
        file goes to ``<path>/gpu/nvml-<UTC yyyymmddThhmmssZ>.json``.
        """
        target = Path(path)
        if target.suffix != ".json":
            target = target / GPU_DIR / snapshot_filename(self.taken_at)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.to_json() + "\n", encoding="utf-8")
        return target


def snapshot_filename(taken_at: datetime) -> str:
    """``nvml-20261130T020000Z.json`` for a snapshot taken at 2026-11-30 02:00:00 UTC."""
    return f"nvml-{utc(taken_at):%Y%m%dT%H%M%SZ}.json"


def read_snapshot(path: str | Path) -> GpuSnapshot:
    """Read a file written by :meth:`GpuSnapshot.write`.

    Raises :class:`~perfkit.errors.BundleError` naming the file (and the line, for broken JSON)
    when it is missing, not JSON, or not a snapshot.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BundleError("GPU snapshot not found", path=str(p)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise BundleError(f"cannot read GPU snapshot: {err}", path=str(p)) from err
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise BundleError(
            f"not valid JSON: {err.msg} (column {err.colno})", path=str(p), line=err.lineno
        ) from err
    except ValueError as err:
        raise BundleError(f"not strict JSON: {err}", path=str(p)) from err
    try:
        return GpuSnapshot.from_dict(data)
    except (TypeError, ValueError) as err:
        raise BundleError(f"not a perfkit NVML snapshot: {err}", path=str(p)) from err


def _row(g: GpuState) -> dict[str, Any]:
    reasons = g.throttle_reasons
    procs = g.processes
    return {
        "gpu": g.index,
        "name": g.name,
        "uuid": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "util_pct": g.util_pct,
        "mem_util_pct": g.mem_util_pct,
        "mem_used_mib": g.mem_used_mib,
        "mem_total_mib": g.mem_total_mib,
        "mem_free_mib": g.mem_free_mib,
        "sm_clock_mhz": g.sm_clock_mhz,
        "sm_clock_max_mhz": g.sm_clock_max_mhz,
        "mem_clock_mhz": g.mem_clock_mhz,
        "mem_clock_max_mhz": g.mem_clock_max_mhz,
        "power_w": g.power_w,
        "power_limit_w": g.power_limit_w,
        "temp_c": g.temp_c,
        "throttle_reasons": None if reasons is None else ", ".join(reasons),
        "ecc_corrected_volatile": g.ecc_corrected_volatile,
        "ecc_uncorrected_volatile": g.ecc_uncorrected_volatile,
        "ecc_corrected_aggregate": g.ecc_corrected_aggregate,
        "ecc_uncorrected_aggregate": g.ecc_uncorrected_aggregate,
        "pcie_tx_kbps": g.pcie_tx_kbps,
        "pcie_rx_kbps": g.pcie_rx_kbps,
        "n_processes": None if procs is None else len(procs),
        "processes": None if procs is None else ", ".join(_process_text(p) for p in procs),
        "unavailable": ", ".join(g.unavailable),
    }


def _process_text(p: GpuProcess) -> str:
    mib = p.used_memory_mib
    return f"{p.pid} ({'n/a' if mib is None else f'{mib:.0f} MiB'})"


def _now() -> datetime:
    return datetime.now(UTC)


def _mib(n: int | None) -> float | None:
    return None if n is None else n / MIB


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _require_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a JSON object")
    return value


@overload
def _int(data: Mapping[str, Any], key: str, *, required: Literal[True]) -> int: ...
@overload
def _int(data: Mapping[str, Any], key: str, *, required: bool = False) -> int | None: ...
def _int(data: Mapping[str, Any], key: str, *, required: bool = False) -> int | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key!r} must be an integer{'' if required else ' or null'}")
    return value


def _float(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{key!r} must be a number or null")
    return float(value)


def _str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{key!r} must be a string or null")
