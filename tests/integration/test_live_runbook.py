"""The runbook and the CLI on live sources: a real Prometheus loaded by `perfkit lab`, and faults
injected by a small proxy in front of it (5xx, malformed JSON, a server that is not there)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from servers import require_binary

from perfkit.app.cli.main import cli
from perfkit.app.runner.run import execute
from perfkit.core.findings import findings_from_notebook
from perfkit.lab.servers import free_port, start

pytestmark = [pytest.mark.integration, pytest.mark.notebook]
SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
RR = SCENARIOS / "release-regression"
WINDOW = {
    "start": "2026-11-18T13:50:00Z",
    "end": "2026-11-18T14:35:00Z",
    "baseline_start": "2026-11-18T13:05:00Z",
    "baseline_end": "2026-11-18T13:45:00Z",
}
CANARY = "canary-live-5e6f7a8b9c0d1e2f"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    require_binary("prometheus")
    require_binary("promtool")
    server = start("prometheus", RR, tmp_path_factory.mktemp("prom"))
    yield server
    server.stop()


class FaultProxy:
    """Forwards to ``upstream`` except for paths matching a rule: (status, body) answered instead."""

    def __init__(self, upstream: str, rules: dict[str, tuple[int, str]]) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                for prefix, (status, body) in proxy.rules.items():
                    if self.path.startswith(prefix):
                        self._send(status, body.encode())
                        return
                r = requests.get(proxy.upstream + self.path, timeout=30)
                self._send(r.status_code, r.content)

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.upstream, self.rules = upstream, rules
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def findings(result):
    return findings_from_notebook(json.loads(result.notebook.read_text()))


@pytest.mark.slow
def test_runbook_on_live_prometheus_matches_the_bundle(prometheus, tmp_path, monkeypatch):
    monkeypatch.setenv("PROM_TOKEN", CANARY)
    params = {
        "bundle": "",
        "prometheus_url": prometheus.url,
        "prometheus_token_env": "PROM_TOKEN",
        "deploys": str(RR / "events.csv"),
        "logs": str(RR / "logs" / "*.log"),
        "service": "assist-api",
        "usd_per_gpu_hour": 2.5,
        "gpu_count": 4,
        **WINDOW,
    }
    live = execute("inference_latency", tmp_path / "live", params)
    offline = execute("inference_latency", tmp_path / "bundle", {"bundle": str(RR)})
    assert live.error is None and offline.error is None
    a, b = findings(live), findings(offline)
    assert a["scope"].data["source"] == "prometheus"
    da, db = a["triage"].data["directions"], b["triage"].data["directions"]
    assert [(d["id"], d["verdict"]) for d in da[:2]] == [(d["id"], d["verdict"]) for d in db[:2]]
    assert da[0]["suspect_version"] == "v2.4.0"
    qa = a["baseline"].data["quantiles"]["incident"]["itl"]
    qb = b["baseline"].data["quantiles"]["incident"]["itl"]
    assert all(abs(qa[q] - qb[q]) <= 0.01 * qb[q] for q in qb)
    assert a["cost"].data["usd_per_million"]["incident"] == pytest.approx(
        b["cost"].data["usd_per_million"]["incident"], rel=0.01
    )
    assert any(q.startswith("histogram_quantile(") for q in a["baseline"].queries)
    for p in (tmp_path / "live").rglob("*"):
        assert not p.is_file() or CANARY.encode() not in p.read_bytes(), p


def test_metrics_server_down_every_section_says_so(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = execute("inference_latency", tmp_path / "out", {"bundle": "", "prometheus_url": url, **WINDOW})
    assert result.error is not None and result.error.startswith(
        "no evidence:"
    )  # a failed run (issue 7 row 10)
    assert "cannot connect" in result.error
    f = findings(result)
    assert f["triage"].status == "missing"
    assert f"{url}/api/v1/label/__name__/values: cannot connect" in f["triage"].summary
    assert "cannot connect" in (tmp_path / "out" / "postmortem.md").read_text()


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
def test_partial_failures_are_named_and_the_rest_completes(prometheus, tmp_path):
    rules = {"/api/v1/query_range": (503, "overloaded")}
    with FaultProxy(prometheus.url, rules) as proxy:
        result = execute(
            "inference_latency",
            tmp_path / "out",
            {"bundle": "", "prometheus_url": proxy.url, "deploys": str(RR / "events.csv"), **WINDOW},
        )
    assert result.error is None
    f = findings(result)
    assert f["changes"].status == "error"
    assert f"{proxy.url}/api/v1/query_range: HTTP 503 after 4 attempts" in f["changes"].summary
    # instant queries still answered: the comparison stands
    assert f["baseline"].status == "ok" and f["baseline"].data["quantiles"]["incident"]["itl"]["0.95"] > 0
    md = (tmp_path / "out" / "postmortem.md").read_text()
    assert "HTTP 503" in md.split("## Missing evidence", 1)[1]


def test_malformed_answers_give_a_one_line_cli_error(prometheus):
    with FaultProxy(prometheus.url, {"/api/v1/label/": (200, "<html>login</html>")}) as proxy:
        res = CliRunner().invoke(
            cli,
            [
                "triage",
                "--prometheus",
                proxy.url,
                "--start",
                WINDOW["start"],
                "--end",
                WINDOW["end"],
                "--format",
                "json",
            ],
        )
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"perfkit: {proxy.url}/api/v1/label/__name__/values: HTTP 200: answer is not "
        "JSON ('<html>login</html>')"
    )


def test_triage_cli_on_live_source(prometheus):
    res = CliRunner().invoke(
        cli,
        [
            "triage",
            "--prometheus",
            prometheus.url,
            "--deploys",
            str(RR / "events.csv"),
            "--start",
            WINDOW["start"],
            "--end",
            WINDOW["end"],
            "--baseline-start",
            WINDOW["baseline_start"],
            "--baseline-end",
            WINDOW["baseline_end"],
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["directions"][0]["id"] == "release_regression"
    assert doc["directions"][0]["suspect_version"] == "v2.4.0"


def test_live_triage_on_a_window_without_samples_says_so(prometheus):
    """Issue 21: a window a day after the evidence used to exit 0 with nine 'inconclusive' rows."""
    res = CliRunner().invoke(
        cli,
        [
            "triage",
            "--prometheus",
            prometheus.url,
            "--start",
            "2026-11-19T13:50:00Z",
            "--end",
            "2026-11-19T14:35:00Z",
        ],
    )
    assert res.exit_code == 2, res.output
    assert "no samples of any series perfkit reads" in res.output and "2026-11-19T13:50:00Z" in res.output
    # the same command on the incident's own window judges it
    ok = CliRunner().invoke(
        cli,
        [
            "triage",
            "--prometheus",
            prometheus.url,
            "--start",
            WINDOW["start"],
            "--end",
            WINDOW["end"],
            "--format",
            "json",
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert any(s["detected"] for s in json.loads(ok.output)["symptoms"])
