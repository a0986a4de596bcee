"""signals.first_bucket: where histogram_quantile's answer is only "at most the first bound".

Cross-checked against the engine's own histogram_quantile (Prometheus' definition, tested in
test_histogram_quantile.py): a quantile lies in the first bucket exactly when the value it returns is
at or under that bucket's bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from perfkit.core.frames import Window
from perfkit.engine import signals as S
from perfkit.engine.local import LocalEngine
from perfkit.sources.openmetrics import parse_text

T0 = datetime(2026, 11, 12, 1, 0, tzinfo=UTC)
METRIC = "vllm:request_queue_time_seconds"


def engine(buckets: dict[str, float]) -> LocalEngine:
    """One series per bucket: 0 at T0 - 5 min, ``buckets`` (cumulative, as scraped) from T0 to T0 +
    10 min every 15 s; the window below covers the rise once."""
    lines = [f"# TYPE {METRIC} histogram"]
    for k in range(-20, 41):
        at = f"{(T0 + timedelta(seconds=15 * k)).timestamp():.0f}"
        for le, count in buckets.items():
            value = count if k >= 0 else 0.0
            lines.append(f'{METRIC}_bucket{{model_name="m",le="{le}"}} {value!r} {at}')
        total = buckets.get("+Inf", 0.0) if k >= 0 else 0.0
        lines.append(f'{METRIC}_count{{model_name="m"}} {total!r} {at}')
        lines.append(f'{METRIC}_sum{{model_name="m"}} 0.0 {at}')
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))


WINDOW = Window(T0 - timedelta(minutes=2), T0 + timedelta(minutes=8))


def check_against_histogram_quantile(e: LocalEngine, fb: S.FirstBucket) -> None:
    qs = (0.1, 0.3, 0.5, 0.75, 0.9, 0.95, 0.99)
    values = S.window_quantiles(e, "queue", qs, WINDOW)
    for q in qs:
        assert fb.holds(q) == (values[q] <= fb.bound + 1e-12), (q, values[q], fb)


def test_the_first_bucket_and_its_share():
    # vLLM's queue-time buckets start at 0.3 s: 60 of 100 requests waited at most that long
    e = engine({"0.3": 60.0, "0.5": 80.0, "1.0": 95.0, "+Inf": 100.0})
    fb = S.first_bucket(e, "queue", WINDOW)
    assert fb == S.FirstBucket(0.3, pytest.approx(0.6))
    assert fb.holds(0.5) and fb.holds(0.6) and not fb.holds(0.61)
    check_against_histogram_quantile(e, fb)


def test_a_bucket_at_zero_is_exact_and_the_next_one_is_interpolated_from_it():
    e = engine({"0": 10.0, "0.3": 60.0, "0.5": 80.0, "+Inf": 100.0})
    fb = S.first_bucket(e, "queue", WINDOW)
    assert fb.bound == 0.3 and fb.share == pytest.approx(0.6)
    check_against_histogram_quantile(e, fb)


def test_bucket_counts_that_are_not_monotonic_are_read_as_histogram_quantile_fixes_them():
    # a bucket above +Inf (scrapes of different moments, a buggy exporter): histogram_quantile raises
    # every count to the largest below it, so its total is 110, not +Inf's 100, and the p90
    # (rank 99) is not in the first bucket although 90 / 100 would say so
    e = engine({"0.1": 90.0, "0.5": 110.0, "+Inf": 100.0})
    fb = S.first_bucket(e, "queue", WINDOW)
    assert fb.share == pytest.approx(90 / 110) and not fb.holds(0.9)
    check_against_histogram_quantile(e, fb)


def test_nothing_observed_or_no_histogram_is_none():
    assert S.first_bucket(engine({"0.3": 0.0, "+Inf": 0.0}), "queue", WINDOW) is None
    assert S.first_bucket(engine({"0.3": 5.0, "+Inf": 5.0}), "ttft", WINDOW) is None  # no such family
