"""One evidence figure per confirmed direction: what the verification looked at, over time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import signals as S
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


def evidence_figure(
    direction: str,
    ev: Evidence,
    engine: Any,
    span: Window,
    window: Window,
    baseline: Window | None,
    events: Sequence[Mapping[str, Any]],
) -> Any:
    """A plotly figure for ``direction``'s evidence, or None when the direction has none to draw."""
    step = S.choose_step(span)
    title = TITLES.get(direction, direction)
    kw: _Marks = {"window": window, "baseline": baseline, "events": events}
    if direction == "prefill_decode_interference":
        it = ev.interference
        if it.series is None or not it.series.height:
            return None
        return figures.two_axes(
            (
                f"long prompts (>{it.long_threshold_tokens:g} tok) arriving",
                it.series.select("ts", pl.col("long_arrivals").alias("value")),
            ),
            (
                f"ITL gaps > {it.stall_threshold_s:g} s",
                it.series.select("ts", pl.col("itl_stalls").alias("value")),
            ),
            title=title,
            left_title="requests",
            right_title="ITL stalls",
            window=window,
        )
    if direction == "release_regression":
        series = {k: v for k, v in ev.release.series.items() if k.startswith(("TTFT", "ITL", "TPOT", "E2E"))}
        return figures.timeseries(series, title=title, ytitle="seconds", log_y=True, **kw)
    if direction == "scheduler_queueing":
        return figures.timeseries(
            {
                "waiting requests": S.gauge_series(engine, "waiting", span, step),
                "running requests": S.gauge_series(engine, "running", span, step),
            },
            title=title,
            ytitle="requests",
            **kw,
        )
    if direction == "decode_efficiency":
        tok = ev.per_token()
        per_token = S.quantile_series(engine, tok, 0.5, span, step).with_columns(pl.col("value") * 1000)
        running = S.gauge_series(engine, "running", span, step)
        return figures.timeseries(
            {f"{tok.upper()} p50 (ms)": per_token, "running requests (batch)": running},
            title=title,
            ytitle="ms / requests",
            **kw,
        )
    if direction == "kv_cache_allocation":
        prefill = S.mean_series(engine, "prefill", span, step).with_columns(pl.col("value") * 100)
        kv = S.gauge_series(engine, "kv_cache_usage", span, step, combine="max").with_columns(
            pl.col("value") * 100
        )
        hits = S.rate_series(engine, "prefix_cache_hits", span, step)
        queries = S.rate_series(engine, "prefix_cache_queries", span, step)
        hit = (
            hits.join(queries, on="ts", suffix="_q").select(
                "ts", (100 * pl.col("value") / pl.col("value_q")).alias("value")
            )
            if hits.height and queries.height
            else S.no_series()
        )
        return figures.timeseries(
            {"mean prefill (s x100)": prefill, "prefix-cache hit rate %": hit, "KV-cache usage %": kv},
            title=title,
            ytitle="percent / s x100",
            **kw,
        )
    if direction == "memory_oversubscription":
        kv = S.gauge_series(engine, "kv_cache_usage", span, step, combine="max").with_columns(
            pl.col("value") * 100
        )
        fb = S.gauge_series(engine, "fb_used", span, step, combine="max")
        free = S.gauge_series(engine, "fb_free", span, step, combine="min")
        used_pct = (
            fb.join(free, on="ts", suffix="_f").select(
                "ts", (100 * pl.col("value") / (pl.col("value") + pl.col("value_f"))).alias("value")
            )
            if fb.height and free.height
            else S.no_series()
        )
        return figures.timeseries(
            {"KV-cache usage %": kv, "GPU memory used %": used_pct}, title=title, ytitle="percent", **kw
        )
    if direction == "data_pipeline":
        return figures.timeseries(
            {
                "step time (s)": S.gauge_series(engine, "train_step", span, step, combine="avg"),
                "data wait, slowest rank (s)": S.gauge_series(
                    engine, "train_data_wait", span, step, combine="max"
                ),
            },
            title=title,
            ytitle="seconds",
            **kw,
        )
    if direction == "network_communication":
        return figures.timeseries(
            {
                "step time (s)": S.gauge_series(engine, "train_step", span, step, combine="avg"),
                "exposed communication (s)": S.gauge_series(engine, "train_comm", span, step, combine="avg"),
            },
            title=title,
            ytitle="seconds",
            **kw,
        )
    if direction == "training_instability":
        return figures.timeseries(
            {"loss (avg over ranks)": S.gauge_series(engine, "train_loss", span, 60.0, combine="avg")},
            title=title,
            ytitle="loss",
            **kw,
        )
    return None
