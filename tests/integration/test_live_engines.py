"""Same numbers, two engines: each embedded bundle backfilled into a real Prometheus and a real
VictoriaMetrics gives the runbook's key numbers within 1 % of the bundle engine, and the same triage."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from servers import require_binary

from perfkit.engine.local import LocalEngine
from perfkit.lab.servers import start
from perfkit.sources.bundle import load_bundle
from perfkit.sources.http import HttpConfig
from perfkit.sources.prometheus import PrometheusClient, PrometheusEngine
from perfkit.triage.evidence import gather
from perfkit.triage.table import run

pytestmark = pytest.mark.integration
SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
NAMES = ("p95-prefill-interference", "release-regression", "queueing-traffic-surge")


def key_numbers(ev) -> dict[str, float]:
    """Every number the runbook leads with: quantiles per stage, rates, stage means, both windows."""
    out: dict[str, float] = {}
    for side, by_signal in ev.baseline.quantiles.items():
        for signal, qs in by_signal.items():
            for q, v in qs.items():
                out[f"{side} {signal} p{q * 100:g}"] = v
    for side, rates in ev.baseline.rates.items():
        for name, v in rates.items():
            out[f"{side} {name}"] = v
    for side, means in ev.stages.means.items():
        for stage, v in means.items():
            if stage != "frontend":  # a difference of near-equal means: compared through its parts
                out[f"{side} mean {stage}"] = v
    return out


def agree(a: float | None, b: float | None, rel: float = 0.01) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rel * max(abs(a), abs(b)) or abs(a - b) < 1e-9


@pytest.fixture(scope="module", params=["prometheus", "victoriametrics"])
def engine_name(request):
    require_binary("prometheus" if request.param == "prometheus" else "victoria-metrics")
    return request.param


@pytest.mark.parametrize("name", NAMES)
def test_same_numbers_and_triage_on_both_engines(name, engine_name, tmp_path):
    bundle = load_bundle(SCENARIOS / name)
    inc = bundle.incident
    local = gather(LocalEngine(bundle.store), inc, events=bundle.events, logs=bundle.logs)
    server = start(engine_name, SCENARIOS / name, tmp_path / engine_name)
    try:
        remote_engine = PrometheusEngine(
            PrometheusClient(HttpConfig(server.url)), start=inc.baseline.start, end=inc.window.end
        )
        remote = gather(remote_engine, inc, events=bundle.events, logs=bundle.logs)
    finally:
        server.stop()
    a, b = key_numbers(local), key_numbers(remote)
    assert a.keys() == b.keys()
    off = {k: (a[k], b[k]) for k in a if not agree(a[k], b[k])}
    assert not off, f"{engine_name} differs from the bundle engine by more than 1 %: {off}"
    assert len(a) >= 60
    # the server aggregated: no raw bucket pulls for quantiles
    assert any(q.startswith("histogram_quantile(") for q in remote_engine.queries)
    la, lb = run(local).to_json(), run(remote).to_json()
    assert [(d["id"], d["verdict"]) for d in la["directions"][:3]] == [
        (d["id"], d["verdict"]) for d in lb["directions"][:3]
    ]
    assert la["directions"][0]["suspect_version"] == lb["directions"][0]["suspect_version"]
