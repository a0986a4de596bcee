"""A load sweep from low load to saturation, and its knee.

:func:`sweep_rates` spaces the offered rates geometrically (each step the same factor higher), so
a sweep resolves the knee to the same relative precision wherever it lies. :func:`find_knee`
takes one point per load level and returns the last level before saturation, where a level is
saturated when either

* the server no longer keeps up: ``achieved_rate < ACHIEVED_MIN_FRAC * offered_rate``, or
* queueing has taken over the latency: ``p99_ttft_ms > P99_TTFT_MAX_GROWTH * p99_ttft_ms`` at the
  lowest load.

>>> find_knee([
...     {"offered_rate": 1, "achieved_rate": 1.0, "p99_ttft_ms": 60},
...     {"offered_rate": 2, "achieved_rate": 2.0, "p99_ttft_ms": 70},
...     {"offered_rate": 4, "achieved_rate": 3.1, "p99_ttft_ms": 900},
... ])["point"]["offered_rate"]
2
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfkit.errors import ConfigError

ACHIEVED_MIN_FRAC = 0.9
"""Below saturation a server completes what it is offered: the achieved rate falls short only by
the requests still in flight when the run ends (E2E latency / run length: 2-5 % for runs of a
minute or more) and the arrivals' sampling noise, which the plans remove (offered rate exact).
A 10 % shortfall is twice that allowance: the server has fallen behind and a queue is growing."""
P99_TTFT_MAX_GROWTH = 2.0
"""Below the knee, p99 TTFT moves with batch composition by some tens of percent; queueing theory
(M/M/1: waiting grows as rho/(1-rho)) makes it climb steeply only near capacity. Doubling the
lowest load's p99 means the queue wait now equals the whole unloaded tail: past the knee, with a
margin over the noise of a stable server."""
MAX_STEPS = 100
"""Most load levels one sweep runs: beyond this, steps closer than a few percent measure noise."""


def sweep_rates(low: float, high: float, steps: int) -> list[float]:
    """``steps`` request rates from ``low`` to ``high`` (both included), each the same factor above
    the last: ``sweep_rates(1, 16, 5) == [1, 2, 4, 8, 16]`` (to rounding)."""
    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        raise ConfigError(f"sweep rates must be numbers, got {low!r} and {high!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ConfigError(f"a sweep needs 0 < low <= high (finite), got {low!r} and {high!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise ConfigError(f"sweep steps must be a whole number from 1 to {MAX_STEPS}, got {steps!r}")
    if lo == hi:
        return [lo]
    if steps == 1:
        raise ConfigError(f"a sweep from {lo:g} to {hi:g} req/s needs at least 2 steps")
    rates = [float(r) for r in np.geomspace(lo, hi, steps)]
    rates[0], rates[-1] = lo, hi  # exactly the ends asked for
    return rates


def _value(point: Any, key: str, index: int) -> float | None:
    """``point[key]`` as a finite number >= 0, None when absent; ConfigError naming the point else."""
    v = point.get(key) if isinstance(point, dict) else None
    if v is None and isinstance(point, dict):
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"sweep point {index}: {key} must be a finite number >= 0, got {v!r}")
    return float(v)


def _required(point: Any, key: str, index: int) -> float:
    v = _value(point, key, index)
    if not v:
        raise ConfigError(f"sweep point {index}: {key} is missing or 0")
    return v


def find_knee(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The knee of a sweep: ``{"point": the last load level before saturation, "reason": why it
    is the knee, "saturated_by": "throughput" | "latency" | None, "next": the first saturated
    point or None, "limits": the two cut-offs}``.

    ``points`` hold ``offered_rate`` and ``achieved_rate`` (requests/s) and ``p99_ttft_ms`` (may be
    None: then only throughput decides); they are taken in order of offered rate. When the lowest
    load is already saturated, ``point`` is None (the knee lies below the sweep). None for no points.
    Raises :class:`~perfkit.errors.ConfigError` naming a point with a missing or invalid number.
    """
    if not points:
        return None
    ordered = sorted(
        ((_required(p, "offered_rate", i), i, p) for i, p in enumerate(points)), key=lambda t: (t[0], t[1])
    )
    base_p99 = next(
        (v for _, i, p in ordered if (v := _value(p, "p99_ttft_ms", i)) is not None and v > 0), None
    )
    limits = {"achieved_min_frac": ACHIEVED_MIN_FRAC, "p99_ttft_max_growth": P99_TTFT_MAX_GROWTH}
    knee: dict[str, Any] | None = None
    for offered, i, p in ordered:
        achieved = _value(p, "achieved_rate", i)
        if achieved is None:
            raise ConfigError(f"sweep point {i}: achieved_rate is missing")
        p99 = _value(p, "p99_ttft_ms", i)
        why = None
        if achieved < ACHIEVED_MIN_FRAC * offered:
            by = "throughput"
            why = f"achieved {achieved:.3g} req/s of {offered:.3g} offered ({achieved / offered:.0%})"
        elif base_p99 is not None and p99 is not None and p99 > P99_TTFT_MAX_GROWTH * base_p99:
            by = "latency"
            why = f"p99 TTFT {p99:.0f} ms, {p99 / base_p99:.1f}x the {base_p99:.0f} ms at the lowest load"
        if why is not None:
            where = "below the lowest load swept" if knee is None else "the last load before saturation"
            return {
                "point": knee,
                "reason": f"{where}; saturated at {offered:.3g} req/s: {why}",
                "saturated_by": by,
                "next": p,
                "limits": limits,
            }
        knee = p
    top = ordered[-1][0]
    return {
        "point": knee,
        "reason": f"not saturated up to {top:.3g} req/s, the highest load swept: the knee is above it",
        "saturated_by": None,
        "next": None,
        "limits": limits,
    }
