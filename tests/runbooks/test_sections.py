"""Runbook sections called in-process (no kernel): what they record for a bundle."""

from __future__ import annotations

import shutil
from pathlib import Path

import perfkit.app.runbooks.inference as rb

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
NVML_SNAPSHOT = (
    Path(__file__).resolve().parents[1] / "sources" / "data" / "nvml" / "nvml-20261130T020000Z.json"
)


def test_gpu_section_reads_a_frozen_nvml_snapshot(scenario_copy):
    bundle = scenario_copy("queueing-traffic-surge")
    (bundle / "gpu").mkdir()
    shutil.copy(NVML_SNAPSHOT, bundle / "gpu" / NVML_SNAPSHOT.name)
    ctx = rb.open_incident(str(bundle))
    f = rb.gpu(ctx).finding
    assert "NVML now:" in f.summary and f.data["nvml"]["available"] is True
    assert (
        f.table["columns"][0] == "gpu"
        and "throttle_reasons" in f.table["columns"]
        and len(f.table["rows"]) == len(f.data["nvml"]["gpus"])
    )


def test_gpu_section_without_snapshot_says_so():
    f = rb.gpu(rb.open_incident(str(SCENARIOS / "queueing-traffic-surge"))).finding
    assert f.status == "ok"  # DCGM history is there
    assert "gpu: no NVML snapshot in the bundle's gpu/ folder" in f.missing


def test_no_source_at_all():
    ctx = rb.open_incident("")
    f = rb.triage(ctx).finding
    assert f.status == "missing" and "no evidence source" in f.summary
