"""No silent defaults (issue 21): a command that needs evidence refuses to run without it.

A runbook's parameters default to its embedded demo, right in JupyterLab and wrong for a command:
`perfkit run inference_latency -o out/x` used to write the demo incident's postmortem and exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli import cli
from perfkit.app.run import check_run_parameters, find_runbook
from perfkit.errors import ConfigError


@pytest.mark.parametrize(
    ("runbook", "names"),
    [
        ("inference_latency", ["--bundle", "--prometheus"]),
        ("training_step", ["--bundle", "--prometheus"]),
        ("baseline_capture", ["result=", "url="]),
    ],
)
def test_run_without_evidence_is_refused_and_writes_nothing(tmp_path, runbook, names):
    out = tmp_path / "x"
    res = CliRunner().invoke(cli, ["run", runbook, "-o", str(out)])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert "no evidence given" in line and "--bundle demo" in line
    assert all(name in line for name in names), line
    assert not out.exists()


def test_parameters_that_name_evidence_are_enough():
    path = find_runbook("inference_latency")
    live = check_run_parameters(path, {"prometheus_url": "http://127.0.0.1:9"}, require_evidence=True)
    assert live["bundle"] == "" and live["prometheus_url"] == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="no evidence given"):
        check_run_parameters(path, {"service": "chat"}, require_evidence=True)
    # the library call (a notebook's own defaults) is unchanged
    assert check_run_parameters(path, {"service": "chat"})["service"] == "chat"


@pytest.mark.parametrize(
    ("runbook", "scenario"),
    [("inference_latency", "p95-prefill-interference"), ("training_step", "dataloader-starvation")],
)
def test_bundle_demo_is_each_runbooks_own_demo(runbook, scenario):
    """`--bundle demo` asks for the demo; for the training runbook that is a training incident."""
    params = check_run_parameters(find_runbook(runbook), {"bundle": "demo"}, require_evidence=True)
    assert Path(params["bundle"]).name == scenario and Path(params["bundle"]).is_dir()


def test_baseline_capture_demo_is_asked_for_by_name():
    params = check_run_parameters(find_runbook("baseline_capture"), {"bundle": "demo"}, require_evidence=True)
    assert "bundle" not in params and params.get("result", "") == "" and params.get("url", "") == ""


def test_batch_item_without_evidence_fails_alone(tmp_path):
    spec = tmp_path / "batch.yaml"
    spec.write_text("- name: forgot\n  runbook: inference_latency\n")
    res = CliRunner().invoke(cli, ["batch", str(spec), "-o", str(tmp_path / "out")])
    assert res.exit_code != 0
    assert "no evidence given" in res.output
    assert not (tmp_path / "out" / "forgot" / "postmortem.md").exists()
