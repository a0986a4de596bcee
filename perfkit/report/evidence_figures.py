"""One evidence figure per confirmed direction: what the verification looked at, over time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import polars as pl

from perfkit.core.frames import Window
from perfkit.report import figures
from perfkit.triage.evidence import Evidence
from perfkit.triage.rows import BY_DIRECTION


class _Marks(TypedDict):
    """What every evidence figure marks: the incident window, the baseline, the deploys."""

    window: Window
    baseline: Window | None
    events: Sequence[Mapping[str, Any]]


def evidence_figure(
    direction: str,
    ev: Evidence,
    series: Mapping[str, pl.DataFrame] | None,
    window: Window,
    baseline: Window | None,
    events: Sequence[Mapping[str, Any]],
) -> Any:
    """A plotly figure for ``direction``'s evidence, or None when the direction has none to draw.

    ``series`` is what its row's figure function (:attr:`perfkit.triage.row_types.Row.figure`)
    computed for it (None for the directions whose evidence is already in ``ev``).
    """
    figure = BY_DIRECTION[direction].figure
    if figure is None:
        return None
    title = figure.title
    kw: _Marks = {"window": window, "baseline": baseline, "events": events}
    if direction == "prefill_decode_interference":
        it = ev.interference
        if it.series is None or not it.series.height:
            return None
        # the claim is "against a baseline": its bins are drawn too, the line broken between the windows
        both = pl.concat([f for f in (it.baseline_series, it.series) if f is not None and f.height]).sort(
            "ts"
        )
        return figures.two_axes(
            (it.arrivals_label, both.select("ts", pl.col("long_arrivals").alias("value"))),
            (it.stalls_label, both.select("ts", pl.col("itl_stalls").alias("value"))),
            title=title,
            left_title="requests" if it.long_threshold_tokens is not None or it.proxy is None else "per bin",
            right_title="ITL stalls" if it.stall_threshold_s is not None else it.stalls_label,
            window=window,
            baseline=baseline if it.baseline_series is not None and it.baseline_series.height else None,
        )
    if direction == "release_regression":  # the latency quantiles, or a training job's step time
        rel = {k: v for k, v in ev.release.series.items() if k.startswith(("TTFT", "ITL", "TPOT", "E2E")) and v.height}  # fmt: skip
        step = {k: v for k, v in ev.release.series.items() if k == "step time" and v.height}
        if not rel and not step:
            return None
        return figures.timeseries(rel or step, title=title, ytitle="seconds", log_y=bool(rel), **kw)
    if figure.scatter and series is not None and len(series) >= 2:
        (yname, y), (xname, x) = list(series.items())[0], list(series.items())[-1]
        if x is not None and y is not None and x.height and y.height:
            return figures.scatter(
                x, y, xtitle=xname, ytitle=yname, title=title, window=window, baseline=baseline
            )
        return None
    if (
        figure.series is not None
        and series is not None
        and any(f is not None and f.height for f in series.values())
    ):
        return figures.timeseries(series, title=title, ytitle=figure.ytitle or "", **kw)
    return None  # nothing to draw: no empty chart
