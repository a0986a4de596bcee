"""How profiler traces (:mod:`perfkit.traces`) look in the training runbook: one step of one rank
on a timeline, the GPU time of every traced rank broken down the way HTA does, and the trace
section's finding (:func:`trace_section`; wired by :mod:`perfkit.app.runbooks.training`).

**The step timeline** (:func:`step_timeline`) draws one ``ProfilerStep#N`` of one rank: a row per
GPU stream with its kernels coloured by HTA's kernel type (computation, communication, memory,
other), and a CPU row with the ``enumerate(DataLoader)#...__next__`` calls (PyTorch's
``record_function`` around fetching a batch) inside the step. It shows at a glance what the GPU
waits for: a long data-loader call with the streams empty (the input pipeline), or a
communication kernel running alone after compute (exposed collectives). A real step has
thousands of kernels; the kernels of one row and type closer than :data:`MERGE_GAP_SHARE` of the
step are drawn as one bar (invisible at the figure's resolution anyway), at most
:data:`MAX_SEGMENTS` bars in all. Bars are thick line segments (x: start and end, a gap between),
which both plotly and the postmortem's static renderer (:mod:`perfkit.report.static`) draw.

Times on the x axis are milliseconds from the step's start (CPU ``ProfilerStep`` start).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl

from perfkit.core.findings import Finding, table_from_frame
from perfkit.report.bench_figures import TablesSection
from perfkit.report.sections import Section
from perfkit.traces.breakdown import COMMUNICATION, COMPUTATION, MEMORY, OTHER, merge, types_of
from perfkit.traces.read import LOADER_PREFIX, RankTrace
from perfkit.traces.steps import Step

MERGE_GAP_SHARE = 1.0 / 2000
"""Kernels closer than 1/2000 of the step are one bar: a 1000-pixel-wide figure cannot show the gap
(half a pixel), and a step of thousands of kernels then draws as tens of bars."""
MAX_SEGMENTS = 4000
"""At most 4000 bars in the figure (plotly's SVG stays responsive; the JSON a few hundred kB)."""
BAR_WIDTH = 14  # px: one row's bar thickness
COLORS = {
    COMPUTATION: "#1f77b4",
    COMMUNICATION: "#ff7f0e",
    MEMORY: "#2ca02c",
    OTHER: "#7f7f7f",
    "data loader": "#d62728",
}
LABELS = {
    COMPUTATION: "compute",
    COMMUNICATION: "NCCL",
    MEMORY: "memcpy/memset",
    OTHER: "other",
    "data loader": "DataLoader __next__",
}
LOADER_ROW = "CPU: data loader"


DATA_STALL_SHARE = 0.05
"""A data-loader call longer than 5 % of its step is a stall worth drawing: a healthy loader hands
over a prefetched batch in tens of µs (the real fixtures' ``enumerate(DataLoader)`` ops: 71 µs)."""


def typical_step(steps: Sequence[Step]) -> Step | None:
    """The step of median duration (HTA's trimming already dropped the cut-off last one): what a
    step of this rank usually looks like, not its worst."""
    usable = [s for s in steps if s.dur_us > 0]
    if not usable:
        return None
    ordered = sorted(usable, key=lambda s: (s.dur_us, s.step))
    return ordered[(len(ordered) - 1) // 2]


def pick_step(report: Any) -> tuple[int, Step, str] | None:
    """Which rank and step to draw from a :class:`~perfkit.traces.analysis.TraceReport`: the step
    with the longest data-loader wait on any rank when that wait is a stall
    (:data:`DATA_STALL_SHARE` of the step: the rank every other one waits for), else the
    lowest-numbered rank's median step. Returns (rank, step, why) or None without steps."""
    waits = [(s.dataloader_us, r.rank, s) for r in report.ranks for s in r.steps if s.dur_us > 0]
    if not waits:
        return None
    wait, rank, step = max(waits, key=lambda w: (w[0], -w[1], -w[2].step))
    if wait >= DATA_STALL_SHARE * step.dur_us:
        return rank, step, f"the longest data-loader wait of any traced rank ({wait / 1000.0:,.0f} ms)"
    for r in sorted(report.ranks, key=lambda r: r.rank):
        typical = typical_step(r.steps)
        if typical is not None:
            return r.rank, typical, "a step of median duration (no data-loader stall in these traces)"
    return None


def _bars(start: np.ndarray, end: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged when closer than ``gap`` (µs)."""
    s, e = merge(start, end)
    if len(s) < 2:
        return s, e
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] - e[:-1] > gap
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def _segments(
    rows: list[tuple[str, str, np.ndarray, np.ndarray]], t0: float
) -> dict[str, tuple[list[Any], list[Any]]]:
    """Per kernel type: x (ms from t0) and y (row label) with None between bars."""
    out: dict[str, tuple[list[Any], list[Any]]] = {}
    for row, kind, s, e in rows:
        xs, ys = out.setdefault(kind, ([], []))
        for a, b in zip(s, e, strict=True):
            xs += [round((float(a) - t0) / 1000.0, 3), round((float(b) - t0) / 1000.0, 3), None]
            ys += [row, row, None]
    return out


def step_timeline(trace: RankTrace, step: Step, *, phase: str = "") -> go.Figure | None:
    """One step of one rank: the GPU streams' kernels by type and the CPU's data-loader calls
    (module docstring); None when no GPU event falls in the step."""
    marks, names = trace.marks, trace.names
    t0, dur, label = step.ts_us, step.dur_us, f"ProfilerStep#{step.step}"
    t1 = t0 + dur
    gap = dur * MERGE_GAP_SHARE
    d = trace.device
    inside = (d["ts"] < t1) & (d["ts"] + d["dur"] > t0) & (d["stream"] >= 0)
    if not inside.any():
        return None
    ts = np.clip(d["ts"][inside].astype(np.float64), t0, t1)
    end = np.clip((d["ts"] + d["dur"])[inside].astype(np.float64), t0, t1)
    streams = d["stream"][inside]
    kinds = types_of(names, d["name"][inside])
    rows: list[tuple[str, str, np.ndarray, np.ndarray]] = []
    is_loader = np.array([names[n].startswith(LOADER_PREFIX) for n in marks["name"]], dtype=bool)
    lt, ld = marks["ts"][is_loader].astype(np.float64), marks["dur"][is_loader].astype(np.float64)
    keep = (lt < t1) & (lt + ld > t0)
    if keep.any():
        s, e = _bars(np.clip(lt[keep], t0, t1), np.clip(lt[keep] + ld[keep], t0, t1), gap)
        rows.append((LOADER_ROW, "data loader", s, e))
    for stream in sorted({int(x) for x in streams}):
        on = streams == stream
        for kind in (COMPUTATION, COMMUNICATION, MEMORY, OTHER):
            pick = on & (kinds == kind)
            if pick.any():
                s, e = _bars(ts[pick], end[pick], gap)
                rows.append((f"GPU stream {stream}", kind, s, e))
    total = sum(len(s) for _, _, s, _ in rows)
    if total > MAX_SEGMENTS:  # coarser merging until it fits: the figure, not the numbers, is cut
        factor = total / MAX_SEGMENTS
        rows = [(r, k, *_bars(s, e, gap * 4 * factor)) for r, k, s, e in rows]
    fig = go.Figure()
    order = [LOADER_ROW] + sorted({r for r, *_ in rows if r != LOADER_ROW}, key=lambda r: int(r.split()[-1]))
    for kind, (xs, ys) in _segments(rows, t0).items():
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"color": COLORS[kind], "width": BAR_WIDTH},
                name=LABELS[kind],
                hovertemplate="%{y}: %{x:.1f} ms<extra>" + LABELS[kind] + "</extra>",
            )
        )
    rank = f"rank {trace.rank}" + (f", {phase}" if phase else "")
    fig.update_layout(
        title={"text": f"One step, {rank}: {label} ({dur / 1000.0:,.0f} ms)", "x": 0.01},
        height=160 + 46 * len(order),
        margin={"l": 130, "r": 20, "t": 50, "b": 40},
        template="plotly_white",
        xaxis={"title": "ms from the step's start", "range": [0, round(dur / 1000.0, 3)]},
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [r for r in order if any(r == row for row, *_ in rows)],
            "autorange": "reversed",
        },
        legend={"orientation": "h", "y": -0.25},
        showlegend=True,
    )
    return fig


def rank_breakdown(phases: Sequence[tuple[str, Any]]) -> go.Figure | None:
    """Per traced rank and phase: HTA's temporal breakdown (compute, non-compute, idle, % of the
    rank's kernel time) as stacked bars, and the data loader's share of the step as a marker.
    ``phases``: (name, :class:`perfkit.traces.analysis.TraceReport`) pairs."""
    labels: list[str] = []
    parts: dict[str, list[float | None]] = {"compute": [], "non-compute": [], "idle": []}
    loader: list[float | None] = []
    for name, report in phases:
        for r in report.ranks:
            d = r.as_dict()
            if d.get("compute_pct") is None:
                continue
            labels.append(f"{name} · rank {r.rank}" if name else f"rank {r.rank}")
            parts["compute"].append(d["compute_pct"])
            parts["non-compute"].append(d["non_compute_pct"])
            parts["idle"].append(d["idle_pct"])
            loader.append(d.get("dataloader_pct"))
    if not labels:
        return None
    colors = {"compute": COLORS[COMPUTATION], "non-compute": COLORS[COMMUNICATION], "idle": "#c7c7c7"}
    fig = go.Figure()
    for key, values in parts.items():
        fig.add_trace(
            go.Bar(
                y=labels,
                x=values,
                orientation="h",
                name=f"{key} (% of kernel time)",
                marker={"color": colors[key]},
            )
        )
    if any(v for v in loader):
        fig.add_trace(
            go.Scatter(
                y=labels,
                x=loader,
                mode="markers",
                marker={"color": COLORS["data loader"], "size": 10, "symbol": "diamond"},
                name="data loader (% of the step)",
            )
        )
    fig.update_layout(
        title={"text": "GPU time per traced rank (HTA's temporal breakdown)", "x": 0.01},
        barmode="stack",
        height=150 + 24 * len(labels),
        margin={"l": 140, "r": 20, "t": 50, "b": 60},
        template="plotly_white",
        xaxis={"title": "percent", "range": [0, 100]},
        yaxis={"type": "category", "autorange": "reversed"},
        legend={"orientation": "h", "y": -0.12},
    )
    return fig


# -- the runbook's trace section ---------------------------------------------------------------------------------


@dataclass
class TracePhase:
    """One profiled run: its name (``traces/<name>``), which window it lies in, its analysis."""

    name: str
    window: str  # baseline | incident | "" (neither)
    report: Any  # perfkit.traces.analysis.TraceReport
    world_size: int | None

    @property
    def label(self) -> str:
        return self.window or self.name or "traces"


def _launch(d: Mapping[str, Any], key: str) -> float | None:
    launch = d.get("launch")
    value = launch.get(key) if isinstance(launch, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _rank_rows(phases: Sequence[TracePhase]) -> pl.DataFrame:
    rows = []
    for p in phases:
        for r in p.report.ranks:
            d = r.as_dict()
            steps = [s.dur_us for s in r.steps]
            rows.append(
                {
                    "phase": p.label,
                    "rank": r.rank,
                    "GPUs": p.world_size,
                    "step ms": round(sum(steps) / len(steps) / 1000.0, 1) if steps else None,
                    "compute %": d["compute_pct"],
                    "non-compute %": d["non_compute_pct"],
                    "idle %": d["idle_pct"],
                    "comm hidden by compute %": d["comm_comp_overlap_pct"],
                    "data loader % of step": d["dataloader_pct"],
                    "launch delay p95 µs": _launch(d, "launch_delay_p95_us"),
                }
            )
    schema = {
        "phase": pl.Utf8,
        "rank": pl.Int64,
        "GPUs": pl.Int64,
        "step ms": pl.Float64,
        "compute %": pl.Float64,
        "non-compute %": pl.Float64,
        "idle %": pl.Float64,
        "comm hidden by compute %": pl.Float64,
        "data loader % of step": pl.Float64,
        "launch delay p95 µs": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f} %" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} %"


def phase_text(p: TracePhase) -> str:
    """One phase's ranks in words: compute and non-compute shares, the data loader's worst rank."""
    ranks = [r for r in p.report.ranks if r.temporal is not None]
    if not ranks:
        return f"{p.label} traces: no GPU events"
    ds = [r.as_dict() for r in ranks]
    of = f" of {p.world_size}" if p.world_size else ""
    text = (
        f"{p.label} traces ({len(ranks)}{of} ranks): compute {_span([d['compute_pct'] for d in ds])} of GPU "
        f"time, non-compute {_span([d['non_compute_pct'] for d in ds])}, idle {_span([d['idle_pct'] for d in ds])}"
    )
    overlap = [d["comm_comp_overlap_pct"] for d in ds if d["comm_comp_overlap_pct"] is not None]
    if overlap:
        text += f", communication hidden under compute {_span(overlap)}"
    loader = sorted(((d["dataloader_pct"] or 0.0, d["rank"]) for d in ds), reverse=True)
    top, rank = loader[0]
    if top >= 1.0:
        others = [v for v, r in loader[1:]]
        text += (
            f"; rank {rank} waits for the data loader {top:.0f} % of its steps"
            + (f" (the others at most {max(others):.0f} %)" if others else "")
            + ": a synchronous job runs at its pace, the other ranks wait for it in their collectives"
        )
    else:
        text += "; no rank waits for the data loader"
    return text


def trace_section(
    phases: Sequence[TracePhase],
    timeline: Any,
    timeline_why: str,
    ranks_figure: Any,
    notes: Sequence[str] = (),
) -> Section:
    """The traced ranks of every profiled run: HTA's breakdown per rank, stragglers, one step."""
    table = _rank_rows(phases)
    texts = [phase_text(p) for p in phases]
    stragglers = []
    for p in phases:
        s = p.report.stragglers
        if s.ranks:
            stragglers.append(f"{p.label}: ranks {', '.join(map(str, s.ranks))} start {s.kernel} late")
        elif s.note:
            stragglers.append(f"{p.label}: no straggler ({s.note})")
    summary = "; ".join(texts)
    if stragglers:
        summary += ". Stragglers (HTA's late-start test): " + "; ".join(stragglers)
    shown: list[dict[str, Any]] = [
        {"name": p.name, "window": p.window, "world_size": p.world_size, **p.report.as_dict()} for p in phases
    ]
    data = {"phases": shown, "text": texts}
    for phase in shown:
        for rank in phase["ranks"]:
            rank.pop("top_kernels", None)  # the table keeps the finding small; `perfkit trace` has them
            rank["idle_breakdown"].pop("streams", None)
    extra = []
    if ranks_figure is not None:
        extra.append(
            Finding(
                "trace_ranks",
                "GPU time per traced rank",
                "HTA's temporal breakdown of every traced rank, per profiled run",
                figure=ranks_figure.to_plotly_json(),
                figure_caption="compute, non-compute (communication, memory copies alone on the GPU) and idle "
                "as % of each rank's kernel time; diamonds: the data loader's share of the step",
            )
        )
    f = Finding(
        "trace",
        "Profiler traces: where each rank's step goes",
        summary,
        status="ok",
        data=data,
        table=table_from_frame(table),
        figure=timeline.to_plotly_json() if timeline is not None else None,
        figure_caption=f"one step of one rank, {timeline_why}; bars: kernels by HTA's type on each GPU "
        "stream, and the DataLoader __next__ calls on the CPU"
        if timeline is not None
        else None,
    )
    return TablesSection(f, table, timeline, extra_figures=[ranks_figure] if ranks_figure else [],
                         extra_findings=extra, notes=list(dict.fromkeys(notes)))  # fmt: skip


def no_traces_section(why: str) -> Section:
    """The trace section when there are no profiler traces: what is missing and how to get them."""
    text = (
        f"no profiler traces: {why}. Record a few steps with torch.profiler (schedule(wait=1, warmup=1, "
        "active=5), on_trace_ready=tensorboard_trace_handler(DIR)) on every rank, put the files in the "
        "bundle's traces/ (or set `traces`), and rerun"
    )
    return Section(
        Finding(
            "trace",
            "Profiler traces: where each rank's step goes",
            text,
            status="missing",
            missing=[f"trace: {why}"],
        )
    )


__all__ = [
    "MAX_SEGMENTS",
    "TracePhase",
    "no_traces_section",
    "phase_text",
    "pick_step",
    "rank_breakdown",
    "step_timeline",
    "trace_section",
    "typical_step",
]
