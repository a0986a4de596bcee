"""The two sides of a before/after comparison (:mod:`perfkit.analyses.compare`), measured.

* :func:`window_side`: a window of the server's own metrics (a bundle's or a live Prometheus'),
  each metric over the whole window, and its standard error from about ten blocks of at least a
  minute: batch means for rates and the KV usage, the delete-a-block jackknife for quantiles.
* :func:`bench_side`: a load test's result (``perfkit.bench/1``), its quantiles' standard errors
  from the per-request records by order statistics, its throughputs' counting step.

The statistics and their sources are described in :mod:`perfkit.analyses.compare`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import polars as pl

from perfkit.analyses.compare import (
    BLOCKS,
    BY_KEY,
    MAX_SAMPLES,
    METRICS,
    MIN_BLOCK_S,
    MIN_BLOCKS,
    SYMPTOMS,
    Measure,
    Side,
)
from perfkit.core.frames import Window
from perfkit.engine import signals as S

# -- a side from a window of server metrics ----------------------------------------------------------


def window_side(engine: Any, window: Window, name: str, *, baseline: Window | None = None) -> Side:
    """The metrics of ``window`` and their standard errors (batch means, block jackknife); with
    ``baseline`` (the side's own ordinary period) also the symptom candidates there, to name it."""
    queries: list[str] = []
    side = Side("window", name, {}, window=window, queries=queries)
    whole = _window_values(engine, window, queries)
    blocks, block_s = _blocks(window)
    per_block: dict[str, list[float | None]] = {}
    jackknife: dict[str, float | None] = {}
    if blocks >= MIN_BLOCKS:
        span = Window(
            window.start + timedelta(seconds=block_s), window.start + timedelta(seconds=blocks * block_s)
        )
        per_block = _block_values(engine, span, window, blocks, block_s, queries)
        jackknife = _jackknife_quantiles(engine, span, blocks, block_s, queries)
    quantiled = dict.fromkeys(m.signal for m in METRICS if m.q is not None and m.signal)
    firsts = {sig: S.first_bucket(engine, sig, window, queries) for sig in quantiled if sig}
    for key, value in whole.items():
        got = [v for v in per_block.get(key, []) if v is not None and math.isfinite(v)]
        se = statistics.stdev(got) / math.sqrt(len(got)) if len(got) >= MIN_BLOCKS else None
        m, bound = BY_KEY[key], None
        if m.q is not None:
            se = jackknife.get(key)
            fb = firsts.get(m.signal or "")
            if value is not None and fb is not None and fb.holds(m.q):
                bound = fb.bound  # histogram_quantile interpolated it from 0: at most the bucket's bound
                side.notes.append(
                    f"{name}: {m.label} lies in its histogram's first bucket: at most {fb.bound * 1000:.0f} ms "
                    "(the value histogram_quantile gives there is interpolated from 0)"
                )
        side.values[key] = Measure(
            value if value is not None and math.isfinite(value) else None, se, bound=bound
        )
    side.requests = S.window_count(engine, "e2e", window, queries=queries)
    if blocks >= MIN_BLOCKS:
        side.noise = f"{blocks} blocks of {_duration(block_s)} (batch means, block jackknife)"
    else:
        side.noise = "not estimated"
        side.notes.append(
            f"{name}: the window ({_duration(window.seconds)}) is too short for {MIN_BLOCKS} blocks of "
            f"{_duration(MIN_BLOCK_S)}: its noise is not estimated"
        )
    if baseline is not None:
        for key in SYMPTOMS:
            m = BY_KEY[key]
            assert m.signal is not None and m.q is not None
            side.baseline[key] = S.window_quantiles(engine, m.signal, (m.q,), baseline, queries)[m.q]
    return side


def _window_values(engine: Any, window: Window, queries: list[str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for signal in dict.fromkeys(m.signal for m in METRICS if m.signal):
        qs = tuple(m.q for m in METRICS if m.signal == signal and m.q is not None)
        for q, v in S.window_quantiles(engine, signal, qs, window, queries).items():
            out[f"{signal}_p{round(q * 100)}"] = v
    out["request_throughput"] = S.histogram_rate(engine, "e2e", window, queries)
    out["output_throughput"] = S.counter_rate(engine, "generation_tokens_total", window, queries)
    total = S.counter_rate(engine, "request_success", window, queries)
    failed = [S.counter_rate(engine, "request_success", window, queries, finished_reason=r) for r in ("abort", "error")]  # fmt: skip
    out["error_rate"] = sum(v or 0.0 for v in failed) / total if total else None
    out["preemptions_per_s"] = S.counter_rate(engine, "preemptions", window, queries)
    out["kv_cache_usage"] = S.gauge_stat(engine, "kv_cache_usage", window, "avg", queries, combine="max")
    return out


def _blocks(window: Window) -> tuple[int, float]:
    """How many blocks of how many seconds (a multiple of 15 s, at least a minute) the window holds."""
    block_s = max(MIN_BLOCK_S, math.ceil(window.seconds / BLOCKS / 15.0) * 15.0)
    return int(window.seconds // block_s), block_s


def _block_values(
    engine: Any, span: Window, window: Window, blocks: int, block_s: float, queries: list[str]
) -> dict[str, list[float | None]]:
    """Each rate and the KV usage in each block: a range query over ``span`` whose step is the
    block, each point the block ending there (batch means)."""

    def values(frame: pl.DataFrame) -> list[float | None]:
        if not frame.height:
            return []
        return [None if v is None else float(v) for v in frame.sort("ts")["value"].to_list()[:blocks]]

    out: dict[str, list[float | None]] = {}
    out["request_throughput"] = values(
        S.rate_series(engine, "e2e", span, block_s, queries, histogram_count=True)
    )
    out["output_throughput"] = values(
        S.rate_series(engine, "generation_tokens_total", span, block_s, queries)
    )
    out["preemptions_per_s"] = values(S.rate_series(engine, "preemptions", span, block_s, queries))
    total = values(S.rate_series(engine, "request_success", span, block_s, queries))
    failed = [values(S.rate_series(engine, "request_success", span, block_s, queries, finished_reason=r))
              for r in ("abort", "error")]  # fmt: skip
    if total:
        out["error_rate"] = [
            sum((f[i] or 0.0) if i < len(f) else 0.0 for f in failed) / t if t else None
            for i, t in enumerate(total)
        ]
    out["kv_cache_usage"] = _gauge_blocks(engine, window, blocks, block_s, queries)
    return out


def _jackknife_quantiles(
    engine: Any, span: Window, blocks: int, block_s: float, queries: list[str]
) -> dict[str, float | None]:
    """Each latency quantile's delete-a-block jackknife standard error: the window's histogram
    pooled without block i, its quantile, for every i; ``se^2 = (B-1)/B x sum((q_i - mean)^2)``.

    The spread of the blocks' own quantiles is not that error: a block full of long prompts has a
    p95 of 13 s yet moves the pooled p95 only by its share of the requests (overstated), and a tail
    that one block holds alone decides the pooled p95 but is one value among ten (understated). With
    blocks of hundreds of requests the deleted groups are large enough for a quantile's jackknife
    to hold (Shao & Wu, *Ann. Statist.* 17 (1989): delete-d with d/sqrt(n) large)."""
    from perfkit.engine import ops
    from perfkit.engine.local import bucket_quantile
    from perfkit.engine.promql import to_promql

    out: dict[str, float | None] = {}
    for signal in dict.fromkeys(m.signal for m in METRICS if m.signal):
        res = S.resolve(engine, signal)
        if res.metric is None:
            continue
        expr = ops.sum_by(ops.increase(ops.Selector(f"{res.metric}_bucket"), block_s), "le")
        queries.append(to_promql(expr))
        frame = engine.range(expr, span.start, span.end, block_s)
        if not frame.height or "le" not in frame.columns:
            continue
        grid = (
            frame.with_columns(pl.col("le").cast(pl.Float64, strict=False).alias("upper"))
            .drop_nulls("upper")
            .pivot(on="upper", index="ts", values="value", aggregate_function="sum")
            .sort("ts")
            .head(blocks)
        )
        columns = sorted((float(c), c) for c in grid.columns if c != "ts")  # each bucket's bound, its column
        uppers = [u for u, _ in columns]
        counts = np.nan_to_num(grid.select([c for _, c in columns]).to_numpy().astype(np.float64))
        if len(counts) < MIN_BLOCKS:
            continue
        left_out = counts.sum(axis=0)[None, :] - counts
        for m in METRICS:
            if m.signal == signal and m.q is not None:
                reps = bucket_quantile(m.q, np.asarray(uppers), left_out)
                reps = reps[np.isfinite(reps)]
                b = reps.size
                ok = b >= MIN_BLOCKS
                out[m.key] = float(math.sqrt((b - 1) / b * ((reps - reps.mean()) ** 2).sum())) if ok else None
    return out


def _gauge_blocks(
    engine: Any, window: Window, blocks: int, block_s: float, queries: list[str]
) -> list[float | None]:
    """The KV-cache usage averaged within each block, from its 15 s samples."""
    frame = S.gauge_series(engine, "kv_cache_usage", window, 15.0, queries, combine="max")
    if not frame.height:
        return []
    offset = (pl.col("ts") - pl.lit(window.start)).dt.total_milliseconds() / 1000.0
    means = (
        frame.with_columns((offset // block_s).cast(pl.Int64).alias("block"))
        .filter(pl.col("block").is_between(0, blocks - 1))
        .group_by("block")
        .agg(pl.col("value").mean())
        .sort("block")
    )
    return [float(v) for v in means["value"].to_list() if v is not None]


# -- a side from a load test's result --------------------------------------------------------------


def bench_side(
    doc: Mapping[str, Any], name: str, samples: Mapping[str, Sequence[float]] | None = None
) -> Side:
    """A ``perfkit.bench/1`` result as a side; ``samples`` (per-request seconds, ``ttft``, ``tpot``,
    ``e2e``, from its records) give its quantiles' standard errors. Server-side extras (preemptions,
    KV usage) come from its ``server`` view when the run scraped one."""
    side = Side("bench", name, {}, requests=_num(doc.get("completed")))
    pct = _map(doc.get("percentiles"))
    fallback = {0.5: "median_{}_ms", 0.99: "p99_{}_ms"}
    arrays = {k: _sample(v) for k, v in (samples or {}).items()}
    for m in METRICS:
        if m.signal is None or m.q is None or m.signal == "queue":
            continue
        field_ = "e2el" if m.signal == "e2e" else m.signal
        by_q = _map(pct.get(f"{field_}_ms"))
        ms = _num(by_q.get(f"{m.q * 100:g}"))
        if ms is None and m.q in fallback:
            ms = _num(doc.get(fallback[m.q].format(field_)))
        values = arrays.get(m.signal)
        se = _order_se(values, m.q) if values is not None and values.size else None
        side.values[m.key] = Measure(None if ms is None else ms / 1000.0, se)
    duration, completed = _num(doc.get("duration")), _num(doc.get("completed")) or 0.0
    tokens = _num(doc.get("total_output_tokens")) or 0.0
    step = 2.0 / duration if duration else 0.0  # one request crossing each edge of the run
    side.values["request_throughput"] = Measure(_num(doc.get("request_throughput")), None, step)
    per_request = tokens / completed if completed else 0.0
    side.values["output_throughput"] = Measure(_num(doc.get("output_throughput")), None, step * per_request)
    failed = _num(doc.get("failed")) or 0.0
    errors = _map(doc.get("errors"))
    rate = _num(errors.get("rate"))
    sent = completed + failed
    rate = rate if rate is not None else (failed / sent if sent else None)
    se = math.sqrt(rate * (1 - rate) / sent) if rate is not None and sent else None
    side.values["error_rate"] = Measure(rate, se)
    server = _map(doc.get("server"))
    preempted = _num(server.get("preemptions"))
    side.values["preemptions_per_s"] = Measure(
        preempted / duration if preempted is not None and duration else None
    )
    kv = _map(server.get("kv_cache_usage"))
    side.values["kv_cache_usage"] = Measure(_num(kv.get("mean")))
    side.values["queue_p95"] = Measure(None)
    side.noise = (
        f"order statistics of {int(completed):,} requests"
        if arrays
        else "not estimated (no per-request records)"
    )
    if not arrays:
        side.notes.append(f"{name}: no per-request records beside it: its quantiles' noise is not estimated")
    validity = _map(doc.get("validity"))
    if validity.get("valid") is False:
        why = "; ".join(str(r) for r in validity.get("reasons") or []) or "no reason given"
        side.notes.append(f"{name}: the run is marked invalid ({why})")
    if doc.get("interrupted") is True:
        side.notes.append(f"{name}: the run was interrupted (fewer requests than planned)")
    return side


def _sample(values: Sequence[float]) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size > MAX_SAMPLES:
        a = a[:: math.ceil(a.size / MAX_SAMPLES)]
    return np.sort(a)


def _order_se(sorted_values: np.ndarray, q: float) -> float:
    """The distribution-free standard error of the q-quantile of sorted values (Conover §3.2)."""
    n = sorted_values.size
    half = math.sqrt(n * q * (1 - q))
    lo = max(0, math.floor(n * q - half) - 1)
    hi = min(n - 1, math.ceil(n * q + half) - 1)
    return float(sorted_values[hi] - sorted_values[lo]) / 2.0


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
