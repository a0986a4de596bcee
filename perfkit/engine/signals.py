"""Signals by their real exporter names, and the queries every analysis shares.

A *signal* is what an analysis wants (``ttft``, ``kv_cache_usage``); the catalogue lists the
metric names real exporters use for it, current name first, then the older names it replaced
(vLLM renamed ``gpu_cache_usage_perc`` → ``kv_cache_usage_perc`` in 0.9 and
``time_per_output_token_seconds`` → ``inter_token_latency_seconds`` in 0.11).

The query helpers build :mod:`perfkit.engine.ops` expressions and hand them to any engine with
``has``/``range``/``instant`` (the local bundle engine, or a Prometheus-compatible server), so
an analysis never knows which one answered. Every helper returns the PromQL it ran, for the
provenance of the number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import dialects, ops
from perfkit.engine.buckets import FirstBucket as FirstBucket  # re-exported: signals.FirstBucket
from perfkit.engine.buckets import buckets_quantile as buckets_quantile  # re-exported
from perfkit.engine.buckets import by_le, edge_counts, first_of
from perfkit.engine.promql import to_promql
from perfkit.errors import QueryError

#: histogram signals: base names (``_bucket``/``_sum``/``_count`` appended), every engine's
#: (:mod:`perfkit.engine.dialects`, vLLM first)
_SERVING_HISTOGRAMS = (
    "ttft",
    "itl",
    "tpot",
    "e2e",
    "queue",
    "prefill",
    "decode",
    "inference",
    "prompt_tokens",
    "generation_tokens",
    "prefill_forward",
    "decode_forward",
    "server_queue",  # a serving frontend's own queue before the engine (Triton's, only as counters)
)
HISTOGRAMS: dict[str, tuple[str, ...]] = {s: dialects.names("histograms", s) for s in _SERVING_HISTOGRAMS}
GAUGES: dict[str, tuple[str, ...]] = {
    **{
        s: dialects.names("gauges", s)
        for s in ("running", "waiting", "kv_cache_usage", "inflight", "awaiting_first_token")
    },
    "gpu_util": ("DCGM_FI_DEV_GPU_UTIL",),
    "fb_used": ("DCGM_FI_DEV_FB_USED",),
    "fb_free": ("DCGM_FI_DEV_FB_FREE",),
    "gr_engine_active": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",),
    "tensor_active": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",),
    "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE",),
    "power": ("DCGM_FI_DEV_POWER_USAGE",),
    "sm_clock": ("DCGM_FI_DEV_SM_CLOCK",),
    "gpu_temp": ("DCGM_FI_DEV_GPU_TEMP",),
    "xid": ("DCGM_FI_DEV_XID_ERRORS",),
    # training jobs: perfkit's documented names (perfkit/sources/train_exporter.py exports them),
    # then what a framework's own log lines give (perfkit/sources/trainer_series.py)
    "train_step": ("train_step_duration_seconds", "trainer_step_seconds"),
    "train_data_wait": ("train_data_wait_seconds", "trainer_data_wait_seconds"),
    "train_comm": ("train_comm_seconds", "trainer_comm_seconds"),
    "train_loss": ("train_loss", "trainer_loss"),
    "train_grad_norm": ("trainer_grad_norm",),
    "train_tokens_per_gpu": ("trainer_tokens_per_second_per_gpu",),
    "train_samples_rate": ("trainer_samples_per_second",),
    "train_tflops": ("trainer_tflops_per_gpu",),
    "train_mfu": ("trainer_mfu_ratio",),
}
_SERVING_COUNTERS = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success",
    "request_aborted",
    "request_failure",
    "request_arrivals",
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
)
COUNTERS: dict[str, tuple[str, ...]] = {
    **{s: dialects.names("counters", s) for s in _SERVING_COUNTERS},
    "node_cpu": ("node_cpu_seconds_total",),
    "net_rx": ("node_network_receive_bytes_total",),
    "net_tx": ("node_network_transmit_bytes_total",),
    "ib_rx": ("node_infiniband_port_data_received_bytes_total",),
    "ib_tx": ("node_infiniband_port_data_transmitted_bytes_total",),
    "train_tokens": ("train_tokens_total",),
    "train_samples": ("train_samples_total",),
}
#: what each source is recognised by, for completeness
SOURCES: dict[str, tuple[str, ...]] = {
    **{f"{d.title} exporter": d.recognise() for d in dialects.DIALECTS},
    "DCGM exporter": ("DCGM_FI_DEV_GPU_UTIL",),
    "node exporter": ("node_cpu_seconds_total",),
}


class Engine(Protocol):
    name: str

    def has(self, metric: str) -> bool: ...

    def range(self, expr: ops.Expr, start: datetime, end: datetime, step_s: float) -> pl.DataFrame: ...

    def instant(self, expr: ops.Expr, at: datetime) -> pl.DataFrame: ...


@dataclass
class Resolved:
    signal: str
    metric: str | None
    legacy: bool = False  # an older name of its engine answered
    engine: str | None = None  # the dialect whose name answered (perfkit.engine.dialects)
    matchers: dict[str, str] = field(default_factory=dict)  # the series of ``metric`` that answer
    #: the gauge ``metric`` is divided by, where the engine gives the signal only as a ratio of two of
    #: its gauges (:data:`perfkit.engine.dialects.GAUGE_RATIOS`, TGI's KV usage)
    divisor: str | None = None

    def selector(self) -> ops.Selector:
        """The gauge's or counter's selector: its family, narrowed to the catalogue's matchers."""
        assert self.metric is not None
        sel = ops.Selector(self.metric)
        return sel.where(**self.matchers) if self.matchers else sel

    def series(self) -> ops.Expr:
        """A gauge signal's series: :meth:`selector`, or the numerator over the divisor (label sets
        matched one to one) where the signal is a ratio of two gauges."""
        if self.divisor is None:
            return self.selector()
        return ops.ratio(self.selector(), ops.Selector(self.divisor))

    def histogram(self, suffix: str) -> ops.Selector:
        """A histogram signal's ``_bucket``/``_sum``/``_count`` selector, narrowed to the catalogue's
        matchers (TGI's ``tgi_batch_forward_duration{method="prefill"}``)."""
        assert self.metric is not None
        sel = ops.Selector(f"{self.metric}{suffix}")
        return sel.where(**self.matchers) if self.matchers else sel

    @property
    def found(self) -> bool:
        return self.metric is not None


def _answered(signal: str, name: str) -> Resolved:
    metric, where = dialects.family(name), dialects.matchers(name)
    d = dialects.dialect_of(metric)
    if d is None:
        names = GAUGES.get(signal) or COUNTERS.get(signal) or ()
        return Resolved(signal, metric, legacy=name in names[1:], matchers=where)
    return Resolved(signal, metric, legacy=dialects.is_legacy(d, name), engine=d.name, matchers=where)


def resolve(engine: Engine, signal: str) -> Resolved:
    """Which metric name answers ``signal`` on this engine: the first engine dialect that has it
    (vLLM, SGLang, TensorRT-LLM, Dynamo, TGI, Triton), its current name before the older ones; for a
    gauge no engine exports as such, the first engine whose two gauges give it as a ratio."""
    if signal in HISTOGRAMS:
        for base in HISTOGRAMS[signal]:
            if engine.has(f"{dialects.family(base)}_bucket"):
                return _answered(signal, base)
        return Resolved(signal, None)
    names = GAUGES.get(signal) or COUNTERS.get(signal)
    if names is None:
        raise QueryError(f"unknown signal {signal!r}")
    for name in names:
        if engine.has(dialects.family(name)):
            return _answered(signal, name)
    if signal in GAUGES:
        for num, den in dialects.GAUGE_RATIOS.get(signal, ()):
            if engine.has(num) and engine.has(den):
                res = _answered(signal, num)
                res.divisor = den
                return res
    return Resolved(signal, None)


EDGE_S = 60.0
"""A series with no sample in the window's first (or last) minute started (or stopped) inside it."""


def _replaced(engine: Engine, sel: ops.Selector, window: Window) -> bool:
    """Whether some series of ``sel`` started or stopped inside ``window`` (a restart under a new
    ``instance``/``pod``, a replica added or removed): the series with samples in the window are not
    the same as those with samples in its first minute, or in its last."""

    def series(at: datetime, seconds: float) -> set[tuple[tuple[str, object], ...]]:
        frame = engine.instant(ops.over_time("count", sel, seconds), at)
        labels = [c for c in frame.columns if c not in ("ts", "value")]
        return {tuple((c, row[c]) for c in labels) for row in frame.iter_rows(named=True)}

    edge = min(EDGE_S, window.seconds / 4)
    every = series(window.end, window.seconds)
    return len(every) > 1 and (
        series(window.start + timedelta(seconds=edge), edge) != every or series(window.end, edge) != every
    )


SUM_STEPS = 240
"""Steps at which a gauge is summed over series when series came or went (:func:`gauge_stat`):
about one per scrape for a window of up to an hour."""


def choose_step(window: Window, *, points: int = 240, minimum_s: float = 15.0) -> float:
    """A range-query step: about ``points`` points, a multiple of 15 s, never below ``minimum_s``."""
    raw = max(window.seconds / points, minimum_s)
    return float(math.ceil(raw / 15.0) * 15)


def rate_window(step_s: float, scrape_s: float = 15.0) -> float:
    """Range for rate(): at least 4 scrapes (rate needs two samples in range) and one step."""
    return max(4 * scrape_s, step_s)


def _scalar(frame: pl.DataFrame) -> float | None:
    if not frame.height:
        return None
    v = frame["value"][0]
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def no_series() -> pl.DataFrame:
    """The empty range result (a signal the engine does not have)."""
    return pl.DataFrame(schema={"ts": pl.Datetime("ms", "UTC"), "value": pl.Float64})


def _instant(engine: Engine, expr: ops.Expr, window: Window, queries: list[str] | None) -> float | None:
    """Evaluate ``expr`` at the window's end as one number, recording its PromQL."""
    if queries is not None:
        queries.append(to_promql(expr))
    return _scalar(engine.instant(expr, window.end))


def _range(
    engine: Engine, expr: ops.Expr, window: Window, step_s: float, queries: list[str] | None
) -> pl.DataFrame:
    """Evaluate ``expr`` over the window at ``step_s``, recording its PromQL."""
    if queries is not None:
        queries.append(to_promql(expr))
    return engine.range(expr, window.start, window.end, step_s)


def window_quantiles(
    engine: Engine, signal: str, qs: tuple[float, ...], window: Window, queries: list[str] | None = None
) -> dict[float, float | None]:
    """Quantiles of a histogram signal over the whole window: histogram_quantile(q, sum by (le) (increase(b[w])))."""
    res = resolve(engine, signal)
    if res.metric is None:
        return dict.fromkeys(qs)
    inc = ops.sum_by(ops.increase(res.histogram("_bucket"), window.seconds), "le")
    out: dict[float, float | None] = {}
    for q in qs:
        expr = ops.histogram_quantile(q, inc)
        if queries is not None:
            queries.append(to_promql(expr))
        out[q] = _scalar(engine.instant(expr, window.end))
    return out


def window_buckets(
    engine: Engine, signal: str, window: Window, queries: list[str] | None = None
) -> dict[float, float] | None:
    """``sum by (le) (increase(<signal>_bucket[window]))`` at the window's end: upper edge → count.
    None when the engine has no histogram for ``signal``."""
    split = window_buckets_by(engine, signal, window, None, queries)
    return None if split is None else split.get("", {})


def window_buckets_by(
    engine: Engine, signal: str, window: Window, by: str | None, queries: list[str] | None = None
) -> dict[str, dict[float, float]] | None:
    """:func:`window_buckets` split by one label, ``sum by (le, by) (...)``: its value → upper edge →
    count (series without it, or every series when ``by`` is None, under ``""``). None when the engine
    has no histogram for ``signal``."""
    res = resolve(engine, signal)
    if res.metric is None:
        return None
    expr = ops.sum_by(ops.increase(res.histogram("_bucket"), window.seconds), "le", *([by] if by else []))
    if queries is not None:
        queries.append(to_promql(expr))
    return edge_counts(engine.instant(expr, window.end), by)


def spans_buckets(engine: Engine, signal: str, windows: list[Window]) -> dict[float, float]:
    """A histogram signal's bucket increases (:func:`window_buckets`) over several windows, summed."""
    total: dict[float, float] = {}
    for w in windows:
        for edge, n in (window_buckets(engine, signal, w) or {}).items():
            total[edge] = total.get(edge, 0.0) + n
    return total


def spans_quantile(engine: Engine, signal: str, q: float, windows: list[Window]) -> float | None:
    """A histogram signal's ``q`` quantile over several windows taken together: their bucket increases
    (:func:`window_buckets`) summed, then read as ``histogram_quantile`` reads one window's. None when
    the engine has no histogram for ``signal`` or the windows hold no observation."""
    return buckets_quantile(spans_buckets(engine, signal, windows), q)


def first_bucket(
    engine: Engine, signal: str, window: Window, queries: list[str] | None = None
) -> FirstBucket | None:
    """The :class:`FirstBucket` of a histogram signal in ``window``: the lowest ``le`` above 0 (below
    it histogram_quantile interpolates from 0, or returns a bucket at or under 0 exactly) and the
    share of the observations at or under it, of the total histogram_quantile uses (``+Inf``, after
    its monotonic fix). None when the signal is absent or saw nothing."""
    return first_of(window_buckets(engine, signal, window, queries))


def _counter_mean(engine: Engine, signal: str) -> tuple[str, str, float] | None:
    """The (time counter, count counter, seconds per unit) an engine gives ``signal``'s mean by, when it
    has no histogram for it (Triton's microsecond counters: :data:`perfkit.engine.dialects.COUNTER_MEANS`)."""
    for time_c, count_c, unit in dialects.COUNTER_MEANS.get(signal, ()):
        if engine.has(time_c) and engine.has(count_c):
            return time_c, count_c, unit
    return None


def window_mean(
    engine: Engine, signal: str, window: Window, queries: list[str] | None = None
) -> float | None:
    """Mean of a histogram signal over the window: increase(_sum) / increase(_count); for an engine
    that counts the signal's time instead (Triton, in µs), increase(time) / increase(count), in seconds."""
    res = resolve(engine, signal)
    if res.metric is None:
        counted = _counter_mean(engine, signal)
        if counted is None:
            return None
        time_c, count_c, unit = counted
        expr = ops.ratio(
            ops.sum_by(ops.increase(ops.Selector(time_c), window.seconds)),
            ops.sum_by(ops.increase(ops.Selector(count_c), window.seconds)),
        )
        value = _instant(engine, expr, window, queries)
        return None if value is None else value * unit
    expr = ops.ratio(
        ops.sum_by(ops.increase(res.histogram("_sum"), window.seconds)),
        ops.sum_by(ops.increase(res.histogram("_count"), window.seconds)),
    )
    return _instant(engine, expr, window, queries)


def window_count(
    engine: Engine, signal: str, window: Window, *, le: float | None = None, queries: list[str] | None = None
) -> float | None:
    """Observations of a histogram signal in the window (those <= ``le`` when given)."""
    res = resolve(engine, signal)
    if res.metric is None:
        return None
    if le is None:
        return _instant(
            engine, ops.sum_by(ops.increase(res.histogram("_count"), window.seconds)), window, queries
        )
    expr, frame = by_le(
        le,
        lambda text: ops.sum_by(ops.increase(res.histogram("_bucket").where(le=text), window.seconds)),
        lambda e: engine.instant(e, window.end),
    )
    if queries is not None:
        queries.append(to_promql(expr))
    return _scalar(frame)


def counter_rate(
    engine: Engine, signal: str, window: Window, queries: list[str] | None = None, **matchers: str
) -> float | None:
    """Average per-second rate of a counter signal over the window (summed over series)."""
    res = resolve(engine, signal)
    if res.metric is None:
        return None
    sel = res.selector().where(**matchers) if matchers else res.selector()
    expr = ops.sum_by(ops.rate(sel, window.seconds))
    return _instant(engine, expr, window, queries)


def histogram_rate(
    engine: Engine, signal: str, window: Window, queries: list[str] | None = None
) -> float | None:
    """Observations per second of a histogram signal (e.g. requests/s from the e2e histogram)."""
    res = resolve(engine, signal)
    if res.metric is None:
        return None
    expr = ops.sum_by(ops.rate(res.histogram("_count"), window.seconds))
    return _instant(engine, expr, window, queries)


def request_rate(engine: Engine, window: Window, queries: list[str] | None = None) -> float | None:
    """Finished requests per second: the observations of the engine's E2E histogram, or where it has
    none (Triton's TensorRT-LLM backend), the rate of its finished-request counter (``request_success``)."""
    if resolve(engine, "e2e").found:
        return histogram_rate(engine, "e2e", window, queries)
    return counter_rate(engine, "request_success", window, queries)


def request_rate_series(
    engine: Engine, window: Window, step_s: float, queries: list[str] | None = None
) -> pl.DataFrame:
    """:func:`request_rate` at every step: ``sum(rate(<e2e>_count[rw]))``, or the finished-request
    counter's rate where the engine has no E2E histogram."""
    if resolve(engine, "e2e").found:
        return rate_series(engine, "e2e", window, step_s, queries, histogram_count=True)
    return rate_series(engine, "request_success", window, step_s, queries)


def gauge_stat(
    engine: Engine,
    signal: str,
    window: Window,
    stat: str = "avg",
    queries: list[str] | None = None,
    combine: str = "sum",
) -> float | None:
    """``stat`` (avg/max/min) over time of a gauge signal, series combined with ``combine`` first.

    A NaN sample (an exporter's garbage) makes Prometheus' ``*_over_time`` NaN: then the stat is taken
    over the steps whose values are finite, as below.

    A sum over series (requests running on every replica) is taken step by step when series came or
    went inside the window: ``combine(g)`` at every step (a stopped series is stale, so a restarted
    server counts once), then ``stat`` of those. Summing each
    series' own average over the window instead would count a server twice when it restarted under
    a new ``instance``/``pod`` mid-window (both series' averages added, each over its own half).
    Averages, maxima and minima across series are not inflated that way, nor is a sum when every
    series lived through the window: those stay one instant query (Prometheus' exact window).
    """
    res = resolve(engine, signal)
    if res.metric is None:
        return None
    sel = res.selector()
    # a ratio of two gauges has no *_over_time of its own: it is taken step by step, as below
    if res.divisor is None and (combine not in ("sum", "count") or not _replaced(engine, sel, window)):
        inner = ops.aggregate(combine, ops.over_time(stat, sel, window.seconds))
        value = _instant(engine, inner, window, queries)
        if value is not None:
            return value
        # None: no sample in the window, or a NaN sample among them (an exporter's garbage makes
        # avg/max_over_time NaN, in Prometheus too): judge the steps whose values are finite
    step = choose_step(window, points=SUM_STEPS)
    # at each step: the series alive then (staleness drops the old one)
    expr = ops.aggregate(combine, res.series())
    frame = _range(engine, expr, window, step, queries)
    values = [float(v) for v in frame["value"].to_list() if v is not None and math.isfinite(v)]
    if not values:
        return None
    summary: dict[str, float] = {"avg": sum(values) / len(values), "max": max(values), "min": min(values)}
    return summary[stat]


def quantile_series(
    engine: Engine,
    signal: str,
    q: float,
    window: Window,
    step_s: float,
    queries: list[str] | None = None,
    by: tuple[str, ...] = (),
) -> pl.DataFrame:
    """histogram_quantile(q, sum by (le, *by) (rate(bucket[rw]))) at every step: frame (*by, ts, value)."""
    res = resolve(engine, signal)
    if res.metric is None:
        return no_series()
    expr = ops.histogram_quantile(
        q, ops.sum_by(ops.rate(res.histogram("_bucket"), rate_window(step_s)), "le", *by)
    )
    return _range(engine, expr, window, step_s, queries)


def rate_series(
    engine: Engine,
    signal: str,
    window: Window,
    step_s: float,
    queries: list[str] | None = None,
    *,
    histogram_count: bool = False,
    le: float | None = None,
    by: tuple[str, ...] = (),
    **matchers: str,
) -> pl.DataFrame:
    """sum(rate(x[rw])) at every step. ``histogram_count``: of a histogram's _count (or its bucket ``le``)."""
    res = resolve(engine, signal)
    if res.metric is None:
        return no_series()
    sel = (
        (res.histogram("_count") if le is None else res.histogram("_bucket"))
        if histogram_count
        else res.selector()
    )
    if matchers:
        sel = sel.where(**matchers)
    if histogram_count and le is not None:
        expr, frame = by_le(
            le,
            lambda text: ops.sum_by(ops.rate(sel.where(le=text), rate_window(step_s)), *by),
            lambda e: engine.range(e, window.start, window.end, step_s),
        )
        if queries is not None:
            queries.append(to_promql(expr))
        return frame
    expr = ops.sum_by(ops.rate(sel, rate_window(step_s)), *by)
    return _range(engine, expr, window, step_s, queries)


def mean_series(
    engine: Engine, signal: str, window: Window, step_s: float, queries: list[str] | None = None
) -> pl.DataFrame:
    """rate(_sum)/rate(_count) of a histogram signal at every step (mean latency per step); an engine's
    time and count counters where it has no histogram (:func:`window_mean`), in seconds."""
    res = resolve(engine, signal)
    rw = rate_window(step_s)
    if res.metric is None:
        counted = _counter_mean(engine, signal)
        if counted is None:
            return no_series()
        time_c, count_c, unit = counted
        expr = ops.ratio(
            ops.sum_by(ops.rate(ops.Selector(time_c), rw)), ops.sum_by(ops.rate(ops.Selector(count_c), rw))
        )
        return _range(engine, expr, window, step_s, queries).with_columns(pl.col("value") * unit)
    expr = ops.ratio(
        ops.sum_by(ops.rate(res.histogram("_sum"), rw)), ops.sum_by(ops.rate(res.histogram("_count"), rw))
    )
    return _range(engine, expr, window, step_s, queries)


def gauge_series(
    engine: Engine,
    signal: str,
    window: Window,
    step_s: float,
    queries: list[str] | None = None,
    combine: str = "sum",
    by: tuple[str, ...] = (),
) -> pl.DataFrame:
    """``combine by (*by) (gauge)`` at every step."""
    res = resolve(engine, signal)
    if res.metric is None:
        return no_series()
    expr = ops.aggregate(combine, res.series(), *by)
    return _range(engine, expr, window, step_s, queries)


def catalogue_families() -> frozenset[str]:
    """Every sample name the signal catalogue reads (histograms with their ``_bucket``/``_sum``/
    ``_count``, gauges, counters): what triage needs of a bundle, with :func:`is_triage_family`."""
    names = {
        f"{dialects.family(b)}{suffix}"
        for bases in HISTOGRAMS.values()
        for b in bases
        for suffix in ("_bucket", "_sum", "_count")
    }
    names |= {dialects.family(n) for group in (GAUGES, COUNTERS) for names_ in group.values() for n in names_}
    names |= {n for means in dialects.COUNTER_MEANS.values() for t, c, _ in means for n in (t, c)}
    names |= {n for pairs in dialects.GAUGE_RATIOS.values() for pair in pairs for n in pair}
    return frozenset(names)


_INFO_PREFIXES = ("vllm:", "sglang:", "trtllm_", "trtllm:")


def is_triage_family(name: str, _names: frozenset[str] = catalogue_families()) -> bool:
    """A sample name triage reads: the catalogue's, and the engines' config info metrics
    (``vllm:cache_config_info``, ``trtllm_kv_cache_config_info``: the engine's settings)."""
    return name in _names or (name.startswith(_INFO_PREFIXES) and name.endswith("_info"))


def serving_engine(engine: Engine) -> str | None:
    """The engine dialect whose series answer (its TTFT, E2E or running gauge, in that order)."""
    for signal in ("ttft", "e2e", "running", "request_success"):
        res = resolve(engine, signal)
        if res.engine is not None:
            return res.engine
    return None


def absent(engine: Engine, kind: str, signal: str) -> str:
    """A signal ``engine``'s evidence lacks, in its serving engine's words (:func:`dialects.absent`),
    or the catalogue's name for one no serving engine has (DCGM, node exporter)."""
    catalogue = {"histograms": HISTOGRAMS, "gauges": GAUGES}.get(kind, {})
    if signal in catalogue and not any(signal in getattr(d, kind) for d in dialects.DIALECTS):
        return f"no {catalogue[signal][0]} {'histogram' if kind == 'histograms' else 'series'}"
    return dialects.absent(serving_engine(engine), kind, signal)
