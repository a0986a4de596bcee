"""The one rule for a number against its baseline, and the robust-scatter constant.

Every "how many times the baseline" in perfkit goes through :func:`ratio`, so a zero or missing
baseline means the same thing wherever it is read: a rise from nothing is infinite (``inf``), nothing
against nothing (``0 / 0``) is no comparison (``None``), and a baseline under a physical floor (a
timer's resolution, the rarest event a window can show) is read at that floor.
"""

from __future__ import annotations

import math

MAD_TO_SD = 1.4826
"""1.4826 x the median absolute deviation estimates the standard deviation of normal noise, and one
outlier cannot move it (1 / Φ⁻¹(3/4))."""


def _finite(x: float | None) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    v = float(x)
    return None if math.isnan(v) else v


def ratio(value: float | None, base: float | None, floor: float = 0.0) -> float | None:
    """``value / max(base, floor)``: how many times its baseline a number is.

    ``None`` when either is missing or not a number, or when the base is negative (no count, time or
    share is); a zero base with a positive value is ``inf`` (a rise from nothing), with a zero value
    ``None`` (nothing to compare)."""
    v, b = _finite(value), _finite(base)
    if v is None or b is None or b < 0:
        return None
    b = max(b, floor)
    if b > 0:
        return v / b
    return math.inf if v > 0 else None
