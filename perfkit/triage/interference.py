"""Long prompts against inter-token stalls, bin by bin: the evidence of the prefill/decode interference
row (:mod:`perfkit.triage.inference_rows`), gathered once with the rest (:mod:`perfkit.triage.evidence`).

Read through what the engine has: its prompt-length histogram (vLLM, SGLang with
``--collect-tokens-histogram``, TGI, Dynamo), else SGLang's log of prefill batches, else trtllm-serve's
per-request prefill times against its TPOT, else the prompt-token counter. The same bins are read
over the baseline window, for the figure to draw the claim's comparison (the correlation is the
incident's own)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import polars as pl

from perfkit.analyses.baseline import BaselineComparison
from perfkit.core.frames import Window
from perfkit.core.incident import Incident
from perfkit.engine import signals as S
from perfkit.sources.engine_lines import prefill_batches
from perfkit.triage import thresholds as T


@dataclass
class Interference:
    long_threshold_tokens: float | None = None
    long_share: dict[str, float | None] = field(default_factory=dict)  # side → share of requests
    stall_threshold_s: float | None = None
    stalls_per_min: dict[str, float | None] = field(default_factory=dict)
    correlation: float | None = None
    minutes: int = 0
    series: pl.DataFrame | None = None  # ts, long_arrivals, itl_stalls (per bin)
    baseline_series: pl.DataFrame | None = None  # the same bins over the baseline window (None: none)
    proxy: str | None = None  # what stands for long arrivals when no prompt-length histogram exists
    #: what the series' two columns count, in words (the figure's and the verdict's)
    arrivals_label: str = "long prompts arriving"
    stalls_label: str = "ITL stalls"


def _bucket_at_least(bounds: list[float], value: float) -> float | None:
    above = [b for b in bounds if b >= value and math.isfinite(b)]
    return min(above) if above else None


def _bounds(engine: S.Engine, signal: str, window: Window) -> list[float]:
    """A histogram's finite bucket bounds: ``count by (le) (last_over_time(...))`` (one small query,
    answered by the server on a live engine, instead of pulling every bucket sample)."""
    from perfkit.engine import ops

    res = S.resolve(engine, signal)
    if not res.found:
        return []
    bucket = ops.over_time(
        "last", ops.Selector(f"{res.metric}_bucket"), window.seconds
    )  # any sample in the window
    frame = engine.instant(ops.aggregate("count", bucket, "le"), window.end)
    if not frame.height or "le" not in frame.columns:
        return []
    return sorted({float(le) for le in frame["le"].unique().to_list() if le not in ("+Inf", "Inf", "")})


def interference(
    engine: S.Engine, inc: Incident, base: BaselineComparison, logs: pl.DataFrame | None = None
) -> Interference:
    """Long-prompt arrivals vs ITL stalls, minute by minute, in the incident window.

    An engine without a prompt-length histogram (SGLang without ``--collect-tokens-histogram``,
    trtllm-serve) is read through what it has: SGLang's log of prefill batches (:func:`_from_batches`:
    each batch's ``#new-token``, a long unchunked prompt being one large batch), else its prompt-token
    counter (the prompt tokens each bin brought stand for its long arrivals; one long prompt outweighs
    dozens of usual ones), the long-prompt share then unmeasured (None)."""
    out = Interference()
    window, baseline = inc.window, inc.baseline
    p_bounds = _bounds(engine, "prompt_tokens", window)
    median_prompt = S.window_quantiles(engine, "prompt_tokens", (0.5,), baseline or window)[0.5]
    long_le = None
    if p_bounds and median_prompt is not None:
        long_le = _bucket_at_least(p_bounds, T.LONG_PROMPT_MULTIPLE * median_prompt)
        if long_le is None:
            return out
    elif _from_batches(engine, inc, base, prefill_batches(logs), out):
        return out  # SGLang's log said it
    elif _from_request_times(engine, inc, out):
        return out  # trtllm-serve: prefill times against per-request TPOT
    elif not S.resolve(engine, "prompt_tokens_total").found:  # noqa: SIM114
        return out
    else:
        out.proxy = "prompt tokens per bin (the engine exports no prompt-length histogram)"
        out.arrivals_label = "prompt tokens arriving (no prompt-length histogram)"
    out.long_threshold_tokens = long_le
    if long_le is not None:
        out.arrivals_label = f"long prompts (>{long_le:g} tok) arriving"
    for side, w in (("incident", window), ("baseline", baseline)):
        if w is None or long_le is None:
            continue
        total = S.window_count(engine, "prompt_tokens", w)
        short = S.window_count(engine, "prompt_tokens", w, le=long_le)
        out.long_share[side] = (total - short) / total if total and short is not None else None
    stall_le = _stalls(engine, inc, base, out)
    if stall_le is None:
        return out
    step = T.INTERFERENCE_BIN_S

    def bins(w: Window) -> pl.DataFrame:
        if long_le is not None:
            long_all = S.rate_series(engine, "prompt_tokens", w, step, histogram_count=True)
            long_short = S.rate_series(engine, "prompt_tokens", w, step, histogram_count=True, le=long_le)
            arrivals = long_all.rename({"value": "a"}).join(long_short.rename({"value": "b"}), on="ts")
        else:
            tokens = S.rate_series(engine, "prompt_tokens_total", w, step)
            arrivals = tokens.rename({"value": "a"}).with_columns(pl.lit(0.0).alias("b"))
        itl_all = S.rate_series(engine, "itl", w, step, histogram_count=True)
        itl_fast = S.rate_series(engine, "itl", w, step, histogram_count=True, le=stall_le)
        return (
            arrivals.join(itl_all.rename({"value": "c"}), on="ts")
            .join(itl_fast.rename({"value": "d"}), on="ts")
            .select(
                "ts",
                ((pl.col("a") - pl.col("b")) * step).alias("long_arrivals"),
                ((pl.col("c") - pl.col("d")) * step).alias("itl_stalls"),
            )
            .sort("ts")
        )

    _keep(out, bins, window, baseline)
    return out


def _from_batches(
    engine: S.Engine, inc: Incident, base: BaselineComparison, batches: pl.DataFrame, out: Interference
) -> bool:
    """Interference read from SGLang's prefill batches (False: too few batches in the log to judge).
    A long batch is :data:`~perfkit.triage.thresholds.LONG_PROMPT_MULTIPLE` times the baseline's median
    batch: the step that computes it is that much longer, and every running decode waits for it."""
    window, baseline = inc.window, inc.baseline

    def within(w: Window) -> pl.DataFrame:
        return batches.filter((pl.col("ts") > w.start) & (pl.col("ts") <= w.end))

    ref = within(baseline or window)
    if ref.height < T.MIN_PREFILL_BATCHES or within(window).height < T.MIN_PREFILL_BATCHES:
        return False
    long_tokens = float(T.LONG_PROMPT_MULTIPLE * float(ref["new_tokens"].median()))  # type: ignore[arg-type]
    out.long_threshold_tokens = long_tokens
    out.proxy = "prefill batches in SGLang's log (#new-token per batch; no prompt-length histogram)"
    out.arrivals_label = f"prefill batches over {long_tokens:.0f} tokens (SGLang's log)"
    for side, w in (("incident", window), ("baseline", baseline)):
        if w is not None and (rows := within(w)).height:
            out.long_share[side] = float((rows["new_tokens"] > long_tokens).mean())  # type: ignore[arg-type]
    stall_le = _stalls(engine, inc, base, out)
    if stall_le is None:
        return True
    step = T.INTERFERENCE_BIN_S

    def bins(w: Window) -> pl.DataFrame:
        itl_all = S.rate_series(engine, "itl", w, step, histogram_count=True)
        itl_fast = S.rate_series(engine, "itl", w, step, histogram_count=True, le=stall_le)
        stalls = itl_all.rename({"value": "c"}).join(itl_fast.rename({"value": "d"}), on="ts").sort("ts")
        longs = within(w).filter(pl.col("new_tokens") > long_tokens)["ts"]
        rw = timedelta(seconds=S.rate_window(step))  # the stalls at ts are those of (ts - rw, ts]
        counts = [float(((longs > t - rw) & (longs <= t)).sum()) for t in stalls["ts"]]
        return (
            stalls.select("ts", ((pl.col("c") - pl.col("d")) * step).alias("itl_stalls"))
            .with_columns(pl.Series("long_arrivals", counts, dtype=pl.Float64))
            .select("ts", "long_arrivals", "itl_stalls")
        )

    _keep(out, bins, window, baseline)
    return True


def _from_request_times(engine: S.Engine, inc: Incident, out: Interference) -> bool:
    """Interference on an engine with per-request prefill-time and TPOT histograms but neither prompt
    lengths nor inter-token gaps (trtllm-serve): a long prefill is one
    :data:`~perfkit.triage.thresholds.LONG_PROMPT_MULTIPLE` times the baseline's median (prefill time grows
    with the prompt), and a decode that waited for it shows in the requests' TPOT, so the bins' long
    prefills are set against the bins' TPOT p99. No stall count: a TPOT averages a stall over the
    request's tokens (False: the engine has what the other readings need, or lacks these)."""
    if S.resolve(engine, "itl").found or not (
        S.resolve(engine, "prefill").found and S.resolve(engine, "tpot").found
    ):
        return False
    window, baseline = inc.window, inc.baseline
    bounds = _bounds(engine, "prefill", window)
    median = S.window_quantiles(engine, "prefill", (0.5,), baseline or window)[0.5]
    long_le = _bucket_at_least(bounds, T.LONG_PROMPT_MULTIPLE * median) if bounds and median else None
    if long_le is None:
        return True
    out.proxy = f"prefill times over {long_le:g} s (no prompt-length histogram)"
    out.arrivals_label = f"prefills longer than {long_le:g} s"
    out.stalls_label = "per-request TPOT p99 (s)"
    for side, w in (("incident", window), ("baseline", baseline)):
        if w is not None:
            total = S.window_count(engine, "prefill", w)
            short = S.window_count(engine, "prefill", w, le=long_le)
            out.long_share[side] = (total - short) / total if total and short is not None else None
    step = T.INTERFERENCE_BIN_S

    def bins(w: Window) -> pl.DataFrame:
        every = S.rate_series(engine, "prefill", w, step, histogram_count=True)
        short_s = S.rate_series(engine, "prefill", w, step, histogram_count=True, le=long_le)
        tpot = S.quantile_series(engine, "tpot", 0.99, w, step)
        return (
            every.rename({"value": "a"})
            .join(short_s.rename({"value": "b"}), on="ts")
            .join(tpot.rename({"value": "c"}), on="ts")
            .select(
                "ts",
                ((pl.col("a") - pl.col("b")) * step).alias("long_arrivals"),
                pl.col("c").alias("itl_stalls"),
            )
            .sort("ts")
        )

    _keep(out, bins, window, baseline)
    return True


def _keep(
    out: Interference, bins: Callable[[Window], pl.DataFrame], window: Window, baseline: Window | None
) -> None:
    """The incident's bins, their correlation, and the same bins over the baseline (for the figure:
    the claim is "against a baseline without either")."""
    _correlate(out, bins(window))
    out.baseline_series = bins(baseline) if baseline is not None else None


def _correlate(out: Interference, frame: pl.DataFrame) -> None:
    """Keep the per-bin series and the correlation of long arrivals with stalls (enough varying bins)."""
    out.series = frame
    out.minutes = frame.height
    x, y = frame["long_arrivals"].to_numpy(), frame["itl_stalls"].to_numpy()
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() >= T.MIN_CORRELATION_BINS and x[ok].std() > 0 and y[ok].std() > 0:
        out.correlation = float(np.corrcoef(x[ok], y[ok])[0, 1])


def _stalls(engine: S.Engine, inc: Incident, base: BaselineComparison, out: Interference) -> float | None:
    """The stall threshold (an ITL bucket bound) and the stalls per minute of each side, into ``out``."""
    window, baseline = inc.window, inc.baseline
    itl_p50 = base.q("baseline", "itl", 0.5) or base.q("incident", "itl", 0.5)
    i_bounds = _bounds(engine, "itl", window)
    if itl_p50 is None or not i_bounds:
        return None
    # A stall is a gap far outside the baseline's own worst: 2x its p99.9 (and >= 0.5 s, >= 10x p50).
    worst_q = T.STALL_WORST_QUANTILE
    normal_worst = S.window_quantiles(engine, "itl", (worst_q,), baseline)[worst_q] if baseline else None
    floor = max(
        T.STALL_MIN_S, T.STALL_MEDIAN_MULTIPLE * itl_p50, T.STALL_WORST_MULTIPLE * (normal_worst or 0)
    )
    stall_le = _bucket_at_least(i_bounds, floor)
    label = f"ITL gaps > {stall_le:g} s" if stall_le is not None else ""
    if stall_le is None:
        # The histogram ends below twice the baseline's worst gap (Dynamo's inter-token buckets stop at
        # 2 s): the gaps past its last bound stand in, where that bound is itself a stall by the other
        # two rules and past the baseline's own p99.9 (fewer than one gap in a thousand there)
        top = max(i_bounds)
        if top < max(T.STALL_MIN_S, T.STALL_MEDIAN_MULTIPLE * itl_p50) or top <= (normal_worst or 0):
            return None
        stall_le = top
        label = f"ITL gaps > {top:g} s (the histogram's last bound, under twice the baseline's p99.9)"
    out.stall_threshold_s = stall_le
    out.stalls_label = label
    for side, w in (("incident", window), ("baseline", baseline)):
        if w is None:
            continue
        total = S.window_count(engine, "itl", w)
        fast = S.window_count(engine, "itl", w, le=stall_le)
        out.stalls_per_min[side] = (
            (total - fast) / (w.seconds / 60) if total is not None and fast is not None else None
        )
    return stall_le
