from __future__ import annotations

import ctypes
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pynvml
import pytest
from fake_nvml import (
    CONSTANTS,
    MIB,
    C,
    FakeNvml,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    NVMLLibraryMismatchError,
    from_nvidia_smi_xml,
    h100,
    two_gpus,
)

from perfkit.errors import BundleError
from perfkit.sources.nvml import (
    CLOCK_EVENT_REASONS,
    TABLE_SCHEMA,
    GpuProcess,
    GpuSnapshot,
    GpuState,
    decode_clock_events,
    read_snapshot,
    snapshot,
)

# The fake's own output for two_gpus(), kept as a golden file: it pins the JSON format (a change to
# to_json shows as a diff), it is NOT a recording of real NVML. Real values: REAL_SMI below.
FAKE_GOLDEN = Path(__file__).parent / "data" / "nvml" / "nvml-20261130T020000Z.json"
# Real `nvidia-smi -q -x` outputs (tests/sources/data/nvml_real/SOURCE.md).
REAL_SMI = Path(__file__).parent / "data" / "nvml_real"
T0 = datetime(2026, 11, 30, 2, 0, 0, 250_000, tzinfo=UTC)


def clock() -> datetime:
    return T0


def take(fake: FakeNvml) -> GpuSnapshot:
    return snapshot(fake.module, clock=clock)


ECC_NOT_SUPPORTED = {
    "ecc_mode": "Not Supported (nvmlDeviceGetEccMode)",
    "ecc_corrected_volatile": "Not Supported (nvmlDeviceGetTotalEccErrors)",
    "ecc_uncorrected_volatile": "Not Supported (nvmlDeviceGetTotalEccErrors)",
    "ecc_corrected_aggregate": "Not Supported (nvmlDeviceGetTotalEccErrors)",
    "ecc_uncorrected_aggregate": "Not Supported (nvmlDeviceGetTotalEccErrors)",
}


# -- the fake and the bit table against the installed pynvml ----------------------------------


def test_fake_constants_are_pynvmls():
    assert {name: getattr(pynvml, name) for name in CONSTANTS} == CONSTANTS


def test_reason_bits_match_pynvml_constants():
    def camel(word: str) -> str:
        return "".join(part.capitalize() for part in word.split("_"))

    for word, bit in CLOCK_EVENT_REASONS:
        assert getattr(pynvml, "nvmlClocksThrottleReason" + camel(word)) == bit, word
    event_words = [w for w, _ in CLOCK_EVENT_REASONS if w not in ("board_limit", "reliability")]
    for word in event_words:
        assert getattr(pynvml, "nvmlClocksEventReason" + camel(word)) == dict(CLOCK_EVENT_REASONS)[word]


def test_decode_every_bit_and_unknown_bits():
    assert decode_clock_events(0) == []
    assert decode_clock_events(pynvml.nvmlClocksThrottleReasonAll) == [w for w, _ in CLOCK_EVENT_REASONS]
    assert decode_clock_events(pynvml.nvmlClocksEventReasonGpuIdle | 0x800 | 0x8000) == [
        "gpu_idle",
        "unknown_0x800",
        "unknown_0x8000",
    ]


# -- a live snapshot over the fake ------------------------------------------------------------


def test_two_gpus_exact_values():
    fake = FakeNvml(two_gpus())
    snap = take(fake)

    assert snap.available is True
    assert snap.reason is None
    assert snap.taken_at == datetime(2026, 11, 30, 2, tzinfo=UTC)
    assert (snap.driver_version, snap.cuda_driver_version, snap.nvml_version) == (
        "570.133.20",
        "12.8",
        "12.570.133.20",
    )
    assert snap.unavailable == {}
    g0, g1 = snap.gpus
    assert g0 == GpuState(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-6f1c2a3e-0000-4000-8000-000000000000",
        pci_bus_id="00000000:18:00.0",
        util_pct=97,
        mem_util_pct=61,
        mem_used_bytes=72000 * MIB,
        mem_total_bytes=81559 * MIB,
        mem_free_bytes=(81559 - 72000 - 512) * MIB,
        mem_reserved_bytes=512 * MIB,
        sm_clock_mhz=1980,
        sm_clock_max_mhz=1980,
        mem_clock_mhz=2619,
        mem_clock_max_mhz=2619,
        throttle_mask=0,
        throttle_api="ClocksEvent",
        power_w=612.25,
        power_limit_w=700.0,
        temp_c=64,
        ecc_mode="enabled",
        ecc_corrected_volatile=3,
        ecc_uncorrected_volatile=0,
        ecc_corrected_aggregate=41,
        ecc_uncorrected_aggregate=1,
        pcie_tx_kbps=1234,
        pcie_rx_kbps=56789,
        processes=[GpuProcess(4242, 71000 * MIB)],
        unavailable={},
    )
    assert (g0.mem_used_mib, g0.mem_total_mib, g0.mem_free_mib) == (72000.0, 81559.0, 9047.0)
    assert g0.throttle_reasons == []

    assert g1.throttle_mask == pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
    assert g1.throttle_mask == 0xC
    assert g1.throttle_reasons == ["sw_power_cap", "hw_slowdown"]
    assert (g1.sm_clock_mhz, g1.power_w, g1.temp_c) == (1410, 699.5, 83)
    assert g1.ecc_mode is None
    assert (
        g1.ecc_corrected_volatile,
        g1.ecc_uncorrected_volatile,
        g1.ecc_corrected_aggregate,
        g1.ecc_uncorrected_aggregate,
    ) == (None, None, None, None)
    assert g1.unavailable == ECC_NOT_SUPPORTED
    assert g1.processes == [GpuProcess(4243, 64000 * MIB), GpuProcess(4244, None)]

    assert (fake.inits, fake.shutdowns, fake.initialized) == (1, 1, 0)
    assert fake.calls[-1] == "nvmlShutdown"
    # the current API answered, so the deprecated one was never asked
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in fake.calls


def test_table_one_row_per_gpu_with_units_in_names():
    table = take(FakeNvml(two_gpus())).table()
    assert table.schema == pl.Schema(TABLE_SCHEMA)
    cols = [
        "gpu",
        "util_pct",
        "mem_used_mib",
        "mem_total_mib",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "power_w",
        "power_limit_w",
        "temp_c",
        "throttle_reasons",
        "ecc_uncorrected_volatile",
        "pcie_tx_kbps",
        "pcie_rx_kbps",
        "n_processes",
        "processes",
    ]
    assert table.select(cols).rows() == [
        (0, 97, 72000.0, 81559.0, 1980, 1980, 612.25, 700.0, 64, "", 0, 1234, 56789, 1, "4242 (71000 MiB)"),
        (
            1,
            88,
            65000.0,
            81559.0,
            1410,
            1980,
            699.5,
            700.0,
            83,
            "sw_power_cap, hw_slowdown",
            None,
            0,
            20480,
            2,
            "4243 (64000 MiB), 4244 (n/a)",
        ),
    ]
    assert table["unavailable"].to_list() == ["", ", ".join(ECC_NOT_SUPPORTED)]


def test_summary_names_models_util_memory_and_throttled_gpu():
    assert take(FakeNvml(two_gpus())).summary() == (
        "2 x NVIDIA H100 80GB HBM3, util 92 % avg, memory 84 % used, "
        "throttled: sw_power_cap, hw_slowdown on GPU 1"
    )


def test_summary_idle_is_not_throttling_and_mixed_models_are_counted():
    gpus = [
        h100(0, reasons=C.nvmlClocksEventReasonGpuIdle, util_gpu=0),
        h100(1, name="NVIDIA H200", util_gpu=10, reasons=C.nvmlClocksEventReasonGpuIdle),
        h100(2, util_gpu=20, reasons=C.nvmlClocksEventReasonSwThermalSlowdown),
    ]
    summary = take(FakeNvml(gpus)).summary()
    assert summary == (
        "2 x NVIDIA H100 80GB HBM3, 1 x NVIDIA H200, util 10 % avg, memory 88 % used, "
        "throttled: sw_thermal_slowdown on GPU 2"
    )
    gpus[2].reasons = 0
    assert take(FakeNvml(gpus)).summary().endswith(", not throttled")


def test_old_pynvml_without_clock_event_api_falls_back_to_throttle_api():
    fake = FakeNvml(two_gpus(), drop=("nvmlDeviceGetCurrentClocksEventReasons",))
    g1 = take(fake).gpus[1]
    assert (g1.throttle_mask, g1.throttle_api) == (0xC, "ClocksThrottle")
    assert g1.throttle_reasons == ["sw_power_cap", "hw_slowdown"]
    assert "throttle_reasons" not in g1.unavailable


def test_old_driver_without_clock_event_function_falls_back_to_throttle_api():
    gpus = two_gpus()
    gpus[1].fail["nvmlDeviceGetCurrentClocksEventReasons"] = NVMLError_FunctionNotFound
    g1 = take(FakeNvml(gpus)).gpus[1]
    assert (g1.throttle_mask, g1.throttle_api) == (0xC, "ClocksThrottle")


def test_clock_events_not_supported_is_recorded_without_fallback():
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetCurrentClocksEventReasons"] = NVMLError_NotSupported
    fake = FakeNvml(gpus)
    g0 = take(fake).gpus[0]
    assert (g0.throttle_mask, g0.throttle_api, g0.throttle_reasons) == (None, None, None)
    assert g0.unavailable == {"throttle_reasons": "Not Supported (nvmlDeviceGetCurrentClocksEventReasons)"}
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in fake.calls


def test_ecc_disabled_is_not_supported_and_counters_are_not_asked():
    fake = FakeNvml([h100(0, ecc_mode=C.NVML_FEATURE_DISABLED)])
    g0 = take(fake).gpus[0]
    assert g0.ecc_mode == "disabled"
    assert g0.ecc_uncorrected_volatile is None
    assert g0.unavailable == {
        "ecc_corrected_volatile": "Not Supported (ECC disabled)",
        "ecc_uncorrected_volatile": "Not Supported (ECC disabled)",
        "ecc_corrected_aggregate": "Not Supported (ECC disabled)",
        "ecc_uncorrected_aggregate": "Not Supported (ECC disabled)",
    }
    assert "nvmlDeviceGetTotalEccErrors" not in fake.calls


def test_memory_info_v1_when_driver_lacks_v2():
    g0 = take(FakeNvml([h100(0, memory_v2=False)])).gpus[0]
    # v1 counts the driver's reservation as used
    assert (g0.mem_used_bytes, g0.mem_free_bytes, g0.mem_reserved_bytes) == (72512 * MIB, 9047 * MIB, None)
    assert g0.unavailable == {}


DEVICE_FIELDS = {
    "nvmlDeviceGetName": ["name"],
    "nvmlDeviceGetUUID": ["uuid"],
    "nvmlDeviceGetPciInfo": ["pci_bus_id"],
    "nvmlDeviceGetUtilizationRates": ["util_pct", "mem_util_pct"],
    "nvmlDeviceGetMemoryInfo": ["mem_used_bytes", "mem_total_bytes", "mem_free_bytes"],
    "nvmlDeviceGetClockInfo": ["sm_clock_mhz", "mem_clock_mhz"],
    "nvmlDeviceGetMaxClockInfo": ["sm_clock_max_mhz", "mem_clock_max_mhz"],
    "nvmlDeviceGetCurrentClocksEventReasons": ["throttle_reasons"],
    "nvmlDeviceGetPowerUsage": ["power_w"],
    "nvmlDeviceGetEnforcedPowerLimit": ["power_limit_w"],
    "nvmlDeviceGetTemperature": ["temp_c"],
    "nvmlDeviceGetEccMode": ["ecc_mode"],
    "nvmlDeviceGetTotalEccErrors": [
        "ecc_corrected_volatile",
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
    ],
    "nvmlDeviceGetPcieThroughput": ["pcie_tx_kbps", "pcie_rx_kbps"],
    "nvmlDeviceGetComputeRunningProcesses": ["processes"],
}


def test_every_device_call_failing_is_recorded_never_fatal():
    fail = dict.fromkeys(DEVICE_FIELDS, NVMLError_NotSupported)
    fake = FakeNvml([h100(0, fail=fail), h100(1)])
    snap = take(fake)
    assert snap.available is True
    g0 = snap.gpus[0]
    assert g0 == GpuState(index=0, unavailable=g0.unavailable)  # every value None
    assert g0.unavailable == {
        name: f"Not Supported ({fn})" for fn, names in DEVICE_FIELDS.items() for name in names
    }
    assert snap.gpus[1].unavailable == {}
    assert fake.shutdowns == 1
    row = snap.table().row(0, named=True)
    assert row["throttle_reasons"] is None and row["processes"] is None and row["n_processes"] is None
    assert snap.summary() == (
        "1 x unknown GPU, 1 x NVIDIA H100 80GB HBM3, util 97 % avg, memory 88 % used, not throttled"
    )


def test_lost_gpu_and_library_mismatch_are_recorded():
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetHandleByIndex"] = NVMLError_GpuIsLost
    gpus[1].fail["nvmlDeviceGetComputeRunningProcesses"] = NVMLLibraryMismatchError
    g0, g1 = take(FakeNvml(gpus)).gpus
    assert g0 == GpuState(index=0, unavailable={"handle": "GPU is lost (nvmlDeviceGetHandleByIndex)"})
    assert g1.processes is None
    assert g1.unavailable["processes"] == "NVMLLibraryMismatchError (nvmlDeviceGetComputeRunningProcesses)"


def test_shutdown_runs_even_when_reading_raises_something_unexpected():
    gpus = two_gpus()
    gpus[1].fail["nvmlDeviceGetName"] = ZeroDivisionError  # a bug, not an NVML answer: it propagates
    fake = FakeNvml(gpus)
    with pytest.raises(ZeroDivisionError):
        take(fake)
    assert (fake.inits, fake.shutdowns) == (1, 1)


# -- no NVML, no GPU ---------------------------------------------------------------------------


def test_init_failure_is_a_result_and_skips_shutdown():
    fake = FakeNvml(two_gpus(), init_error=NVMLError_LibraryNotFound())
    snap = take(fake)
    assert snap == GpuSnapshot(
        available=False, reason="NVML not available: NVML Shared Library Not Found", gpus=[]
    )
    assert snap.taken_at == datetime(2026, 11, 30, 2, tzinfo=UTC)
    assert (fake.shutdowns, fake.calls) == (0, ["nvmlInit"])
    assert snap.summary() == "NVML not available: NVML Shared Library Not Found"
    assert snap.table().height == 0
    assert snap.table().schema == pl.Schema(TABLE_SCHEMA)


def test_zero_gpus():
    fake = FakeNvml([])
    snap = take(fake)
    assert (snap.available, snap.reason, snap.gpus) == (False, "no GPU visible to NVML", [])
    assert snap.driver_version == "570.133.20"
    assert snap.summary() == "no GPU visible to NVML"
    assert fake.shutdowns == 1


def test_device_count_failure():
    fake = FakeNvml(two_gpus(), count_error=NVMLError_GpuIsLost())
    snap = take(fake)
    assert (snap.available, snap.reason, snap.gpus) == (False, "NVML could not count GPUs: GPU is lost", [])
    assert fake.shutdowns == 1


def _libnvml_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_real_pynvml_never_raises():
    snap = snapshot()  # the installed pynvml, this machine's NVML (if any)
    json.loads(snap.to_json())
    if not _libnvml_loads():
        assert snap == GpuSnapshot(
            available=False, reason="NVML not available: NVML Shared Library Not Found", gpus=[]
        )
        assert snap.summary() == "NVML not available: NVML Shared Library Not Found"
    elif snap.available:
        assert snap.gpus and all(g.name for g in snap.gpus)
    else:
        assert "NVML" in (snap.reason or "")


# -- JSON file ---------------------------------------------------------------------------------


def _strict(name: str) -> None:
    raise AssertionError(f"{name} in strict JSON")


def test_to_json_is_strict_with_utc_time():
    data = json.loads(take(FakeNvml(two_gpus())).to_json(), parse_constant=_strict)
    assert data["format"] == "perfkit.nvml/1"
    assert data["taken_at"] == "2026-11-30T02:00:00Z"
    assert data["gpus"][1]["throttle_reasons"] == ["sw_power_cap", "hw_slowdown"]
    assert data["gpus"][1]["ecc_uncorrected_volatile"] is None
    assert data["gpus"][0]["mem_used_mib"] == 72000.0


def test_write_into_bundle_gpu_folder_and_read_back(tmp_path: Path):
    snap = take(FakeNvml(two_gpus()))
    path = snap.write(tmp_path)
    assert path == tmp_path / "gpu" / "nvml-20261130T020000Z.json"
    back = read_snapshot(path)
    assert back == snap
    assert back.taken_at == snap.taken_at
    assert back.gpus[1].throttle_reasons == ["sw_power_cap", "hw_slowdown"]
    assert back.table().equals(snap.table())
    assert back.summary() == snap.summary()


def test_unavailable_snapshot_round_trips_to_an_explicit_file(tmp_path: Path):
    snap = take(FakeNvml([], init_error=NVMLError_LibraryNotFound()))
    path = snap.write(tmp_path / "x" / "state.json")
    assert path == tmp_path / "x" / "state.json"
    back = read_snapshot(path)
    assert back == snap
    assert back.reason == "NVML not available: NVML Shared Library Not Found"


def test_the_fakes_golden_file_is_still_what_it_gives():
    snap = take(FakeNvml(two_gpus()))
    assert FAKE_GOLDEN.read_text(encoding="utf-8") == snap.to_json() + "\n"
    assert read_snapshot(FAKE_GOLDEN) == snap


def test_bad_json_names_file_and_line(tmp_path: Path):
    path = tmp_path / "gpu" / "nvml-20261130T020000Z.json"
    path.parent.mkdir()
    path.write_text('{\n  "format": "perfkit.nvml/1",\n  "gpus": [\n')
    with pytest.raises(BundleError) as info:
        read_snapshot(path)
    assert info.value.path == str(path)
    assert info.value.line == 4
    assert str(info.value).startswith(f"{path}:4: not valid JSON")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(format="perfkit.nvml/0"), "'format' is 'perfkit.nvml/0'"),
        (lambda d: d["gpus"][0].update(index="0"), "'index' must be an integer"),
        (lambda d: d["gpus"][1].update(temp_c=83.5), "'temp_c' must be an integer or null"),
        (lambda d: d.update(available="yes"), "'available' must be true or false"),
        (lambda d: d["gpus"][0]["processes"][0].pop("pid"), "'pid' must be an integer"),
    ],
)
def test_wrong_shape_names_file_and_key(tmp_path: Path, edit, message):
    data = json.loads(FAKE_GOLDEN.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BundleError) as info:
        read_snapshot(path)
    assert info.value.path == str(path)
    assert message in str(info.value)


def test_nan_and_missing_file_are_bundle_errors(tmp_path: Path):
    path = tmp_path / "nvml.json"
    path.write_text(FAKE_GOLDEN.read_text(encoding="utf-8").replace('"power_w": 612.25', '"power_w": NaN'))
    with pytest.raises(BundleError, match="not strict JSON: NaN"):
        read_snapshot(path)
    with pytest.raises(BundleError, match="GPU snapshot not found") as info:
        read_snapshot(tmp_path / "absent.json")
    assert info.value.path == str(tmp_path / "absent.json")


# -- real values: a fake built from real nvidia-smi output gives perfkit's snapshot the same numbers --


@pytest.mark.parametrize(
    ("name", "want"),
    [
        (
            "a100-sxm4-mig.xml",  # MIG on: no whole-GPU utilisation; ECC on, volatile counters N/A
            {
                "name": "NVIDIA A100-SXM4-40GB",
                "mem_total_mib": 40960.0,
                "mem_used_mib": 38.0,
                "mem_reserved_mib": 605.0,
                "sm_clock_mhz": 1410,
                "mem_clock_mhz": 1215,
                "power_w": 66.92,
                "power_limit_w": 400.0,
                "temp_c": 36,
                "throttle_reasons": [],
                "util_pct": None,
                "ecc_mode": "enabled",
                "ecc_corrected_aggregate": 0,
                "ecc_corrected_volatile": None,
            },
        ),
        (
            "rtx-4090-driver-535.xml",  # driver 535's clocks_event_reasons: idle
            {
                "name": "NVIDIA GeForce RTX 4090",
                "mem_total_mib": 24564.0,
                "mem_used_mib": 2.0,
                "mem_reserved_mib": 346.0,
                "sm_clock_mhz": 210,
                "mem_clock_mhz": 405,
                "power_w": 26.84,
                "power_limit_w": 450.0,
                "temp_c": 40,
                "throttle_reasons": ["gpu_idle"],
                "util_pct": 0,
                "ecc_mode": "disabled",
                "ecc_corrected_aggregate": None,
                "ecc_corrected_volatile": None,
            },
        ),
    ],
)
def test_a_snapshot_of_real_nvidia_smi_values_has_the_same_numbers(name, want):
    meta, smi = from_nvidia_smi_xml(REAL_SMI / name, pynvml)
    snap = take(FakeNvml([g.fake for g in smi], driver_version=meta["driver_version"]))
    assert snap.available and snap.driver_version == meta["driver_version"]
    (g,) = snap.gpus
    (x,) = smi
    # the numbers as nvidia-smi printed them, written out above (not read back from the fake)
    got = {
        "name": g.name,
        "mem_total_mib": g.mem_total_mib,
        "mem_used_mib": g.mem_used_mib,
        "mem_reserved_mib": g.mem_reserved_bytes / MIB if g.mem_reserved_bytes is not None else None,
        "sm_clock_mhz": g.sm_clock_mhz,
        "mem_clock_mhz": g.mem_clock_mhz,
        "power_w": g.power_w,
        "power_limit_w": g.power_limit_w,
        "temp_c": g.temp_c,
        "throttle_reasons": g.throttle_reasons,
        "util_pct": g.util_pct,
        "ecc_mode": g.ecc_mode,
        "ecc_corrected_aggregate": g.ecc_corrected_aggregate,
        "ecc_corrected_volatile": g.ecc_corrected_volatile,
    }
    assert got == want
    # and against every value the XML holds, parsed independently of the table above
    assert (g.uuid, g.pci_bus_id) == (x.xml["uuid"], x.xml["pci_bus_id"])
    assert (g.sm_clock_max_mhz, g.mem_clock_max_mhz) == (
        x.xml["sm_clock_max_mhz"],
        x.xml["mem_clock_max_mhz"],
    )
    assert (g.pcie_tx_kbps, g.pcie_rx_kbps) == (x.xml["pcie_tx_kbps"], x.xml["pcie_rx_kbps"])
    # nvidia-smi prints each byte count floored to MiB, so its "free" is within 2 MiB of total - used - reserved
    assert abs(g.mem_free_mib - x.xml["mem_free_mib"]) <= 2.0
    # a field nvidia-smi shows as N/A is None here and named, never a made-up 0
    assert (g.util_pct is None) == (x.xml["util_gpu_pct"] is None)
    if g.util_pct is None:
        assert g.unavailable["util_pct"] == "Not Supported (nvmlDeviceGetUtilizationRates)"
    assert g.throttle_reasons == x.active_reasons  # nvidia-smi's Active tags, decoded through NVML's bits
    json.loads(snap.to_json(), parse_constant=_strict)


@pytest.mark.parametrize(
    ("active", "mask", "words"),
    [
        # nvidia-smi's XML tag words -> the bit nvml.h / pynvml defines -> perfkit's decoded words
        (["gpu_idle"], 0x1, ["gpu_idle"]),
        (["sw_power_cap", "hw_slowdown"], 0x4 | 0x8, ["sw_power_cap", "hw_slowdown"]),
        (["hw_thermal_slowdown"], 0x40, ["hw_thermal_slowdown"]),
        (
            ["sw_thermal_slowdown", "hw_power_brake_slowdown"],
            0x20 | 0x80,
            ["sw_thermal_slowdown", "hw_power_brake_slowdown"],
        ),
        (["display_clocks_setting"], 0x100, ["display_clock_setting"]),
    ],
)
def test_active_reasons_in_real_xml_decode_as_nvml_defines_them(tmp_path, active, mask, words):
    """The real A100 file with some reasons switched to Active (nvidia-smi's own tag names); the
    bitmask is built from the installed pynvml and must equal nvml.h's values written here."""
    text = (REAL_SMI / "a100-sxm4-mig.xml").read_text(encoding="utf-8")
    for word in active:
        tag = f"clocks_throttle_reason_{word}"
        text, n = re.subn(f"<{tag}>Not Active\\s*</{tag}>", f"<{tag}>Active</{tag}>", text)
        assert n == 1, tag
    path = tmp_path / "smi.xml"
    path.write_text(text, encoding="utf-8")
    _, (x,) = from_nvidia_smi_xml(path, pynvml)
    assert x.fake.reasons == mask
    (g,) = take(FakeNvml([x.fake])).gpus
    assert g.throttle_mask == mask and g.throttle_reasons == words
