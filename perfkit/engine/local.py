"""Evaluate :mod:`perfkit.engine.ops` expressions over a :class:`~perfkit.core.frames.MetricStore`.

Results are polars frames with the result's label columns, ``ts`` (Datetime ms UTC) and
``value`` — the shape a Prometheus range query returns, one row per (series, step). Steps
without data are omitted, as Prometheus omits them.

Per-series window work (extrapolated ``rate``, ``*_over_time``) is vectorised with numpy
``searchsorted`` over each series' sorted timestamps; grouping, joins and aggregations run in
polars.

Staleness. A live Prometheus writes a staleness marker into a series at the first scrape that no
longer has it (the target went away, or restarted under a new ``instance``/``pod``), and an
instant selector stops returning the series there. A bundle (OpenMetrics text, a backfill, a
capture) keeps only the samples, so a plain 5-minute lookback would hold a stopped series' last
value for 5 minutes and sum it with the new series that replaced it. The local engine emulates the
markers: a series is stale :data:`STALE_AFTER_SCRAPES` of its own scrape intervals (the median gap
between its samples) after a sample with no successor, so ``sum(gauge)`` counts only the live
series. Two intervals, not one: a bundle cannot tell a single lost scrape (or a late, jittered
timestamp) from a target that went away, and one missed scrape must not blank a live series; the
cost is that a stopped series is seen at most one interval longer than Prometheus would show it.
A series with a single sample (no interval to estimate) keeps the 5-minute lookback.
``LocalEngine(store, staleness=False)`` gives the plain lookback, what a Prometheus loaded by
backfill (which writes no markers either) answers. Range functions (``rate``,
``*_over_time``) never see staleness markers in Prometheus, so they are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from perfkit.core.frames import TS_DTYPE, MetricStore, select_series, to_ms
from perfkit.core.scope import Matcher
from perfkit.engine.ops import (
    LOOKBACK_S,
    Aggregate,
    Binary,
    Expr,
    HistogramQuantile,
    RangeFunction,
    Selector,
    validate,
)
from perfkit.errors import QueryError


class LocalEngine:
    """The bundle backend: computes the operations itself, with Prometheus 2.x semantics."""

    name = "bundle"

    def __init__(self, store: MetricStore, *, staleness: bool = True) -> None:
        self.store = store
        self.staleness = staleness  # emulate Prometheus' staleness markers (module docstring)

    def has(self, metric: str) -> bool:
        frame = self.store.get(metric)
        return frame is not None and frame.height > 0

    def metric_names(self) -> list[str]:
        return [n for n, f in self.store.frames.items() if f.height]

    def raw(self, metric: str, start: datetime, end: datetime) -> pl.DataFrame:
        """The stored samples of ``metric`` in [start, end] (label columns, ts, value)."""
        frame = self.store.get(metric)
        if frame is None:
            return _empty([]).with_columns(pl.col("ts").cast(TS_DTYPE))
        a, b = to_ms(start), to_ms(end)
        ts = pl.col("ts").cast(pl.Int64)
        return frame.filter((ts >= a) & (ts <= b))

    def range(self, expr: Expr, start: datetime, end: datetime, step_s: float) -> pl.DataFrame:
        """Evaluate at ``start, start+step, ... <= end``."""
        if step_s <= 0:
            raise QueryError(f"step must be positive, got {step_s}")
        a, b = to_ms(start), to_ms(end)
        if b < a:
            raise QueryError("query range ends before it starts")
        steps = np.arange(a, b + 1, int(round(step_s * 1000)), dtype=np.int64)
        validate(expr)
        return _finish(self._eval(expr, steps))

    def instant(self, expr: Expr, at: datetime) -> pl.DataFrame:
        validate(expr)
        return _finish(self._eval(expr, np.array([to_ms(at)], dtype=np.int64)))

    # -- evaluation --------------------------------------------------------------------------

    def _eval(self, expr: Expr, steps: np.ndarray) -> pl.DataFrame:
        if isinstance(expr, Selector):
            return self._instant_selector(expr, steps)
        if isinstance(expr, RangeFunction):
            return self._range_function(expr, steps)
        if isinstance(expr, Aggregate):
            return _aggregate(expr, self._eval(expr.expr, steps))
        if isinstance(expr, HistogramQuantile):
            return histogram_quantile_frame(expr.q, self._eval(expr.expr, steps))
        if isinstance(expr, Binary):
            return _binary(expr.op, self._eval(expr.lhs, steps), self._eval(expr.rhs, steps))
        raise QueryError(f"not an expression: {expr!r}")

    def _select(self, sel: Selector) -> pl.DataFrame | None:
        frame = self.store.get(sel.metric)
        if frame is None or not frame.height:
            return None
        for label, value in sel.matchers:
            if label not in frame.columns:
                return None
            frame = frame.filter(pl.col(label) == value)
        if sel.scoped:
            frame = _scoped(frame, sel.scoped)
        return frame

    def _instant_selector(self, sel: Selector, steps: np.ndarray) -> pl.DataFrame:
        frame = self._select(sel)
        if frame is None:
            return _empty([])
        lookback = int(LOOKBACK_S * 1000)
        staleness = self.staleness

        def one(ts: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            idx = np.searchsorted(ts, steps, side="right") - 1
            ok = idx >= 0
            horizon = stale_after_ms(ts, lookback) if staleness else lookback
            ok[ok] &= ts[idx[ok]] >= steps[ok] - horizon  # [t - 5m, t] as Prometheus 2.x, or stale sooner
            out = np.full(steps.shape, np.nan)
            out[ok] = v[idx[ok]]
            return out, ok

        return _per_series(frame, steps, one, keep_name=True)

    def _range_function(self, fn: RangeFunction, steps: np.ndarray) -> pl.DataFrame:
        frame = self._select(fn.selector)
        if frame is None:
            return _empty([])
        window = int(round(fn.window_s * 1000))
        is_counter = fn.fn in ("rate", "increase")

        def one(ts: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            lo = np.searchsorted(ts, steps - window, side="left")  # [t - w, t], as Prometheus 2.x
            hi = np.searchsorted(ts, steps, side="right")
            n = hi - lo
            if is_counter:
                return _extrapolated(ts, v, lo, hi, steps, window, fn.fn == "rate")
            return _over_time(fn.fn, v, lo, hi), n > 0

        return _per_series(frame, steps, one, keep_name=False)


# -- helpers (pure) ----------------------------------------------------------------------------

STALE_AFTER_SCRAPES = 2.0
"""A series with no sample for this many of its scrape intervals is stale (module docstring)."""


def stale_after_ms(ts: np.ndarray, lookback_ms: int) -> int:
    """How long (ms) a sample of the series with sorted times ``ts`` (ms) answers an instant
    selector: :data:`STALE_AFTER_SCRAPES` x its median scrape interval, never beyond the lookback;
    the lookback when the series has a single sample (no interval to estimate)."""
    if ts.size < 2:
        return lookback_ms
    gaps = np.diff(ts)
    gaps = gaps[gaps > 0]
    if not gaps.size:
        return lookback_ms
    return int(min(lookback_ms, STALE_AFTER_SCRAPES * float(np.median(gaps))))


def _scoped(frame: pl.DataFrame, matchers: tuple[Matcher, ...]) -> pl.DataFrame:
    """The series of ``frame`` every scope matcher accepts."""
    return select_series(frame, lambda labels: all(m.matches(labels) for m in matchers))[0]


def _empty(labels: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        schema={**dict.fromkeys(labels, pl.Utf8), "ts": pl.Int64, "value": pl.Float64},
    )


def _finish(frame: pl.DataFrame) -> pl.DataFrame:
    labels = [c for c in frame.columns if c not in ("ts", "value")]
    return frame.with_columns(pl.col("ts").cast(TS_DTYPE)).sort([*labels, "ts"])


def _per_series(
    frame: pl.DataFrame,
    steps: np.ndarray,
    fn: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    *,
    keep_name: bool,
) -> pl.DataFrame:
    """Apply ``fn(ts_ms, values) -> (values_at_steps, ok_mask)`` to each series of ``frame``."""
    labels = [c for c in frame.columns if c not in ("ts", "value")]
    out: list[pl.DataFrame] = []
    groups = frame.partition_by(labels, as_dict=True, maintain_order=True) if labels else {(): frame}
    for key, group in groups.items():
        ts = group["ts"].to_physical().to_numpy()
        v = group["value"].to_numpy().astype(np.float64, copy=False)
        values, ok = fn(ts, v)
        if not ok.any():
            continue
        part = {lab: [k] * int(ok.sum()) for lab, k in zip(labels, key, strict=True)}
        part["ts"] = steps[ok]
        part["value"] = values[ok]
        out.append(
            pl.DataFrame(part, schema={**dict.fromkeys(labels, pl.Utf8), "ts": pl.Int64, "value": pl.Float64})
        )
    if not out:
        return _empty(labels)
    return pl.concat(out, how="diagonal_relaxed")


def _extrapolated(
    ts: np.ndarray,
    v: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    steps: np.ndarray,
    window: int,
    is_rate: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Prometheus 2.x ``extrapolatedRate`` for every step at once (counter semantics)."""
    n = hi - lo
    ok = n >= 2
    out = np.full(steps.shape, np.nan)
    if not ok.any():
        return out, ok
    # Counter resets: every drop adds back the value before it (cumulative correction).
    drops = np.zeros_like(v)
    if v.size > 1:
        prev = v[:-1]
        drops[1:] = np.where(v[1:] < prev, prev, 0.0)
    corrected = v + np.cumsum(drops)
    first_i, last_i = lo[ok], hi[ok] - 1
    result = corrected[last_i] - corrected[first_i]
    first_v = v[first_i]
    t_first, t_last = ts[first_i], ts[last_i]
    range_start = steps[ok] - window
    range_end = steps[ok]
    to_start = (t_first - range_start) / 1000.0
    to_end = (range_end - t_last) / 1000.0
    sampled = (t_last - t_first) / 1000.0
    avg_gap = sampled / (n[ok] - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        to_zero = np.where((result > 0) & (first_v >= 0), sampled * (first_v / result), np.inf)
    to_start = np.minimum(to_start, to_zero)
    threshold = avg_gap * 1.1
    interval = sampled + np.where(to_start < threshold, to_start, avg_gap / 2)
    interval = interval + np.where(to_end < threshold, to_end, avg_gap / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = result * (interval / sampled)
    if is_rate:
        result = result / (window / 1000.0)
    out[ok] = result
    return out, ok


def _over_time(fn: str, v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    n = hi - lo
    out = np.full(lo.shape, np.nan)
    has = n > 0
    if not has.any():
        return out
    if fn in ("sum_over_time", "avg_over_time", "count_over_time"):
        csum = np.concatenate([[0.0], np.cumsum(v)])
        sums = csum[hi] - csum[lo]
        if fn == "sum_over_time":
            out[has] = sums[has]
        elif fn == "avg_over_time":
            out[has] = sums[has] / n[has]
        else:
            out[has] = n[has].astype(np.float64)
        return out
    if fn == "last_over_time":
        out[has] = v[hi[has] - 1]
        return out
    reducer = np.maximum if fn == "max_over_time" else np.minimum
    for i in np.flatnonzero(has):
        out[i] = reducer.reduce(v[lo[i] : hi[i]])
    return out


def _aggregate(agg: Aggregate, frame: pl.DataFrame) -> pl.DataFrame:
    by = [b for b in agg.by if b in frame.columns]
    missing = [b for b in agg.by if b not in frame.columns]
    exprs = {
        "sum": pl.col("value").sum(),
        "avg": pl.col("value").mean(),
        "max": pl.col("value").max(),
        "min": pl.col("value").min(),
        "count": pl.col("value").count().cast(pl.Float64),
    }
    if not frame.height:
        return _empty(list(agg.by))
    out = frame.group_by([*by, "ts"], maintain_order=True).agg(exprs[agg.op].alias("value"))
    # A "by" label the series lack groups as the empty string, as Prometheus does.
    return out.with_columns([pl.lit("").alias(m) for m in missing]) if missing else out


def _binary(op: str, lhs: pl.DataFrame, rhs: pl.DataFrame) -> pl.DataFrame:
    llabels = [c for c in lhs.columns if c not in ("ts", "value")]
    rlabels = [c for c in rhs.columns if c not in ("ts", "value")]
    if not lhs.height or not rhs.height:
        return _empty(llabels)
    # One-to-one matching on the whole label set, a missing label being the empty one
    # (Prometheus' default vector matching); the result keeps the left side's labels.
    every = [*llabels, *(c for c in rlabels if c not in llabels)]

    def keyed(frame: pl.DataFrame, have: list[str]) -> pl.DataFrame:
        absent = [pl.lit("").alias(c) for c in every if c not in have]
        return frame.with_columns(absent).with_columns(pl.col(every).fill_null(""))

    joined = keyed(lhs, llabels).join(
        keyed(rhs, rlabels).select(*every, "ts", pl.col("value").alias("rhs")),
        on=[*every, "ts"],
        how="inner",
    )
    lhs_v, rhs_v = pl.col("value"), pl.col("rhs")
    value = {"+": lhs_v + rhs_v, "-": lhs_v - rhs_v, "*": lhs_v * rhs_v, "/": lhs_v / rhs_v}[op]
    return joined.select(*llabels, "ts", value.alias("value"))


def bucket_quantile(q: float, upper: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Prometheus' ``bucketQuantile`` for many rows at once.

    ``upper``: sorted bucket upper bounds (ending in +Inf), shape (B,); ``counts``: cumulative
    counts, shape (N, B). Returns shape (N,), NaN where Prometheus returns NaN.
    """
    counts = np.asarray(counts, dtype=np.float64)
    n_rows = counts.shape[0]
    if np.isnan(q):
        return np.full(n_rows, np.nan)
    if q < 0:
        return np.full(n_rows, -np.inf)
    if q > 1:
        return np.full(n_rows, np.inf)
    if upper.size < 2 or not np.isposinf(upper[-1]):
        return np.full(n_rows, np.nan)
    counts = np.maximum.accumulate(np.nan_to_num(counts, nan=0.0), axis=1)  # ensureMonotonic
    observations = counts[:, -1]
    out = np.full(n_rows, np.nan)
    valid = observations > 0
    rank = q * observations
    # first bucket (excluding +Inf) whose count >= rank; B-1 if none
    inner = counts[:, :-1]
    ge = inner >= rank[:, None]
    b = np.where(ge.any(axis=1), ge.argmax(axis=1), upper.size - 1)
    top = b == upper.size - 1
    out[valid & top] = upper[-2]
    rest = valid & ~top
    first_nonpos = rest & (b == 0) & (upper[0] <= 0)
    out[first_nonpos] = upper[0]
    rest &= ~first_nonpos
    rows = np.flatnonzero(rest)
    bb = b[rows]
    end = upper[bb]
    start = np.where(bb > 0, upper[np.maximum(bb - 1, 0)], 0.0)
    below = np.where(bb > 0, counts[rows, np.maximum(bb - 1, 0)], 0.0)
    count = counts[rows, bb] - below
    r = rank[rows] - below
    with np.errstate(divide="ignore", invalid="ignore"):
        out[rows] = start + (end - start) * (r / count)
    return out


def histogram_quantile_frame(q: float, frame: pl.DataFrame) -> pl.DataFrame:
    """``histogram_quantile(q, frame)``: group by every label but ``le``, per timestamp."""
    if not frame.height:
        labels = [c for c in frame.columns if c not in ("ts", "value", "le")]
        return _empty(labels)
    if "le" not in frame.columns:
        raise QueryError("histogram_quantile needs the 'le' label (aggregate 'by (le)')")
    labels = [c for c in frame.columns if c not in ("ts", "value", "le")]
    frame = frame.with_columns(pl.col("le").cast(pl.Float64, strict=False).alias("_le")).filter(
        pl.col("_le").is_not_null()
    )
    # Coalesce equal bounds ("1" and "1.0"), as Prometheus does.
    frame = frame.group_by([*labels, "ts", "_le"]).agg(pl.col("value").sum())
    out: list[pl.DataFrame] = []
    groups = frame.partition_by(labels, as_dict=True) if labels else {(): frame}
    for key, group in groups.items():
        upper = np.sort(group["_le"].unique().to_numpy())
        wide = group.pivot(on="_le", index="ts", values="value", sort_columns=False).sort("ts")
        cols = {float(c): c for c in wide.columns if c != "ts"}
        matrix = np.column_stack([wide[cols[u]].to_numpy() for u in upper])
        present = np.column_stack([wide[cols[u]].is_not_null().to_numpy() for u in upper])
        # A bucket series absent at a step is left out at that step, as Prometheus does
        # (not counted as 0): evaluate each pattern of present buckets on its own.
        values = np.full(wide.height, np.nan)
        patterns, which = np.unique(present, axis=0, return_inverse=True)
        for i, pattern in enumerate(patterns):
            rows = np.flatnonzero(which.ravel() == i)
            values[rows] = bucket_quantile(q, upper[pattern], matrix[np.ix_(rows, pattern)])
        part: dict[str, list[Any] | np.ndarray] = {
            lab: [k] * wide.height for lab, k in zip(labels, key, strict=True)
        }
        part["ts"] = wide["ts"].to_numpy()
        part["value"] = values
        out.append(
            pl.DataFrame(part, schema={**dict.fromkeys(labels, pl.Utf8), "ts": pl.Int64, "value": pl.Float64})
        )
    return pl.concat(out, how="diagonal_relaxed")
