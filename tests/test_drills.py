"""Drills end to end, as a trainer and a trainee use them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def injected(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "".join(next(c for c in nb["cells"] if "injected-parameters" in c["metadata"]["tags"])["source"])


def test_list_gives_briefs_not_answers():
    res = invoke("drill", "list")
    assert res.exit_code == 0
    assert "decode-thermal-throttle" in res.output and "easy" in res.output
    for direction in ("decode_efficiency", "scheduler_queueing", "release_regression"):
        assert direction not in res.output


def test_start_hides_the_answer_and_parameterizes_the_runbook(tmp_path):
    res = invoke("drill", "start", "release-regression", "-o", str(tmp_path / "d"))
    assert res.exit_code == 0, res.output
    evidence = tmp_path / "d" / "evidence"
    assert (evidence / "incident.yaml").exists() and not (evidence / "answer.yaml").exists()
    assert str(evidence.resolve()) in injected(tmp_path / "d" / "inference_latency.ipynb")


def test_check_grades_and_explains():
    res = invoke(
        "drill", "check", "release-regression", "--answer", "release_regression", "--version", "v2.4.0"
    )
    assert res.exit_code == 0 and res.output.startswith("CORRECT")
    res = CliRunner().invoke(
        cli, ["drill", "check", "release-regression", "--answer", "release_regression", "--version", "v2.4.1"]
    )
    assert res.exit_code == 1 and "the version is not: v2.4.1" in res.output
    res = CliRunner().invoke(
        cli, ["drill", "check", "queueing-traffic-surge", "--answer", "kv_cache_allocation"]
    )
    assert res.exit_code == 1 and "the direction was scheduler_queueing" in res.output
    assert "waiting requests climb into the hundreds" in res.output  # the evidence to have seen
    assert "perfkit's triage: rank 1 scheduler_queueing (confirmed)" in res.output
    res = CliRunner().invoke(cli, ["drill", "check", "release-regression", "--answer", "bad_luck"])
    assert res.exit_code == 2 and "unknown direction 'bad_luck'" in res.output


@pytest.mark.integration
def test_live_drill_serves_metrics_from_prometheus(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    res = invoke("drill", "start", "queueing-traffic-surge", "-o", str(tmp_path / "d"), "--live")
    try:
        assert res.exit_code == 0, res.output
        text = injected(tmp_path / "d" / "inference_latency.ipynb")
        assert 'prometheus_url = "http://127.0.0.1:' in text and 'bundle = ""' in text
    finally:
        res = invoke("lab", "down")
    assert "stopped prometheus-drill-queueing-traffic-surge" in res.output


def test_training_drill_opens_the_training_runbook(tmp_path):
    res = invoke("drill", "start", "allreduce-scaling-64gpu", "-o", str(tmp_path / "t"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "t" / "training_step.ipynb").exists()
    assert not (tmp_path / "t" / "inference_latency.ipynb").exists()
