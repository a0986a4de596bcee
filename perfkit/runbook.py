"""What a runbook cell calls: one function per section, each returning a displayable :class:`Section`.

A section shows a one-line verdict, a table and a figure, and records its finding into the
notebook. It never raises: missing or broken evidence becomes a section that says what is
missing (status ``missing``/``error``), and the runbook carries on::

    import perfkit.runbook as rb
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
from typing import Any

import polars as pl

from perfkit import figures
from perfkit.errors import ConfigError, PerfkitError
from perfkit.findings import Finding, record, table_from_frame
from perfkit.frames import iso
from perfkit.incident import Incident, default_baseline, with_overrides
from perfkit.report.render import md_escape

REPO = Path(__file__).resolve().parents[1]
STATUS_LABEL = {"ok": "OK", "warn": "WARN", "critical": "CRITICAL", "missing": "MISSING", "error": "ERROR"}


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


@dataclass
class Section:
    finding: Finding
    table: pl.DataFrame | None = None
    figure: Any = None  # plotly figure
    extra_figures: list[Any] = field(default_factory=list)
    extra_findings: list[Finding] = field(default_factory=list)
    style: Callable[[Any], Any] | None = None  # pandas DataFrame -> Styler

    def _ipython_display_(self) -> None:
        from IPython.display import Markdown, display

        f = self.finding
        label = STATUS_LABEL.get(f.status, f.status.upper())
        # evidence text is inert here as in the postmortem: no links, images or HTML in the notebook
        display(Markdown(f"**\\[{label}\\] {md_escape(f.title)}** — {md_escape(f.summary)}"))
        if f.missing:
            display(Markdown("Missing evidence: " + "; ".join(md_escape(m) for m in f.missing)))
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


def resolve_bundle(path: str) -> Path:
    """A bundle path as given, else relative to the repository (runbooks run from runbooks/)."""
    p = Path(os.path.expanduser(path))
    if p.is_dir() or p.is_absolute():
        return p
    for base in (Path.cwd(), REPO):
        if (base / p).is_dir():
            return base / p
    return p


def open_incident(
    bundle: str = "",
    *,
    prometheus_url: str = "",
    prometheus_token_env: str = "",
    prometheus_token_file: str = "",
    prometheus_basic_auth_user: str = "",
    prometheus_password_env: str = "",
    timeout_s: float = 30.0,
    tls_ca_file: str = "",
    alertmanager_url: str = "",
    logs: str = "",
    deploys: str = "",
    git_repo: str = "",
    release_metric: str = "",
    start: str = "",
    end: str = "",
    since: str = "",
    baseline_start: str = "",
    baseline_end: str = "",
    service: str = "",
    slo: dict[str, float] | None = None,
    gpu_count: int = 0,
    usd_per_gpu_hour: float = 0.0,
    **extra: Any,
) -> Context:
    """Load the evidence for the runbook from a bundle or from live sources.

    Never raises: a failure (unreadable bundle, metrics server down) is kept in ``ctx.error`` and
    every section then says it could not run, and why.
    """
    params = {
        "bundle": bundle,
        "prometheus_url": prometheus_url,
        "prometheus_token_env": prometheus_token_env,
        "alertmanager_url": alertmanager_url,
        "logs": logs,
        "deploys": deploys,
        "start": start,
        "end": end,
        "since": since,
        "baseline_start": baseline_start,
        "baseline_end": baseline_end,
        "service": service,
        **extra,
    }
    ctx = Context(params)
    try:
        if bundle:
            _open_bundle(ctx, bundle, start, end, baseline_start, baseline_end, service, slo)
        elif prometheus_url:
            from perfkit.sources.live import LiveConfig, live_incident, open_live

            incident = live_incident(
                start=start,
                end=end,
                since=since,
                baseline_start=baseline_start,
                baseline_end=baseline_end,
                service=service,
                slo=slo,
                gpu_count=gpu_count,
                usd_per_gpu_hour=usd_per_gpu_hour,
            )
            cfg = LiveConfig(
                prometheus_url,
                token_env=prometheus_token_env,
                token_file=prometheus_token_file,
                basic_auth_user=prometheus_basic_auth_user,
                password_env=prometheus_password_env,
                timeout_s=float(timeout_s or 30.0),
                ca_file=tls_ca_file,
                alertmanager_url=alertmanager_url,
                logs=[p for p in logs.split(",") if p.strip()] if logs else [],
                deploys=deploys,
                git_repo=git_repo,
                release_metric=release_metric,
            )
            live = open_live(cfg, incident)
            ctx.incident, ctx.engine = incident, live.engine
            ctx.events, ctx.logs, ctx.stats = live.events, live.logs, live.stats
            ctx.add_missing(live.missing)
        else:
            raise ConfigError(
                "no evidence source: set `bundle` (an incident bundle folder) or `prometheus_url`"
            )
    except PerfkitError as exc:
        from perfkit.secrets import redact_text

        ctx.error = redact_text(str(exc))
    return ctx


def _open_bundle(
    ctx: Context,
    bundle: str,
    start: str,
    end: str,
    baseline_start: str,
    baseline_end: str,
    service: str,
    slo: dict[str, float] | None,
) -> None:
    from perfkit.incident import read_incident
    from perfkit.query.local import LocalEngine
    from perfkit.sources.bundle import load_bundle

    root = resolve_bundle(bundle)
    incident = with_overrides(
        read_incident(root / "incident.yaml"),
        start=start or None,
        end=end or None,
        baseline_start=baseline_start or None,
        baseline_end=baseline_end or None,
    )
    if incident.baseline is None:
        incident.baseline = default_baseline(incident.window)
    if service:
        incident.service = service
    for key, value in (slo or {}).items():
        if value:
            incident.slo[key] = float(value)
    b = load_bundle(root, incident=incident)
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


def _fig_json(fig: Any) -> dict[str, Any] | None:
    return fig.to_plotly_json() if fig is not None else None


def _events(ctx: Context) -> list[dict[str, Any]]:
    if ctx.events is None or not ctx.events.height:
        return []
    return [dict(r) for r in ctx.events.iter_rows(named=True)]


# -- sections -------------------------------------------------------------------------------------


@section("scope", "Scope")
def scope(ctx: Context) -> Section:
    inc = ctx.incident
    assert inc is not None
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
        ["evidence", f"{ctx.engine.name}: {ctx.params.get('bundle') or ctx.params.get('prometheus_url')}"],
    ]
    table = pl.DataFrame({"field": [r[0] for r in rows], "value": [str(r[1]) for r in rows]})
    f = Finding(
        "scope",
        "Scope",
        f"{inc.service}: {inc.title}",
        data={**inc.as_dict(), "source": ctx.engine.name},
        table=table_from_frame(table),
    )
    return Section(f, table)


@section("completeness", "Data completeness")
def completeness(ctx: Context) -> Section:
    from perfkit.analyses.completeness import completeness as run

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("completeness", lambda: run(ctx.engine, inc.window, stats=ctx.stats, events=ctx.events))
    table = res.table()
    status = {"complete": "ok", "degraded": "warn", "missing": "critical"}[res.verdict]
    present = [k for k, v in res.sources.items() if v]
    summary = f"{res.verdict}: sources {', '.join(present) or 'none'}; {res.skew_note}"
    gaps = sum(len(r.gaps) for r in res.rows)
    if gaps:
        summary += f"; {gaps} gaps"
    f = Finding(
        "completeness",
        "Data completeness",
        summary,
        status=status,
        data=res.as_dict(),
        table=table_from_frame(table),
        missing=list(res.missing),
    )
    return Section(f, table)


@section("changes", "What changed")
def changes(ctx: Context) -> Section:
    from perfkit.analyses.release import correlate

    inc = ctx.incident
    assert inc is not None
    rel = ctx.need("release", lambda: correlate(ctx.engine, inc.window, inc.baseline, ctx.events))
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
    latency = {k: v for k, v in rel.series.items() if k.startswith(("TTFT", "ITL", "TPOT"))}
    fig = figures.timeseries(
        latency,
        title="Latency quantiles with deploys",
        ytitle="seconds",
        window=inc.window,
        baseline=inc.baseline,
        events=_events(ctx),
        slo=inc.slo.get("ttft_p95_s"),
        log_y=True,
    )
    status = "critical" if rel.suspect or rel.unexplained else ("missing" if not rel.series else "ok")
    f = Finding(
        "changes",
        "What changed",
        rel.summary(),
        status=status,
        data=rel.as_dict(),
        table=table_from_frame(table),
        figure=_fig_json(fig),
        figure_caption=f"quantiles at {rel.step_s:g} s steps over {iso(rel.span.start)} → "
        f"{iso(rel.span.end)}; dotted lines: deploys/config changes",
        missing=list(rel.missing),
        queries=list(dict.fromkeys(rel.queries)),
    )
    return Section(f, table, fig)


@section("baseline", "Baseline vs now")
def baseline(ctx: Context) -> Section:
    from perfkit.analyses.baseline import compare

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("baseline", lambda: compare(ctx.engine, inc.window, inc.baseline, inc.slo))
    table = res.table()
    head = res.headline()
    breaches = [r.metric for r in res.rows if r.breach]
    if head and head.ratio:
        summary = (
            f"{head.metric} {head.incident:.3g} s vs {head.baseline:.3g} s in the baseline "
            f"({head.ratio:.2f}x)"
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


@section("stages", "Per-stage latency")
def stages(ctx: Context) -> Section:
    from perfkit.analyses.stages import breakdown

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("stages", lambda: breakdown(ctx.engine, inc.window, inc.baseline))
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
        figure_caption="means are increase(_sum)/increase(_count) of vLLM's per-stage histograms",
        missing=list(res.missing),
        queries=list(dict.fromkeys(res.queries)),
    )
    return Section(f, table, fig, [p95])


@section("triage", "Triage table")
def triage(ctx: Context) -> Section:
    from perfkit.triage.evidence import gather
    from perfkit.triage.table import run

    inc = ctx.incident
    assert inc is not None
    from perfkit.analyses.baseline import compare
    from perfkit.analyses.release import correlate
    from perfkit.analyses.stages import breakdown

    base = ctx.need("baseline", lambda: compare(ctx.engine, inc.window, inc.baseline, inc.slo))
    st = ctx.need("stages", lambda: breakdown(ctx.engine, inc.window, inc.baseline))
    rel = ctx.need("release", lambda: correlate(ctx.engine, inc.window, inc.baseline, ctx.events))
    ev = ctx.need(
        "evidence",
        lambda: gather(
            ctx.engine, inc, events=ctx.events, logs=ctx.logs, baseline=base, stages=st, release=rel
        ),
    )
    res = ctx.need("triage", lambda: run(ev))
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
    from perfkit.triage.figures import evidence_figure

    figs = []
    for r in res.confirmed():
        fig = evidence_figure(
            r.row.direction, ev, ctx.engine, rel.span, inc.window, inc.baseline, _events(ctx)
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
    return Section(
        f, table, fig, [other for _, other in figs[1:]], extra_findings=extra, style=_verdict_style
    )


VERDICT_COLOURS = {
    "confirmed": "background-color: #fde2e1",
    "ruled_out": "color: #6b7280",
    "inconclusive": "background-color: #fef3c7",
}


def _verdict_style(frame):  # pandas Styler: colour each row by its verdict
    return frame.style.hide(axis="index").apply(
        lambda row: [VERDICT_COLOURS.get(row.get("verdict"), "")] * len(row), axis=1
    )


@section("training", "Training step breakdown")
def training(ctx: Context) -> Section:
    from perfkit import signals as S
    from perfkit.triage.training import gather_training

    inc = ctx.incident
    assert inc is not None
    ev = ctx.need("train", lambda: gather_training(ctx.engine, inc))
    if not ev.present:
        return Section(
            Finding(
                "training",
                "Training step breakdown",
                "no train_* metrics: not a training job, or "
                "its loop does not export them (perfkit.train_exporter)",
                status="missing",
                missing=["training: no train_step_duration_seconds"],
            )
        )
    rows = []
    for name, d, unit in (
        ("step time", ev.step_s, "s"),
        ("data wait (slowest rank)", ev.data_wait_share, "share"),
        ("exposed communication", ev.comm_share, "share"),
        ("tokens/s", ev.tokens_per_s, "tok/s"),
        ("loss roughness", ev.loss_roughness, "rel"),
        ("loss spikes", ev.loss_spikes, "count"),
    ):
        b, i = d.get("baseline"), d.get("incident")
        rows.append(
            {
                "metric": name,
                "unit": unit,
                "baseline": None if b is None else float(b),
                "incident": None if i is None else float(i),
                "change_x": round(i / b, 2) if b and i is not None else None,
            }
        )
    table = pl.DataFrame(
        rows,
        schema={
            "metric": pl.Utf8,
            "unit": pl.Utf8,
            "baseline": pl.Float64,
            "incident": pl.Float64,
            "change_x": pl.Float64,
        },
    )
    span_start = inc.baseline.start if inc.baseline else inc.window.start
    from perfkit.frames import Window

    span = Window(span_start, inc.window.end)
    step = S.choose_step(span)
    fig = figures.timeseries(
        {
            "step time (s, avg over ranks)": S.gauge_series(
                ctx.engine, "train_step", span, step, combine="avg"
            ),
            "data wait (s, slowest rank)": S.gauge_series(
                ctx.engine, "train_data_wait", span, step, combine="max"
            ),
            "exposed comm (s, avg)": S.gauge_series(ctx.engine, "train_comm", span, step, combine="avg"),
            "loss (avg)": S.gauge_series(ctx.engine, "train_loss", span, step, combine="avg"),
        },
        title="Step time, data wait, communication and loss",
        ytitle="seconds / loss",
        window=inc.window,
        baseline=inc.baseline,
        events=_events(ctx),
    )
    share_w, share_c = ev.data_wait_share.get("incident"), ev.comm_share.get("incident")
    tps = ev.tokens_per_s
    summary = (
        f"step {ev.step_s.get('incident') or 0:.2f} s vs {ev.step_s.get('baseline') or 0:.2f} s; data wait "
        f"{(share_w or 0):.0%} of the step on the slowest rank, exposed comm {(share_c or 0):.0%}"
    )
    if tps.get("baseline") and tps.get("incident") is not None:
        summary += f"; tokens/s {tps['incident'] / tps['baseline']:.2f}x the baseline"
    f = Finding(
        "training",
        "Training step breakdown",
        summary,
        status="warn",
        data=ev.as_dict(),
        table=table_from_frame(table),
        figure=_fig_json(fig),
        figure_caption="train_* gauges from every rank; data wait from the slowest rank at each step",
    )
    return Section(f, table, fig)


@section("gpu", "GPU state")
def gpu(ctx: Context) -> Section:
    from perfkit.analyses.gpu import gpu_state

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("gpu", lambda: gpu_state(ctx.engine, inc.window, inc.baseline))
    fig = None
    if res.gpus:
        from perfkit import signals as S

        rel_span = ctx.results["release"].span if "release" in ctx.results else inc.window
        step = S.choose_step(rel_span)
        fig = figures.timeseries(
            {
                "GPU util % (avg)": S.gauge_series(ctx.engine, "gpu_util", rel_span, step, combine="avg"),
                "tensor active x100 (avg)": S.gauge_series(
                    ctx.engine, "tensor_active", rel_span, step, combine="avg"
                ).with_columns(pl.col("value") * 100),
            },
            title="GPU activity (DCGM)",
            ytitle="percent",
            window=inc.window,
            baseline=inc.baseline,
            events=_events(ctx),
        )
    nvml = ctx.need("nvml", lambda: _nvml_snapshot(ctx))
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

    inc = ctx.incident
    assert inc is not None
    res = ctx.need("cost", lambda: run(ctx.engine, inc.hardware, inc.window, inc.baseline))
    table = pl.DataFrame(
        {
            "window": list(res.tokens_per_s),
            "generated_tokens_per_s": list(res.tokens_per_s.values()),
            "usd_per_million_tokens": [res.usd_per_million.get(k) for k in res.tokens_per_s],
        },
        schema={
            "window": pl.Utf8,
            "generated_tokens_per_s": pl.Float64,
            "usd_per_million_tokens": pl.Float64,
        },
    )
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


@section("postmortem", "Findings")
def findings(ctx: Context) -> Section:
    from perfkit.analyses.postmortem import build

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
    )
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
