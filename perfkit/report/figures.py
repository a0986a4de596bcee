"""Plotly figures for runbooks and postmortems: incident window shaded, deploys marked, SLOs drawn.

Every figure is built from frames (never from a query) so the same figure can be rebuilt from a
finding's data. Times are UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import polars as pl

from perfkit.core.frames import Window, iso

WINDOW_FILL = "rgba(214, 39, 40, 0.10)"
BASELINE_FILL = "rgba(127, 127, 127, 0.10)"
DEPLOY_COLOR = "#6a3d9a"
SLO_COLOR = "#d62728"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f")


def _layout(fig: go.Figure, title: str, ytitle: str, *, height: int = 360) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.18},
        yaxis_title=ytitle,
        xaxis_title="time (UTC)",
        hovermode="x unified",
    )
    return fig


def mark_windows(fig: go.Figure, window: Window | None, baseline: Window | None) -> None:
    if baseline is not None:
        fig.add_vrect(
            x0=iso(baseline.start),
            x1=iso(baseline.end),
            fillcolor=BASELINE_FILL,
            line_width=0,
            layer="below",
            annotation_text="baseline",
            annotation_position="top left",
        )
    if window is not None:
        fig.add_vrect(
            x0=iso(window.start),
            x1=iso(window.end),
            fillcolor=WINDOW_FILL,
            line_width=0,
            layer="below",
            annotation_text="incident",
            annotation_position="top left",
        )


def mark_events(
    fig: go.Figure,
    events: Sequence[Mapping[str, Any]],
    kinds: tuple[str, ...] = ("deploy", "rollback", "config"),
) -> None:
    for e in events:
        if e.get("kind") not in kinds:
            continue
        ts = e["ts"] if isinstance(e["ts"], str) else iso(e["ts"])
        label = e.get("version") or e.get("kind")
        fig.add_shape(
            type="line",
            x0=ts,
            x1=ts,
            y0=0,
            y1=1,
            xref="x",
            yref="paper",
            line={"color": DEPLOY_COLOR, "width": 1.5, "dash": "dot"},
        )
        fig.add_annotation(
            x=ts,
            y=1.0,
            xref="x",
            yref="paper",
            text=str(label),
            showarrow=False,
            yanchor="bottom",
            font={"size": 10, "color": DEPLOY_COLOR},
        )


def mark_slo(fig: go.Figure, slo: float | None, label: str = "SLO", *, text: str | None = None) -> None:
    """A dashed line at ``slo``, labelled ``"<label> <slo>"`` (or ``text``)."""
    if slo is None:
        return
    fig.add_shape(
        type="line",
        x0=0,
        x1=1,
        xref="paper",
        y0=slo,
        y1=slo,
        yref="y",
        line={"color": SLO_COLOR, "width": 1.5, "dash": "dash"},
    )
    fig.add_annotation(
        x=1,
        xref="paper",
        y=slo,
        yref="y",
        text=text or f"{label} {slo:g}",
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
        font={"size": 10, "color": SLO_COLOR},
    )


def timeseries(
    series: Mapping[str, pl.DataFrame],
    *,
    title: str,
    ytitle: str,
    window: Window | None = None,
    baseline: Window | None = None,
    events: Sequence[Mapping[str, Any]] = (),
    slo: float | None = None,
    log_y: bool = False,
) -> go.Figure:
    """Lines from frames with ``ts`` and ``value``, windows shaded, deploys and SLO marked."""
    fig = go.Figure()
    for i, (name, frame) in enumerate(series.items()):
        if frame is None or not frame.height:
            continue
        x, y = with_gaps(frame["ts"].to_list(), frame["value"].to_list())
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                name=name,
                mode="lines+markers" if None in y else "lines",  # a point alone between gaps still shows
                marker={"size": 4},
                line={"color": PALETTE[i % len(PALETTE)], "width": 1.6},
                connectgaps=False,
            )
        )
    mark_windows(fig, window, baseline)
    mark_events(fig, events)
    mark_slo(fig, slo)
    if log_y and fig.data:
        fig.update_yaxes(type="log")
    return _layout(fig, title, ytitle)


def scatter(
    x: pl.DataFrame,
    y: pl.DataFrame,
    *,
    xtitle: str,
    ytitle: str,
    title: str,
    window: Window,
    baseline: Window | None = None,
) -> go.Figure:
    """A relationship: ``y`` against ``x`` (frames with ``ts`` and ``value``), one point per time
    both have, the baseline's points grey and the incident window's red (the rest, between them,
    left out): whether the incident moved along the same curve (more load) or to another (slower)."""
    joined = x.select("ts", pl.col("value").alias("x")).join(
        y.select("ts", pl.col("value").alias("y")), on="ts"
    )
    joined = joined.filter(pl.col("x").is_finite() & pl.col("y").is_finite())
    fig = go.Figure()
    sides = [("baseline", baseline, "#9ca3af"), ("incident", window, "#dc2626")]
    for name, w, colour in sides:
        if w is None:
            continue
        part = joined.filter((pl.col("ts") >= w.start) & (pl.col("ts") <= w.end))
        if part.height:
            fig.add_trace(
                go.Scatter(
                    x=part["x"].to_list(),
                    y=part["y"].to_list(),
                    name=f"{name} ({part.height} points)",
                    mode="markers",
                    marker={"size": 6, "color": colour, "opacity": 0.75},
                    text=[str(t) for t in part["ts"].to_list()],
                    hovertemplate="%{text}<br>"
                    + xtitle
                    + " %{x:.3g}<br>"
                    + ytitle
                    + " %{y:.3g}<extra></extra>",
                )
            )
    _layout(fig, title, ytitle)
    fig.update_layout(xaxis_title=xtitle, hovermode="closest")
    return fig


GAP_STEPS = 2.5
"""Two points further apart than 2.5 of the series' usual steps have a gap between them (a restart,
an exporter down, a scrape that failed): the line breaks there instead of drawing a straight line
across time nobody measured. A single late scrape (up to 2 steps) stays connected."""


def with_gaps(ts: list[Any], values: list[Any]) -> tuple[list[str], list[Any]]:
    """ISO times and values with a ``None`` point inside every gap (:data:`GAP_STEPS`)."""
    if len(ts) < 3:
        return [iso(t) for t in ts], list(values)
    steps = sorted((b - a).total_seconds() for a, b in zip(ts, ts[1:], strict=False))
    usual = steps[len(steps) // 2]
    x: list[str] = []
    y: list[Any] = []
    for k, (t, v) in enumerate(zip(ts, values, strict=True)):
        if k and usual > 0 and (t - ts[k - 1]).total_seconds() > GAP_STEPS * usual:
            x.append(iso(ts[k - 1] + (t - ts[k - 1]) / 2))
            y.append(None)
        x.append(iso(t))
        y.append(v)
    return x, y


def bars(
    categories: Sequence[str],
    groups: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    ytitle: str,
    stacked: bool = False,
) -> go.Figure:
    fig = go.Figure()
    for i, (name, values) in enumerate(groups.items()):
        fig.add_trace(
            go.Bar(
                x=list(categories),
                y=[v if v is not None else 0 for v in values],
                name=name,
                marker_color=PALETTE[i % len(PALETTE)],
            )
        )
    fig.update_layout(barmode="stack" if stacked else "group")
    fig = _layout(fig, title, ytitle)
    fig.update_layout(xaxis_title="", hovermode="closest")
    return fig


def two_axes(
    left: tuple[str, pl.DataFrame],
    right: tuple[str, pl.DataFrame],
    *,
    title: str,
    left_title: str,
    right_title: str,
    window: Window | None = None,
    baseline: Window | None = None,
) -> go.Figure:
    """Bars on the left axis, a line on the right axis (e.g. long-prompt arrivals vs ITL stalls); the
    line breaks where the bins do (:func:`with_gaps`: the time between a baseline and the incident is
    not drawn across as if it had been measured)."""
    fig = go.Figure()
    ln, lf = left
    rn, rf = right
    rx, ry = with_gaps(rf["ts"].to_list(), rf["value"].to_list())
    fig.add_trace(
        go.Bar(
            x=[iso(t) for t in lf["ts"].to_list()],
            y=lf["value"].to_list(),
            name=ln,
            marker_color=PALETTE[1],
            opacity=0.7,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=rx,
            y=ry,
            name=rn,
            yaxis="y2",
            mode="lines+markers",
            line={"color": PALETTE[0]},
        )
    )
    fig.update_layout(
        yaxis={"rangemode": "tozero"},  # counts: an axis that starts above 0 exaggerates the swing
        yaxis2={
            "title": right_title,
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "rangemode": "tozero",
            "tickformat": ".3~g",  # the right axis' ticks follow the left's grid: no 239.7
        },
    )
    mark_windows(fig, window, baseline)
    return _layout(fig, title, left_title)
