"""Runbook sections called in-process (no kernel): what they record for a bundle."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pynvml

import perfkit.app.runbooks.inference as rb

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
SOURCES_TESTS = Path(__file__).resolve().parents[1] / "sources"
# The fake NVML's own output for fake_nvml.two_gpus() (a golden file of the format, synthetic values).
FAKE_NVML_GOLDEN = SOURCES_TESTS / "data" / "nvml" / "nvml-20261130T020000Z.json"
# A real `nvidia-smi -q -x` of an A100 (tests/sources/data/nvml_real/SOURCE.md).
REAL_A100 = SOURCES_TESTS / "data" / "nvml_real" / "a100-sxm4-mig.xml"


def test_gpu_section_reads_the_fakes_golden_snapshot(scenario_copy):
    bundle = scenario_copy("queueing-traffic-surge")
    (bundle / "gpu").mkdir()
    shutil.copy(FAKE_NVML_GOLDEN, bundle / "gpu" / FAKE_NVML_GOLDEN.name)
    ctx = rb.open_incident(str(bundle))
    f = rb.gpu(ctx).finding
    assert "NVML now:" in f.summary and f.data["nvml"]["available"] is True
    assert (
        f.table["columns"][0] == "gpu"
        and "throttle_reasons" in f.table["columns"]
        and len(f.table["rows"]) == len(f.data["nvml"]["gpus"])
    )


def test_gpu_section_shows_a_real_a100s_numbers(scenario_copy):
    sys.path.insert(0, str(SOURCES_TESTS))
    try:
        from fake_nvml import FakeNvml, from_nvidia_smi_xml
    finally:
        sys.path.remove(str(SOURCES_TESTS))
    from perfkit.sources.nvml import snapshot

    meta, smi = from_nvidia_smi_xml(REAL_A100, pynvml)
    bundle = scenario_copy("queueing-traffic-surge")
    snapshot(FakeNvml([g.fake for g in smi], driver_version=meta["driver_version"]).module).write(bundle)
    f = rb.gpu(rb.open_incident(str(bundle))).finding
    assert "NVML now: 1 x NVIDIA A100-SXM4-40GB, util n/a" in f.summary and "not throttled" in f.summary
    (row,) = f.table["rows"]
    cell = dict(zip(f.table["columns"], row, strict=True))
    # nvidia-smi said: 40960 MiB total, 38 MiB used, 66.92 W of 400 W, 36 C, SM 1410 MHz, utilisation N/A
    assert (cell["mem_total_mib"], cell["mem_used_mib"]) == (40960.0, 38.0)
    assert (cell["power_w"], cell["power_limit_w"], cell["temp_c"], cell["sm_clock_mhz"]) == (
        66.92,
        400.0,
        36,
        1410,
    )
    assert cell["util_pct"] is None and "util_pct" in cell["unavailable"]


def test_gpu_section_without_snapshot_says_so():
    f = rb.gpu(rb.open_incident(str(SCENARIOS / "queueing-traffic-surge"))).finding
    assert f.status == "ok"  # DCGM history is there
    assert "gpu: no NVML snapshot in the bundle's gpu/ folder" in f.missing


def test_no_source_at_all():
    ctx = rb.open_incident("")
    f = rb.triage(ctx).finding
    assert f.status == "missing" and "no evidence source" in f.summary
