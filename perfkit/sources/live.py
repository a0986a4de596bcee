"""Open an incident on live sources: a Prometheus-compatible server, Alertmanager, log files, deploy history.

Used by the runbooks (``prometheus_url`` parameter), ``perfkit triage --prometheus`` and
``perfkit capture``. Each optional source that fails is recorded as missing evidence with the
URL and status; only the metrics server is required.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from perfkit.core.frames import EVENTS_SCHEMA, LOG_SCHEMA, STATS_SCHEMA, Window
from perfkit.core.incident import Hardware, Incident, default_baseline, incident_scope, make_window
from perfkit.engine.scope import ScopedEngine
from perfkit.errors import ConfigError, PerfkitError, SecretLeak

if TYPE_CHECKING:
    from perfkit.sources.http import Auth, HttpConfig

DEFAULT_TIMEOUT_S = 30.0
"""Seconds one HTTP request to a live source may take (the runbooks' ``timeout_s``, ``--timeout``)."""

_LIVE_PARAMETERS = {
    "prometheus_url": "prometheus_url",
    "prometheus_token_env": "token_env",
    "prometheus_token_file": "token_file",
    "prometheus_basic_auth_user": "basic_auth_user",
    "prometheus_password_env": "password_env",
    "tls_ca_file": "ca_file",
    "alertmanager_url": "alertmanager_url",
    "deploys": "deploys",
    "git_repo": "git_repo",
    "release_metric": "release_metric",
}
"""Runbook parameter name → :class:`LiveConfig` field, for the parameters that name a source or a
credential reference (what :meth:`LiveConfig.as_parameters` gives back)."""


@dataclass
class LiveConfig:
    """Where the live evidence is and how to reach it. Credentials are references only: the name of
    an env var or a file holding the token, a basic-auth user and the env var holding its password.
    A URL may not carry ``user:password@`` (:class:`~perfkit.errors.SecretLeak` from :func:`open_live`).
    The same credentials, TLS settings and timeout go to the metrics server and Alertmanager."""

    prometheus_url: str
    token_env: str = ""
    token_file: str = ""
    ca_file: str = ""
    insecure: bool = False
    alertmanager_url: str = ""
    logs: list[str] = field(default_factory=list)
    deploys: str = ""
    git_repo: str = ""  # a repository whose tags in the window are releases
    release_metric: str = ""  # "metric:label", e.g. "build_info:version": label changes are releases
    basic_auth_user: str = ""  # HTTP basic auth: the user (not a secret) ...
    password_env: str = ""  # ... and the env var holding the password
    timeout_s: float = DEFAULT_TIMEOUT_S  # per HTTP request

    def as_parameters(self) -> dict[str, Any]:
        """The runbook parameters this configuration stands for (those that are set), to pass to
        :func:`~perfkit.core.secrets.check_parameters` and :func:`~perfkit.core.secrets.parameter_warnings`."""
        params = {name: getattr(self, attr) for name, attr in _LIVE_PARAMETERS.items()}
        return {k: v for k, v in params.items() if v}

    def auth(self) -> Auth:
        """The credential references, as every server gets them."""
        from perfkit.sources.http import Auth

        return Auth(
            token_env=self.token_env or None,
            token_file=self.token_file or None,
            username=self.basic_auth_user or None,
            password_env=self.password_env or None,
        )

    def http(self, url: str) -> HttpConfig:
        """The HTTP settings for the server at ``url``: this configuration's credentials, TLS
        settings and timeout."""
        from perfkit.sources.http import HttpConfig

        return HttpConfig(
            url,
            auth=self.auth(),
            verify=not self.insecure,
            ca_file=self.ca_file or None,
            timeout_s=self.timeout_s,
        )

    def prometheus_http(self) -> HttpConfig:
        """The HTTP settings for the metrics server."""
        return self.http(self.prometheus_url)

    def alertmanager_http(self) -> HttpConfig:
        """The HTTP settings for Alertmanager (``alertmanager_url``)."""
        return self.http(self.alertmanager_url)

    def check(self) -> None:
        """Raise :class:`~perfkit.errors.SecretLeak` for a URL with credentials or an env var
        reference that is not a name, :class:`~perfkit.errors.ConfigError` for a token given twice."""
        from perfkit.core.secrets import check_url, env_reference_error

        check_url("prometheus_url", self.prometheus_url)
        if self.alertmanager_url:
            check_url("alertmanager_url", self.alertmanager_url)
        for name, value in (("token_env", self.token_env), ("password_env", self.password_env)):
            message = env_reference_error(name, value)
            if message:
                raise SecretLeak(message)
        if self.token_env and self.token_file:
            raise ConfigError("give the token as an env var reference or a file, not both")


@dataclass
class LiveEvidence:
    engine: object
    events: pl.DataFrame
    logs: pl.DataFrame
    stats: pl.DataFrame
    missing: list[str]
    log_files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # read, but less certain than it looks (Bundle.notes)


MAX_SINCE_S = 10 * 365 * 86400  # further back than any metrics store keeps


def parse_since(text: str, now: datetime | None = None) -> tuple[datetime, datetime]:
    """'2h', '90m', '1d' → (now - that, now)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text or "")
    if not m:
        raise ConfigError(f"since: expected a duration like 90m, 2h or 1d, got {text!r}")
    seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    if not 0 < seconds <= MAX_SINCE_S:
        raise ConfigError(f"since: {text.strip()!r} is not between 1 s and 10 years")
    end = (now or datetime.now(UTC)).replace(microsecond=0)
    return end - timedelta(seconds=seconds), end


def live_incident(
    *,
    start: str = "",
    end: str = "",
    since: str = "",
    baseline_start: str = "",
    baseline_end: str = "",
    service: str = "",
    slo: dict[str, float] | None = None,
    gpu_count: int = 0,
    usd_per_gpu_hour: float = 0.0,
    title: str = "",
    scope: str = "",
    hosts: str = "",
) -> Incident:
    """An incident described by parameters alone (no incident.yaml)."""
    if since and not (start or end):
        a, b = parse_since(since)
        window = make_window(a, b, what="--since")
    else:
        window = make_window(start, end, what="window")
    baseline = (
        make_window(baseline_start, baseline_end, what="baseline")
        if baseline_start or baseline_end
        else default_baseline(window)
    )
    name = service or "service"
    return Incident(
        id=f"INC-{window.start:%Y%m%d-%H%M}-{name}",
        title=title or f"Performance incident on {name}",
        service=name,
        window=window,
        baseline=baseline,
        slo={k: float(v) for k, v in (slo or {}).items() if v},
        hardware=Hardware(
            count=int(gpu_count) or 1,
            usd_per_gpu_hour=float(usd_per_gpu_hour) or None,
            count_known=bool(int(gpu_count)),
        ),
        scope=scope,
        hosts=hosts,
    )


@dataclass(frozen=True)
class IncidentParams:
    """Which incident, and where its evidence is: the runbook parameters the notebooks pass to
    :func:`perfkit.app.runbooks.context.open_incident`, which the CLI's live options stand for, and from
    which live mode is opened. Field names are the runbooks' parameter names.

    Credentials are references only (env var and file names). ``logs`` are paths or globs (the
    runbooks give them comma-separated); ``slo`` maps an SLO name to its bound (0: not set), the
    runbooks' ``slo_<name>`` parameters. Empty and zero values mean "not given".
    """

    prometheus_url: str = ""
    prometheus_token_env: str = ""
    prometheus_token_file: str = ""
    prometheus_basic_auth_user: str = ""
    prometheus_password_env: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    tls_ca_file: str = ""
    alertmanager_url: str = ""
    deploys: str = ""
    git_repo: str = ""
    release_metric: str = ""
    start: str = ""
    end: str = ""
    since: str = ""
    baseline_start: str = ""
    baseline_end: str = ""
    service: str = ""
    logs: tuple[str, ...] = ()  # after the window: the order `perfkit run` has always passed them in
    slo: Mapping[str, float] = field(default_factory=dict)
    gpu_count: int = 0
    usd_per_gpu_hour: float = 0.0
    scope: str = ""  # PromQL label matchers of the affected workload (perfkit.core.scope)
    hosts: str = ""  # its hosts, comma-separated, when the host join cannot find them

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The parameter names this object holds (its fields; the SLOs also as ``slo_<name>``)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> IncidentParams:
        """The incident parameters among ``params`` (runbook parameters by name; others are ignored).

        ``logs`` may be one comma-separated string (as in the runbooks) or a sequence of paths;
        ``slo`` a mapping, and ``slo_<name>`` parameters add to it; None counts as not given.
        """
        given: dict[str, Any] = {k: v for k, v in params.items() if k in cls.names() and v is not None}
        logs = given.get("logs", ())
        if isinstance(logs, str):
            given["logs"] = tuple(p for p in logs.split(",") if p.strip())
        else:
            given["logs"] = tuple(logs)
        slo = dict(given.get("slo") or {})
        for key, value in params.items():
            if key.startswith("slo_") and key[4:] not in slo:
                slo[key[4:]] = value
        given["slo"] = slo
        return cls(**given)

    def runbook_parameters(self) -> dict[str, Any]:
        """The parameters that are set, by the names the runbooks use (``logs`` comma-separated,
        each SLO as ``slo_<name>``): what to hand a runbook to open this incident."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "logs":
                if value:
                    out["logs"] = ",".join(value)
            elif f.name == "slo":
                out.update({f"slo_{k}": v for k, v in value.items() if v})
            elif value and value != f.default:
                out[f.name] = value
        return out

    def live_config(self) -> LiveConfig:
        """Where the live evidence is and how to reach it (``timeout_s`` 0: the default)."""
        return LiveConfig(
            **{attr: getattr(self, name) for name, attr in _LIVE_PARAMETERS.items()},
            timeout_s=float(self.timeout_s or DEFAULT_TIMEOUT_S),
            logs=list(self.logs),
        )

    def incident(self) -> Incident:
        """The incident these parameters describe, for live mode (:func:`live_incident`)."""
        return live_incident(
            start=self.start,
            end=self.end,
            since=self.since,
            baseline_start=self.baseline_start,
            baseline_end=self.baseline_end,
            service=self.service,
            slo=dict(self.slo),
            gpu_count=self.gpu_count,
            usd_per_gpu_hour=self.usd_per_gpu_hour,
            scope=self.scope,
            hosts=self.hosts,
        )


def open_live(cfg: LiveConfig, incident: Incident) -> LiveEvidence:
    """Connect the sources; the metrics server must answer (SourceError otherwise).

    Refuses, before any request, a URL with ``user:password@`` and an env var reference that is not
    a variable name (:class:`~perfkit.errors.SecretLeak`, see :meth:`LiveConfig.check`).
    """
    from perfkit.sources.prometheus import PrometheusClient, PrometheusEngine

    cfg.check()
    client = PrometheusClient(cfg.prometheus_http())
    span_start = incident.baseline.start if incident.baseline else incident.window.start
    engine: Any = PrometheusEngine(client, start=span_start - timedelta(minutes=5), end=incident.window.end)
    engine.metric_names()  # fail now, with the URL and status, if the server does not answer
    scope = incident_scope(incident)
    if scope:  # every query carries the workload's matchers, or its hosts (perfkit.engine.scope)
        engine = ScopedEngine(engine, scope, Window(span_start, incident.window.end))
        engine.hosts()  # fail now if the scope matches nothing on the server
    missing: list[str] = []
    notes: list[str] = []
    frames = [pl.DataFrame(schema=EVENTS_SCHEMA)]
    frames.extend(_releases(cfg, engine, Window(span_start, incident.window.end), incident.service, missing))
    if cfg.alertmanager_url:
        try:
            from perfkit.sources.alertmanager import AlertmanagerClient

            am = AlertmanagerClient(cfg.alertmanager_http())
            frames.append(am.timeline_events(Window(span_start, incident.window.end), incident.service))
        except PerfkitError as exc:
            missing.append(f"alerts: {exc}")
    from perfkit.sources.releases import merge_releases

    events = merge_releases(*frames)
    logs = pl.DataFrame(schema=LOG_SCHEMA)
    stats = pl.DataFrame(schema=STATS_SCHEMA)
    files: list[Path] = []
    if cfg.logs:
        from perfkit.sources.logs import expand, read_logs

        files = expand(cfg.logs)
        if files:
            result = read_logs(files, window=incident.window)
            logs, stats = result.records, result.stats
            missing.extend(f"logs: {e}" for e in result.errors)
            notes.extend(f"logs: {n}" for n in result.notes)  # lines placed by their neighbours' times
        else:
            missing.append(f"logs: nothing matches {', '.join(cfg.logs)}")
    else:
        missing.append("logs: no log files given (logs=PATH or glob)")
    return LiveEvidence(engine, events, logs, stats, missing, files, notes)


def _releases(cfg: LiveConfig, engine, span: Window, service: str, missing: list[str]) -> list[pl.DataFrame]:
    """Release history from every configured source; a failing one is named in ``missing``."""
    from perfkit.sources import releases

    frames: list[pl.DataFrame] = []
    if cfg.deploys:
        try:
            frames.append(releases.read_release_file(Path(cfg.deploys)))
        except PerfkitError as exc:
            missing.append(f"deploys: {exc}")
    if cfg.git_repo:
        try:
            frames.append(releases.git_releases(cfg.git_repo, span, service=service or None))
        except PerfkitError as exc:
            missing.append(f"git releases: {exc}")
    if cfg.release_metric:
        metric, _, label = cfg.release_metric.partition(":")
        try:
            frames.append(
                releases.info_metric_releases(
                    engine, metric, label or "version", span, service=service or None
                )
            )
        except PerfkitError as exc:
            missing.append(f"release metric {cfg.release_metric}: {exc}")
    if not (cfg.deploys or cfg.git_repo or cfg.release_metric):
        missing.append(
            "events: no deploy history given (deploys=FILE, git_repo=DIR or release_metric=NAME:LABEL)"
        )
    return frames
