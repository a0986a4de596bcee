"""``perfkit trace`` on what bundles hold (issue 21): a folder of phases, a bundle, an embedded
incident's name; ``--hta-compat``; and the idle table that no longer sets "idle 0.00 %" beside
seconds of "host wait" without saying they measure different things."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from trace_synth import FIXTURES

from perfkit.app.cli.trace import resolve_trace_path, trace
from perfkit.errors import ConfigError
from perfkit.traces import analyze, analyze_phases

ROOT = Path(__file__).resolve().parents[2]
SCALING = ROOT / "data" / "scenarios" / "allreduce-scaling-64gpu"
B200 = ROOT / "tests" / "data" / "tracelens-traces" / "eager_trace.subset.json.gz"


def run(*args: str):
    return CliRunner().invoke(trace, list(args))


@pytest.fixture
def phases(tmp_path):
    """A bundle's traces/ as the simulator writes it: baseline/ and incident/, ranks in each
    (two real HTA test traces, one per phase)."""
    root = tmp_path / "traces"
    for name, src in (("baseline", "trace_diff/control"), ("incident", "trace_diff/test")):
        shutil.copytree(FIXTURES / src, root / name)
    return root


def test_a_folder_of_phases_is_read_phase_by_phase(phases):
    with pytest.raises(
        ConfigError, match=r"holds phases baseline/, incident/ \(one profiled run each\): give one"
    ):
        analyze(phases)
    got = analyze_phases(phases)
    assert list(got) == ["baseline", "incident"]
    for name, report in got.items():
        assert report.as_dict() == analyze(phases / name).as_dict()
    res = run(str(phases), "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert list(out["phases"]) == ["baseline", "incident"]
    res = run(str(phases))
    assert res.exit_code == 0 and "phase baseline/" in res.output and "phase incident/" in res.output


def test_an_embedded_incident_name_and_a_bundle_folder_are_accepted():
    """As ``perfkit scaling allreduce-scaling-64gpu`` (perfkit.app.runbooks.context.resolve_bundle)."""
    assert resolve_trace_path("allreduce-scaling-64gpu").resolve() == (SCALING / "traces").resolve()
    assert resolve_trace_path(str(SCALING)) == SCALING / "traces"
    res = run("allreduce-scaling-64gpu", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert sorted(out["phases"]) == ["baseline", "incident"]
    assert [r["rank"] for r in out["phases"]["incident"]["ranks"]] == [0, 1, 2, 3, 32, 63]
    res = run("no-such-incident")
    assert res.exit_code != 0 and "nor an embedded incident" in str(res.exception or res.output)


def test_idle_and_its_causes_agree():
    """The scaling incident: GPU idle is 0.4 ms a rank (idle 0.00 %), while the per-stream gaps
    HTA sums (the NCCL stream waiting between collectives while compute runs) are ~31 s. The
    causes shown beside idle % add up to it; the stream gaps are labelled as such."""
    report = analyze(SCALING / "traces" / "baseline").as_dict()
    for r in report["ranks"]:
        causes = r["gpu_idle_by_cause"]
        assert sum(causes.values()) == pytest.approx(r["idle_us"])
        gaps = r["idle_breakdown"]
        assert gaps["host_wait_us"] + gaps["kernel_wait_us"] + gaps["other_us"] > 1000 * r["idle_us"]
    res = run(str(SCALING / "traces" / "baseline"))
    assert res.exit_code == 0, res.output
    assert "the causes add up to idle %" in res.output and "stream gaps (HTA)" in res.output
    assert "not GPU idle" in res.output


def test_hta_compat_flag_changes_only_the_kernel_classes():
    ours = json.loads(run(str(B200), "--format", "json", "--whole-trace").output)
    hta = json.loads(run(str(B200), "--format", "json", "--whole-trace", "--hta-compat").output)
    assert ours["ranks"][0]["kernel_time_us"] == hta["ranks"][0]["kernel_time_us"]
    assert ours["ranks"][0]["idle_us"] == hta["ranks"][0]["idle_us"]
    assert ours["ranks"][0]["compute_us"] < hta["ranks"][0]["compute_us"]
    assert "hta-compat" in hta["kernel_classes"] and "hta-compat" not in ours["kernel_classes"]
