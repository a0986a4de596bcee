"""A fleet's Prometheus: two models on different hosts in the same metric families. Scoped, the live
engine (matchers pushed into PromQL against a real Prometheus) and the bundle engine agree, and
triage judges only the affected model and its GPUs and hosts."""

from __future__ import annotations

import pytest
from fleet import HOST, MODEL, fleet_bundle
from servers import require_binary

from perfkit.core.scope import parse_scope
from perfkit.engine.local import LocalEngine
from perfkit.engine.scope import ScopedEngine, ScopeMatchesNothing
from perfkit.lab.servers import start
from perfkit.sources.bundle import load_bundle
from perfkit.sources.http import HttpConfig
from perfkit.sources.prometheus import PrometheusClient, PrometheusEngine
from perfkit.triage.evidence import gather
from perfkit.triage.table import run

pytestmark = pytest.mark.integration


def test_scoped_live_and_bundle_engines_agree_and_judge_one_model(tmp_path):
    require_binary("prometheus")
    bundle_dir = fleet_bundle(tmp_path)
    scope = parse_scope(f'{{model_name="{MODEL}"}}')
    scoped = load_bundle(bundle_dir, scope=scope)
    whole = load_bundle(bundle_dir)
    assert scoped.scope is not None and scoped.scope.hosts == [HOST]
    dcgm = scoped.store.frames["DCGM_FI_DEV_GPU_UTIL"]
    assert (
        set(dcgm["Hostname"]) == {HOST}
        and whole.store.frames["DCGM_FI_DEV_GPU_UTIL"].height == 2 * dcgm.height
    )
    inc = scoped.incident
    local = run(gather(LocalEngine(scoped.store), inc, events=scoped.events, logs=scoped.logs))
    server = start("prometheus", bundle_dir, tmp_path / "prometheus")
    try:
        client = PrometheusClient(HttpConfig(server.url))
        plain = PrometheusEngine(client, start=inc.baseline.start, end=inc.window.end)
        live = ScopedEngine(plain, scope, inc.baseline.__class__(inc.baseline.start, inc.window.end))
        remote = run(gather(live, inc, events=scoped.events, logs=scoped.logs))
        assert live.hosts() == {HOST}
        queries = "\n".join(plain.queries)
        assert f'model_name="{MODEL}"' in queries  # the matchers went to the server
        assert 'Hostname=~"assist\\\\-api\\\\-0"' in queries or f'Hostname=~"{HOST}"' in queries
        with pytest.raises(ScopeMatchesNothing):
            ScopedEngine(
                PrometheusEngine(client, start=inc.baseline.start, end=inc.window.end),
                parse_scope('{model_name="nope"}'),
                live.span,
            ).hosts()
    finally:
        server.stop()
    a, b = local.to_json(), remote.to_json()
    assert [(d["id"], d["verdict"]) for d in a["directions"][:3]] == [
        (d["id"], d["verdict"]) for d in b["directions"][:3]
    ]
    assert a["directions"][0]["id"] == "decode_efficiency"
    ev_a = next(s for s in a["symptoms"] if s["id"] == "tpot_high")["evidence"]
    ev_b = next(s for s in b["symptoms"] if s["id"] == "tpot_high")["evidence"]
    numbers = [k for k, v in ev_a.items() if isinstance(v, float)]
    assert numbers and all(ev_a[k] == pytest.approx(ev_b[k], rel=0.01) for k in numbers)


def test_lab_up_prints_the_scope_and_capture_keeps_only_the_workload(tmp_path, monkeypatch):
    """`perfkit lab up FLEET --scope` serves the whole fleet and prints the scope parameter;
    `perfkit capture --scope` writes a bundle with the one model, its GPUs and its hosts."""
    import json

    from click.testing import CliRunner

    from perfkit.app.cli.main import cli

    require_binary("prometheus")
    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    bundle_dir = fleet_bundle(tmp_path)
    scope = f'{{model_name="{MODEL}"}}'
    runner = CliRunner()
    res = runner.invoke(cli, ["lab", "up", str(bundle_dir), "--scope", scope], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert f"scope = {json.dumps(scope)}" in res.output
    state = json.loads((tmp_path / "lab" / "prometheus-fleet" / "state.json").read_text())
    try:
        inc = load_bundle(bundle_dir).incident
        w, b = inc.window.as_dict(), inc.baseline.as_dict()
        out = tmp_path / "captured"
        args = ["capture", "--prometheus", state["url"], "--start", w["start"], "--end", w["end"]]
        args += ["--baseline-start", b["start"], "--baseline-end", b["end"], "--scope", scope, "-o", str(out)]
        res = runner.invoke(cli, args, catch_exceptions=False)
        assert res.exit_code == 0, res.output
    finally:
        assert runner.invoke(cli, ["lab", "down"], catch_exceptions=False).exit_code == 0
    captured = load_bundle(out, scope=parse_scope(""))  # as written, before its own scope: applies
    models = set(captured.store.frames["vllm:num_requests_running"]["model_name"])
    assert models == {MODEL}
    assert set(captured.store.frames["DCGM_FI_DEV_GPU_UTIL"]["Hostname"]) == {HOST}
    assert {i.split(":")[0] for i in captured.store.frames["node_cpu_seconds_total"]["instance"]} == {HOST}
    assert load_bundle(out).incident.scope == scope  # the captured incident.yaml says what it holds
