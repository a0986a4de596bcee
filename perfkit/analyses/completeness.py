"""Is the monitoring data complete and aligned? Which signals exist, gaps, scrape phase, clock skew."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import polars as pl

from perfkit.core.frames import Window, iso, utc
from perfkit.engine.signals import GAUGES, HISTOGRAMS, SOURCES, resolve

GAP_FACTOR = 2.5  # a hole longer than 2.5 scrape intervals is a gap (one missed scrape is noise)


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
class Completeness:
    window: Window
    rows: list[SignalCoverage]
    sources: dict[str, bool]
    clock_skew_s: float | None
    skew_note: str
    missing: list[str]

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
    if training:  # a training job has no inference server; its own exporter stands in
        sources.pop("vLLM exporter", None)
        sources["training exporter (train_*)"] = True
    for name, present in sources.items():
        if not present:
            missing.append(f"{name}: no series in the window")
    for r in rows:
        if r.metric is None and r.signal in HISTOGRAMS:
            missing.append(f"{r.signal}: no {HISTOGRAMS[r.signal][0]} histogram")
        elif r.metric is None and r.signal in GAUGES:
            missing.append(f"{r.signal}: no {GAUGES[r.signal][0]} series")
        elif r.metric and r.samples == 0:
            missing.append(f"{r.signal}: {r.metric} has no samples in the window")
    skew, note = None, "no vLLM stats log lines: clock skew between logs and metrics not checked"
    if stats is not None and stats.height:
        running = resolve(engine, "running")
        if not running.metric:
            note = "no vllm:num_requests_running series: clock skew between logs and metrics not checked"
        else:
            pad = timedelta(minutes=20)
            skew, note = clock_skew(
                stats.filter((pl.col("ts") >= window.start - pad) & (pl.col("ts") <= window.end + pad)),
                engine.raw(running.metric, window.start - pad, window.end + pad),
            )
    if events is not None and not events.height:
        missing.append("events: no deploy or alert events (release history unknown)")
    return Completeness(window, rows, sources, skew, note, missing)
