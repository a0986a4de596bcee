from __future__ import annotations

import pytest

from perfkit.core.incident import make_window, with_overrides
from perfkit.errors import BundleError, ConfigError
from perfkit.sources.incident_file import read_incident


def write(tmp_path, text):
    p = tmp_path / "incident.yaml"
    p.write_text(text)
    return p


def test_inverted_and_empty_windows(tmp_path):
    p = write(tmp_path, "window: {start: '2026-11-12T03:00:00Z', end: '2026-11-12T02:00:00Z'}\n")
    with pytest.raises(BundleError, match=r"incident.yaml: window: ends \(2026-11-12T02:00:00Z\) before"):
        read_incident(p)
    p = write(tmp_path, "window: {start: '2026-11-12T03:00:00Z', end: '2026-11-12T03:00:00Z'}\n")
    with pytest.raises(BundleError, match="before or when it starts"):
        read_incident(p)
    with pytest.raises(ConfigError, match="start and end are both required"):
        make_window("", "2026-11-12T03:00:00Z")


def test_yaml_error_names_the_line(tmp_path):
    p = write(tmp_path, "id: x\nwindow: {start: [\n")
    with pytest.raises(BundleError) as err:
        read_incident(p)
    assert err.value.path == str(p) and err.value.line is not None


def test_overrides_keep_utc_and_validate(tmp_path):
    p = write(
        tmp_path,
        "window: {start: '2026-11-12T01:00:00Z', end: '2026-11-12T02:00:00Z'}\nslo: {ttft_p95_s: 1.5}\n",
    )
    inc = with_overrides(read_incident(p), start="2026-11-12T01:30:00+01:00", end=None)
    assert inc.window.start.isoformat() == "2026-11-12T00:30:00+00:00"
    assert inc.slo == {"ttft_p95_s": 1.5}
    with pytest.raises(ConfigError):
        with_overrides(inc, start="2026-11-12T05:00:00Z")
