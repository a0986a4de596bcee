"""How a runbook section looks: the displayable :class:`Section` and each section's finding.

A :class:`Section` shows a one-line verdict, a table and figures in the notebook and records its
finding (``application/vnd.perfkit.finding+json``). The ``*_section`` functions turn an analysis
result into that finding: verdict line, status, table and figure. ``perfkit.app.runbooks.inference`` wires
the inputs; the computation lives in ``perfkit.analyses``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.analyses.baseline import USER_FACING
from perfkit.analyses.training_stalls import described, gaps, stood_still
from perfkit.analyses.workloads import describe
from perfkit.core.findings import Finding, record, table_from_frame
from perfkit.core.frames import iso
from perfkit.core.incident import Incident
from perfkit.report import figures
from perfkit.report.markdown import md_escape
from perfkit.report.replica_figures import replicas_figure

STATUS_LABEL = {"ok": "OK", "warn": "WARN", "critical": "CRITICAL", "missing": "MISSING", "error": "ERROR"}


@dataclass
class Section:
    finding: Finding
    table: pl.DataFrame | None = None
    figure: Any = None  # plotly figure
    extra_figures: list[Any] = field(default_factory=list)
    extra_findings: list[Finding] = field(default_factory=list)
    style: Callable[[Any], Any] | None = None  # pandas DataFrame -> Styler

    def _show_header(self) -> None:
        """The finding's status, title and summary, and what evidence it lacked."""
        from IPython.display import Markdown, display

        f = self.finding
        label = STATUS_LABEL.get(f.status, f.status.upper())
        # evidence text is inert here as in the postmortem: no links, images or HTML in the notebook
        display(Markdown(f"**\\[{label}\\] {md_escape(f.title)}** — {md_escape(f.summary)}"))
        if f.missing:
            display(Markdown("Missing evidence: " + "; ".join(md_escape(m) for m in f.missing)))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        f = self.finding
        self._show_header()
        if self.table is not None and self.table.height:
            frame = self.table.to_pandas()
            styler = self.style(frame) if self.style else frame.style.hide(axis="index")
            display(styler.format(precision=4, escape="html"))
        for fig in [self.figure, *self.extra_figures]:
            if fig is not None:
                fig.show()
        record(f)
        for extra in self.extra_findings:
            record(extra)


def _fig_json(fig: Any) -> dict[str, Any] | None:
    return fig.to_plotly_json() if fig is not None else None


def scope_section(
    inc: Incident,
    source: str,
    evidence: Any,
    scope: Mapping[str, Any] | None = None,
    workloads: Sequence[Mapping[str, Any]] = (),
    identified: str = "",
    engine: Mapping[str, Any] | None = None,
) -> Section:
    """The incident's fields as a table; ``source`` is the engine's name, ``evidence`` the bundle or URL;
    ``identified``: what of the model and GPU was read from the evidence's labels (and why not).

    ``scope`` is the workload scope's report (what it kept); ``workloads`` those the evidence holds
    when it is not scoped (several: the rows below judge them together, and each one's scope is shown);
    ``engine`` the serving engine whose series the rows read (``{name, title, version}``)."""
    rows = [
        ["incident", inc.id],
        ["title", inc.title],
        ["service", inc.service],
        ["model", inc.model or "n/a"],
        ["window (UTC)", f"{iso(inc.window.start)} → {iso(inc.window.end)}"],
        [
            "baseline (UTC)",
            f"{iso(inc.baseline.start)} → {iso(inc.baseline.end)}" if inc.baseline else "none",
        ],
        ["SLOs", ", ".join(f"{k}={v:g}" for k, v in inc.slo.items()) or "none"],
        ["hardware", f"{inc.hardware.count} x {inc.hardware.gpu}"],
        ["evidence", f"{source}: {evidence}"],
    ]
    if engine:
        version = f" {engine['version']}" if engine.get("version") else " (version not in the logs)"
        rows.append(["serving engine", f"{engine.get('title')}{version}"])
    if identified:
        rows.append(["read from the evidence", identified])
    summary = f"{inc.service}: {inc.title}"
    status = "ok"
    if scope:
        chosen = scope["scope"]
        rows.append(["workload scope", chosen["matchers"] or "(hosts only)"])
        rows.append(
            ["hosts", ", ".join(scope["hosts"]) or "not joined: " + "; ".join(scope.get("notes") or [])]
        )
        rows.append(
            [
                "series kept",
                f"{scope['workload_series']['kept']} of {scope['workload_series']['seen']} workload series, "
                f"{scope['gpu_host_series']['kept']} of {scope['gpu_host_series']['seen']} GPU/host series",
            ]
        )
        summary += f" — scope {chosen['matchers'] or 'hosts ' + ', '.join(chosen['hosts'] or [])}"
    for w in workloads:
        rows.append([f"workload ({w['kind']})", f"scope = '{w['scope']}': {describe(w)}"])
    if len(workloads) > 1:
        status = "warn"
        summary += (
            f" — {len(workloads)} workloads in the evidence, judged together: set the `scope` parameter "
            "to the affected one"
        )
    table = pl.DataFrame({"field": [r[0] for r in rows], "value": [str(r[1]) for r in rows]})
    f = Finding(
        "scope",
        "Scope",
        summary,
        status=status,
        data={
            **inc.as_dict(),
            "source": source,
            "scope": scope,
            "workloads": list(workloads),
            "engine": dict(engine) if engine else None,
        },
        table=table_from_frame(table),
        missing=[f"scope: {len(workloads)} workloads judged together (no scope given)"]
        if len(workloads) > 1
        else [],
    )
    return Section(f, table)


def completeness_section(res: Any, notes: list[str] | None = None) -> Section:
    """A completeness result: verdict, the sources present, clock skew and gaps; and the sources'
    ``notes`` (what was read but is less certain than it looks: log lines placed by their neighbours)."""
    table = res.table()
    status = {"complete": "ok", "degraded": "warn", "missing": "critical"}[res.verdict]
    present = [k for k, v in res.sources.items() if v]
    summary = f"{res.verdict}: sources {', '.join(present) or 'none'}; {res.skew_note}"
    gaps = sum(len(r.gaps) for r in res.rows)
    if gaps:
        summary += f"; {gaps} gaps"
    restarts = getattr(res, "restarts", [])
    if restarts:
        summary += "; restarts: " + ", ".join(f"{r.source} at {r.ts} ({r.how})" for r in restarts)
    if notes:
        summary += "; " + "; ".join(notes)
    f = Finding(
        "completeness",
        "Data completeness",
        summary,
        status=status,
        data={**res.as_dict(), "notes": list(notes or [])},
        table=table_from_frame(table),
        missing=list(res.missing),
    )
    return Section(f, table)


def changes_section(rel: Any, inc: Incident, events: list[dict[str, Any]]) -> Section:
    """A release correlation: the shifts, and the latency quantiles drawn with the deploys."""
    rows = [
        {
            "ts": s.as_dict()["ts"],
            "series": s.series,
            "before": s.before,
            "after": s.after,
            "change_pct": round(100 * s.rel_change, 1),
            "degrading": s.degrading,
            "starts at": (
                f"{s.aligned_event['kind']} {s.aligned_event['version'] or s.aligned_event['detail']}"
                if s.aligned_event
                else "no deploy"
            ),
        }
        for s in rel.shifts
    ]
    table = pl.DataFrame(
        rows,
        schema={
            "ts": pl.Utf8,
            "series": pl.Utf8,
            "before": pl.Float64,
            "after": pl.Float64,
            "change_pct": pl.Float64,
            "degrading": pl.Boolean,
            "starts at": pl.Utf8,
        },
    )
    latency = {k: v for k, v in rel.series.items() if k.startswith(("TTFT", "ITL", "TPOT")) and v.height}
    # a training job's, the minutes it stood still drawn as gaps (its gauge repeated the last step)
    step = {k: gaps(v, rel.stalled) for k, v in rel.series.items() if k == "step time" and v.height}
    fig = None
    if latency or step:  # a chart with nothing to draw is left out, not drawn empty
        fig = figures.timeseries(
            latency or step,
            title="Latency quantiles with deploys"
            if latency
            else "Step time with deploys and config changes",
            ytitle="seconds",
            window=inc.window,
            baseline=inc.baseline,
            events=events,
            slo=inc.slo.get("ttft_p95_s") if latency else None,
            log_y=bool(latency),
        )
    status = "critical" if rel.suspect or rel.unexplained else ("missing" if not rel.series else "ok")
    f = Finding(
        "changes",
        "What changed",
        rel.summary(),
        status=status,
        data=rel.as_dict(),
        table=table_from_frame(table),
        figure=_fig_json(fig) if fig is not None else None,
        figure_caption=f"{'quantiles' if latency else 'the mean step time'} at {rel.step_s:g} s steps over "
        f"{iso(rel.span.start)} → {iso(rel.span.end)}; dotted lines: deploys/config changes"
        + (f"; a gap: {stood_still(rel.stalled)}" if step and not latency and rel.stalled else "")
        if fig is not None
        else None,
        missing=list(rel.missing),
        queries=list(dict.fromkeys(rel.queries)),
    )
    return Section(f, table, fig)


def baseline_section(res: Any) -> Section:
    """A baseline comparison: the headline quantile, SLO breaches, and the quantiles as bars."""
    table = res.table()
    head = res.headline()
    breaches = [r.metric for r in res.rows if r.breach]
    if head and head.ratio:
        base, now = (head.shown(side, lambda v: f"{v:.3g}") for side in (0, 1))
        summary = f"{head.metric} {now} s vs {base} s in the baseline ({head.ratio_text})"
    elif (felt := [r for r in res.rows if r.unit == "s" and r.metric.split()[0] in USER_FACING and r.incident is not None]) and all(all(r.under) for r in felt):  # fmt: skip
        summary = (
            "no latency quantile moved beyond what the histograms resolve: every one measured lies in "
            "its first bucket in both windows (see the table's note)"
        )
    else:
        summary = "no latency quantiles to compare: " + "; ".join(res.missing or ["no latency histograms"])
    if breaches:
        summary += f"; SLO breached: {', '.join(breaches)}"
    lat = [r for r in res.rows if r.unit == "s" and r.metric.split()[0] in ("TTFT", "TPOT", "ITL")]
    fig = figures.bars(
        [r.metric for r in lat],
        {"baseline": [r.baseline for r in lat], "incident": [r.incident for r in lat]},
        title="Latency quantiles: baseline vs incident",
        ytitle="seconds",
    )
    if any((r.incident or 0) > 0 or (r.baseline or 0) > 0 for r in lat):
        fig.update_yaxes(type="log")
    f = Finding(
        "baseline",
        "Baseline vs now",
        summary,
        status="critical" if breaches else ("ok" if head else "missing"),
        data=res.as_dict(),
        table=table_from_frame(table),
        figure=_fig_json(fig),
        figure_caption="histogram_quantile over increase() of each whole window",
        missing=list(res.missing),
        queries=list(dict.fromkeys(res.queries)),
    )
    return Section(f, table, fig)


def impact_section(res: Any) -> Section:
    """Impact in SLO terms (:mod:`perfkit.analyses.impact`): per SLO, attainment on both sides,
    minutes and requests over, budget burn; the severity and its basis; breaches there before.
    The figure: each breached SLO's per-minute quantile as a multiple of its bound (one axis, one
    SLO line at 1), baseline and incident windows, gaps left open."""
    sev = res.severity
    table = res.table()
    drawn = {k: v for k, v in res.series.items() if any(s.breached and k == s.metric for s in res.slos)}
    fig = None
    if drawn:
        labels = {s.metric: s.label for s in res.slos}
        fig = figures.timeseries(
            {labels.get(k, k): v for k, v in drawn.items()},
            title="Breached SLOs: per-minute quantile over its bound",
            ytitle="× its SLO bound",
            window=res.window,
            baseline=res.baseline,
        )
        figures.mark_slo(fig, 1.0, text="the SLO's bound")
        fig.update_traces(connectgaps=False)
        peak = max((float(v.max()) for v in (f["value"].drop_nulls() for f in drawn.values()) if v.len()), default=1.0)  # fmt: skip
        if peak > 20:  # a tail at 50x its bound would flatten the rest: log scale
            fig.update_yaxes(type="log")
    status = {"SEV-2": "critical", "SEV-3": "critical", "SEV-4": "ok"}.get(sev.level, "missing")
    f = Finding(
        "impact",
        "Impact in SLO terms",
        res.summary(),
        status=status if res.slos else "missing",
        data=res.as_dict(),
        table=table_from_frame(table),
        figure=_fig_json(fig) if fig is not None else None,
        figure_caption=(
            "histogram_quantile(q, sum by (le) (rate(bucket[1m]))) each minute, divided by the SLO's bound: "
            "above 1 the minute breached; a gap is a minute without data"
            if fig is not None
            else None
        ),
        missing=list(res.missing),
        queries=list(dict.fromkeys(res.queries)),
    )
    return Section(f, table, fig)


def stages_section(res: Any) -> Section:
    """A per-stage breakdown: mean and p95 time to first token by stage, baseline vs incident."""
    table = res.table()
    cats = ["queue", "prefill", "frontend"]
    fig = figures.bars(
        cats,
        {side: [res.means.get(side, {}).get(c) for c in cats] for side in ("baseline", "incident")},
        title="Mean time to first token by stage (frontend = e2e − queue − inference)",
        ytitle="seconds",
    )
    p95 = figures.bars(
        ["queue", "prefill"],
        {
            side: [res.p95.get(side, {}).get(c) for c in ("queue", "prefill")]
            for side in ("baseline", "incident")
        },
        title="p95 by stage",
        ytitle="seconds",
    )
    f = Finding(
        "stages",
        "Per-stage latency",
        res.summary(),
        status="warn" if res.tail_owner else "missing",
        data=res.as_dict(),
        table=table_from_frame(table),
        figure=_fig_json(fig),
        figure_caption="means are increase(_sum)/increase(_count) of the serving engine's per-stage histograms",
        missing=list(res.missing),
        queries=list(dict.fromkeys(res.queries)),
    )
    return Section(f, table, fig, [p95])


def triage_section(
    res: Any,
    ev: Any,
    series: Mapping[str, Mapping[str, pl.DataFrame] | None],
    inc: Incident,
    events: list[dict[str, Any]],
) -> Section:
    """A triage run: rank 1 and its verdict, the table coloured by verdict, one evidence figure per
    confirmed row (``series``: each confirmed direction's ``evidence_series``)."""
    table = res.table()
    top = res.top
    if top and top.verification.verdict == "confirmed":
        summary = f"rank 1: {top.row.direction} (confirmed) — {top.verification.why}"
        status = "critical"
    elif top and top.score > 0:
        summary = f"rank 1: {top.row.direction} ({top.verification.verdict}) — {top.verification.why}"
        status = "warn"
    else:
        unchecked = [r for r in res.results if r.detection.missing]
        summary = "no row of the triage table fired"
        if unchecked:
            summary += (
                f"; {len(unchecked)} of {len(res.results)} rows could not be checked (evidence missing)"
            )
        status = "missing" if 2 * len(unchecked) > len(res.results) else "ok"
    judged = res.judged or {}
    if judged.get("narrowed"):
        summary += f" (judged {judged['start']} → {judged['end']}: {judged['why']})"
    if (res.replicas or {}).get("outliers"):  # every row read the fleet's sums: this one is not in them
        summary += f". Not the whole fleet: {res.replicas['summary']}"
        status = "critical" if status == "critical" else "warn"
    from perfkit.report.evidence_figures import evidence_figure

    figs = []
    for r in res.confirmed():
        fig = evidence_figure(
            r.row.direction, ev, series.get(r.row.direction), inc.window, inc.baseline, events
        )
        if fig is not None:
            figs.append((r.row.direction, fig))
    fig = figs[0][1] if figs else None
    f = Finding(
        "triage",
        "Triage table",
        summary,
        status=status,
        data=res.to_json(),
        table=table_from_frame(table),
        figure=_fig_json(fig),
        figure_caption=f"evidence for {figs[0][0]} (confirmed)" if figs else None,
        missing=list(res.missing),
    )
    extra = [
        Finding(
            f"evidence-{direction}",
            f"Evidence: {direction}",
            f"what confirmed {direction}",
            figure=_fig_json(other),
            figure_caption=f"evidence for {direction} (confirmed)",
        )
        for direction, other in figs[1:]
    ]
    rep: Any = getattr(ev, "replicas", None)  # a fleet: each replica beside the others
    panels = replicas_figure(rep.series, rep.label, [r.name for r in rep.outliers], f"{rep.signal.upper()} p50 (ms)",
                             inc.window, inc.baseline) if rep is not None and rep.label and rep.signal else None  # fmt: skip
    if panels is not None:
        extra.append(Finding("replicas", "Replicas", rep.summary(), figure=_fig_json(panels),
                             figure_caption=f"each replica's median by {rep.label}; dotted: every replica's median"))  # fmt: skip
    shown = [other for _, other in figs[1:]] + ([panels] if panels is not None else [])
    return Section(f, table, fig, shown, extra_findings=extra, style=_verdict_style)


VERDICT_COLOURS = {
    "confirmed": "background-color: #fde2e1",
    "ruled_out": "color: #6b7280",
    "inconclusive": "background-color: #fef3c7",
}


def _verdict_style(frame):  # pandas Styler: colour each row by its verdict
    return frame.style.hide(axis="index").apply(
        lambda row: [VERDICT_COLOURS.get(row.get("verdict"), "")] * len(row), axis=1
    )


def training_not_exported_section() -> Section:
    """No train_* metrics: the training section says so."""
    return Section(
        Finding(
            "training",
            "Training step breakdown",
            "no train_* metrics and no framework step lines (Megatron-LM, torchtitan, DeepSpeed, HF Trainer) "
            "or TensorBoard scalars: not a training job, or its loop logs neither (perfkit.sources.train_exporter)",
            status="missing",
            missing=["training: no step time (train_step_duration_seconds or a framework's lines)"],
        )
    )


def training_section(
    ev: Any,
    table: pl.DataFrame,
    series: Mapping[str, pl.DataFrame],
    inc: Incident,
    events: list[dict[str, Any]],
    throughput: Mapping[str, pl.DataFrame] | None = None,
) -> Section:
    """Training evidence: step time, data wait and communication shares, tokens/s, and the gauges
    over time; ``throughput``: the framework's own tokens/s, samples/s or TFLOP/s over time."""
    fig = figures.timeseries(
        series,
        title="Step time, data wait, communication and loss",
        ytitle="seconds / loss",
        window=inc.window,
        baseline=inc.baseline,
        events=events,
    )
    share_w, share_c = ev.data_wait_share.get("incident"), ev.comm_share.get("incident")
    tps = ev.tokens_per_s

    def pct(v: float | None) -> str:
        return "unknown" if v is None else f"{v:.0%}"

    step_i, step_b = ev.step_s.get("incident"), ev.step_s.get("baseline")
    step = f"step {step_i:.2f} s vs {step_b or 0:.2f} s" if step_i is not None else "step time unknown"
    summary = f"{step}; data wait {pct(share_w)} of the step on the slowest rank, exposed communication {pct(share_c)} (mean over ranks)"
    if tps.get("baseline") and tps.get("incident") is not None:
        summary += f"; tokens/s per GPU over the whole window (time down included) {tps['incident'] / tps['baseline']:.2f}x the baseline"
    if frozen := (getattr(ev, "stalled", {}) or {}).get("incident"):
        summary += "; " + described(frozen)
    sources = getattr(ev, "sources", {}) or {}
    if sources and not all(v.startswith("perfkit TrainMetrics") for v in sources.values()):
        summary += "; from " + "; ".join(f"{k.removeprefix('train_')}: {v}" for k, v in sources.items())
    f = Finding(
        "training",
        "Training step breakdown",
        summary,
        status="warn",
        data=ev.as_dict(),
        table=table_from_frame(table),
        figure=_fig_json(fig),
        figure_caption="train_* gauges from every rank (or the framework's own lines: see the summary); "
        "data wait from the slowest rank at each step",
    )
    extra = []
    if throughput:  # only the series the framework reports (section_data.throughput_series)
        extra.append(
            figures.timeseries(
                throughput,
                title="Throughput as the framework reports it",
                ytitle="per second",
                window=inc.window,
                baseline=inc.baseline,
                events=events,
            )
        )
    return Section(f, table, fig, extra_figures=extra)


def gpu_section(
    res: Any,
    series: Mapping[str, pl.DataFrame] | None,
    nvml: Any,
    inc: Incident,
    events: list[dict[str, Any]],
) -> Section:
    """GPU state: DCGM history (``series`` is None without GPUs) and, when there is one, the NVML snapshot."""
    fig = None
    if series is not None:
        fig = figures.timeseries(
            series,
            title="GPU activity (DCGM)",
            ytitle="percent",
            window=inc.window,
            baseline=inc.baseline,
            events=events,
        )
    missing = list(res.missing)
    summary = res.summary()
    data = res.as_dict()
    table = res.table
    if nvml is not None and nvml.available:
        data["nvml"] = nvml.to_dict()
        summary += f"; NVML now: {nvml.summary()}"
        table = nvml.table()
    elif nvml is not None:
        missing.append(f"gpu: {nvml.reason}")
    status = "ok" if res.gpus or (nvml is not None and nvml.available) else "missing"
    f = Finding(
        "gpu",
        "GPU state",
        summary,
        status=status,
        data=data,
        table=table_from_frame(table) if table.height else None,
        figure=_fig_json(fig),
        figure_caption="DCGM exporter gauges averaged over GPUs" if fig else None,
        missing=missing,
        queries=res.queries,
    )
    return Section(f, table, fig)


def cost_section(res: Any, table: pl.DataFrame) -> Section:
    """Cost per million tokens, baseline vs incident."""
    f = Finding(
        "cost",
        "Cost per million tokens",
        res.summary(),
        status="ok" if res.usd_per_million.get("incident") else "missing",
        data=res.as_dict(),
        table=table_from_frame(table),
        missing=list(res.missing),
        queries=res.queries,
    )
    return Section(f, table)


def findings_section(model: Mapping[str, Any]) -> Section:
    """The postmortem model's summary and timeline."""
    table = pl.DataFrame(
        {
            "time (UTC)": [r["ts"] for r in model["timeline"]],
            "event": [r["event"] for r in model["timeline"]],
            "source": [r["source"] for r in model["timeline"]],
        }
    )
    f = Finding(
        "postmortem",
        "Findings",
        model["summary"],
        status="ok",
        data=dict(model),
        table=table_from_frame(table),
        missing=list(model["missing"]),
    )
    return Section(f, table)
