"""The series behind each confirmed direction's evidence figure: what its verification looked at.

One function per figure, each a query set over ``span`` (the baseline's start to the incident's end),
named as the figure shows them, with the joins done here (prefix-cache hit rate, GPU memory used %).
Each row of the triage table names its figure's function (:attr:`perfkit.triage.row_types.Row.figure`);
plain frames out, no display: ``perfkit.report.evidence_figures`` draws them and
``perfkit.app.runbooks.inference`` wires them. The directions whose evidence is already a result
(``prefill_decode_interference``, ``release_regression``) name none. Every function takes
``(engine, span, per_token=...)``: ``per_token`` is the per-output-token histogram the server exports
(``tpot``, or ``itl`` on older vLLM), as the triage evidence chose it.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import signals as S


def _ratio_pct(num: pl.DataFrame, den: pl.DataFrame, suffix: str, denominator: pl.Expr) -> pl.DataFrame:
    """100 * num / denominator, joined on ts; no series when either side is empty."""
    if not (num.height and den.height):
        return S.no_series()
    return num.join(den, on="ts", suffix=suffix).select(
        "ts", (100 * pl.col("value") / denominator).alias("value")
    )


Series = dict[str, pl.DataFrame]


def queue_series(engine: Any, span: Window, *, per_token: str = "tpot") -> Series:
    """Requests waiting and running: a queue that grows while the batch is full."""
    step = S.choose_step(span)
    return {
        "waiting requests": S.gauge_series(engine, "waiting", span, step),
        "running requests": S.gauge_series(engine, "running", span, step),
    }


def decode_series(engine: Any, span: Window, *, per_token: str = "tpot") -> Series:
    """The median token's time against the batch size."""
    step = S.choose_step(span)
    per_tok = S.quantile_series(engine, per_token, 0.5, span, step).with_columns(pl.col("value") * 1000)
    running = S.gauge_series(engine, "running", span, step)
    return {f"{per_token.upper()} p50 (ms)": per_tok, "running requests (batch)": running}


def kv_series(engine: Any, span: Window, *, per_token: str = "tpot") -> Series:
    """Mean prefill time, the prefix-cache hit rate and the KV cache's use."""
    step = S.choose_step(span)
    prefill = S.mean_series(engine, "prefill", span, step).with_columns(pl.col("value") * 100)
    kv = S.gauge_series(engine, "kv_cache_usage", span, step, combine="max").with_columns(
        pl.col("value") * 100
    )
    hits = S.rate_series(engine, "prefix_cache_hits", span, step)
    queries = S.rate_series(engine, "prefix_cache_queries", span, step)
    hit = _ratio_pct(hits, queries, "_q", pl.col("value_q"))
    return {"mean prefill (s x100)": prefill, "prefix-cache hit rate %": hit, "KV-cache usage %": kv}


def memory_series(engine: Any, span: Window, *, per_token: str = "tpot") -> Series:
    """The KV cache's use and GPU memory used, around the out-of-memory crashes."""
    step = S.choose_step(span)
    kv = S.gauge_series(engine, "kv_cache_usage", span, step, combine="max").with_columns(
        pl.col("value") * 100
    )
    fb = S.gauge_series(engine, "fb_used", span, step, combine="max")
    free = S.gauge_series(engine, "fb_free", span, step, combine="min")
    used_pct = _ratio_pct(fb, free, "_f", pl.col("value") + pl.col("value_f"))
    return {"KV-cache usage %": kv, "GPU memory used %": used_pct}


def data_wait_series(engine: Any, span: Window, *, per_token: str = "tpot") -> Series:
    """Step time against the slowest rank's data wait."""
    step = S.choose_step(span)
    return {
        "step time (s)": S.gauge_series(engine, "train_step", span, step, combine="avg"),
        "data wait, slowest rank (s)": S.gauge_series(engine, "train_data_wait", span, step, combine="max"),
    }


def comm_series(engine: Any, span: Window, *, per_token: str = "tpot") -> Series:
    """Step time against exposed communication."""
    step = S.choose_step(span)
    return {
        "step time (s)": S.gauge_series(engine, "train_step", span, step, combine="avg"),
        "exposed communication (s)": S.gauge_series(engine, "train_comm", span, step, combine="avg"),
    }


def loss_series(engine: Any, span: Window, *, per_token: str = "tpot") -> Series:
    """The training loss, averaged over ranks, a point a minute."""
    return {"loss (avg over ranks)": S.gauge_series(engine, "train_loss", span, 60.0, combine="avg")}
