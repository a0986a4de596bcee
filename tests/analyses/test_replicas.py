"""The replica that diverges (issue 37 item 3), on fleets built from embedded scenarios of one model
and one template (perfkit.lab.sim.fleet: each replica a scenario's own metrics, relabelled by host and
shifted onto the first one's window): one engine of four that decodes twice as slowly is named, and
the only one; a fleet slowed as a whole, peers with their own noise and two replicas name none."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.analyses.replicas import replicas
from perfkit.engine.local import LocalEngine
from perfkit.lab.sim.fleet import FleetWorkload, write_fleet
from perfkit.sources.bundle import load_bundle

MODEL = "Qwen/Qwen3-32B"


def _judged(tmp_path: Path, *parts: tuple[str, int]):
    out = tmp_path / "fleet"
    write_fleet(out, [FleetWorkload(MODEL, scenario, n) for scenario, n in parts])
    b = load_bundle(out)
    return replicas(LocalEngine(b.store), b.incident.window, b.incident.baseline)


def test_one_slow_replica_of_four_is_found_named_and_alone(tmp_path):
    got = _judged(tmp_path, ("healthy-busy-evening", 3), ("decode-thermal-throttle", 1))
    assert got.label == "instance" and len(got.rows) == 4
    assert [r.name for r in got.outliers] == ["gpu-b00:8000"]
    slow = got.outliers[0].numbers["tpot"]
    assert slow["ratio"] > 1.8 and slow["baseline_ratio"] < 1.1  # it diverged at the onset
    assert "gpu-b00:8000 diverges (TPOT p50" in got.summary()
    assert got.as_dict()["outliers"] == ["gpu-b00:8000"] and got.queries


@pytest.mark.parametrize(
    "parts",
    [
        (("decode-thermal-throttle", 4),),  # the whole fleet slowed together: not one replica's doing
        (("healthy-busy-evening", 2), ("healthy-decoy-deploy", 2)),  # healthy peers, each its own traffic
    ],
)
def test_no_replica_is_named_where_none_diverges(tmp_path, parts):
    got = _judged(tmp_path, *parts)
    assert len(got.rows) == 4 and got.outliers == []
    ratios = [n["ratio"] for r in got.rows for n in r.numbers.values()]
    assert max(ratios) < 1.3  # peers agree well inside the 1.5x the outlier needs


def test_two_replicas_cannot_tell_which_is_odd(tmp_path):
    got = _judged(tmp_path, ("healthy-busy-evening", 1), ("decode-thermal-throttle", 1))
    assert got.label is None and got.outliers == []
    assert "too few" in got.summary()


def test_the_runbook_names_the_replica_in_the_triage_json_and_the_postmortem(tmp_path):
    """The rows read the fleet's sums and none fires on one slow engine of four (its TPOT moves the
    fleet's median by a tenth): the triage JSON's ``replicas``, the triage summary, the postmortem's
    summary and root cause name it."""
    import perfkit.app.runbooks.inference as rb

    out = tmp_path / "fleet"
    write_fleet(out, [FleetWorkload(MODEL, "healthy-busy-evening", 3), FleetWorkload(MODEL, "decode-thermal-throttle", 1)])  # fmt: skip
    ctx = rb.open_incident(str(out))
    ctx.params["predict_fix"] = False
    for name in ("scope", "completeness", "changes", "baseline", "impact", "stages"):
        getattr(rb, name)(ctx)
    section = rb.triage(ctx)
    tri = section.finding
    assert tri.data["replicas"]["outliers"] == ["gpu-b00:8000"]
    # the small multiples: the diverging replica's panel first and in red, one panel each
    (panels,) = [f for f in section.extra_findings if f.key == "replicas"]
    assert panels.figure is not None and "gpu-b00:8000 diverges" in panels.summary
    fig = section.extra_figures[-1]
    assert [a.text for a in fig.layout.annotations][:4] == [
        "gpu-b00:8000",
        "gpu-a00:8000",
        "gpu-a01:8000",
        "gpu-a02:8000",
    ]
    red = [t for t in fig.data if t.name == "diverges"]
    assert len(red) == 1 and red[0].xaxis in (None, "x")  # the first panel's
    assert sum(t.name == "replica" for t in fig.data) == 3
    assert "Not the whole fleet" in tri.summary and tri.status in ("warn", "critical")
    model = rb.findings(ctx).finding.data
    assert "gpu-b00:8000 diverges" in model["summary"] and "gpu-b00:8000 diverges" in model["root_cause"]


def test_one_engine_has_no_replicas_to_judge():
    import perfkit.app.runbooks.inference as rb

    ctx = rb.open_incident("p95-prefill-interference")
    ctx.params["predict_fix"] = False
    for name in ("scope", "completeness", "changes", "baseline", "impact", "stages"):
        getattr(rb, name)(ctx)
    assert rb.triage(ctx).finding.data["replicas"] is None
