"""What a runbook cell calls: one function per section, each returning a displayable :class:`Section`.

A section shows a one-line verdict, a table and a figure, and records its finding into the
notebook. It never raises: missing or broken evidence becomes a section that says what is
missing (status ``missing``/``error``), and the runbook carries on::

    import perfkit.app.runbooks.inference as rb
    ctx = rb.open_incident(bundle="data/scenarios/p95-prefill-interference")
    rb.completeness(ctx)      # displays and records the finding
"""

from __future__ import annotations

from typing import Any

import polars as pl

from perfkit.app.runbooks.context import Context, open_incident, resolve_bundle, section
from perfkit.report import sections as show
from perfkit.report.sections import Section

__all__ = [
    "Context",
    "baseline",
    "changes",
    "completeness",
    "cost",
    "findings",
    "gpu",
    "impact",
    "open_incident",
    "predicted_fix",
    "resolve_bundle",
    "scope",
    "section",
    "stages",
    "training",
    "triage",
    "verify_fix",
]


def _events(ctx: Context) -> list[dict[str, Any]]:
    if ctx.events is None or not ctx.events.height:
        return []
    return [dict(r) for r in ctx.events.iter_rows(named=True)]


# -- sections: wiring only (computation in perfkit.analyses, presentation in perfkit.report.sections)


@section("scope", "Scope")
def scope(ctx: Context) -> Section:
    from perfkit.sources.engine_config import engine_version
    from perfkit.triage.evidence import serving_engine
    from perfkit.triage.table import engine_text

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
        engine_text(serving_engine(ctx.engine), engine_version(ctx.logs)),
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
    return show.completeness_section(res, ctx.notes)


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
    from perfkit.app.runbooks.baseline import with_attainment_and_bench

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("baseline", lambda: compare(ctx.engine, inc.window, inc.baseline, inc.slo))
    return with_attainment_and_bench(ctx, show.baseline_section(res))  # SLO attainment, `bench_result`


@section("impact", "Impact in SLO terms")
def impact(ctx: Context) -> Section:
    """Per SLO: attainment before and during, minutes and requests over, budget burned, whether the
    breach was there before; the severity from what the incident caused (:mod:`perfkit.analyses.impact`)."""
    from perfkit.analyses.baseline import compare
    from perfkit.analyses.impact import assess
    from perfkit.analyses.slo import attainment

    inc = ctx.incident
    assert inc is not None
    base = ctx.need("baseline", lambda: compare(ctx.engine, inc.window, inc.baseline, inc.slo))
    slo = ctx.need("slo_attainment", lambda: attainment(ctx.engine, inc.window, inc.baseline, inc.slo))
    res = ctx.need(
        "impact", lambda: assess(ctx.engine, inc.window, inc.baseline, inc.slo, slo, base.quantiles)
    )
    return show.impact_section(res)


@section("stages", "Per-stage latency")
def stages(ctx: Context) -> Section:
    from perfkit.analyses.stages import breakdown

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("stages", lambda: breakdown(ctx.engine, inc.window, inc.baseline))
    return show.stages_section(res)


@section("triage", "Triage table")
def triage(ctx: Context) -> Section:
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
        r.row.direction: r.row.figure.series(ctx.engine, rel.span, per_token=ev.per_token())
        if r.row.figure and r.row.figure.series
        else None
        for r in res.confirmed()
    }
    return show.triage_section(res, ev, series, inc, _events(ctx))


@section("training", "Training step breakdown")
def training(ctx: Context) -> Section:
    from perfkit.analyses.section_data import throughput_series, training_series, training_table
    from perfkit.analyses.training_evidence import gather_training

    inc = ctx.incident
    assert inc is not None
    ev = ctx.need("train", lambda: gather_training(ctx.engine, inc))
    if not ev.present:
        return show.training_not_exported_section()
    table = training_table(ev)
    series = training_series(ctx.engine, inc.window, inc.baseline)
    throughput = throughput_series(ctx.engine, inc.window, inc.baseline)
    return show.training_section(ev, table, series, inc, _events(ctx), throughput)


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


@section("predicted_fix", "The fix, predicted by a calibrated replay")
def predicted_fix(ctx: Context) -> Section:
    """Each confirmed direction's remedy replayed on the serving simulator calibrated to this
    incident (:mod:`perfkit.app.whatif.remedy`), beside what was observed; the triage section first."""
    from perfkit.app.whatif.base import config_from_bundle
    from perfkit.app.whatif.remedy import TARGET, predict
    from perfkit.report import remedy_view

    if not ctx.params.get("predict_fix", True):
        return remedy_view.not_run_section("predict_fix is False: not replayed", status="ok")
    res = ctx.results.get("triage")
    if res is None:
        return remedy_view.not_run_section(
            "the triage section has not run: nothing confirmed to predict a fix for"
        )
    directions = [r.row.direction for r in res.confirmed() if r.row.direction in TARGET]
    if not directions:
        return remedy_view.not_run_section(
            "no confirmed serving direction with a remedy to replay", status="ok"
        )
    if ctx.bundle is None:
        return remedy_view.not_run_section(
            "a replay needs a bundle: capture the window (perfkit capture) and run on it"
        )
    base = config_from_bundle(ctx.bundle.path)
    pred = predict(
        ctx.bundle.path, base.cfg, directions, slo_ms=base.slo_ms, usd_per_gpu_hour=base.usd_per_gpu_hour
    )
    ctx.results["predicted_fix"] = pred
    return remedy_view.predicted_fix_section(pred.as_dict(), pred.summary())


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
        impact=ctx.results.get("impact"),
        predicted_fix=pred.action_text() if (pred := ctx.results.get("predicted_fix")) is not None else None,
        fix_helps=pred is None or pred.recommended is not None,
    )
    return show.findings_section(model)


def verify_fix(ctx: Context) -> Any:
    """Did the fix work? The incident window against the window after the fix (the ``after_*``
    parameters); says it is skipped when none is given (:mod:`perfkit.app.runbooks.compare`)."""
    from perfkit.app.runbooks.compare import verify_fix as run

    return run(ctx)
