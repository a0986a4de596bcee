"""When a training job stood still while its exporter kept answering: the spans its gauges froze.

A hung job (a collective that never completes, a stuck data loader) keeps its metrics endpoint up:
``train_step_duration_seconds``, ``train_data_wait_seconds`` and ``train_comm_seconds`` go on
serving the last step's values while ``train_tokens_total`` stops rising. So does a crashed job's
series for Prometheus' 5-minute lookback. Averaged in, those minutes read as the step before the
hang: the NCCL socket fallback's 6.1 s step (5.9x its baseline, 83 % in collectives) read 4.0 s
(3.9x, 58 %) because 10 of its 19 minutes repeated the healthy step it hung after.

A **stall** is a stretch in which the job's token counter, summed over the ranks that export it,
did not move for at least :data:`STALL_STEPS` ordinary steps, :data:`STALL_STEPS` of its ordinary
updates and :data:`MIN_STALL_S`: a running job adds tokens every step, so five steps without one is
a job that stopped. The ordinary update is the median time the counter holds a value in the window:
an exporter that updates it at each log (the HF Trainer's ``on_log`` every 500 steps) holds it for
minutes while the job runs, and those minutes are not a hang. Averages of the step
gauges leave stalls out (the time is counted once, as time down, by
:mod:`perfkit.analyses.training_progress` and the impact); without ``train_tokens_total`` nothing
is left out and the caller says so.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import signals as S

STALL_STEPS = 5.0
"""The counter still for 5 ordinary steps: a step's time varies by tens of % (jitter, a checkpoint
save), never 5x while the job runs (the same margin as the log lines' stall,
:data:`perfkit.analyses.training_progress.STALL_INTERVALS`)."""
MIN_STALL_S = 120.0
"""...and for 2 minutes at least: 8 scrapes at 15 s, so a scrape missed or a counter exported every
30 s is not a stall."""
GRID_S = 15.0  # the usual scrape interval: the counter is read at each


def stalls(engine: Any, window: Window, step_s: float | None = None) -> list[tuple[datetime, datetime]]:
    """The spans ``(last moving sample, last still sample]`` in which the job's tokens did not rise
    (module docstring); ``step_s`` is the ordinary step time (None: the 2-minute floor alone)."""
    if not S.resolve(engine, "train_tokens").found:
        return []
    frame = S.gauge_series(engine, "train_tokens", window, GRID_S, combine="sum")
    if frame.height < 2:
        return []
    ts, values = frame["ts"].to_list(), frame["value"].to_numpy().astype(np.float64)
    held: list[tuple[datetime, datetime]] = []  # each value's first and last sample
    start = 0
    for i in range(1, len(ts) + 1):
        if i < len(ts) and values[i] == values[start]:
            continue
        held.append((ts[start], ts[i - 1]))
        start = i
    usual = float(np.median([(b - a).total_seconds() + GRID_S for a, b in held]))
    step = STALL_STEPS * step_s if step_s and np.isfinite(step_s) else 0.0
    least = max(MIN_STALL_S, step, STALL_STEPS * usual)
    return [(a, b) for a, b in held if (b - a).total_seconds() >= least]


def stalled_s(spans: list[tuple[datetime, datetime]]) -> float:
    return sum((b - a).total_seconds() for a, b in spans)


def running(frame: pl.DataFrame, spans: list[tuple[datetime, datetime]]) -> pl.DataFrame:
    """``frame``'s rows outside every stall (its ``ts`` after a stall's start and up to its end)."""
    if not spans or not frame.height or "ts" not in frame.columns:
        return frame
    keep = pl.lit(True)
    for a, b in spans:
        keep = keep & ~((pl.col("ts") > a) & (pl.col("ts") <= b))
    return frame.filter(keep)


def gaps(frame: pl.DataFrame, spans: list[tuple[datetime, datetime]]) -> pl.DataFrame:
    """``frame`` with its values inside every stall nulled: drawn as a gap, not as the frozen gauge."""
    if not spans or not frame.height or "ts" not in frame.columns:
        return frame
    inside = pl.lit(False)
    for a, b in spans:
        inside = inside | ((pl.col("ts") > a) & (pl.col("ts") <= b))
    return frame.with_columns(pl.when(inside).then(None).otherwise(pl.col("value")).alias("value"))


def running_mean(frame: pl.DataFrame, spans: list[tuple[datetime, datetime]]) -> tuple[float | None, int]:
    """The mean of ``frame``'s finite values outside the stalls, and how many there were."""
    kept = running(frame, spans)
    if not kept.height:
        return None, 0
    v = kept["value"].to_numpy().astype(np.float64)
    v = v[np.isfinite(v)]
    return (float(v.mean()), int(v.size)) if v.size else (None, 0)


def described(spans: list[tuple[datetime, datetime]]) -> str:
    """``the 10.0 min the job stood still (its gauges froze) are left out of the averages``."""
    if not spans:
        return ""
    total = timedelta(seconds=stalled_s(spans)).total_seconds() / 60
    many = f" in {len(spans)} stretches" if len(spans) > 1 else ""
    return (
        f"the {total:.1f} min the job stood still{many} (tokens did not rise; its step gauges repeated "
        "the last step) are left out of the step-time averages"
    )


def stood_still(spans: list[tuple[datetime, datetime]]) -> str:
    """``the job stood still 10.0 min (tokens did not rise), its frozen step gauge not drawn``."""
    if not spans:
        return ""
    many = f" in {len(spans)} stretches" if len(spans) > 1 else ""
    minutes = stalled_s(spans) / 60
    return (
        f"the job stood still {minutes:.1f} min{many} (tokens did not rise), its frozen step gauge not drawn"
    )
