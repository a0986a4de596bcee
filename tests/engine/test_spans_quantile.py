"""signals.spans_quantile: a histogram's quantile over several windows taken together.

Triage reads the TTFT median outside the minutes after a restart (issue 27): the windows' bucket
increases are summed, then read as Prometheus' ``histogram_quantile`` reads one window's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from perfkit.core.frames import Window
from perfkit.engine import signals as S
from perfkit.engine.local import LocalEngine
from perfkit.sources.openmetrics import parse_text

T0 = datetime(2026, 11, 12, 1, 0, tzinfo=UTC)
METRIC = "vllm:time_to_first_token_seconds"
BOUNDS = ("0.1", "1.0", "5.0", "+Inf")


def _minute(k: int) -> tuple[float, float]:
    """Requests finished in minute ``k`` (fast, in the first bucket; slow, in (1, 5] s): ten fast a
    minute for 10 minutes, then a restart's backlog of 60 slow a minute for 5, then fast again."""
    if 10 <= k < 15:
        return 0.0, 60.0
    return (10.0, 0.0) if 0 <= k < 25 else (0.0, 0.0)


def engine() -> LocalEngine:
    lines = [f"# TYPE {METRIC} histogram"]
    fast = slow = 0.0
    for step in range(-8, 30 * 4):  # a scrape every 15 s
        k = step // 4
        if step >= 0:
            f, s = _minute(k)
            fast, slow = fast + f / 4, slow + s / 4
        at = f"{(T0 + timedelta(seconds=15 * step)).timestamp():.0f}"
        for le in BOUNDS:
            value = fast + (slow if le in ("5.0", "+Inf") else 0.0)
            lines.append(f'{METRIC}_bucket{{model_name="m",le="{le}"}} {value!r} {at}')
        lines.append(f'{METRIC}_count{{model_name="m"}} {fast + slow!r} {at}')
        lines.append(f'{METRIC}_sum{{model_name="m"}} 0.0 {at}')
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))


def _w(a: float, b: float) -> Window:
    return Window(T0 + timedelta(minutes=a), T0 + timedelta(minutes=b))


def test_the_median_outside_the_backlog_is_the_fast_requests_median():
    e = engine()
    whole = S.window_quantiles(e, "ttft", (0.5,), _w(0, 25))[0.5]
    # 300 slow of 500: the window's median sits in the slow bucket ...
    assert whole is not None and 1.0 < whole < 5.0
    # ... and outside the backlog every request was fast: half the first bucket's bound
    # (the scrape at minute 10 already counts the backlog's first 15 s: the span before it ends there)
    steady = S.spans_quantile(e, "ttft", 0.5, [_w(0, 9.75), _w(15, 25)])
    assert steady == pytest.approx(0.05, rel=1e-6)


def test_one_span_reads_as_one_window_and_the_slow_span_stays_slow():
    e = engine()
    for span in (_w(0, 10), _w(10, 15), _w(2, 20)):
        for q in (0.5, 0.9):
            one = S.window_quantiles(e, "ttft", (q,), span)[q]
            assert S.spans_quantile(e, "ttft", q, [span]) == pytest.approx(one, rel=1e-9)


def test_no_histogram_or_no_window_is_no_answer():
    e = engine()
    assert S.spans_quantile(e, "ttft", 0.5, []) is None
    assert S.spans_quantile(e, "itl", 0.5, [_w(0, 10)]) is None  # no such histogram here
