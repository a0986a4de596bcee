"""Live-source wiring: release history from every configured kind; failures named, never fatal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from perfkit.errors import ConfigError
from perfkit.frames import Window
from perfkit.query.local import LocalEngine
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
