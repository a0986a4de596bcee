"""Histogram buckets as exporters write them and as ``histogram_quantile`` reads them: the first
bucket of a window (:class:`FirstBucket`), a quantile of a set of bucket counts (:func:`buckets_quantile`),
the spellings of a bucket bound in the ``le`` label (:func:`le_spellings`) and an instant answer's counts
per edge (:func:`edge_counts`), for the query helpers of
:mod:`perfkit.engine.signals`; and whether a quantile's change between two windows is more than the
buckets can resolve (:func:`within_resolution`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from perfkit.engine import ops


@dataclass(frozen=True)
class FirstBucket:
    """A histogram's first bucket over a window: its upper bound and the share of the window's
    observations in it. ``histogram_quantile`` interpolates inside that bucket from 0, so a quantile
    that falls there says only "at most ``bound``": vLLM's queue, prefill, decode and E2E buckets start
    at 0.3 s, and a healthy server's queue p50 of 2 ms reads as 150 ms."""

    bound: float
    share: float

    def holds(self, q: float) -> bool:
        """Whether the ``q`` quantile falls in this bucket (its rank ``q x count`` is within it)."""
        return self.share >= q


def first_of(counts: dict[float, float] | None) -> FirstBucket | None:
    """The :class:`FirstBucket` of one window's bucket counts (upper edge → cumulative count): the
    lowest edge above 0 and the share at or under it, of the total histogram_quantile uses (``+Inf``,
    after its monotonic fix). None without an observation."""
    positive = sorted(b for b in counts or {} if 0 < b < math.inf)
    if not counts or math.inf not in counts or not positive:
        return None
    total = max(counts.values())
    if total <= 0:
        return None
    first = max(v for b, v in counts.items() if b <= positive[0])  # the cumulative count at the bound
    return FirstBucket(positive[0], min(1.0, max(0.0, first / total)))


def edge_counts(frame: pl.DataFrame, by: str | None = None) -> dict[str, dict[float, float]]:
    """An instant ``sum by (le[, by]) (...)`` answer as ``by``'s value → upper edge → count (all under
    ``""`` without ``by``, and series lacking the label too). An ``le`` that is not a number is left
    out, as ``histogram_quantile`` does; counts of equal edges are added."""
    out: dict[str, dict[float, float]] = {}
    if not frame.height or "le" not in frame.columns:
        return out
    values = frame[by].to_list() if by is not None and by in frame.columns else [None] * frame.height
    for who, le, value in zip(values, frame["le"].to_list(), frame["value"].to_list(), strict=True):
        try:
            edge = float(str(le))
        except ValueError:
            continue
        if value is not None and math.isfinite(value):
            counts = out.setdefault("" if who is None else str(who), {})
            counts[edge] = counts.get(edge, 0.0) + float(value)
    return out


def buckets_quantile(buckets: dict[float, float], q: float) -> float | None:
    """``histogram_quantile(q, ...)`` of one set of bucket counts (upper edge → cumulative count);
    None without a ``+Inf`` bucket or an observation."""
    import numpy as np

    from perfkit.engine.local import bucket_quantile

    if len(buckets) < 2 or not math.isinf(max(buckets)):
        return None
    upper = np.array(sorted(buckets))
    value = float(bucket_quantile(q, upper, np.array([[buckets[e] for e in upper]]))[0])
    return value if math.isfinite(value) else None


TAIL_MOVE = 2.0
"""Between adjacent buckets a quantile is known only to have crossed their shared edge; the move is real
when the share of observations past that edge changed by 2x or more (for a p95: the 5 % tail beyond the
baseline's bucket at least doubled, or halved). Less is the interpolation's reading of a few % of
observations stepping over one edge: vLLM's inter-token buckets are 25 ms apart at 25-100 ms, so a
p95 of 25 ms with 95.4 % of gaps under 25 ms reads 45 ms when 94.0 % are (1.8x "worse")."""


def quantile_bucket(buckets: dict[float, float], q: float) -> tuple[float, float] | None:
    """The bucket ``(lower edge, upper edge)`` the ``q`` quantile lies in (0 below the first edge),
    as ``histogram_quantile`` finds it; None without a ``+Inf`` count or an observation."""
    edges = sorted(buckets)
    if not edges or not math.isinf(edges[-1]):
        return None
    total = max(buckets.values())
    if total <= 0:
        return None
    rank, lower, running = q * total, 0.0, 0.0
    for e in edges:
        running = max(running, buckets[e])  # histogram_quantile's monotonic fix
        if running >= rank:
            return lower, e
        lower = e
    return None


def _share_under(buckets: dict[float, float], edge: float) -> float:
    total = max(buckets.values())
    return max((v for e, v in buckets.items() if e <= edge), default=0.0) / total


def within_resolution(before: dict[float, float], after: dict[float, float], q: float) -> bool | None:
    """Whether the ``q`` quantile's change between two windows' bucket counts is within the histogram's
    resolution: the same bucket, or adjacent buckets with the share past their shared edge moved by less
    than :data:`TAIL_MOVE`. None when either side has no quantile."""
    b, a = quantile_bucket(before, q), quantile_bucket(after, q)
    if b is None or a is None:
        return None
    if b == a:
        return True
    if a[0] == b[1] or b[0] == a[1]:  # adjacent: compare the tails past the shared edge
        edge = b[1] if a[0] == b[1] else a[1]
        tb, ta = 1.0 - _share_under(before, edge), 1.0 - _share_under(after, edge)
        lo, hi = sorted((tb, ta))
        return lo > 0 and hi < TAIL_MOVE * lo
    return False


def le_text(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def le_spellings(bound: float) -> tuple[str, ...]:
    """How exporters write a bucket's upper bound in its ``le`` label, first the one perfkit always
    asked for (Python's prometheus_client: ``"2.0"``, ``"7400.0"``), then the others: Rust's ``f64``
    Display and prometheus-cpp print a whole number without ``.0`` (Dynamo's and TGI's ``le="7400"``,
    Triton's ``le="10"``), Go's shortest form uses an exponent (``"1e+06"``), Rust's never
    (``"0.00001"``). Prometheus 3 rewrites them all to one form on ingestion; 2.x keeps the exporter's."""
    import numpy as np

    if math.isinf(bound):
        return ("+Inf",)
    b = float(bound)
    out = [le_text(b)]
    if b == int(b) and abs(b) < 1e15:
        out.append(str(int(b)))
    out.append(np.format_float_positional(b, trim="-"))  # Rust's Display: never an exponent
    scientific = np.format_float_scientific(b, trim="-", exp_digits=2)  # "1e+06", "7.4e+03"
    exponent = int(scientific.rsplit("e", 1)[1])
    out.append(scientific if exponent < -4 or exponent >= 6 else out[-1])  # Go's %g, shortest
    return tuple(dict.fromkeys(out))


def by_le(
    bound: float, build: Callable[[str], ops.Expr], run: Callable[[ops.Expr], pl.DataFrame]
) -> tuple[ops.Expr, pl.DataFrame]:
    """``build(le)`` run with the first spelling of ``bound`` whose series exist (:func:`le_spellings`):
    the expression and its result (the first spelling's, empty, when none has series)."""
    first: tuple[ops.Expr, pl.DataFrame] | None = None
    for le in le_spellings(bound):
        expr = build(le)
        frame = run(expr)
        if frame.height:
            return expr, frame
        first = first or (expr, frame)
    assert first is not None
    return first
