"""The replica split against a real Prometheus: ``sum by (le, instance)`` and ``count by (instance)``
as the server answers them give the same replicas, medians and outlier as the bundle's engine
(perfkit.analyses.replicas on a fleet of four, one of which decodes twice as slowly)."""

from __future__ import annotations

import pytest
from servers import require_binary

from perfkit.analyses.replicas import replicas
from perfkit.engine.local import LocalEngine
from perfkit.lab.servers import start
from perfkit.lab.sim.fleet import FleetWorkload, write_fleet
from perfkit.sources.bundle import load_bundle
from perfkit.sources.http import HttpConfig
from perfkit.sources.prometheus import PrometheusClient, PrometheusEngine

pytestmark = pytest.mark.integration

MODEL = "Qwen/Qwen3-32B"


def test_a_real_prometheus_names_the_same_slow_replica(tmp_path):
    require_binary("prometheus")
    out = tmp_path / "fleet"
    write_fleet(out, [FleetWorkload(MODEL, "healthy-busy-evening", 3), FleetWorkload(MODEL, "decode-thermal-throttle", 1)])  # fmt: skip
    b = load_bundle(out)
    inc = b.incident
    local = replicas(LocalEngine(b.store), inc.window, inc.baseline)
    server = start("prometheus", out, tmp_path / "prometheus")
    try:
        engine = PrometheusEngine(
            PrometheusClient(HttpConfig(server.url)), start=inc.baseline.start, end=inc.window.end
        )
        live = replicas(engine, inc.window, inc.baseline)
    finally:
        server.stop()
    assert [r.name for r in live.outliers] == [r.name for r in local.outliers] == ["gpu-b00:8000"]
    assert live.label == local.label == "instance"
    for a, b_ in zip(local.rows, live.rows, strict=True):
        assert a.name == b_.name
        for sig, n in a.numbers.items():
            assert b_.numbers[sig]["ratio"] == pytest.approx(n["ratio"], rel=0.05), (a.name, sig)
