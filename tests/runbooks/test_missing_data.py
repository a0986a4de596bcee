"""A runbook never dies of missing data: each section says what is missing; the postmortem lists it."""

from __future__ import annotations

import json
import shutil

import pytest

from perfkit.app.runner.run import execute
from perfkit.core.findings import findings_from_notebook

pytestmark = pytest.mark.notebook


def test_bundle_without_logs_events_or_gpu_metrics(scenario_copy, tmp_path):
    bundle = scenario_copy("queueing-traffic-surge")
    shutil.rmtree(bundle / "logs")
    (bundle / "events.csv").unlink()
    (bundle / "metrics" / "dcgm.om").unlink()
    (bundle / "metrics" / "node.om").unlink()
    result = execute("inference_latency", tmp_path / "out", {"bundle": str(bundle)})
    assert result.error is None
    f = findings_from_notebook(json.loads(result.notebook.read_text()))
    assert f["gpu"].status == "missing"
    assert any("DCGM" in m for m in f["gpu"].missing)
    assert any("events.csv" in m for m in f["completeness"].missing + f["postmortem"].missing)
    # the answer survives: queueing is read from vLLM's own metrics
    assert f["triage"].data["directions"][0]["id"] == "scheduler_queueing"
    pm = (tmp_path / "out" / "postmortem.md").read_text()
    section = pm.split("## Missing evidence", 1)[1]
    assert "DCGM" in section and "events.csv" in section


def test_malformed_bundle_still_completes_and_says_why(scenario_copy, tmp_path):
    bundle = scenario_copy("release-regression")
    (bundle / "metrics" / "vllm.om").write_text(
        'vllm:num_requests_running 1 100\nvllm:x{engine="0" 1 100\n# EOF\n'
    )
    result = execute("inference_latency", tmp_path / "out", {"bundle": str(bundle)})
    # the evidence could not be loaded: the run failed (exit 1), and its record says why
    assert result.error is not None and "vllm.om:2: malformed sample line" in result.error
    f = findings_from_notebook(json.loads(result.notebook.read_text()))
    assert f["triage"].status == "missing"
    assert "vllm.om:2: malformed sample line" in f["triage"].summary
    assert "vllm.om:2" in (tmp_path / "out" / "postmortem.md").read_text()


def test_bundle_without_metrics_folder(scenario_copy, tmp_path):
    bundle = scenario_copy("release-regression")
    shutil.rmtree(bundle / "metrics")
    result = execute("inference_latency", tmp_path / "out", {"bundle": str(bundle)})
    assert result.error is None
    f = findings_from_notebook(json.loads(result.notebook.read_text()))
    assert all(x.status != "error" for x in f.values()), {k: x.summary for k, x in f.items()}
    assert f["completeness"].status == "critical"
    assert {f[k].status for k in ("changes", "baseline", "triage", "cost")} == {"missing"}
    assert all(d["verdict"] != "confirmed" for d in f["triage"].data["directions"])
    assert "no metrics/ folder" in (tmp_path / "out" / "postmortem.md").read_text()
