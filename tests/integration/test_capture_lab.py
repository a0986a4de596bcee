"""`perfkit lab up/down` and `perfkit capture`, as a user runs them: bundle → Prometheus → capture →
bundle gives the same findings; the captured OpenMetrics is accepted by promtool."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from servers import require_binary

from perfkit.app.cli.main import cli
from perfkit.engine.local import LocalEngine
from perfkit.sources.bundle import load_bundle
from perfkit.triage.evidence import gather
from perfkit.triage.table import run

pytestmark = pytest.mark.integration
SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of this process is dead for our purposes
        return os.waitpid(pid, os.WNOHANG)[0] != pid
    except ChildProcessError:
        pass
    try:  # so is another parent's zombie (a daemonized server's, until init reaps it on a busy machine)
        stat = open(f"/proc/{pid}/stat").read()  # noqa: PTH123, SIM115
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def gone_soon(pid: int, timeout_s: float = 10.0) -> bool:
    """The process is gone within ``timeout_s``: "stopped" means it was signalled and is exiting, and on
    a loaded machine a server's exit (its sockets and files closed, its entry released) takes a moment."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_lab_up_capture_round_trip_and_down(engine, tmp_path, monkeypatch):
    require_binary("prometheus" if engine == "prometheus" else "victoria-metrics")
    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    source = SCENARIOS / "p95-prefill-interference"
    res = invoke("lab", "up", str(source), "--engine", engine)
    assert res.exit_code == 0, res.output
    state = json.loads((tmp_path / "lab" / f"{engine}-{source.name}" / "state.json").read_text())
    assert f'prometheus_url = "{state["url"]}"' in res.output and pid_alive(state["pid"])
    try:
        inc = load_bundle(source).incident
        out = tmp_path / "captured"
        res = invoke(
            "capture",
            "--prometheus",
            state["url"],
            "--start",
            inc.window.as_dict()["start"],
            "--end",
            inc.window.as_dict()["end"],
            "--baseline-start",
            inc.baseline.as_dict()["start"],
            "--baseline-end",
            inc.baseline.as_dict()["end"],
            "--service",
            "chat-api",
            "--deploys",
            str(source / "events.csv"),
            "--logs",
            str(source / "logs" / "vllm.log"),
            "-o",
            str(out),
        )
        assert res.exit_code == 0, res.output
    finally:
        res = invoke("lab", "down")
    assert f"stopped {engine}-{source.name}" in res.output and gone_soon(state["pid"])
    captured, original = load_bundle(out), load_bundle(source)
    assert captured.missing == []
    a = run(
        gather(LocalEngine(original.store), original.incident, events=original.events, logs=original.logs)
    )
    b = run(
        gather(LocalEngine(captured.store), captured.incident, events=captured.events, logs=captured.logs)
    )
    ja, jb = a.to_json(), b.to_json()
    assert [(d["id"], d["verdict"]) for d in ja["directions"][:2]] == [
        (d["id"], d["verdict"]) for d in jb["directions"][:2]
    ]
    assert jb["directions"][0]["id"] == "prefill_decode_interference"
    qa = next(s for s in ja["symptoms"] if s["id"] == "tail_latency_divergence")["evidence"]
    qb = next(s for s in jb["symptoms"] if s["id"] == "tail_latency_divergence")["evidence"]
    assert qb["ttft_p95_ratio"] == pytest.approx(qa["ttft_p95_ratio"], rel=0.01)
    # promtool accepts what capture wrote
    check = subprocess.run(
        [
            require_binary("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(out / "metrics" / "captured.om"),
            str(tmp_path / "tsdb"),
        ],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_lab_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    res = invoke("lab", "down", "nothing-here")
    assert res.exit_code == 1 and "no lab server named nothing-here" in res.output
    monkeypatch.setenv("PATH", str(tmp_path))  # no binaries at all
    res = invoke("lab", "up", str(SCENARIOS / "release-regression"))
    assert res.exit_code == 2
    assert "prometheus is not installed: apt-get install -y --no-install-recommends prometheus" in res.output


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
@pytest.mark.notebook
def test_runbook_on_the_printed_lab_url_gives_the_bundles_findings(tmp_path, monkeypatch):
    """The issue's promise, as a new user follows it: lab up, paste the printed parameters, run."""
    import ast

    from perfkit.app.runner.run import execute
    from perfkit.core.findings import findings_from_notebook

    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    source = SCENARIOS / "release-regression"
    res = invoke("lab", "up", str(source))
    assert res.exit_code == 0, res.output
    try:
        pasted = {}
        for line in res.output.splitlines():
            if line.startswith("  ") and " = " in line:
                name, value = line.strip().split(" = ", 1)
                pasted[name] = ast.literal_eval(value)
        live = execute("inference_latency", tmp_path / "live", pasted)
    finally:
        invoke("lab", "down")
    disk = execute("inference_latency", tmp_path / "disk", {"bundle": str(source)})
    a = findings_from_notebook(json.loads(live.notebook.read_text()))
    b = findings_from_notebook(json.loads(disk.notebook.read_text()))
    assert a["scope"].data["source"] == "prometheus" and b["scope"].data["source"] == "bundle"
    da, db = a["triage"].data["directions"], b["triage"].data["directions"]
    assert [(d["id"], d["verdict"], d["suspect_version"]) for d in da] == [
        (d["id"], d["verdict"], d["suspect_version"]) for d in db
    ]
    assert a["changes"].data["suspect_version"] == "v2.4.0"
    assert {c["version"] for c in a["changes"].data["cleared"]} == {
        c["version"] for c in b["changes"].data["cleared"]
    }
    breach_a = [r[0] for r in a["postmortem"].data["impact"]["rows"] if r[-1] == "BREACH"]
    breach_b = [r[0] for r in b["postmortem"].data["impact"]["rows"] if r[-1] == "BREACH"]
    assert breach_a == breach_b
