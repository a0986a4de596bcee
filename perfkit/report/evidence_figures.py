"""One evidence figure per confirmed direction: what the verification looked at, over time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import polars as pl

from perfkit.core.frames import Window
from perfkit.report import figures
from perfkit.triage.evidence import Evidence

TITLES = {
    "prefill_decode_interference": "Long-prompt arrivals vs ITL stalls (per 2 min)",
    "release_regression": "Shift at the suspect deploy",
    "scheduler_queueing": "Queue length vs running batch",
    "decode_efficiency": "Time per output token vs batch size",
    "kv_cache_allocation": "Prefill time, prefix-cache hits and KV-cache usage",
    "memory_oversubscription": "KV-cache usage and GPU memory around the out-of-memory crashes",
    "data_pipeline": "Data wait of the slowest rank vs step time, and the busiest CPU",
    "network_communication": "Exposed communication vs step time",
    "training_instability": "Training loss against the baseline",
}


class _Marks(TypedDict):
    """What every evidence figure marks: the incident window, the baseline, the deploys."""

    window: Window
    baseline: Window | None
    events: Sequence[Mapping[str, Any]]


#: the y-axis title of each direction whose figure is a time series of ``evidence_series``
YTITLES = {
    "scheduler_queueing": "requests",
    "decode_efficiency": "ms / requests",
    "kv_cache_allocation": "percent / s x100",
    "memory_oversubscription": "percent",
    "data_pipeline": "seconds",
    "network_communication": "seconds",
    "training_instability": "loss",
}


def evidence_figure(
    direction: str,
    ev: Evidence,
    series: Mapping[str, pl.DataFrame] | None,
    window: Window,
    baseline: Window | None,
    events: Sequence[Mapping[str, Any]],
) -> Any:
    """A plotly figure for ``direction``'s evidence, or None when the direction has none to draw.

    ``series`` is what ``perfkit.analyses.evidence_series.evidence_series`` computed for it
    (None for the directions whose evidence is already in ``ev``).
    """
    title = TITLES.get(direction, direction)
    kw: _Marks = {"window": window, "baseline": baseline, "events": events}
    if direction == "prefill_decode_interference":
        it = ev.interference
        if it.series is None or not it.series.height:
            return None
        return figures.two_axes(
            (it.arrivals_label, it.series.select("ts", pl.col("long_arrivals").alias("value"))),
            (it.stalls_label, it.series.select("ts", pl.col("itl_stalls").alias("value"))),
            title=title,
            left_title="requests" if it.long_threshold_tokens is not None or it.proxy is None else "per bin",
            right_title="ITL stalls" if it.stall_threshold_s is not None else it.stalls_label,
            window=window,
        )
    if direction == "release_regression":
        rel = {k: v for k, v in ev.release.series.items() if k.startswith(("TTFT", "ITL", "TPOT", "E2E"))}
        return figures.timeseries(rel, title=title, ytitle="seconds", log_y=True, **kw)
    if direction in YTITLES and series is not None:
        return figures.timeseries(series, title=title, ytitle=YTITLES[direction], **kw)
    return None
