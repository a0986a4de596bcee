"""Histogram buckets as exporters write them and as ``histogram_quantile`` reads them: the first
bucket of a window (:class:`FirstBucket`), a quantile of a set of bucket counts (:func:`buckets_quantile`),
and the spellings of a bucket bound in the ``le`` label (:func:`le_spellings`), for the query helpers of
:mod:`perfkit.engine.signals`."""

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
