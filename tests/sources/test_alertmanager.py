"""AlertmanagerClient: against a real Alertmanager (integration) and a fake session (faults)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
import requests

from perfkit.core.frames import Window
from perfkit.errors import SourceError
from perfkit.lab.servers import free_port
from perfkit.sources.alertmanager import AlertmanagerClient, alerts_to_events, parse_time
from perfkit.sources.http import Auth, HttpConfig

URL = "http://am.test:9093"
ALERTS = URL + "/api/v2/alerts"
CANARY = "canary-AM-t0ken-3c9d1e7f42"


def iso_ms(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


# -- a real Alertmanager (the `alertmanager` fixture lives in tests/conftest.py) ------------------


def post_alerts(url: str, alerts: list[dict]) -> None:
    resp = requests.post(f"{url}/api/v2/alerts", json=alerts, timeout=5)
    assert resp.status_code == 200, resp.text


@pytest.mark.integration
def test_real_alertmanager_timeline(alertmanager):
    now = datetime.now(UTC).replace(microsecond=0)
    fired = now - timedelta(minutes=10)
    post_alerts(
        alertmanager,
        [
            {  # firing since 10 min
                "labels": {"alertname": "TTFTHigh", "service": "vllm-chat", "severity": "page"},
                "annotations": {"summary": "TTFT p95 4.2 s > SLO 2 s <script>x</script>", "description": "d"},
                "startsAt": iso_ms(fired),
            },
            {  # resolved a minute ago: accepted, then never listed
                "labels": {"alertname": "KVCacheFull", "service": "vllm-chat"},
                "annotations": {"summary": "KV cache at 99%"},
                "startsAt": iso_ms(now - timedelta(minutes=5)),
                "endsAt": iso_ms(now - timedelta(minutes=1)),
            },
            {  # only a description, the service in `job`
                "labels": {"alertname": "GPUXid", "job": "dcgm"},
                "annotations": {"description": "Xid 79 on gpu-node-3"},
                "startsAt": iso_ms(now - timedelta(minutes=3)),
            },
        ],
    )
    client = AlertmanagerClient(HttpConfig(alertmanager, timeout_s=10))

    listed = client.alerts()
    assert sorted(a["labels"]["alertname"] for a in listed) == ["GPUXid", "TTFTHigh"]
    assert {a["status"]["state"] for a in listed} == {"active"}
    # endsAt of an active alert is in the future (resolve_timeout, 5 min by default): not a resolution
    assert all(parse_time(a["endsAt"]) > now for a in listed)
    # not even active=false shows the resolved alert
    assert client.alerts(active=False) == []

    events = client.timeline_events(Window(now - timedelta(hours=1), now + timedelta(minutes=1)))
    assert events.rows() == [
        (fired, "alert", "vllm-chat", None, "TTFTHigh firing: TTFT p95 4.2 s > SLO 2 s <script>x</script>"),
        (now - timedelta(minutes=3), "alert", "dcgm", None, "GPUXid firing: Xid 79 on gpu-node-3"),
    ]
    # started before the window and still firing: included with its real start
    late = client.timeline_events(Window(now - timedelta(minutes=1), now + timedelta(minutes=1)))
    assert late["ts"].to_list() == [fired, now - timedelta(minutes=3)]
    # ended windows see nothing: the alerts began after them
    assert client.timeline_events(Window(now - timedelta(hours=2), now - timedelta(hours=1))).height == 0
    only = client.timeline_events(Window(now - timedelta(hours=1), now), service="dcgm")
    assert only["detail"].to_list() == ["GPUXid firing: Xid 79 on gpu-node-3"]


@pytest.mark.integration
def test_real_alertmanager_drops_an_alert_when_it_ends(alertmanager):
    """An alert whose endsAt passes leaves the list at once: the resolution is not observable."""
    now = datetime.now(UTC)
    post_alerts(
        alertmanager,
        [
            {
                "labels": {"alertname": "ShortLived", "service": "api"},
                "annotations": {"summary": "ends in 2 s"},
                "startsAt": iso_ms(now - timedelta(minutes=2)),
                "endsAt": iso_ms(now + timedelta(seconds=2)),
            }
        ],
    )
    client = AlertmanagerClient(HttpConfig(alertmanager, timeout_s=10))
    window = Window(now - timedelta(hours=1), now + timedelta(hours=1))
    before = client.timeline_events(window)
    assert before["detail"].to_list() == ["ShortLived firing: ends in 2 s"]
    time.sleep(3)
    assert client.alerts() == []
    assert client.timeline_events(window).height == 0


@pytest.mark.integration
def test_real_alertmanager_silenced_filter(alertmanager):
    now = datetime.now(UTC)
    post_alerts(
        alertmanager,
        [
            {
                "labels": {"alertname": "Noisy", "service": "api"},
                "startsAt": iso_ms(now - timedelta(minutes=1)),
            },
            {
                "labels": {"alertname": "Real", "service": "api"},
                "startsAt": iso_ms(now - timedelta(minutes=1)),
            },
        ],
    )
    silence = {
        "matchers": [{"name": "alertname", "value": "Noisy", "isRegex": False, "isEqual": True}],
        "startsAt": iso_ms(now - timedelta(minutes=1)),
        "endsAt": iso_ms(now + timedelta(hours=1)),
        "createdBy": "perfkit-test",
        "comment": "test",
    }
    resp = requests.post(f"{alertmanager}/api/v2/silences", json=silence, timeout=5)
    assert resp.status_code == 200, resp.text
    client = AlertmanagerClient(HttpConfig(alertmanager, timeout_s=10))
    deadline = time.monotonic() + 10
    while {a["labels"]["alertname"]: a["status"]["state"] for a in client.alerts()}.get(
        "Noisy"
    ) != "suppressed":
        assert time.monotonic() < deadline, client.alerts()
        time.sleep(0.1)  # the silence is applied asynchronously
    assert [a["labels"]["alertname"] for a in client.alerts(silenced=False)] == ["Real"]
    assert [a["labels"]["alertname"] for a in client.alerts(filters=['alertname="Noisy"'])] == ["Noisy"]


# -- events from alert objects (no server) -------------------------------------------------------

WINDOW = Window("2026-11-30T01:00:00Z", "2026-11-30T03:00:00Z")
NOW = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)


def alert(name: str, starts: str, ends: str, **labels: str) -> dict:
    return {
        "labels": {"alertname": name, **labels},
        "annotations": {"summary": f"{name} summary"},
        "startsAt": starts,
        "endsAt": ends,
        "status": {"state": "active", "silencedBy": [], "inhibitedBy": []},
    }


def test_resolved_alerts_get_a_second_row_when_an_answer_has_them():
    alerts = [
        alert(
            "Before", "2026-11-30T00:10:00Z", "2026-11-30T00:50:00Z", service="a"
        ),  # over before the window
        alert("Across", "2026-11-30T00:30:00Z", "2026-11-30T01:20:00.5Z", service="a"),  # resolved inside
        alert("Inside", "2026-11-30T01:30:00Z", "2026-11-30T02:00:00.123456789Z", job="b"),
        alert("Firing", "2026-11-30T02:10:00Z", "2026-11-30T02:35:00Z", service="c"),  # endsAt after NOW
        alert("After", "2026-11-30T03:00:00.001Z", "2026-11-30T03:05:00Z", service="a"),
        {"labels": {"alertname": "NoStart"}, "startsAt": "not a time"},
    ]
    events = alerts_to_events(alerts, WINDOW, now=NOW)
    assert events.rows() == [
        (datetime(2026, 11, 30, 0, 30, tzinfo=UTC), "alert", "a", None, "Across firing: Across summary"),
        (datetime(2026, 11, 30, 1, 20, 0, 500000, tzinfo=UTC), "alert", "a", None, "Across resolved"),
        (datetime(2026, 11, 30, 1, 30, tzinfo=UTC), "alert", "b", None, "Inside firing: Inside summary"),
        (datetime(2026, 11, 30, 2, 0, 0, 123000, tzinfo=UTC), "alert", "b", None, "Inside resolved"),
        (datetime(2026, 11, 30, 2, 10, tzinfo=UTC), "alert", "c", None, "Firing firing: Firing summary"),
    ]
    assert alerts_to_events(alerts, WINDOW, now=NOW, service="b")["detail"].to_list() == [
        "Inside firing: Inside summary",
        "Inside resolved",
    ]


def test_untrusted_text_is_kept_verbatim():
    hostile = alert("X</td><script>", "2026-11-30T01:00:00Z", "2026-11-30T05:00:00Z", service='s\n"q"')
    hostile["annotations"] = {"summary": "{{ 7*7 }} <img src=x onerror=alert(1)>"}
    events = alerts_to_events([hostile], WINDOW, now=NOW)
    assert events.rows() == [
        (
            datetime(2026, 11, 30, 1, 0, tzinfo=UTC),
            "alert",
            's\n"q"',
            None,
            "X</td><script> firing: {{ 7*7 }} <img src=x onerror=alert(1)>",
        )
    ]


# -- faults, with a fake session -----------------------------------------------------------------


def response(status: int, body: bytes | str | list | dict) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    if isinstance(body, list | dict):
        body = json.dumps(body)
    resp._content = body.encode() if isinstance(body, str) else body
    resp.url = ALERTS
    return resp


class FakeSession(requests.Session):
    def __init__(self, answers: list[object]) -> None:
        super().__init__()
        self.answers = list(answers)
        self.calls: list[tuple[str, list]] = []

    def get(self, url, params=None, timeout=None, **kwargs):  # type: ignore[override]
        self.calls.append((url, list(params or [])))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def client(answers: list[object], **kwargs) -> tuple[AlertmanagerClient, FakeSession, list[float]]:
    session = FakeSession(answers)
    sleeps: list[float] = []
    am = AlertmanagerClient(HttpConfig(URL, **kwargs), session=session, sleep=sleeps.append)
    return am, session, sleeps


ONE = [alert("TTFTHigh", "2026-11-30T01:10:00Z", "2026-11-30T05:00:00Z", service="vllm-chat")]


def test_503_twice_then_200():
    am, session, sleeps = client(
        [response(503, "busy"), response(503, "busy"), response(200, ONE)], backoff_s=0.5
    )
    events = am.timeline_events(WINDOW)
    assert events["detail"].to_list() == ["TTFTHigh firing: TTFTHigh summary"]
    assert sleeps == [0.5, 1.0]  # injected: no real waiting
    assert len(session.calls) == 3
    url, params = session.calls[0]
    assert url == ALERTS
    assert params == [
        ("active", "true"),
        ("silenced", "true"),
        ("inhibited", "true"),
        ("unprocessed", "true"),
    ]


def test_500_forever_names_url_status_and_attempts():
    am, session, sleeps = client([response(500, "oops")] * 3, retries=2)
    with pytest.raises(SourceError) as info:
        am.alerts()
    assert str(info.value) == f"{ALERTS}: HTTP 500 after 3 attempts"
    assert info.value.status == 500 and info.value.url == ALERTS
    assert sleeps == [0.5, 1.0]


def test_malformed_json():
    am, _, _ = client([response(200, '[{"labels": {"alertname": "X"}')])
    with pytest.raises(SourceError, match=r"HTTP 200: answer is not JSON"):
        am.alerts()
    am, _, _ = client([response(200, {"status": "success"})])
    with pytest.raises(SourceError, match="want a JSON list of alerts"):
        am.alerts()


def test_401_and_other_4xx_are_not_retried():
    am, session, _ = client([response(401, "unauthorized")])
    with pytest.raises(SourceError, match=r"HTTP 401: not authorised \(check the token reference\)"):
        am.alerts()
    assert len(session.calls) == 1
    am, session, _ = client([response(400, "bad matcher")])
    with pytest.raises(SourceError, match=r"HTTP 400: 'bad matcher'"):
        am.alerts(filters=["bad matcher"])
    assert session.calls[0][1][-1] == ("filter", "bad matcher")


def test_connection_refused_and_timeout():
    am, _, sleeps = client([requests.ConnectionError("[Errno 111] Connection refused")] * 4)
    with pytest.raises(
        SourceError, match=r"^http://am.test:9093/api/v2/alerts: cannot connect .* after 4 attempts$"
    ):
        am.alerts()
    assert sleeps == [0.5, 1.0, 2.0]
    am, _, _ = client([requests.Timeout()] * 2, retries=1, timeout_s=2.5)
    with pytest.raises(SourceError, match=r"timed out after 2.5 s after 2 attempts"):
        am.alerts()


def test_connection_refused_by_a_real_closed_port():
    am = AlertmanagerClient(
        HttpConfig(f"http://127.0.0.1:{free_port()}", retries=1, timeout_s=2), sleep=lambda s: None
    )
    with pytest.raises(SourceError, match=r"cannot connect \(ConnectionError\) after 2 attempts"):
        am.alerts()


def test_credentials_in_the_url_are_not_shown():
    session = FakeSession([response(500, "")])
    am = AlertmanagerClient(HttpConfig("https://admin:hunter2hunter2@am.test/", retries=0), session=session)
    with pytest.raises(SourceError) as info:
        am.alerts()
    assert "hunter2" not in str(info.value) and "hunter2" not in repr(am)
    assert str(info.value).startswith("https://am.test/api/v2/alerts: HTTP 500")


def test_canary_token_never_in_errors_or_repr(monkeypatch):
    monkeypatch.setenv("PERFKIT_TEST_AM_TOKEN", CANARY)
    auth = Auth(token_env="PERFKIT_TEST_AM_TOKEN")
    faults = [
        [response(401, f"invalid bearer token {CANARY}")],
        [response(403, CANARY)],
        [response(400, f"echo: Authorization: Bearer {CANARY}")],
        [response(400, f"token={CANARY}")],
        [response(200, f"<html>{CANARY}")],
        [response(502, CANARY)] * 2,
        [requests.ConnectionError(f"refused {CANARY}")] * 2,
        [requests.Timeout(CANARY)] * 2,
        [requests.exceptions.InvalidURL(CANARY)],
    ]
    for answers in faults:
        am, session, _ = client(answers, auth=auth, retries=1)
        assert session.headers["Authorization"] == f"Bearer {CANARY}"  # the token is sent...
        with pytest.raises(SourceError) as info:
            am.timeline_events(WINDOW)
        err = info.value
        for text in (str(err), repr(err), repr(err.args), str(err.url), repr(am)):  # ...and never shown
            assert CANARY not in text, text
        assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_parse_time():
    assert parse_time("2026-11-30T01:47:25.877954772Z") == datetime(
        2026, 11, 30, 1, 47, 25, 877954, tzinfo=UTC
    )
    assert parse_time("2026-11-30T02:47:25+01:00") == datetime(2026, 11, 30, 1, 47, 25, tzinfo=UTC)
    assert parse_time("0001-01-01T00:00:00Z") is None  # Go's zero time: no end
    assert parse_time("") is None and parse_time(None) is None and parse_time("soon") is None
