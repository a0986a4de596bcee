"""Is the monitoring data complete and aligned? Which signals exist, gaps, scrape phase, clock skew,
and where an exporter's process restarted.

Restarts. A restarted vLLM server or training job starts its counters again from zero; restarted by
an orchestrator, it often comes back under a new ``instance`` and ``pod`` (the same series, new
target labels). Both are found in the raw samples of the window and reported as :class:`Restart`
events with their time, for the timeline: a counter that drops (``counter reset``), and a series
that ends while one with the same labels but another ``instance``/``pod`` begins (``new
instance``). Signs of one restart (every histogram of a server resets at the same scrape, every rank
of a job) within :data:`RESTART_SPREAD_SCRAPES` scrape intervals are one event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import numpy as np
import polars as pl

from perfkit.core.frames import Window, iso, utc
from perfkit.engine import signals as S
from perfkit.engine.dialects import BY_NAME, DIALECTS, family
from perfkit.engine.signals import GAUGES, HISTOGRAMS, SOURCES, resolve

GAP_FACTOR = 2.5  # a hole longer than 2.5 scrape intervals is a gap (one missed scrape is noise)
RESTART_SPREAD_SCRAPES = 2.5
"""Signs of a restart this close together (in scrape intervals) are one restart: one target's series
are scraped together, the ranks of one job within an interval of each other, and a restarted server
is back within a scrape or two."""
RESTART_MAX_DOWN_S = 1800.0
"""A series that replaces another after more than 30 min is a new deployment, not a restart."""
TARGET_LABELS = ("instance", "pod")  # what a restart changes when an orchestrator reschedules
#: per source: counters whose drop is a restart of that source's process (histograms: their _count)
RESTART_COUNTERS: dict[str, tuple[str, ...]] = {
    "vLLM exporter": (
        "vllm:request_success_total",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:time_to_first_token_seconds_count",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ),
    "training exporter": ("train_tokens_total", "train_samples_total"),
    "node exporter": ("node_cpu_seconds_total",),
}
#: per source: families whose series stand for the source's processes (a new instance shows here)
RESTART_SERIES: dict[str, tuple[str, ...]] = {
    "vLLM exporter": (
        "vllm:num_requests_running",
        "vllm:request_success_total",
        "vllm:e2e_request_latency_seconds_count",
    ),
    "training exporter": ("train_step_duration_seconds", "train_tokens_total"),
}
for _d in DIALECTS[1:]:  # the other serving engines, by their own names (perfkit.engine.dialects)
    _counts = tuple(f"{b}_count" for sig in ("e2e", "ttft") for b in _d.histograms.get(sig, ()))
    _totals = tuple(n for sig in ("request_success", "prompt_tokens_total") for n in _d.counters.get(sig, ()))
    RESTART_COUNTERS[f"{_d.title} exporter"] = _counts + _totals
    RESTART_SERIES[f"{_d.title} exporter"] = (
        tuple(family(n) for n in _d.gauges.get("running", ())) + _counts[:1]
    )


@dataclass
class SignalCoverage:
    signal: str
    metric: str | None
    legacy: bool
    series: int = 0
    samples: int = 0
    scrape_s: float | None = None
    phase_s: float | None = None
    coverage_frac: float = 0.0
    gaps: list[tuple[str, float]] = field(default_factory=list)  # (start iso, seconds)


@dataclass
class Restart:
    """A process behind an exporter restarted: ``ts`` is the first sample of its new life."""

    ts: str  # ISO time of the first sample after the restart
    source: str  # "vLLM exporter", "training exporter", "node exporter"
    how: str  # "counter reset", "new instance" or both
    series: int  # series that show it
    last_before: str | None = None  # ISO time of the last sample before it
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "source": self.source,
            "how": self.how,
            "series": self.series,
            "last_before": self.last_before,
            "detail": self.detail,
        }


@dataclass
class Completeness:
    window: Window
    rows: list[SignalCoverage]
    sources: dict[str, bool]
    clock_skew_s: float | None
    skew_note: str
    missing: list[str]
    restarts: list[Restart] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        present = [r for r in self.rows if r.metric]
        if not present:
            return "missing"
        if any(r.coverage_frac < 0.9 for r in present) or self.missing:
            return "degraded"
        return "complete"

    def table(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "signal": [r.signal for r in self.rows],
                "metric": [(r.metric or "—") + (" (older name)" if r.legacy else "") for r in self.rows],
                "series": [r.series for r in self.rows],
                "samples": [r.samples for r in self.rows],
                "scrape_s": [r.scrape_s for r in self.rows],
                "coverage_pct": [round(100 * r.coverage_frac, 1) for r in self.rows],
                "gaps": [len(r.gaps) for r in self.rows],
                "longest_gap_s": [max((g[1] for g in r.gaps), default=0.0) for r in self.rows],
            }
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "sources": self.sources,
            "clock_skew_s": self.clock_skew_s,
            "skew_note": self.skew_note,
            "gaps": {r.signal: r.gaps for r in self.rows if r.gaps},
            "restarts": [r.as_dict() for r in self.restarts],
        }


def _coverage(
    frame: pl.DataFrame, window: Window
) -> tuple[int, int, float | None, float | None, float, list]:
    """Series count, samples, scrape interval, phase, covered fraction and gaps of raw samples."""
    if not frame.height:
        return 0, 0, None, None, 0.0, []
    labels = [c for c in frame.columns if c not in ("ts", "value")]
    groups = frame.partition_by(labels, as_dict=True) if labels else {(): frame}
    # the series with the most samples stands for the target (they are scraped together)
    main = max(groups.values(), key=lambda g: g.height)
    t = np.sort(main["ts"].cast(pl.Int64).to_numpy()) / 1000.0
    start, end = window.start.timestamp(), window.end.timestamp()
    deltas = np.diff(t)
    interval = float(np.median(deltas)) if deltas.size else None
    gaps: list[tuple[str, float]] = []
    covered = 0.0
    if interval:
        limit = GAP_FACTOR * interval
        edges = np.concatenate([[start], t, [end]])
        holes = np.diff(edges)
        for i in np.flatnonzero(holes > limit):
            gaps.append((iso(utc(edges[i])), round(float(holes[i]), 1)))
        covered = float(np.minimum(holes, interval).sum())
    phase = float(np.median(np.mod(t, interval))) if interval else None
    frac = min(1.0, covered / max(end - start, 1e-9))
    return len(groups), frame.height, interval, phase, frac, gaps


def clock_skew(
    stats: pl.DataFrame, running: pl.DataFrame, *, max_lag_s: int = 900
) -> tuple[float | None, str]:
    """Lag (s) of the log clock against the metrics clock: cross-correlate the stats line's
    ``Running`` count with ``vllm:num_requests_running``. Positive: log timestamps are late."""
    if not stats.height or not running.height:
        return None, "cannot compare clocks: need vLLM stats log lines and vllm:num_requests_running"
    ls = stats.sort("ts")
    lt = ls["ts"].cast(pl.Int64).to_numpy() / 1000.0
    lv = ls["running"].cast(pl.Float64).to_numpy()
    ms = running.group_by("ts").agg(pl.col("value").sum()).sort("ts")
    mt = ms["ts"].cast(pl.Int64).to_numpy() / 1000.0
    mv = ms["value"].to_numpy()
    lo, hi = max(lt[0], mt[0]), min(lt[-1], mt[-1])
    if hi - lo < 20 * 60:
        return None, "logs and metrics overlap by less than 20 min: clock skew not estimated"
    grid = np.arange(lo + max_lag_s, hi - max_lag_s, 5.0)
    if grid.size < 50:
        return None, "too little overlap to estimate clock skew"
    m = np.interp(grid, mt, mv)
    m = (m - m.mean()) / (m.std() or 1.0)
    best, best_lag = -2.0, 0
    for lag in range(-max_lag_s, max_lag_s + 1, 5):
        lg = np.interp(grid + lag, lt, lv)
        sd = lg.std()
        if sd == 0:
            continue
        c = float(np.mean(m * (lg - lg.mean()) / sd))
        if c > best:
            best, best_lag = c, lag
    if best < 0.3:
        return None, f"log and metric running counts do not correlate (r={best:.2f}); clock skew unknown"
    return float(best_lag), f"log clock vs metrics clock: {best_lag:+d} s (r={best:.2f})"


def completeness(
    engine, window: Window, *, stats: pl.DataFrame | None = None, events: pl.DataFrame | None = None
) -> Completeness:
    """Check every catalogued signal for presence, scrape interval, gaps and the log clock."""
    rows: list[SignalCoverage] = []
    missing: list[str] = []
    training = engine.has("train_step_duration_seconds") and not engine.has("vllm:num_requests_running")
    histograms = (
        () if training else ("ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode", "prompt_tokens")
    )
    gauges = (
        ("train_step", "train_data_wait", "train_comm", "train_loss")
        if training
        else ("running", "waiting", "kv_cache_usage")
    ) + ("gpu_util", "fb_used", "tensor_active")
    for signal in histograms:
        res = resolve(engine, signal)
        cov = SignalCoverage(signal, res.metric, res.legacy)
        if res.metric:
            frame = engine.raw(f"{res.metric}_count", window.start, window.end)
            cov.series, cov.samples, cov.scrape_s, cov.phase_s, cov.coverage_frac, cov.gaps = _coverage(
                frame, window
            )
        rows.append(cov)
    for signal in gauges:
        res = resolve(engine, signal)
        cov = SignalCoverage(signal, res.metric, res.legacy)
        if res.metric:
            frame = engine.raw(res.metric, window.start, window.end)
            cov.series, cov.samples, cov.scrape_s, cov.phase_s, cov.coverage_frac, cov.gaps = _coverage(
                frame, window
            )
        rows.append(cov)
    sources = {name: any(engine.has(m) for m in metrics) for name, metrics in SOURCES.items()}
    engines = [f"{d.title} exporter" for d in DIALECTS]
    if any(sources[name] for name in engines):  # the serving engines present; the others are no gap
        sources = {k: v for k, v in sources.items() if v or k not in engines}
    else:  # none: the default engine is what is missing
        sources = {k: v for k, v in sources.items() if k not in engines[1:]}
    if training:  # a training job has no inference server; its own exporter stands in
        sources.pop("vLLM exporter", None)
        sources["training exporter (train_*)"] = True
    for name, present in sources.items():
        if not present:
            missing.append(f"{name}: no series in the window")
    for r in rows:
        if r.metric is None and r.signal in HISTOGRAMS:
            missing.append(f"{r.signal}: {S.absent(engine, 'histograms', r.signal)}")
        elif r.metric is None and r.signal in GAUGES:
            missing.append(f"{r.signal}: {S.absent(engine, 'gauges', r.signal)}")
        elif r.metric and r.samples == 0:
            missing.append(f"{r.signal}: {r.metric} has no samples in the window")
    served = BY_NAME.get(S.serving_engine(engine) or "")
    skew, note = None, f"no {served.title if served else 'engine'} stats log lines: clock skew between logs and metrics not checked"  # fmt: skip
    if stats is not None and stats.height:
        running = resolve(engine, "running")
        if not running.metric:
            note = f"{S.absent(engine, 'gauges', 'running')}: clock skew between logs and metrics not checked"
        else:
            pad = timedelta(minutes=20)
            skew, note = clock_skew(
                stats.filter((pl.col("ts") >= window.start - pad) & (pl.col("ts") <= window.end + pad)),
                engine.raw(running.metric, window.start - pad, window.end + pad),
            )
    if events is not None and not events.height:
        missing.append("events: no deploy or alert events (release history unknown)")
    return Completeness(window, rows, sources, skew, note, missing, restarts(engine, window))


# -- restarts -------------------------------------------------------------------------------------


@dataclass
class _Sign:
    ts: int  # ms, first sample of the new life
    before: int | None  # ms, last sample of the old life
    how: str
    detail: str


def _labels(frame: pl.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in ("ts", "value")]


def _interval_ms(frame: pl.DataFrame) -> float | None:
    """The scrape interval of a family: the median gap between samples of its series."""
    labels = _labels(frame)
    ts = frame.select([*labels, pl.col("ts").cast(pl.Int64)]).sort([*labels, "ts"])
    gaps = ts.with_columns(gap=pl.col("ts").diff().over(labels) if labels else pl.col("ts").diff())["gap"]
    gaps = gaps.filter(gaps > 0)
    return float(cast(float, gaps.median())) if gaps.len() else None


def _counter_resets(frame: pl.DataFrame, metric: str) -> list[_Sign]:
    """Every drop of a counter series: the sample after it begins a new life."""
    labels = _labels(frame)
    f = frame.select([*labels, pl.col("ts").cast(pl.Int64), "value"]).sort([*labels, "ts"])
    prev = [pl.col(c).shift(1).over(labels) if labels else pl.col(c).shift(1) for c in ("value", "ts")]
    f = f.with_columns(prev[0].alias("prev"), prev[1].alias("prev_ts"))
    drops = f.filter(pl.col("value") < pl.col("prev"))
    return [
        _Sign(int(r["ts"]), int(r["prev_ts"]), "counter reset", metric) for r in drops.iter_rows(named=True)
    ]


def _new_instances(frame: pl.DataFrame, interval_ms: float) -> list[_Sign]:
    """A series that ends while one with the same labels but another instance/pod begins."""
    labels = _labels(frame)
    target = [c for c in labels if c in TARGET_LABELS]
    if not target:
        return []
    ident = [c for c in labels if c not in TARGET_LABELS and c != "le"]
    spans = (
        frame.select([*labels, pl.col("ts").cast(pl.Int64)])
        .group_by(labels)
        .agg(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
    )
    groups = spans.partition_by(ident, as_dict=True) if ident else {(): spans}
    out: list[_Sign] = []
    for group in groups.values():
        if group.height < 2:
            continue
        rows = group.sort("first").to_dicts()
        ended: set[int] = set()  # series already continued by another (each life continues once)
        for j, new in enumerate(rows):
            # the series that ended latest before this one began (replicas running beside it never qualify)
            old = [
                (row["last"], i)
                for i, row in enumerate(rows)
                if i != j
                and i not in ended
                and row["first"] < new["first"]
                and -interval_ms <= new["first"] - row["last"] <= RESTART_MAX_DOWN_S * 1000
            ]
            if not old:
                continue
            i = max(old)[1]
            prev = rows[i]
            changed = ", ".join(f"{c} {prev[c]} -> {new[c]}" for c in target if prev[c] != new[c])
            if changed:
                ended.add(i)
                out.append(_Sign(int(new["first"]), int(prev["last"]), "new instance", changed))
    return out


def restarts(engine: Any, window: Window) -> list[Restart]:
    """The restarts of every source's processes in ``window`` (module docstring), in time order."""
    found: list[Restart] = []
    for source in RESTART_COUNTERS:
        signs: list[_Sign] = []
        interval: float | None = None
        for metric in RESTART_COUNTERS[source]:
            if engine.has(metric):
                frame = engine.raw(metric, window.start, window.end)
                if frame.height:
                    interval = interval or _interval_ms(frame)
                    signs += _counter_resets(frame, metric)
        for metric in RESTART_SERIES.get(source, ()):
            if engine.has(metric):
                frame = engine.raw(metric, window.start, window.end)
                if frame.height:
                    interval = interval or _interval_ms(frame)
                    signs += _new_instances(frame, interval or 15_000.0)
        found += _cluster(source, signs, RESTART_SPREAD_SCRAPES * (interval or 15_000.0))
    return sorted(found, key=lambda r: r.ts)


def _cluster(source: str, signs: list[_Sign], spread_ms: float) -> list[Restart]:
    """Signs within ``spread_ms`` of the first of a run are one restart."""
    out: list[Restart] = []
    run: list[_Sign] = []
    for sign in [*sorted(signs, key=lambda s: s.ts), None]:
        if run and (sign is None or sign.ts - run[0].ts > spread_ms):
            hows = sorted({s.how for s in run})
            details = sorted({s.detail for s in run})
            before = [s.before for s in run if s.before is not None]
            out.append(
                Restart(
                    iso(utc(run[0].ts / 1000)),
                    source,
                    " and ".join(hows),
                    len(run),
                    iso(utc(max(before) / 1000)) if before else None,
                    "; ".join(details[:4]) + (f"; +{len(details) - 4} more" if len(details) > 4 else ""),
                )
            )
            run = []
        if sign is not None:
            run.append(sign)
    return out
