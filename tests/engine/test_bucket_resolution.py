"""A quantile's change the histogram cannot resolve is no headline (issue 36, item 7): vLLM's
inter-token-latency buckets (vllm/v1/metrics/loggers.py: 0.01, 0.025, 0.05, 0.075, 0.1, ...)."""

from __future__ import annotations

import math

from perfkit.engine.buckets import buckets_quantile, quantile_bucket, within_resolution

EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, math.inf)


def _counts(shares: dict[float, float], n: float = 100_000) -> dict[float, float]:
    """Cumulative counts from the share at or under each edge."""
    return {e: n * shares.get(e, 1.0) for e in EDGES}


def test_a_few_percent_across_one_edge_is_within_resolution() -> None:
    # 95.4 % of gaps under 25 ms, then 94.0 %: p95 reads 25 ms, then ~45 ms (1.8x on the interpolation)
    before = _counts({0.01: 0.60, 0.025: 0.954, 0.05: 0.99})
    after = _counts({0.01: 0.58, 0.025: 0.940, 0.05: 0.952})
    b, a = buckets_quantile(before, 0.95), buckets_quantile(after, 0.95)
    assert b is not None and a is not None and a / b > 1.7  # what the headline used to say
    assert quantile_bucket(before, 0.95) == (0.01, 0.025) and quantile_bucket(after, 0.95) == (0.025, 0.05)
    assert within_resolution(before, after, 0.95) is True  # 4.6 % past 25 ms, then 6.0 %: 1.3x


def test_a_tail_that_doubled_past_the_edge_is_a_real_change() -> None:
    before = _counts({0.01: 0.60, 0.025: 0.954, 0.05: 0.99})
    after = _counts({0.01: 0.40, 0.025: 0.85, 0.05: 0.93, 0.075: 0.97})
    assert within_resolution(before, after, 0.95) is False  # 4.6 % past 25 ms, then 15 %
    # and two buckets apart is always resolved
    far = _counts({0.01: 0.2, 0.025: 0.5, 0.05: 0.8, 0.075: 0.9, 0.1: 0.96})
    assert quantile_bucket(far, 0.95) == (0.075, 0.1)
    assert within_resolution(before, far, 0.95) is False


def test_one_bucket_is_within_resolution_and_an_empty_side_says_nothing() -> None:
    before = _counts({0.025: 0.50, 0.05: 0.97})
    after = _counts({0.025: 0.40, 0.05: 0.96})
    assert within_resolution(before, after, 0.95) is True
    assert within_resolution(before, dict.fromkeys(EDGES, 0.0), 0.95) is None
