"""Request lengths drawn from a length histogram (a bundle's ``vllm:request_prompt_tokens`` /
``vllm:request_generation_tokens``), for :func:`perfkit.loadgen.shapes.replay_bundle`.

A bucket says how many requests fell between two bounds, not where: a draw places each request in
a bucket by the bucket counts, then within it. Uniform within a bucket overstates a falling
distribution (a lognormal's right side: most of a wide bucket's requests sit near its lower bound)
and the ``+Inf`` bucket has no upper bound at all. The histogram's ``_sum`` pins down what they
leave open: the mean. So within each bucket the draw is ``lo + (hi - lo + 1) * u**k`` with one
tilt ``k`` for all buckets, found by bisection so that the expected mean is ``_sum / _count``
(``k = 1`` is uniform; ``k > 1`` leans each bucket to its lower bound). Without a ``_sum`` the
draw stays uniform, and says so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

TILT_RANGE = (1 / 8, 8.0)
"""The tilt's bounds: at 8 a bucket's mean sits 1/9 of its width above its lower bound, at 1/8 at
8/9 of it; a mean the histogram cannot reach within them is drawn at the bound, with a note."""
MEAN_CLOSE = 0.01
"""Bisection stops within 1 % of the target mean."""


def bound(le: Any) -> float:
    """A bucket's ``le`` as a number (NaN when it is not one: that bucket is ignored)."""
    try:
        return float(le)
    except (TypeError, ValueError):
        return math.nan


def _expected(p: np.ndarray, lo: np.ndarray, width: np.ndarray, k: float) -> float:
    """The mean of ``lo + floor(width * u**k)`` (continuous approximation: ``width / (k + 1)``)."""
    return float((p * (lo + width / (k + 1.0) - 0.5)).sum())


def _tilt(p: np.ndarray, lo: np.ndarray, width: np.ndarray, mean: float) -> tuple[float, bool]:
    """(the tilt whose expected mean is ``mean``, whether it was reachable)."""
    a, b = TILT_RANGE
    if _expected(p, lo, width, b) > mean:  # even leaning hardest to the lower bounds is too long
        return b, False
    if _expected(p, lo, width, a) < mean:
        return a, False
    la, lb = math.log(a), math.log(b)
    for _ in range(60):
        mid = (la + lb) / 2
        got = _expected(p, lo, width, math.exp(mid))
        if abs(got / mean - 1) <= MEAN_CLOSE / 4:
            break
        if got > mean:
            la = mid
        else:
            lb = mid
    return math.exp((la + lb) / 2), True


def draw_lengths(
    frame: Any, n: int, rng: np.random.Generator, metric: str, top_tokens: int, mean: float | None = None
) -> tuple[np.ndarray | None, list[str]]:
    """``n`` whole lengths drawn from the cumulative bucket counts in ``frame`` (columns le, value)
    with mean ``mean`` when given (module docstring), and notes on what was assumed."""
    if not frame.height or "le" not in frame.columns:
        return None, []
    pairs = sorted(
        (bound(le), float(v)) for le, v in zip(frame["le"], frame["value"], strict=True) if v is not None
    )
    pairs = [(b, c) for b, c in pairs if not math.isnan(b)]
    bounds = np.array([b for b, _ in pairs])
    cumulative = np.maximum.accumulate(np.nan_to_num(np.array([c for _, c in pairs]), nan=0.0).clip(0.0))
    per_bucket = np.diff(cumulative, prepend=0.0)
    total = float(per_bucket.sum())
    finite = bounds[np.isfinite(bounds)]
    if total <= 0 or not len(finite):
        return None, []
    top = float(finite.max())
    upper = np.minimum(np.where(np.isfinite(bounds), bounds, 2 * top), top_tokens)
    lower = np.concatenate(([0.0], upper[:-1]))
    lo_all = np.floor(lower) + 1
    width_all = np.maximum(lo_all, np.floor(upper)) - lo_all + 1
    notes: list[str] = []
    k = 1.0
    if mean is not None and math.isfinite(mean) and mean > 0:
        k, reached = _tilt(per_bucket / total, lo_all, width_all, mean)
        uniform = _expected(per_bucket / total, lo_all, width_all, 1.0)
        notes.append(
            f"{metric}: drawn within buckets leaning {'to their lower' if k > 1 else 'to their upper'} "
            f"bounds (u^{k:.2f}) so the mean is the histogram's _sum/_count, {mean:,.0f} tokens "
            f"(uniform would give {uniform:,.0f})"
            + ("" if reached else ": not reachable within the buckets, drawn as close as they allow")
        )
    else:
        notes.append(
            f"{metric}: no _sum in the window: drawn uniform within buckets (the mean is not pinned)"
        )
    u = rng.random((n, 2))  # one row a request: the draw of the first N is the same for any n >= N
    bucket = np.minimum(
        np.searchsorted(np.cumsum(per_bucket) / total, u[:, 0], side="right"), len(bounds) - 1
    )
    lo, width = lo_all[bucket], width_all[bucket]
    drawn = np.clip(lo + np.minimum(np.floor(u[:, 1] ** k * width), width - 1), 1, top_tokens)
    share = float(per_bucket[~np.isfinite(bounds)].sum()) / total
    if share > 0:
        notes.append(
            f"{metric}: {share:.1%} of requests were over {top:g} (the +Inf bucket), drawn up to {2 * top:g}"
        )
    return drawn.astype(np.int32), notes
