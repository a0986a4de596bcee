"""What an incident is (id, service, window, baseline, SLOs, hardware), and checking one parsed
from ``incident.yaml`` (reading the file is :mod:`perfkit.sources.incident_file`'s job)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from perfkit.core.frames import Window, utc
from perfkit.core.scope import Scope, parse_scope
from perfkit.errors import BundleError, ConfigError

SLO_KEYS = ("ttft_p95_s", "tpot_p95_s", "itl_p95_s", "e2e_p99_s", "error_rate_frac")


@dataclass
class Hardware:
    gpu: str = "unknown"
    count: int = 1
    usd_per_gpu_hour: float | None = None
    count_known: bool = True  # False: ``count`` is the default 1, not given (no tensor-parallel size)


@dataclass
class Incident:
    id: str
    title: str
    service: str
    window: Window
    baseline: Window | None = None
    model: str | None = None
    slo: dict[str, float] = field(default_factory=dict)
    hardware: Hardware = field(default_factory=Hardware)
    scope: str = ""  # PromQL label matchers of the affected workload (perfkit.core.scope)
    hosts: str = ""  # the workload's hosts, comma-separated, when the host join cannot find them

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "service": self.service,
            "model": self.model,
            "window": self.window.as_dict(),
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "slo": dict(self.slo),
            "hardware": self.hardware.__dict__,
            "scope": self.scope or None,
            "hosts": self.hosts or None,
        }


MAX_WINDOW_DAYS = 90
"""The longest window perfkit reads: an incident and its baseline span hours, a training job's
scaling comparison days; Prometheus' default retention is 15 days. A longer window (an edited
``incident.yaml`` reaching back centuries) would ask every reader for a range it cannot hold: a
1,000-year window had ``scaling`` use 22 GB and ``triage`` 4 GB before failing."""


def make_window(start: Any, end: Any, *, what: str = "window") -> Window:
    """A validated window: both ends parse, end after start, at most :data:`MAX_WINDOW_DAYS` long
    (else ConfigError)."""
    if start in (None, "") or end in (None, ""):
        raise ConfigError(f"{what}: start and end are both required")
    try:
        a, b = utc(start), utc(end)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}: cannot read time ({exc})") from None
    if b <= a:
        raise ConfigError(
            f"{what}: ends ({b:%Y-%m-%dT%H:%M:%SZ}) before or when it starts ({a:%Y-%m-%dT%H:%M:%SZ})"
        )
    if (b - a).total_seconds() > MAX_WINDOW_DAYS * 86400:
        raise ConfigError(
            f"{what}: {a:%Y-%m-%dT%H:%M:%SZ} to {b:%Y-%m-%dT%H:%M:%SZ} is longer than {MAX_WINDOW_DAYS} days"
        )
    return Window(a, b)


def window_arg(text: str, what: str) -> Window | None:
    """A command line's ``START/END`` (UTC ISO 8601) as a window; None when ``text`` is empty."""
    if not text:
        return None
    start, sep, end = text.partition("/")
    if not sep:
        raise ConfigError(f"{what}: expected START/END (UTC ISO 8601), got {text[:80]!r}")
    return make_window(start.strip(), end.strip(), what=what)


def default_baseline(window: Window) -> Window:
    """Same length as the window, ending one window-length before it starts (with a 5-min gap)."""
    length = window.end - window.start
    end = window.start - timedelta(minutes=5)
    return Window(end - length, end)


def parse_incident(data: Any, *, path: str = "incident.yaml") -> Incident:
    if not isinstance(data, dict):
        raise BundleError("expected a mapping at the top level", path=path)
    try:
        win = data["window"]
        window = make_window(win.get("start"), win.get("end"), what="window")
    except (KeyError, AttributeError):
        raise BundleError("needs window: {start, end}", path=path) from None
    except ConfigError as exc:
        raise BundleError(str(exc), path=path) from None
    baseline = None
    if data.get("baseline"):
        try:
            b = data["baseline"]
            baseline = make_window(b.get("start"), b.get("end"), what="baseline")
        except (AttributeError, ConfigError) as exc:
            raise BundleError(str(exc), path=path) from None
    slo = {}
    for key, value in (data.get("slo") or {}).items():
        try:
            slo[str(key)] = float(value)
        except (TypeError, ValueError):
            raise BundleError(f"slo.{key} must be a number, got {value!r}", path=path) from None
    hw = data.get("hardware") or {}
    hardware = Hardware(
        gpu=str(hw.get("gpu", "unknown")),
        count=int(hw.get("count", 1) or 1),
        count_known=bool(hw.get("count")),
        usd_per_gpu_hour=float(hw["usd_per_gpu_hour"]) if hw.get("usd_per_gpu_hour") is not None else None,
    )
    scope, hosts = str(data.get("scope") or ""), data.get("hosts") or ""
    if isinstance(hosts, list):
        hosts = ",".join(str(h) for h in hosts)
    try:
        parse_scope(scope, str(hosts))
    except ConfigError as exc:
        raise BundleError(str(exc), path=path) from None
    return Incident(
        id=str(data.get("id") or "INC-unknown"),
        title=str(data.get("title") or "Untitled incident"),
        service=str(data.get("service") or "unknown"),
        model=data.get("model"),
        window=window,
        baseline=baseline,
        slo=slo,
        hardware=hardware,
        scope=scope,
        hosts=str(hosts),
    )


def with_overrides(
    incident: Incident,
    *,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
    baseline_start: datetime | str | None = None,
    baseline_end: datetime | str | None = None,
    scope: str | None = None,
    hosts: str | None = None,
) -> Incident:
    """A copy with the window/baseline (and scope) replaced by runbook parameters where given."""
    window = incident.window
    if start or end:
        window = make_window(start or window.start, end or window.end, what="window")
    baseline = incident.baseline
    if baseline_start or baseline_end:
        base = baseline or default_baseline(window)
        baseline = make_window(baseline_start or base.start, baseline_end or base.end, what="baseline")
    return Incident(
        incident.id,
        incident.title,
        incident.service,
        window,
        baseline,
        incident.model,
        dict(incident.slo),
        incident.hardware,
        scope or incident.scope,
        hosts or incident.hosts,
    )


def incident_scope(incident: Incident) -> Scope:
    """The incident's workload scope (empty: everything the evidence holds)."""
    return parse_scope(incident.scope, incident.hosts)
