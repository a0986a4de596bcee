"""What a runbook cell calls: one function per section, each returning a displayable :class:`Section`.

A section shows a one-line verdict, a table and a figure, and records its finding into the
notebook. It never raises: missing or broken evidence becomes a section that says what is
missing (status ``missing``/``error``), and the runbook carries on::

    import perfkit.app.runbook as rb
    ctx = rb.open_incident(bundle="data/scenarios/p95-prefill-interference")
    rb.completeness(ctx)      # displays and records the finding
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
from perfkit.report import sections as show
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
    from perfkit.app.embedded import bundle_path  # installed: an embedded incident, simulated on first use

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
        b = load_bundle(root, incident=incident)
    except ScopeMatchesNothing as exc:
        from perfkit.triage.table import with_workloads

        raise with_workloads(exc, root) from None
    ctx.bundle, ctx.incident, ctx.engine = b, incident, LocalEngine(b.store)
    ctx.events, ctx.logs, ctx.stats = b.events, b.logs, b.stats
    ctx.add_missing(b.missing)


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


def _events(ctx: Context) -> list[dict[str, Any]]:
    if ctx.events is None or not ctx.events.height:
        return []
    return [dict(r) for r in ctx.events.iter_rows(named=True)]


# -- sections: wiring only (computation in perfkit.analyses, presentation in perfkit.report.sections)


@section("scope", "Scope")
def scope(ctx: Context) -> Section:
    inc = ctx.incident
    assert inc is not None
    report, workloads = _scope(ctx)
    return show.scope_section(
        inc,
        ctx.engine.name,
        ctx.params.get("bundle") or ctx.params.get("prometheus_url"),
        report.as_dict() if report else None,
        [w.as_dict() for w in workloads],
        ctx.results.get("identified", ""),
    )


def _scope(ctx: Context) -> tuple[Any, list[Any]]:
    """The scope's report (scoped evidence), else the workloads the evidence holds (computed once)."""
    report = getattr(ctx.bundle, "scope", None) or getattr(ctx.engine, "report", None)
    if report is not None:
        return report, []
    from perfkit.analyses.workloads import find_workloads

    inc = ctx.incident
    assert inc is not None
    return None, ctx.need("workloads", lambda: find_workloads(ctx.engine, inc.window))


@section("completeness", "Data completeness")
def completeness(ctx: Context) -> Section:
    from perfkit.analyses.completeness import completeness as run

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("completeness", lambda: run(ctx.engine, inc.window, stats=ctx.stats, events=ctx.events))
    return show.completeness_section(res)


@section("changes", "What changed")
def changes(ctx: Context) -> Section:
    from perfkit.analyses.release import correlate

    inc, events = ctx.incident, ctx.events
    assert inc is not None and events is not None
    rel = ctx.need("release", lambda: correlate(ctx.engine, inc.window, inc.baseline, events))
    return show.changes_section(rel, inc, _events(ctx))


@section("baseline", "Baseline vs now")
def baseline(ctx: Context) -> Section:
    from perfkit.analyses.baseline import compare
    from perfkit.app.baseline_runbook import with_attainment_and_bench

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("baseline", lambda: compare(ctx.engine, inc.window, inc.baseline, inc.slo))
    return with_attainment_and_bench(ctx, show.baseline_section(res))  # SLO attainment, `bench_result`


@section("stages", "Per-stage latency")
def stages(ctx: Context) -> Section:
    from perfkit.analyses.stages import breakdown

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("stages", lambda: breakdown(ctx.engine, inc.window, inc.baseline))
    return show.stages_section(res)


@section("triage", "Triage table")
def triage(ctx: Context) -> Section:
    from perfkit.analyses.evidence_series import evidence_series
    from perfkit.triage.evidence import gather, release_history_given
    from perfkit.triage.table import run

    inc, events = ctx.incident, ctx.events
    assert inc is not None and events is not None
    from perfkit.analyses.baseline import compare
    from perfkit.analyses.release import correlate
    from perfkit.analyses.stages import breakdown

    base = ctx.need("baseline", lambda: compare(ctx.engine, inc.window, inc.baseline, inc.slo))
    st = ctx.need("stages", lambda: breakdown(ctx.engine, inc.window, inc.baseline))
    rel = ctx.need("release", lambda: correlate(ctx.engine, inc.window, inc.baseline, events))
    ev = ctx.need(
        "evidence",
        lambda: gather(
            ctx.engine,
            inc,
            events=events,
            logs=ctx.logs,
            baseline=base,
            stages=st,
            release=rel,
            history_given=release_history_given(ctx.missing),
        ),  # fmt: skip
    )
    res = ctx.need("triage", lambda: run(ev))
    report, workloads = _scope(ctx)
    res.scope = report.as_dict() if report else None
    res.workloads = [w.as_dict() for w in workloads]
    series = {
        r.row.direction: evidence_series(r.row.direction, ctx.engine, rel.span, per_token=ev.per_token())
        for r in res.confirmed()
    }
    return show.triage_section(res, ev, series, inc, _events(ctx))


@section("training", "Training step breakdown")
def training(ctx: Context) -> Section:
    from perfkit.analyses.section_data import training_series, training_table
    from perfkit.analyses.training_evidence import gather_training

    inc = ctx.incident
    assert inc is not None
    ev = ctx.need("train", lambda: gather_training(ctx.engine, inc))
    if not ev.present:
        return show.training_not_exported_section()
    table = training_table(ev)
    series = training_series(ctx.engine, inc.window, inc.baseline)
    return show.training_section(ev, table, series, inc, _events(ctx))


@section("gpu", "GPU state")
def gpu(ctx: Context) -> Section:
    from perfkit.analyses.gpu import gpu_state
    from perfkit.analyses.section_data import gpu_activity_series

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("gpu", lambda: gpu_state(ctx.engine, inc.window, inc.baseline))
    series = None
    if res.gpus:
        rel_span = ctx.results["release"].span if "release" in ctx.results else inc.window
        series = gpu_activity_series(ctx.engine, rel_span)
    nvml = ctx.need("nvml", lambda: _nvml_snapshot(ctx))
    return show.gpu_section(res, series, nvml, inc, _events(ctx))


def _nvml_snapshot(ctx: Context):
    """Live: a snapshot of this host's GPUs now. Bundle: the newest gpu/*.json snapshot it froze, if any."""
    from perfkit.sources import nvml

    if ctx.bundle is None:
        return nvml.snapshot()
    snaps = sorted((ctx.bundle.path / "gpu").glob("*.json")) if (ctx.bundle.path / "gpu").is_dir() else []
    if not snaps:
        return nvml.GpuSnapshot(
            available=False, reason="no NVML snapshot in the bundle's gpu/ folder", gpus=[]
        )
    return nvml.read_snapshot(snaps[-1])


@section("cost", "Cost")
def cost(ctx: Context) -> Section:
    from perfkit.analyses.cost import cost as run
    from perfkit.analyses.section_data import cost_table

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("cost", lambda: run(ctx.engine, inc.hardware, inc.window, inc.baseline))
    return show.cost_section(res, cost_table(res))


@section("postmortem", "Findings")
def findings(ctx: Context) -> Section:
    from perfkit.report.postmortem import build

    inc = ctx.incident
    assert inc is not None
    gpu_res, cost_res = ctx.results.get("gpu"), ctx.results.get("cost")
    model = build(
        inc,
        base=ctx.results.get("baseline"),
        stages=ctx.results.get("stages"),
        release=ctx.results.get("release"),
        triage=ctx.results.get("triage"),
        events=ctx.events if ctx.events is not None else pl.DataFrame(),
        missing=list(ctx.missing),
        gpu_summary=gpu_res.summary() if gpu_res else None,
        cost_summary=cost_res.summary() if cost_res else None,
        restarts=[r.as_dict() for r in getattr(ctx.results.get("completeness"), "restarts", [])],
    )
    return show.findings_section(model)


def verify_fix(ctx: Context) -> Any:
    """Did the fix work? The incident window against the window after the fix (the ``after_*``
    parameters); says it is skipped when none is given (:mod:`perfkit.app.runbook_compare`)."""
    from perfkit.app.runbook_compare import verify_fix as run

    return run(ctx)
