"""The TTFT median of the requests no long prefill held back (issue 27).

Without chunked prefill a long prompt's prefill takes whole engine steps, and every request that
arrives meanwhile waits for it: its TTFT lands in the tail. A share ``phi`` of requests held back that
way moves the window's median even while the others are served as usual: those sit at the bottom
``1 - phi`` of the distribution, so their median is the window's ``0.5 * (1 - phi)`` quantile.
``phi`` is read from the histograms as the excess share of requests above the baseline's own p99 (the
bucket bound at or above it): what the baseline window also had there is no holding back.

The seed's triage row reads "P95 TTFT up, P50 fine": judged on the requests that were not held back,
a median the long prompts moved themselves is still "fine"; one that a slower engine moved is not,
because a slower engine moves the requests below the tail too.
"""

from __future__ import annotations

import math

from perfkit.core.frames import Window
from perfkit.engine import signals as S

HELD_MAX = 0.49  # below one half: the median of what is left must still be a median of something


def _share_above(buckets: dict[float, float], bound: float) -> float | None:
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return None
    below = max((n for edge, n in buckets.items() if edge <= bound), default=0.0)
    return max(0.0, 1.0 - below / total)


def unheld_median(
    engine: S.Engine, spans: list[Window], baseline: Window | None
) -> tuple[float | None, float | None]:
    """(TTFT median of the requests not held back over ``spans``, the share held back); (None, None)
    when either window's TTFT histogram is missing or empty."""
    if baseline is None or not spans:
        return None, None
    base = S.window_buckets(engine, "ttft", baseline) or {}
    inc = S.spans_buckets(engine, "ttft", spans)
    p99 = S.buckets_quantile(base, 0.99)
    if p99 is None or S.buckets_quantile(inc, 0.5) is None:
        return None, None
    bound = min(edge for edge in base if edge >= p99)
    above_inc, above_base = _share_above(inc, bound), _share_above(base, bound)
    if above_inc is None or above_base is None:
        return None, None
    held = min(max(0.0, above_inc - above_base), HELD_MAX)
    return S.buckets_quantile(inc, 0.5 * (1.0 - held)), held
