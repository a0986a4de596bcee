"""Live-source wiring: release history from every configured kind; failures named, never fatal."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from perfkit.core.frames import Window
from perfkit.engine.local import LocalEngine
from perfkit.errors import ConfigError
from perfkit.sources.live import LiveConfig, _releases, live_incident, parse_since
from perfkit.sources.openmetrics import parse_text

T0 = 1_794_000_000  # 2026-11-11T21:20:00Z


def test_release_metric_and_a_bad_deploys_file(tmp_path):
    lines = ["# TYPE build_info gauge"]
    for i in range(40):
        version = "v1" if i < 20 else "v2"
        lines.append(f'build_info{{version="{version}"}} 1 {T0 + 60 * i}')
    engine = LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))
    bad = tmp_path / "deploys.yaml"
    bad.write_text("- ts: [not a time\n")
    missing: list[str] = []
    span = Window(datetime.fromtimestamp(T0, UTC), datetime.fromtimestamp(T0 + 39 * 60, UTC))
    frames = _releases(
        LiveConfig("http://unused", release_metric="build_info:version", deploys=str(bad)),
        engine,
        span,
        "svc",
        missing,
    )
    rows = [r for f in frames for r in f.iter_rows(named=True)]
    assert [(r["kind"], r["version"], r["ts"]) for r in rows] == [
        ("deploy", "v2", datetime.fromtimestamp(T0 + 20 * 60, UTC))
    ]
    assert len(missing) == 1 and missing[0].startswith(f"deploys: {bad}")


def test_no_release_source_is_named_as_missing():
    missing: list[str] = []
    assert (
        _releases(
            LiveConfig("http://unused"),
            None,
            Window(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)),
            "",
            missing,
        )
        == []
    )
    assert missing and "no deploy history" in missing[0]


def test_live_incident_windows():
    now = datetime(2026, 11, 30, 3, 0, 7, tzinfo=UTC)
    assert parse_since("90m", now) == (datetime(2026, 11, 30, 1, 30, 7, tzinfo=UTC), now)
    with pytest.raises(ConfigError, match="since: expected a duration"):
        parse_since("yesterday")
    inc = live_incident(start="2026-11-30T01:00:00Z", end="2026-11-30T02:00:00Z", service="chat")
    assert inc.baseline is not None and inc.baseline.end <= inc.window.start
    assert inc.id == "INC-20261130-0100-chat"
    with pytest.raises(ConfigError, match="window: ends"):
        live_incident(start="2026-11-30T02:00:00Z", end="2026-11-30T01:00:00Z")


def test_incident_params_from_runbook_parameters_and_back():
    from perfkit.sources.live import IncidentParams

    given = {
        "prometheus_url": "http://prom:9090",
        "prometheus_token_env": "PROM_TOKEN",
        "timeout_s": 12.5,
        "tls_ca_file": "/etc/ca.pem",
        "alertmanager_url": "http://am:9093",
        "logs": "a.log, ,logs/*.gz",
        "start": "2026-11-30T01:00:00Z",
        "end": "2026-11-30T02:00:00Z",
        "service": "chat",
        "slo": {"ttft_p95_s": 2.0, "tpot_p95_s": 0.0},
        "gpu_count": 8,
        "bundle": "",  # not an incident parameter: ignored
        "unknown": 1,
    }
    params = IncidentParams.from_mapping(given)
    assert params.logs == ("a.log", "logs/*.gz") and params.slo == {"ttft_p95_s": 2.0, "tpot_p95_s": 0.0}
    assert params.runbook_parameters() == {
        "prometheus_url": "http://prom:9090",
        "prometheus_token_env": "PROM_TOKEN",
        "timeout_s": 12.5,
        "tls_ca_file": "/etc/ca.pem",
        "alertmanager_url": "http://am:9093",
        "logs": "a.log,logs/*.gz",
        "start": "2026-11-30T01:00:00Z",
        "end": "2026-11-30T02:00:00Z",
        "service": "chat",
        "slo_ttft_p95_s": 2.0,
        "gpu_count": 8,
    }
    # back again: the same parameters (the SLO left at 0 is "not set", so not given back)
    assert IncidentParams.from_mapping(params.runbook_parameters()) == replace(
        params, slo={"ttft_p95_s": 2.0}
    )
    assert IncidentParams().runbook_parameters() == {}  # defaults are not "set"

    cfg = params.live_config()
    assert (cfg.prometheus_url, cfg.token_env, cfg.ca_file, cfg.timeout_s, cfg.logs) == (
        "http://prom:9090",
        "PROM_TOKEN",
        "/etc/ca.pem",
        12.5,
        ["a.log", "logs/*.gz"],
    )
    inc = params.incident()
    assert inc.service == "chat" and inc.slo == {"ttft_p95_s": 2.0} and inc.hardware.count == 8


def test_live_config_builds_one_http_config_per_server():
    from perfkit.sources.http import Auth, HttpConfig

    cfg = LiveConfig(
        "http://prom:9090",
        token_env="PROM_TOKEN",
        basic_auth_user="ops",
        password_env="PROM_PASSWORD",
        ca_file="/etc/ca.pem",
        alertmanager_url="http://am:9093",
        timeout_s=7.0,
    )
    auth = Auth(token_env="PROM_TOKEN", username="ops", password_env="PROM_PASSWORD")
    assert cfg.prometheus_http() == HttpConfig(
        "http://prom:9090", auth=auth, ca_file="/etc/ca.pem", timeout_s=7.0
    )
    assert cfg.alertmanager_http() == HttpConfig(
        "http://am:9093", auth=auth, ca_file="/etc/ca.pem", timeout_s=7.0
    )
    insecure = LiveConfig("http://prom:9090", insecure=True).prometheus_http()
    assert insecure.verify is False and insecure.auth == Auth() and insecure.timeout_s == 30.0


def test_http_config_checks_timeouts_and_hides_userinfo():
    from perfkit.sources.http import HttpConfig

    with pytest.raises(ConfigError, match="timeout_s must be positive"):
        HttpConfig("http://prom:9090", timeout_s=0)
    with pytest.raises(ConfigError, match="total_timeout_s must be positive"):
        HttpConfig("http://prom:9090", total_timeout_s=-1)
    assert "hunter2" not in repr(HttpConfig("https://admin:hunter2hunter2@prom.test/"))
