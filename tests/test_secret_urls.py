"""Credentials in URLs (``http://user:password@host``): refused on input, never recorded.

Issue 7, row 3: a password in ``--prometheus`` reached the executed notebook, the postmortem and
the captured bundle's incident.yaml.
"""

from __future__ import annotations

import base64
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest
import yaml

from perfkit.core.frames import TS_DTYPE
from perfkit.core.scrub import known_secrets, scrub, secret_values
from perfkit.core.secrets import (
    check_parameters,
    check_url,
    redact_parameters,
    redact_text,
    strip_userinfo,
    url_userinfo_error,
)
from perfkit.errors import SecretLeak
from perfkit.sources.capture import capture
from perfkit.sources.live import LiveConfig, live_incident, open_live

PASSWORD = "hunter2pass"
URL = f"http://admin:{PASSWORD}@prom.example:9090"


@pytest.mark.parametrize(
    "name",
    ["prometheus_url", "alertmanager_url"],
)
def test_check_parameters_refuses_a_url_with_a_password(name):
    with pytest.raises(SecretLeak) as err:
        check_parameters({name: URL})
    message = str(err.value)
    assert name in message and PASSWORD not in message and "admin" not in message
    assert "--basic-auth-user USER --password-env VAR" in message
    assert "prometheus_basic_auth_user" in message and "prometheus_password_env" in message
    assert "'http://prom.example:9090'" in message  # what to give instead


@pytest.mark.parametrize(
    "value",
    [
        "http://glc_eyJvIjoiMTIzNCJ9@prom.example:9090",  # user only: tokens are put there too
        "https://admin:p%40ss%3Aword@prom.example/prometheus",  # percent-encoded password
        "http://admin:pa/ss@prom.example:9090",  # unescaped '/': urlsplit sees port 'pa'
        "http://admin:p@ss@prom.example:9090",  # unescaped '@'
        "admin:p@ss@prom.example:9090",  # no scheme
        "//admin:p@ss@prom.example:9090",
    ],
)
def test_any_credentials_in_a_url_parameter_are_refused(value):
    with pytest.raises(SecretLeak) as err:
        check_parameters({"prometheus_url": value})
    assert "prometheus_url" in str(err.value)
    for part in ("glc_", "p%40ss", "pa/ss", "p@ss", "admin"):
        assert part not in str(err.value)


def test_a_url_with_credentials_in_any_parameter_is_refused():
    with pytest.raises(SecretLeak, match="'deploys'"):
        check_parameters({"deploys": f"https://ci:{PASSWORD}@deploys.example/history.json"})
    with pytest.raises(SecretLeak, match="'sources'"):
        check_parameters({"sources": [{"url": f"http://u:{PASSWORD}@h"}]})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("prometheus_url", "http://127.0.0.1:9090"),
        ("prometheus_url", "https://prom.example/prometheus/"),
        ("prometheus_url", "http://[::1]:9090"),
        ("prometheus_url", "https://prom.example/api?match=user@example.com"),  # after '?': not userinfo
        ("bundle", "data/scenarios/incident@2026"),  # not a URL
        ("title", "paged by oncall@example.com, see https://wiki.example/runbooks/x"),
    ],
)
def test_urls_without_credentials_pass(name, value):
    check_parameters({name: value})
    assert url_userinfo_error(name, value, strict=not name.endswith("_url")) is None


def test_basic_auth_parameters_are_references_not_secrets():
    params = {"prometheus_basic_auth_user": "admin", "prometheus_password_env": "PROM_PASSWORD"}
    check_parameters(params)
    assert redact_parameters(params) == params  # both shown in the postmortem


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        (URL, "http://prom.example:9090"),
        (f"{URL}/api/v1/query?q=a@b", "http://prom.example:9090/api/v1/query?q=a@b"),
        ("http://admin:pa/ss@prom:9090/x", "http://prom:9090/x"),
        ("http://admin:p@ss@prom:9090", "http://prom:9090"),
        ("https://tok3n@prom", "https://prom"),
        ("http://prom:9090", "http://prom:9090"),
        ("not a url", "not a url"),
        (f"cannot reach {URL}: refused", "cannot reach http://prom.example:9090: refused"),
    ],
)
def test_strip_userinfo(url, stripped):
    assert strip_userinfo(url) == stripped


def test_shown_parameters_and_messages_hide_url_credentials():
    assert redact_parameters({"prometheus_url": URL}) == {
        "prometheus_url": "http://[redacted]@prom.example:9090"
    }
    assert redact_text(f"GET {URL}/api failed") == "GET http://[redacted]@prom.example:9090/api failed"
    assert PASSWORD in secret_values({"prometheus_url": URL})  # the report scrubs it too


def test_known_secrets_cover_a_parameter_url_password_in_every_spelling():
    tricky = 'pa"ss\\w@rd:1'
    url = f"https://admin:{tricky.replace('@', '%40').replace(':', '%3A')}@prom"
    secrets = known_secrets({"prometheus_url": url}, environ={})
    doc = {
        "source": [f"prometheus_url = {json.dumps(url)}\n"],
        "printed": [repr({"password": tricky}), "password=" + tricky, f"<td>{url}</td>"],
    }
    clean, hits = scrub(doc, secrets)
    strings = [*clean["source"], *clean["printed"]]
    assert hits >= 4
    for text in strings:
        assert 'pa"ss' not in text and "w@rd" not in text and "w%40rd" not in text, text


def test_check_url_is_the_same_refusal():
    with pytest.raises(SecretLeak, match="'alertmanager_url'"):
        check_url("alertmanager_url", URL)
    check_url("alertmanager_url", "http://am:9093")


# -- live sources ----------------------------------------------------------------------------------


def incident():
    return live_incident(start="2026-11-30T01:00:00Z", end="2026-11-30T02:00:00Z", service="chat")


def test_open_live_refuses_url_credentials_before_any_request():
    # port 9 (discard): a request would fail with a connection error, not a SecretLeak
    with pytest.raises(SecretLeak) as err:
        open_live(LiveConfig(f"http://admin:{PASSWORD}@127.0.0.1:9"), incident())
    assert "prometheus_url" in str(err.value) and PASSWORD not in str(err.value)
    with pytest.raises(SecretLeak, match="alertmanager_url"):
        open_live(LiveConfig("http://127.0.0.1:9", alertmanager_url=URL), incident())
    token = "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3"
    with pytest.raises(SecretLeak) as err:
        open_live(LiveConfig("http://127.0.0.1:9", token_env=token), incident())
    assert token not in str(err.value) and token[:3] not in str(err.value)


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append((self.path.split("?")[0], self.headers.get("Authorization", "")))
        if self.path.startswith("/api/v1/label/__name__/values"):
            body = {"status": "success", "data": ["up"]}
        elif self.path.startswith("/api/v2/alerts"):
            body = []
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    finally:
        server.shutdown()
        server.server_close()


def test_open_live_sends_basic_auth_from_references_to_both_servers(recorder, monkeypatch):
    url, seen = recorder
    monkeypatch.setenv("PERFKIT_TEST_PROM_PASSWORD", PASSWORD)
    cfg = LiveConfig(
        url,
        alertmanager_url=url,
        basic_auth_user="admin",
        password_env="PERFKIT_TEST_PROM_PASSWORD",
        timeout_s=7.5,
    )
    ev = open_live(cfg, incident())
    expected = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    assert ("/api/v1/label/__name__/values", expected) in seen
    assert ("/api/v2/alerts", expected) in seen
    assert not [m for m in ev.missing if m.startswith("alerts")]
    assert ev.engine.client.timeout_s == 7.5
    assert PASSWORD not in repr(ev.engine.client)
    assert cfg.as_parameters() == {
        "prometheus_url": url,
        "prometheus_basic_auth_user": "admin",
        "prometheus_password_env": "PERFKIT_TEST_PROM_PASSWORD",
        "alertmanager_url": url,
    }


# -- capture ---------------------------------------------------------------------------------------


class _Client:
    url = URL  # a client built by hand with credentials in its URL


class _Engine:
    client = _Client()

    def metric_names(self):
        return ["vllm:num_requests_running"]

    def raw(self, name, start, end):
        ts = [int(start.timestamp() * 1000) + 60_000 * i for i in range(3)]
        return pl.DataFrame({"ts": ts, "value": [1.0, 2.0, 3.0], "instance": ["a", "a", "a"]})


def test_capture_records_no_url_credentials(tmp_path: Path):
    events = pl.DataFrame(
        {
            "ts": [datetime(2026, 11, 30, 1, 10, tzinfo=UTC)],
            "kind": ["deploy"],
            "service": ["chat"],
            "version": ["v2"],
            "detail": [f"rolled out from {URL}/builds/7"],
        },
        schema={"ts": TS_DTYPE, "kind": pl.Utf8, "service": pl.Utf8, "version": pl.Utf8, "detail": pl.Utf8},
    )
    out = tmp_path / "bundle"
    capture(_Engine(), incident(), out, events=events)
    written = {p.name: p.read_text() for p in out.rglob("*") if p.is_file()}
    assert {"incident.yaml", "events.csv", "captured.om"} <= set(written)
    for name, text in written.items():
        assert PASSWORD not in text and "admin:" not in text, name
    doc = yaml.safe_load(written["incident.yaml"])
    assert doc["captured"]["from"] == "http://prom.example:9090"
    assert "http://prom.example:9090/builds/7" in written["events.csv"]


# -- passwords with '#' or '?', and credentials in the query string -------------------------------

HASH_PASSWORD = "S3cr3t#Pw"


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        (f"http://admin:{HASH_PASSWORD}@127.0.0.1:9", "http://127.0.0.1:9"),
        ("http://admin:S3cr3t?Pw@127.0.0.1:9/api", "http://127.0.0.1:9/api"),
        ("http://admin:123#Pw@prom:9090/api?q=a@b", "http://prom:9090/api?q=a@b"),
        ("https://admin:p@ss#w@prom.example", "https://prom.example"),
        (
            "https://prom.example/api?match=user@example.com",
            "https://prom.example/api?match=user@example.com",
        ),
    ],
)
def test_the_userinfo_of_a_url_ends_at_its_last_at_sign(url, stripped):
    assert strip_userinfo(url) == stripped


@pytest.mark.parametrize(
    ("url", "password", "host"),
    [
        (f"http://admin:{HASH_PASSWORD}@127.0.0.1:9", HASH_PASSWORD, "127.0.0.1:9"),
        ("http://admin:S3cr3t?Pw@127.0.0.1:9", "S3cr3t?Pw", "127.0.0.1:9"),
        ("admin:S3cr3t#Pw@127.0.0.1:9", "S3cr3t#Pw", "127.0.0.1:9"),
        ("http://admin:123#Pw@prom:9090", "123#Pw", "prom:9090"),
    ],
)
def test_a_password_with_hash_or_question_mark_is_refused_and_scrubbed(url, password, host):
    with pytest.raises(SecretLeak) as err:
        check_parameters({"prometheus_url": url})
    message = str(err.value)
    assert "prometheus_url" in message and host in message
    for part in (password, "Pw", "admin"):
        assert part not in message, part
    if "://" not in url:
        return
    assert redact_text(f"GET {url}/api") == f"GET http://[redacted]@{host}/api"
    clean, hits = scrub(
        {"printed": f"url={url} password={password}"}, known_secrets({"prometheus_url": url}, {})
    )
    assert hits and password not in clean["printed"] and "Pw" not in clean["printed"]


ENV_URLS = {
    "DATABASE_URL": "postgres://app:Pg#Passw0rd-xyz@db/prod",
    "CACHE_URL": "redis://:Rd?S3cret-abc@cache:6379/0",
    "WEBHOOK_URL": "https://hooks.example/notify?channel=ops&Token=Wh00kT0ken-42x",
    "EXPORT_URL": "https://s3.example/bucket/f.csv?X-Id=1&sig=Zk29Xq81Lm47",
}


def test_env_urls_with_hash_or_query_credentials_are_scrubbed():
    secrets = known_secrets({}, ENV_URLS)
    printed = "\n".join(
        [repr(dict(ENV_URLS)), *(f"{k}={v}" for k, v in ENV_URLS.items()), json.dumps(ENV_URLS)]
    )
    clean, hits = scrub({"text": printed}, secrets)
    assert hits
    for leaked in (
        "Pg#Passw0rd-xyz",
        "Passw0rd",
        "Rd?S3cret-abc",
        "S3cret",
        "Wh00kT0ken-42x",
        "Zk29Xq81Lm47",
    ):
        assert leaked not in clean["text"], leaked


@pytest.mark.parametrize(
    "query",
    [
        "password=Pa55w0rd-xyz",
        "token=Tk9xQ2mZpL",
        "ACCESS_TOKEN=Tk9xQ2mZpL",
        "api_key=Tk9xQ2mZpL",
        "apikey=Tk9xQ2mZpL",
        "Key=Tk9xQ2mZpL",
        "secret=Tk9xQ2mZpL",
        "auth=Tk9xQ2mZpL",
    ],
)
def test_query_string_credentials_in_a_url_parameter_are_refused(query):
    value = query.split("=", 1)[1]
    for url in (f"http://prom:9090/api/v1?{query}", f"http://prom:9090/?step=30&{query}&x=1"):
        with pytest.raises(SecretLeak) as err:
            check_parameters({"prometheus_url": url})
        message = str(err.value)
        assert "prometheus_url" in message and "query string" in message
        assert value not in message and value[:4] not in message
        assert url_userinfo_error("alertmanager_url", url)
        with pytest.raises(SecretLeak):
            check_url("alertmanager_url", url)


def test_harmless_query_strings_pass():
    for url in ("http://prom:9090/api/v1/query?query=up&step=30", "http://prom:9090/graph?monkey=1&tokens=3"):
        assert check_parameters({"prometheus_url": url}) is None  # accepted: no SecretLeak
        assert not url_userinfo_error("prometheus_url", url)
        assert check_url("prometheus_url", url) is None
        # the same URL with a credential in its query string is refused: the check did look at it
        with pytest.raises(SecretLeak):
            check_parameters({"prometheus_url": f"{url}&token=Tk9xQ2mZpL"})
