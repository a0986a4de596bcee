"""No silent defaults (issue 21): a command that needs evidence refuses to run without it.

A runbook's parameters default to its embedded demo, right in JupyterLab and wrong for a command:
`perfkit run inference_latency -o out/x` used to write the demo incident's postmortem and exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.runner.run import check_run_parameters, find_runbook
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


def test_each_section_reports_its_start_in_order(tmp_path):
    """Progress (issue 21): one report per code cell, titled by the section heading above it."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_markdown_cell("## 1. Scope\nsome words"),
        nbformat.v4.new_code_cell("import time; time.sleep(0.3)"),
        nbformat.v4.new_markdown_cell("text without a heading"),
        nbformat.v4.new_code_cell("y = x + 1"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    seen: list[tuple[int, int, str, float]] = []
    from perfkit.app.runner.run import execute

    result = execute(str(path), tmp_path / "out", {"x": 2}, render=False, progress=lambda *a: seen.append(a))
    assert result.ok, result.error
    # papermill injects the parameters cell after the tagged one: four code cells in all
    assert [(i, n) for i, n, _, _ in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [t for _, _, t, _ in seen] == ["Title", "Title", "1. Scope", "1. Scope"]
    elapsed = [e for *_, e in seen]
    assert elapsed == sorted(elapsed) and elapsed[-1] - elapsed[-2] >= 0.25  # the sleep lies between
