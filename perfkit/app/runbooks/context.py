"""The section API every runbook calls: :class:`Context` (one incident, opened once), :func:`open_incident`
(a bundle or live sources, by the runbook's parameters), :func:`resolve_bundle`, and :func:`section`, the
guard that turns any failure of a section into a section that says what is missing, so a runbook never
stops half-way. The sections themselves are in :mod:`perfkit.app.runbooks.inference`,
:mod:`perfkit.app.runbooks.training`, :mod:`perfkit.app.runbooks.baseline` and
:mod:`perfkit.app.runbooks.compare`.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from perfkit.core.findings import Finding
from perfkit.core.incident import Incident, default_baseline, with_overrides
from perfkit.core.resources import REPO
from perfkit.errors import ConfigError, PerfkitError
from perfkit.report.sections import Section

if TYPE_CHECKING:
    from perfkit.sources.live import IncidentParams


@dataclass
class Context:
    """Everything the sections share: the incident, the engine, and results computed once."""

    params: dict[str, Any]
    incident: Incident | None = None
    engine: Any = None
    bundle: Any = None
    events: pl.DataFrame | None = None
    logs: pl.DataFrame | None = None
    stats: pl.DataFrame | None = None
    error: str | None = None
    missing: list[str] = field(default_factory=list)
    #: what the sources read but is less certain than it looks (perfkit.sources.bundle.Bundle.notes)
    notes: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, str] = field(default_factory=dict)

    def need(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self.results:
            self.results[key] = compute()
        return self.results[key]

    def add_missing(self, items: list[str]) -> None:
        for m in items:
            if m not in self.missing:
                self.missing.append(m)


def resolve_bundle(path: str) -> Path:
    """A bundle path as given, else relative to the repository (runbooks run from runbooks/)."""
    p = Path(os.path.expanduser(path))
    if p.is_dir() or p.is_absolute():
        return p
    for base in (Path.cwd(), REPO):
        if (base / p).is_dir():
            return base / p
    from perfkit.app.runner.embedded import (
        bundle_path,  # installed: an embedded incident, simulated on first use
    )

    try:
        return bundle_path(path)
    except PerfkitError:
        return p


_SHOWN_PARAMETERS = (
    "prometheus_url",
    "prometheus_token_env",
    "alertmanager_url",
    "logs",
    "deploys",
    "start",
    "end",
    "since",
    "baseline_start",
    "baseline_end",
    "service",
    "scope",
    "hosts",
)
"""The incident parameters kept in ``Context.params`` (with the bundle and any unknown ones)."""


def open_incident(bundle: str = "", **params: Any) -> Context:
    """Load the evidence for the runbook from a bundle or from live sources.

    ``params`` are the runbook parameters (:class:`~perfkit.sources.live.IncidentParams`: the
    live sources, the window, the service, SLOs and cost); others are kept in ``ctx.params``.
    Never raises: a failure (unreadable bundle, metrics server down) is kept in ``ctx.error`` and
    every section then says it could not run, and why.
    """
    from perfkit.sources.live import IncidentParams

    names = IncidentParams.names()
    ctx = Context(
        {
            "bundle": bundle,
            **{name: params.get(name, "") for name in _SHOWN_PARAMETERS},
            **{k: v for k, v in params.items() if k not in names},
        }
    )
    wanted = IncidentParams.from_mapping(params)
    try:
        if bundle:
            _open_bundle(ctx, bundle, wanted)
        elif wanted.prometheus_url:
            from perfkit.sources.live import open_live

            incident = wanted.incident()
            live = open_live(wanted.live_config(), incident)
            ctx.incident, ctx.engine = incident, live.engine
            ctx.events, ctx.logs, ctx.stats = live.events, live.logs, live.stats
            ctx.add_missing(live.missing)
            ctx.notes = list(live.notes)
        else:
            raise ConfigError(
                "no evidence source: set `bundle` (an incident bundle folder) or `prometheus_url`"
            )
    except PerfkitError as exc:
        from perfkit.core.secrets import redact_text

        ctx.error = redact_text(str(exc))
        return ctx
    _identify(ctx)
    return ctx


def _identify(ctx: Context) -> None:
    """The served model and GPU from the evidence's own labels when neither incident.yaml nor the
    parameters name them (live mode always; a bundle captured without them), so that the decode
    roofline and the memory estimate can run; said in the scope section."""
    from perfkit.analyses.workloads import fill_identity

    if ctx.incident is not None and ctx.engine is not None:
        try:
            said = fill_identity(ctx.engine, ctx.incident)
        except Exception as exc:  # noqa: BLE001 - a runbook never dies of it: the Scope section says so
            said = f"model and GPU labels not read: {type(exc).__name__}: {str(exc)[:200]}"
        if said:
            ctx.results["identified"] = said


def _open_bundle(ctx: Context, bundle: str, wanted: IncidentParams) -> None:
    from perfkit.engine.local import LocalEngine
    from perfkit.engine.scope import ScopeMatchesNothing
    from perfkit.sources.bundle import load_bundle
    from perfkit.sources.incident_file import read_incident

    root = resolve_bundle(bundle)
    incident = with_overrides(
        read_incident(root / "incident.yaml"),
        start=wanted.start or None,
        end=wanted.end or None,
        baseline_start=wanted.baseline_start or None,
        baseline_end=wanted.baseline_end or None,
        scope=wanted.scope or None,
        hosts=wanted.hosts or None,
    )
    if incident.baseline is None:
        incident.baseline = default_baseline(incident.window)
    if wanted.service:
        incident.service = wanted.service
    for key, value in wanted.slo.items():
        if value:
            incident.slo[key] = float(value)
    try:
        b = load_bundle(root, incident=incident, tensorboard=str(ctx.params.get("tensorboard") or "") or None)
    except ScopeMatchesNothing as exc:
        from perfkit.triage.table import with_workloads

        raise with_workloads(exc, root) from None
    ctx.bundle, ctx.incident, ctx.engine = b, incident, LocalEngine(b.store)
    ctx.events, ctx.logs, ctx.stats = b.events, b.logs, b.stats
    ctx.add_missing(b.missing)
    ctx.notes = list(b.notes)


def section(key: str, title: str) -> Callable[[Callable[[Context], Section]], Callable[[Context], Section]]:
    """Guard a section: no context → 'missing'; any exception → 'error' with the message; never raises."""

    def wrap(fn: Callable[[Context], Section]) -> Callable[[Context], Section]:
        @functools.wraps(fn)
        def run(ctx: Context) -> Section:
            if ctx.error or ctx.engine is None:
                why = ctx.error or "no evidence loaded"
                # data.not_run tells `perfkit run` the evidence never loaded: the run failed
                return Section(
                    Finding(
                        key, title, f"not run: {why}", status="missing", data={"not_run": why}, missing=[why]
                    )
                )
            try:
                out = fn(ctx)
            except PerfkitError as exc:
                out = Section(
                    Finding(key, title, f"could not complete: {exc}", status="error", missing=[str(exc)])
                )
            except Exception as exc:  # a bug must not end the incident record: say it, keep going
                tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
                out = Section(Finding(key, title, f"failed: {tb}", status="error", missing=[f"{key}: {tb}"]))
            ctx.add_missing(out.finding.missing)
            ctx.summaries[key] = out.finding.summary
            return out

        return run

    return wrap
