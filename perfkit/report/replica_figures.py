"""Small multiples, one panel a replica: each replica's per-token median over time beside the fleet's
(issue 37 item 3), the replicas that diverge first and drawn in red. A fleet's sum hides one slow
engine; side by side, it is the panel whose line leaves the grey one at the onset."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from perfkit.core.frames import Window, iso
from perfkit.report.figures import BASELINE_FILL, PALETTE, SLO_COLOR, WINDOW_FILL, with_gaps

MAX_PANELS = 12
"""Most replicas drawn (the diverging ones first): past a dozen panels none is readable."""
COLUMNS = 4


def replicas_figure(
    series: pl.DataFrame,
    label: str,
    outliers: list[str],
    ytitle: str,
    window: Window,
    baseline: Window | None,
) -> Any:
    """The panels, or None when fewer than two replicas have a series."""
    if series is None or not series.height or label not in series.columns:
        return None
    frame = series.drop_nulls("value").with_columns(pl.col("value") * 1e3)
    names = sorted({str(v) for v in frame[label].to_list() if v not in (None, "")})
    if len(names) < 2:
        return None
    shown = [n for n in outliers if n in names] + [n for n in names if n not in outliers]
    shown = shown[:MAX_PANELS]
    fleet = frame.group_by("ts").agg(pl.col("value").median()).sort("ts")
    rows = math.ceil(len(shown) / COLUMNS)
    cols = min(COLUMNS, len(shown))
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=True, subplot_titles=shown,
                        vertical_spacing=0.12 if rows > 1 else 0.0, horizontal_spacing=0.03)  # fmt: skip
    fx, fy = with_gaps(fleet["ts"].to_list(), fleet["value"].to_list())
    seen: set[str] = set()  # one legend entry per kind of line
    for k, name in enumerate(shown):
        row, col = k // COLUMNS + 1, k % COLUMNS + 1
        mine = frame.filter(pl.col(label) == name).sort("ts")
        x, y = with_gaps(mine["ts"].to_list(), mine["value"].to_list())
        odd = name in outliers
        for group, xs, ys, line in (
            ("every replica's median", fx, fy, {"color": "#9ca3af", "width": 1.2, "dash": "dot"}),
            (
                "diverges" if odd else "replica",
                x,
                y,
                {"color": SLO_COLOR if odd else PALETTE[0], "width": 1.6},
            ),
        ):
            fig.add_trace(go.Scatter(x=xs, y=ys, name=group, legendgroup=group, showlegend=group not in seen,
                                     line=line, connectgaps=False), row=row, col=col)  # fmt: skip
            seen.add(group)
    for w, fill in ((baseline, BASELINE_FILL), (window, WINDOW_FILL)):
        if w is not None:
            fig.add_vrect(x0=iso(w.start), x1=iso(w.end), fillcolor=fill, line_width=0, layer="below",
                          row="all", col="all")  # fmt: skip
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text=ytitle, row=1, col=1)
    fig.update_layout(
        title={"text": f"Each replica ({label}) against the fleet", "x": 0.01},
        height=220 * rows + 110,
        margin={"l": 60, "r": 20, "t": 70, "b": 40},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.35 if rows == 1 else -0.12},  # below the dates
    )
    return fig
