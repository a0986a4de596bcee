"""PrometheusClient against a fake session: retries, errors naming URL and status, range splitting,
auth from references, and no token in any message."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import requests

from perfkit.errors import SourceError
from perfkit.sources.http import Auth, HttpConfig
from perfkit.sources.prometheus import PrometheusClient, PrometheusEngine, series_frame

URL = "http://prom.example:9090"
CANARY = "canary-0badc0ffee1234567890"
T0 = datetime(2026, 11, 12, 1, 0, tzinfo=UTC)


class Resp:
    def __init__(self, status: int, body) -> None:
        self.status_code = status
        self.text = body if isinstance(body, str) else json.dumps(body)

    def json(self):
        return json.loads(self.text)


class FakeSession(requests.Session):
    """Answers from a script: a list of responses or exceptions, or a function of (url, params)."""

    def __init__(self, script) -> None:
        super().__init__()
        self.script = script
        self.calls: list[tuple[str, dict]] = []

    def get(self, url, params=None, timeout=None, **kw):  # noqa: ARG002
        self.calls.append((url, dict(params or {})))
        item = self.script(url, params) if callable(self.script) else self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def ok(data) -> Resp:
    return Resp(200, {"status": "success", "data": data})


def client(
    script, max_points: int | None = None, **http
) -> tuple[PrometheusClient, FakeSession, list[float]]:
    """A client on a fake session; ``http`` are :class:`HttpConfig` settings."""
    sleeps: list[float] = []
    session = FakeSession(script)
    extra = {} if max_points is None else {"max_points": max_points}
    c = PrometheusClient(HttpConfig(URL, **http), session=session, sleep=sleeps.append, **extra)
    return c, session, sleeps


def test_retries_5xx_with_backoff_then_succeeds():
    c, s, sleeps = client(
        [Resp(503, "busy"), Resp(502, "bad gateway"), ok({"resultType": "vector", "result": []})]
    )
    assert c.query("up", T0) == {"resultType": "vector", "result": []}
    assert len(s.calls) == 3 and sleeps == [0.5, 1.0]


def test_gives_up_with_url_status_and_attempts():
    c, s, _ = client(lambda url, params: Resp(500, "boom"), retries=2)
    with pytest.raises(SourceError) as err:
        c.query("up", T0)
    assert str(err.value) == f"{URL}/api/v1/query: HTTP 500 after 3 attempts"
    assert err.value.status == 500 and len(s.calls) == 3


def test_timeouts_and_refused_connections_are_retried_then_reported():
    c, _, _ = client([requests.Timeout(), requests.Timeout(), requests.Timeout(), requests.Timeout()])
    with pytest.raises(SourceError, match=r"/api/v1/query: timed out after 30 s after 4 attempts"):
        c.query("up", T0)
    c, _, _ = client(lambda u, p: requests.ConnectionError("refused"), retries=1)
    with pytest.raises(SourceError, match="cannot connect"):
        c.query("up", T0)


def test_malformed_and_error_answers():
    c, _, _ = client([Resp(200, "<html>proxy login</html>")])
    with pytest.raises(SourceError, match=r"HTTP 200: answer is not JSON \('<html>proxy login</html>'\)"):
        c.query("up", T0)
    c, _, _ = client(
        [Resp(400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"})]
    )
    with pytest.raises(SourceError, match="HTTP 400: bad_data parse error at char 3"):
        c.query("up(", T0)
    c, s, _ = client([Resp(400, {"status": "error", "error": "x"})])
    with pytest.raises(SourceError):
        c.query("up", T0)
    assert len(s.calls) == 1  # a 4xx is not retried


def test_wrong_token_never_appears(monkeypatch):
    monkeypatch.setenv("PROM_TOKEN", CANARY)
    echo = Resp(401, f"invalid token {CANARY}")
    c, s, _ = client([echo], auth=Auth(token_env="PROM_TOKEN"))
    with pytest.raises(SourceError) as err:
        c.query("up", T0)
    assert err.value.status == 401 and "not authorised" in str(err.value)
    assert s.headers["Authorization"] == f"Bearer {CANARY}"  # it was sent ...
    assert (
        CANARY not in str(err.value) and CANARY not in repr(err.value) and CANARY not in repr(c)
    )  # ... not shown
    c, _, _ = client([Resp(500, f"upstream said {CANARY}")] * 4, auth=Auth(token_env="PROM_TOKEN"))
    with pytest.raises(SourceError) as err:
        c.query("up", T0)
    assert CANARY not in str(err.value)
    c, _, _ = client(
        [Resp(400, {"status": "error", "error": f"bad header Bearer {CANARY}"})],
        auth=Auth(token_env="PROM_TOKEN"),
    )
    with pytest.raises(SourceError) as err:
        c.query("up", T0)
    assert CANARY not in str(err.value)


def test_basic_auth_and_tls_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("PROM_PASSWORD", "s3cret-value")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    c, s, _ = client([ok([])], auth=Auth(username="ops", password_env="PROM_PASSWORD"), ca_file=str(ca))
    assert s.auth == ("ops", "s3cret-value") and s.verify == str(ca)
    c, s, _ = client([ok([])])
    assert s.verify is True and "Authorization" not in s.headers


def test_range_is_split_under_the_points_limit_and_merged():
    def answer(url, params):
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
        n = int((end - start) / step) + 1
        assert n <= 100
        values = [[start + i * step, str(i)] for i in range(n)]
        return ok({"resultType": "matrix", "result": [{"metric": {"job": "x"}, "values": values}]})

    c, s, _ = client(answer, max_points=100)
    end = datetime.fromtimestamp(T0.timestamp() + 249 * 15, UTC)  # 250 steps
    result = c.query_range("rate(x[1m])", T0, end, 15)
    assert len(s.calls) == 3
    ts = [v[0] for v in result[0]["values"]]
    assert len(ts) == 250 and ts == sorted(ts) and ts[0] == T0.timestamp()


def test_series_frame_keeps_nan_and_inf_and_labels():
    frame = series_frame(
        [{"metric": {"__name__": "x", "gpu": "0"}, "values": [[1, "NaN"], [2, "+Inf"], [3, "1.5"]]}]
    )
    assert frame.columns == ["gpu", "ts", "value"]
    v = frame["value"].to_list()
    assert v[0] != v[0] and v[1] == float("inf") and v[2] == 1.5


def test_engine_has_uses_metric_names_in_the_span():
    c, s, _ = client([ok(["vllm:num_requests_running", "up"])])
    e = PrometheusEngine(c, start=T0, end=T0)
    assert e.has("up") and not e.has("DCGM_FI_DEV_GPU_UTIL")
    assert len(s.calls) == 1 and s.calls[0][0].endswith("/api/v1/label/__name__/values")
