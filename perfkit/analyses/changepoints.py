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
    min_size: int = 8,
    threshold: float = 5.0,
    min_rel: float = 0.2,
    max_points: int = 4,
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
    x = _rolling_median(x, 5)
    diffs = np.diff(x)
    mad = np.median(np.abs(diffs - np.median(diffs))) if diffs.size else 0.0
    sigma = max(mad / 0.6745 / np.sqrt(2), 1e-3 if log_scale else 1e-9 + 1e-3 * np.median(np.abs(x)))
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
