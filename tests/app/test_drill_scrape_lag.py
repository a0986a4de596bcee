"""A live drill's Prometheus may hold fewer samples than the drill clock has passed (its scrapes are
late on a busy machine): ``scraped_through`` asks it how far it holds them, and ``drill status``
warns when that lags the clock by more than two scrapes. The Prometheus here is a small HTTP server
answering the query API with what the test gives it (a Prometheus that lags on cue cannot be had)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.drills import live as L
from perfkit.errors import ConfigError

ANCHOR = 1.7e9


@pytest.fixture
def prometheus() -> Iterator[tuple[str, dict]]:
    """(URL, answer): set ``answer["status"]`` and ``answer["body"]``; ``answer["asked"]`` collects
    the query strings received."""
    answer: dict = {"status": 200, "body": "", "asked": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            answer["asked"].append(parse_qs(urlsplit(self.path).query))
            data = answer["body"].encode()
            self.send_response(answer["status"])
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


def vector(value: str) -> str:
    return json.dumps(
        {
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]},
        }
    )


def test_the_newest_scraped_second_is_asked_at_the_drill_clock(prometheus):
    url, answer = prometheus
    answer["body"] = vector("1234.5")
    state = {"anchor": ANCHOR, "urls": {"prometheus": url}}
    assert L.scraped_through(state, 1300.0) == 1234.5
    asked = answer["asked"][-1]
    assert "perfkit_lab_servesim_virtual_seconds" in asked["query"][0]
    assert float(asked["time"][0]) == pytest.approx(ANCHOR + 1300.0)  # the drill clock's now, not the wall's


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, vector("1234.5")),  # an error status: whatever the body says
        (200, "<html>not json</html>"),
        (
            200,
            json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}),
        ),  # no samples
        (200, vector("NaN-ish")),
        (200, vector("-Inf")),  # Prometheus's own spelling: no second to print
        (200, vector("NaN")),
        (200, json.dumps({"data": None})),
    ],
)
def test_an_answer_that_says_nothing_is_none(prometheus, status, body):
    url, answer = prometheus
    answer["status"], answer["body"] = status, body
    assert L.scraped_through({"anchor": ANCHOR, "urls": {"prometheus": url}}, 100.0) is None


def test_only_a_loopback_prometheus_is_asked():
    with pytest.raises(ConfigError, match="not a loopback URL"):
        L.scraped_through({"anchor": ANCHOR, "urls": {"prometheus": "http://10.1.2.3:9090"}}, 100.0)


def _status(monkeypatch, tmp_path, v: float, scraped: float | None, stopped: bool = False) -> str:
    state = {"anchor": ANCHOR, "speed": 30.0, "timing": {"scrape": 15.0}, "processes": {}, "stopped": stopped}
    got = {
        "state": state,
        "running": {},
        "supervisor": {},
        "v": v,
        "scraped_v": scraped,
        "load_stopped": False,
    }
    monkeypatch.setattr(L, "status", lambda folder: got)
    res = CliRunner().invoke(cli, ["drill", "status", "drill-01", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    return res.output


def test_status_warns_when_the_samples_lag_the_clock_by_more_than_two_scrapes(monkeypatch, tmp_path):
    said = _status(monkeypatch, tmp_path, v=2000.0, scraped=1700.0)
    assert "Prometheus holds samples up to" in said and "300 virtual seconds behind" in said
    assert L.iso_at({"anchor": ANCHOR}, 1700.0) in said


@pytest.mark.parametrize(
    ("scraped", "stopped"),
    [(1975.0, False), (None, False), (1700.0, True)],  # within two scrapes; not asked; a stopped drill
)
def test_status_says_nothing_of_scrapes_in_step_or_unknown(monkeypatch, tmp_path, scraped, stopped):
    said = _status(monkeypatch, tmp_path, v=2000.0, scraped=scraped, stopped=stopped)
    assert "drill clock:" in said and "Prometheus holds samples" not in said
