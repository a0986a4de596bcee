"""A fake ``pynvml`` for tests: the functions :mod:`perfkit.sources.nvml` calls, over per-GPU data.

``FakeNvml(gpus).module`` is a module object with pynvml's function names, constants and error
classes. The constants are copied from nvidia-ml-py 13.615.71 (a test checks them against the
installed ``pynvml``); the error classes *are* pynvml's, which imports without a GPU, so
``except NVMLError`` and ``str(err)`` ("Not Supported") behave as on a real machine.

Like NVML, each function checks its arguments: an unknown clock type, sensor, ECC counter or PCIe
counter raises ``NVMLError_InvalidArgument``, and any call outside ``nvmlInit``/``nvmlShutdown``
raises ``NVMLError_Uninitialized``. ``FakeGpu.fail`` makes one function raise for that GPU.
"""

from __future__ import annotations

import re
import types
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pynvml import (
    NVMLError,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_InvalidArgument,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    NVMLError_Uninitialized,
    NVMLLibraryMismatchError,
)

# Copied from nvidia-ml-py 13.615.71 pynvml.py.
CONSTANTS: dict[str, int] = {
    "NVML_FEATURE_DISABLED": 0,
    "NVML_FEATURE_ENABLED": 1,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_VOLATILE_ECC": 0,
    "NVML_AGGREGATE_ECC": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_CLOCK_GRAPHICS": 0,
    "NVML_CLOCK_SM": 1,
    "NVML_CLOCK_MEM": 2,
    "NVML_CLOCK_VIDEO": 3,
    "NVML_PCIE_UTIL_TX_BYTES": 0,
    "NVML_PCIE_UTIL_RX_BYTES": 1,
    "nvmlMemory_v2": 0x02000028,
    "nvmlClocksEventReasonGpuIdle": 0x1,
    "nvmlClocksEventReasonApplicationsClocksSetting": 0x2,
    "nvmlClocksEventReasonSwPowerCap": 0x4,
    "nvmlClocksEventReasonHwSlowdown": 0x8,
    "nvmlClocksEventReasonSyncBoost": 0x10,
    "nvmlClocksEventReasonSwThermalSlowdown": 0x20,
    "nvmlClocksEventReasonHwThermalSlowdown": 0x40,
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": 0x80,
    "nvmlClocksEventReasonDisplayClockSetting": 0x100,
    "nvmlClocksThrottleReasonGpuIdle": 0x1,
    "nvmlClocksThrottleReasonApplicationsClocksSetting": 0x2,
    "nvmlClocksThrottleReasonSwPowerCap": 0x4,
    "nvmlClocksThrottleReasonHwSlowdown": 0x8,
    "nvmlClocksThrottleReasonSyncBoost": 0x10,
    "nvmlClocksThrottleReasonSwThermalSlowdown": 0x20,
    "nvmlClocksThrottleReasonHwThermalSlowdown": 0x40,
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": 0x80,
    "nvmlClocksThrottleReasonDisplayClockSetting": 0x100,
    "nvmlClocksThrottleReasonBoardLimit": 0x200,
    "nvmlClocksThrottleReasonReliability": 0x400,
}
C = types.SimpleNamespace(**CONSTANTS)

ERRORS = {
    "NVMLError": NVMLError,
    "NVMLError_FunctionNotFound": NVMLError_FunctionNotFound,
    "NVMLError_GpuIsLost": NVMLError_GpuIsLost,
    "NVMLError_InvalidArgument": NVMLError_InvalidArgument,
    "NVMLError_LibraryNotFound": NVMLError_LibraryNotFound,
    "NVMLError_NotSupported": NVMLError_NotSupported,
    "NVMLError_Uninitialized": NVMLError_Uninitialized,
    "NVMLLibraryMismatchError": NVMLLibraryMismatchError,
}


@dataclass
class FakeGpu:
    """One GPU's answers, in NVML's units (bytes, MHz, mW, °C, KB/s)."""

    name: str
    uuid: str
    bus_id: bytes  # pynvml leaves nvmlPciInfo_t.busId as bytes
    util_gpu: int
    util_memory: int
    mem_total: int
    mem_used: int  # excluding reserved, as nvmlDeviceGetMemoryInfo v2 reports it
    mem_reserved: int
    clocks: dict[int, int]  # NVML_CLOCK_* -> MHz
    max_clocks: dict[int, int]
    reasons: int  # clock-event bitmask
    power_mw: int
    power_limit_mw: int
    temp_c: int
    ecc_mode: int  # NVML_FEATURE_*
    ecc: dict[tuple[int, int], int | None]  # (NVML_MEMORY_ERROR_TYPE_*, NVML_*_ECC) -> count; None: N/A
    pcie_kbps: dict[int, int]  # NVML_PCIE_UTIL_* -> KB/s
    processes: list[tuple[int, int | None]]  # (pid, used bytes)
    fail: dict[str, type[BaseException]] = field(default_factory=dict)  # function -> error it raises
    memory_v2: bool = True  # False: the driver predates nvmlDeviceGetMemoryInfo_v2


@dataclass(frozen=True)
class Handle:
    index: int


class FakeNvml:
    """State behind the fake module: the GPUs, and what was called."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: BaseException | None = None,
        count_error: BaseException | None = None,
        drop: tuple[str, ...] = (),
        driver_version: str = "570.133.20",
        cuda_driver_version: int = 12080,
        nvml_version: str = "12.570.133.20",
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.count_error = count_error
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.nvml_version = nvml_version
        self.initialized = 0
        self.inits = 0
        self.shutdowns = 0
        self.calls: list[str] = []
        self.module = types.ModuleType("fake_pynvml")
        for name, value in {**CONSTANTS, **ERRORS}.items():
            setattr(self.module, name, value)
        for name in dir(self):
            if name.startswith("nvml") and name not in drop:
                setattr(self.module, name, getattr(self, name))

    # -- library ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdowns += 1
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        if self.count_error is not None:
            raise self.count_error
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        self._fail(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return Handle(index)

    # -- per device ------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: Handle) -> str:
        return self._gpu(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, h: Handle) -> str:
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetPciInfo(self, h: Handle) -> Any:
        g = self._gpu(h, "nvmlDeviceGetPciInfo")
        return types.SimpleNamespace(busId=g.bus_id, busIdLegacy=g.bus_id[4:], domain=0)

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Any:
        g = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return types.SimpleNamespace(gpu=g.util_gpu, memory=g.util_memory)

    def nvmlDeviceGetMemoryInfo(self, h: Handle, version: int | None = None) -> Any:
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        if not version:  # v1: "used" includes what the driver reserves
            used = g.mem_used + g.mem_reserved
            return types.SimpleNamespace(total=g.mem_total, free=g.mem_total - used, used=used)
        if not g.memory_v2:
            raise NVMLError_FunctionNotFound()
        if version != C.nvmlMemory_v2:
            raise NVMLError_InvalidArgument()
        free = g.mem_total - g.mem_used - g.mem_reserved
        return types.SimpleNamespace(
            version=version, total=g.mem_total, reserved=g.mem_reserved, free=free, used=g.mem_used
        )

    def nvmlDeviceGetClockInfo(self, h: Handle, clock_type: int) -> int:
        return self._lookup(self._gpu(h, "nvmlDeviceGetClockInfo").clocks, clock_type)

    def nvmlDeviceGetMaxClockInfo(self, h: Handle, clock_type: int) -> int:
        return self._lookup(self._gpu(h, "nvmlDeviceGetMaxClockInfo").max_clocks, clock_type)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Handle) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons").reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Handle) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrentClocksThrottleReasons").reasons

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Handle) -> int:
        return self._gpu(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetTemperature")
        return self._lookup({C.NVML_TEMPERATURE_GPU: g.temp_c}, sensor)

    def nvmlDeviceGetEccMode(self, h: Handle) -> list[int]:
        g = self._gpu(h, "nvmlDeviceGetEccMode")
        return [g.ecc_mode, g.ecc_mode]

    def nvmlDeviceGetTotalEccErrors(self, h: Handle, error_type: int, counter_type: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetTotalEccErrors")
        if g.ecc_mode != C.NVML_FEATURE_ENABLED:
            raise NVMLError_NotSupported()
        count = self._lookup(g.ecc, (error_type, counter_type))
        if count is None:  # a counter this GPU does not keep (nvidia-smi: N/A)
            raise NVMLError_NotSupported()
        return count

    def nvmlDeviceGetPcieThroughput(self, h: Handle, counter: int) -> int:
        return self._lookup(self._gpu(h, "nvmlDeviceGetPcieThroughput").pcie_kbps, counter)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Handle) -> list[Any]:
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [
            types.SimpleNamespace(
                pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
            )
            for pid, used in g.processes
        ]

    # -- helpers (no "nvml" prefix, so not exported) -----------------------------------------
    def _enter(self, fn: str) -> None:
        self.calls.append(fn)
        if self.initialized <= 0:
            raise NVMLError_Uninitialized()

    def _gpu(self, h: Handle, fn: str) -> FakeGpu:
        self._enter(fn)
        if not isinstance(h, Handle) or not 0 <= h.index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        g = self.gpus[h.index]
        self._fail(g, fn)
        return g

    @staticmethod
    def _fail(g: FakeGpu, fn: str) -> None:
        error = g.fail.get(fn)
        if error is not None:
            raise error()

    @staticmethod
    def _lookup(table: dict[Any, Any], key: Any) -> Any:
        if key not in table:
            raise NVMLError_InvalidArgument()
        return table[key]


MIB = 1024 * 1024
H100_TOTAL = 81559 * MIB  # what an H100 80GB HBM3 reports


def h100(index: int, **changes: Any) -> FakeGpu:
    """A busy H100 80GB HBM3 with ECC on; ``changes`` override fields."""
    base = dict(
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-6f1c2a3e-0000-4000-8000-00000000000{index}",
        bus_id=f"00000000:{0x18 + 0x1F * index:02X}:00.0".encode(),
        util_gpu=97,
        util_memory=61,
        mem_total=H100_TOTAL,
        mem_used=72000 * MIB,
        mem_reserved=512 * MIB,
        clocks={C.NVML_CLOCK_GRAPHICS: 1755, C.NVML_CLOCK_SM: 1980, C.NVML_CLOCK_MEM: 2619},
        max_clocks={C.NVML_CLOCK_GRAPHICS: 1755, C.NVML_CLOCK_SM: 1980, C.NVML_CLOCK_MEM: 2619},
        reasons=0,
        power_mw=612_250,
        power_limit_mw=700_000,
        temp_c=64,
        ecc_mode=C.NVML_FEATURE_ENABLED,
        ecc={
            (C.NVML_MEMORY_ERROR_TYPE_CORRECTED, C.NVML_VOLATILE_ECC): 3,
            (C.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, C.NVML_VOLATILE_ECC): 0,
            (C.NVML_MEMORY_ERROR_TYPE_CORRECTED, C.NVML_AGGREGATE_ECC): 41,
            (C.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, C.NVML_AGGREGATE_ECC): 1,
        },
        pcie_kbps={C.NVML_PCIE_UTIL_TX_BYTES: 1234, C.NVML_PCIE_UTIL_RX_BYTES: 56789},
        processes=[(4242, 71000 * MIB)],
    )
    base.update(changes)
    return FakeGpu(**base)


def two_gpus() -> list[FakeGpu]:
    """GPU 0 healthy; GPU 1 power-capped with a hardware slowdown, and no ECC support."""
    return [
        h100(0),
        h100(
            1,
            util_gpu=88,
            mem_used=65000 * MIB,
            clocks={C.NVML_CLOCK_GRAPHICS: 1395, C.NVML_CLOCK_SM: 1410, C.NVML_CLOCK_MEM: 2619},
            reasons=C.nvmlClocksEventReasonSwPowerCap | C.nvmlClocksEventReasonHwSlowdown,
            power_mw=699_500,
            temp_c=83,
            fail={
                "nvmlDeviceGetEccMode": NVMLError_NotSupported,
                "nvmlDeviceGetTotalEccErrors": NVMLError_NotSupported,
            },
            pcie_kbps={C.NVML_PCIE_UTIL_TX_BYTES: 0, C.NVML_PCIE_UTIL_RX_BYTES: 20480},
            processes=[(4243, 64000 * MIB), (4244, None)],
        ),
    ]


# -- a fake built from a real nvidia-smi -q -x ------------------------------------------------------


def _reason_constant(word: str) -> str:
    """pynvml's constant for an nvidia-smi XML reason tag's word (``sw_power_cap`` -> ``...SwPowerCap``).

    nvidia-smi writes ``display_clocks_setting`` where nvml.h says ``DisplayClockSetting``."""
    word = {"display_clocks_setting": "display_clock_setting"}.get(word, word)
    return "nvmlClocksEventReason" + "".join(part.capitalize() for part in word.split("_"))


def _number(text: str | None, unit: str) -> float | None:
    """``"66.92 W"`` -> 66.92; ``"N/A"`` (or no element) -> None; any other unit is an error."""
    if text is None or text.strip() in ("N/A", "[N/A]", "Not Supported"):
        return None
    m = re.fullmatch(r"\s*(-?[0-9.]+)\s*" + re.escape(unit) + r"\s*", text)
    if m is None:
        raise ValueError(f"expected a number in {unit}: {text!r}")
    return float(m.group(1))


@dataclass
class SmiGpu:
    """One ``<gpu>`` of a real ``nvidia-smi -q -x``, in nvidia-smi's own units, and the fake from it."""

    xml: dict[str, Any]  # the values as nvidia-smi printed them (MiB, W, MHz, C, KB/s; None: N/A)
    active_reasons: list[str]  # the reason tags nvidia-smi shows as Active, in its own words
    fake: FakeGpu


def from_nvidia_smi_xml(path: Path, pynvml_module: Any) -> tuple[dict[str, str], list[SmiGpu]]:
    """The driver's facts and each GPU of a real ``nvidia-smi -q -x`` file, with a :class:`FakeGpu`
    holding the same values in NVML's units (bytes, mW, ...). The clock-event bitmask is built from
    the tags nvidia-smi shows Active, bit by bit from the *installed* pynvml's constants; a field
    nvidia-smi shows as N/A is a function (or ECC counter) that raises ``NVMLError_NotSupported``."""
    root = ET.parse(path).getroot()  # a local file; ElementTree never fetches the DOCTYPE's DTD
    meta = {
        "driver_version": root.findtext("driver_version") or "",
        "cuda": root.findtext("cuda_version") or "",
    }
    out = []
    for g in root.findall("gpu"):
        power = g.find("power_readings")
        if power is None:
            power = g.find("gpu_power_readings")  # driver 535 and later
        assert power is not None
        limit = power.findtext("enforced_power_limit") or power.findtext("current_power_limit")
        reasons = g.find("clocks_event_reasons")
        if reasons is None:
            reasons = g.find("clocks_throttle_reasons")  # before driver 535
        assert reasons is not None
        active = [
            re.sub(r"^clocks_(event|throttle)_reason_", "", r.tag)
            for r in reasons
            if (r.text or "").strip() == "Active"
        ]
        mask = 0
        for word in active:
            mask |= int(getattr(pynvml_module, _reason_constant(word)))
        ecc: dict[tuple[int, int], int | None] = {}
        for counter, kind in (("volatile", C.NVML_VOLATILE_ECC), ("aggregate", C.NVML_AGGREGATE_ECC)):
            for err, etype in (
                ("correctable", C.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                ("uncorrectable", C.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            ):
                # NVML's total is the sum over the memories nvidia-smi lists (SRAM, DRAM)
                parts = [g.findtext(f"ecc_errors/{counter}/{mem}_{err}") for mem in ("sram", "dram")]
                values = [_number(p, "") for p in parts]
                ecc[etype, kind] = None if None in values else int(sum(v for v in values if v is not None))
        xml = {
            "name": g.findtext("product_name"),
            "uuid": g.findtext("uuid"),
            "pci_bus_id": g.findtext("pci/pci_bus_id"),
            "util_gpu_pct": _number(g.findtext("utilization/gpu_util"), "%"),
            "util_mem_pct": _number(g.findtext("utilization/memory_util"), "%"),
            "mem_total_mib": _number(g.findtext("fb_memory_usage/total"), "MiB"),
            "mem_reserved_mib": _number(g.findtext("fb_memory_usage/reserved"), "MiB"),
            "mem_used_mib": _number(g.findtext("fb_memory_usage/used"), "MiB"),
            "mem_free_mib": _number(g.findtext("fb_memory_usage/free"), "MiB"),
            "sm_clock_mhz": _number(g.findtext("clocks/sm_clock"), "MHz"),
            "graphics_clock_mhz": _number(g.findtext("clocks/graphics_clock"), "MHz"),
            "mem_clock_mhz": _number(g.findtext("clocks/mem_clock"), "MHz"),
            "sm_clock_max_mhz": _number(g.findtext("max_clocks/sm_clock"), "MHz"),
            "graphics_clock_max_mhz": _number(g.findtext("max_clocks/graphics_clock"), "MHz"),
            "mem_clock_max_mhz": _number(g.findtext("max_clocks/mem_clock"), "MHz"),
            "power_w": _number(power.findtext("power_draw"), "W"),
            "power_limit_w": _number(limit, "W"),
            "temp_c": _number(g.findtext("temperature/gpu_temp"), "C"),
            "ecc_mode": g.findtext("ecc_mode/current_ecc"),
            "ecc": ecc,
            "pcie_tx_kbps": _number(g.findtext("pci/tx_util"), "KB/s"),
            "pcie_rx_kbps": _number(g.findtext("pci/rx_util"), "KB/s"),
            "processes": [
                (int(p.findtext("pid") or -1), _number(p.findtext("used_memory"), "MiB"))
                for p in g.findall("processes/process_info")
            ],
        }
        fail: dict[str, type[BaseException]] = {}
        if xml["util_gpu_pct"] is None:  # MIG mode: NVML has no whole-GPU utilisation
            fail["nvmlDeviceGetUtilizationRates"] = NVMLError_NotSupported

        def mib(v: float | None) -> int:
            assert v is not None
            return int(v) * MIB

        def mhz(values: dict[str, Any], clocks: str) -> dict[int, int]:
            pick = {C.NVML_CLOCK_GRAPHICS: "graphics", C.NVML_CLOCK_SM: "sm", C.NVML_CLOCK_MEM: "mem"}
            return {k: int(values[f"{w}_clock{clocks}_mhz"]) for k, w in pick.items()}

        fake = FakeGpu(
            name=str(xml["name"]),
            uuid=str(xml["uuid"]),
            bus_id=str(xml["pci_bus_id"]).encode(),
            util_gpu=int(xml["util_gpu_pct"] or 0),
            util_memory=int(xml["util_mem_pct"] or 0),
            mem_total=mib(xml["mem_total_mib"]),
            mem_used=mib(xml["mem_used_mib"]),
            mem_reserved=mib(xml["mem_reserved_mib"]),
            clocks=mhz(xml, ""),
            max_clocks=mhz(xml, "_max"),
            reasons=mask,
            power_mw=round(xml["power_w"] * 1000),  # nvidia-smi prints NVML's mW / 1000, 2 decimals
            power_limit_mw=round(xml["power_limit_w"] * 1000),
            temp_c=int(xml["temp_c"]),
            ecc_mode=C.NVML_FEATURE_ENABLED if xml["ecc_mode"] == "Enabled" else C.NVML_FEATURE_DISABLED,
            ecc=ecc,
            pcie_kbps={
                C.NVML_PCIE_UTIL_TX_BYTES: int(xml["pcie_tx_kbps"]),
                C.NVML_PCIE_UTIL_RX_BYTES: int(xml["pcie_rx_kbps"]),
            },
            processes=[(pid, None if used is None else int(used) * MIB) for pid, used in xml["processes"]],
            fail=fail,
        )
        out.append(SmiGpu(xml, active, fake))
    return meta, out
