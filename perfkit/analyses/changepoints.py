"""Level shifts in a metric series: robust binary segmentation.

Why not a library such as ruptures: its penalised searches need the noise level tuned per series
anyway, and a monitoring series at one-minute steps is short (tens to hundreds of points). This is
the textbook CUSUM split with the guards an on-call engineer needs: a rolling median first (a
restart's two-minute blip is not a level shift), a minimum segment length, and a minimum
*relative* change (a 3 % wiggle is not an incident even when it is statistically clear).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

MIN_SEGMENT_POINTS = 8
"""A level lasts at least 8 points (8 minutes at the usual one-minute step) on each side of a change:
a restart or a burst of long prompts is shorter, an incident that pages someone is longer."""
SHIFT_SCORE = 5.0
"""The CUSUM statistic (difference of the two means in units of its standard error) must reach 5:
about 1 in 2 million by chance under normal noise, so a series of a few hundred points with
several splits tried stays clear of false alarms."""
MIN_REL_CHANGE = 0.2
"""A change of at least 20 % of the level: smaller shifts are within the hour-to-hour wobble of a
latency quantile and not what an engineer acts on, however clear statistically."""
MAX_POINTS = 4  # at most 4 change points per series: more is a noisy series, not a story
SMOOTH_POINTS = 5
"""The rolling median the series is smoothed with before splitting: a blip of 2 points (a restart,
one slow scrape) never holds the median of 5."""
MIN_SIGMA_LOG = 1e-3  # the noise floor on a log scale (0.1 %): a perfectly flat series is not infinitely sure


@dataclass(frozen=True)
class ChangePoint:
    ts: datetime  # first point of the new level
    index: int
    before: float  # median level before (in the series' units)
    after: float  # median level after
    score: float  # standardised size of the shift

    @property
    def rel_change(self) -> float:
        """(after − before) / before; +0.6 means 60 % higher."""
        return (self.after - self.before) / self.before if self.before else float("inf")


def _rolling_median(x: np.ndarray, k: int) -> np.ndarray:
    if x.size < k:
        return x.copy()
    pad = k // 2
    padded = np.pad(x, pad, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, k)
    return np.median(windows, axis=1)


def detect(
    ts: list[datetime],
    values: np.ndarray,
    *,
    min_size: int = MIN_SEGMENT_POINTS,
    threshold: float = SHIFT_SCORE,
    min_rel: float = MIN_REL_CHANGE,
    max_points: int = MAX_POINTS,
    log_scale: bool = True,
) -> list[ChangePoint]:
    """Change points of ``values`` (NaNs dropped), strongest first, at most ``max_points``.

    ``log_scale`` compares latencies multiplicatively (a 2x jump is the same at 50 ms and 5 s).
    """
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(v) & ((v > 0) if log_scale else True)
    idx_map = np.flatnonzero(keep)
    if idx_map.size < 2 * min_size:
        return []
    x = np.log(v[keep]) if log_scale else v[keep]
    x = _rolling_median(x, SMOOTH_POINTS)
    diffs = np.diff(x)
    mad = np.median(np.abs(diffs - np.median(diffs))) if diffs.size else 0.0
    floor = MIN_SIGMA_LOG if log_scale else 1e-9 + MIN_SIGMA_LOG * np.median(np.abs(x))
    sigma = max(mad / 0.6745 / np.sqrt(2), floor)  # MAD of differences → SD of the noise
    found: list[tuple[int, float]] = []

    def split(a: int, b: int) -> None:
        n = b - a
        if n < 2 * min_size or len(found) >= max_points * 3:
            return
        seg = x[a:b]
        csum = np.cumsum(seg)
        total = csum[-1]
        ks = np.arange(min_size, n - min_size + 1)
        left_mean = csum[ks - 1] / ks
        right_mean = (total - csum[ks - 1]) / (n - ks)
        stat = np.abs(right_mean - left_mean) / (sigma * np.sqrt(1.0 / ks + 1.0 / (n - ks)))
        best = int(np.argmax(stat))
        k = int(ks[best])
        before, after = np.median(seg[:k]), np.median(seg[k:])
        rel = (
            (np.exp(after - before) - 1.0) if log_scale else ((after - before) / before if before else np.inf)
        )
        if stat[best] < threshold or abs(rel) < min_rel:
            return
        found.append((a + k, float(stat[best])))
        split(a, a + k)
        split(a + k, b)

    split(0, x.size)
    found.sort(key=lambda p: -p[1])
    out: list[ChangePoint] = []
    cuts = sorted(i for i, _ in found[:max_points])
    bounds = [0, *cuts, x.size]
    for i, score in found[:max_points]:
        j = bounds.index(i)
        lo, hi = bounds[j - 1], bounds[j + 1]
        raw = v[keep]
        before = float(np.median(raw[lo:i]))
        after = float(np.median(raw[i:hi]))
        out.append(ChangePoint(ts[int(idx_map[i])], int(idx_map[i]), before, after, score))
    return out
