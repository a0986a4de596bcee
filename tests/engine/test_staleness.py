"""The local engine's staleness emulation, worked out by hand (the comparison with a live-scraping
Prometheus is tests/integration/test_staleness_live.py).

A restarted server comes back under a new ``instance``: the old series stops, a new one begins. In
Prometheus the old one is stale from the first scrape without it; a bundle has no markers, so the
engine ends a series two of its scrape intervals after its last sample.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from perfkit.engine.local import LocalEngine
from perfkit.engine.ops import Selector, increase, rate, sum_by
from perfkit.sources.openmetrics import parse_text

B = 1_795_996_800


def at(offset: float) -> datetime:
    return datetime.fromtimestamp(B + offset, UTC)


def lines(name: str, labels: str, points: list[tuple[float, float]]) -> list[str]:
    return [f"{name}{{{labels}}} {v!r} {B + t!r}" for t, v in points]


# instance a scraped every 15 s from 0 to 600 s; the server restarts and comes back 45 s later (two
# scrapes missed) as instance b, until 1200 s
A_TIMES = [15.0 * k for k in range(41)]  # 0 .. 600
B_TIMES = [645.0 + 15.0 * k for k in range(38)]  # 645 .. 1200


def restart_store(*, staleness: bool = True) -> LocalEngine:
    text = [
        "# TYPE running gauge",
        *lines("running", 'instance="a"', [(t, 3.0) for t in A_TIMES]),
        *lines("running", 'instance="b"', [(t, 5.0) for t in B_TIMES]),
        "# TYPE served counter",  # 2 requests per scrape; b starts again from 0
        *lines("served_total", 'instance="a"', [(t, 1000.0 + 2 * k) for k, t in enumerate(A_TIMES)]),
        *lines("served_total", 'instance="b"', [(t, 2.0 * k) for k, t in enumerate(B_TIMES)]),
    ]
    return LocalEngine(parse_text("\n".join(text) + "\n# EOF\n", require_eof=True), staleness=staleness)


def sums(engine: LocalEngine, start: float, end: float) -> dict[float, float]:
    frame = engine.range(sum_by(Selector("running")), at(start), at(end), 15)
    return {row["ts"].timestamp() - B: row["value"] for row in frame.iter_rows(named=True)}


def test_after_a_restart_the_sum_counts_the_live_instance_only():
    got = sums(restart_store(), 0, 1200)
    # a's last sample at 600 answers up to 600 + 2 x 15 s (inclusive); b's first sample is at 645
    assert got[600] == 3 and got[615] == 3 and got[630] == 3
    assert all(got[t] == 5 for t in B_TIMES)
    assert set(got) == set(A_TIMES) | {615.0, 630.0} | set(B_TIMES)


def test_the_plain_lookback_sums_the_stopped_instance_for_five_minutes():
    got = sums(restart_store(staleness=False), 0, 1200)
    assert got[645] == 8 and got[900] == 8  # a's 3 still counted 300 s after its last sample
    assert got[915] == 5


def test_a_series_ends_two_intervals_after_its_last_sample():
    engine = restart_store()
    frame = engine.range(Selector("running").where(instance="b"), at(1200), at(1300), 5)
    seen = sorted(row["ts"].timestamp() - B for row in frame.iter_rows(named=True))
    assert seen == [1200 + 5 * k for k in range(7)]  # 1200 .. 1230


def test_one_lost_scrape_does_not_blank_a_live_series():
    kept = [t for t in A_TIMES if t != 300]  # one scrape lost: a 30 s hole
    text = ["# TYPE g gauge", *lines("g", 'instance="a"', [(t, 1.0) for t in kept])]
    engine = LocalEngine(parse_text("\n".join(text) + "\n# EOF\n", require_eof=True))
    frame = engine.range(Selector("g"), at(0), at(600), 5)
    assert frame.height == 121  # every 5 s step from 0 to 600 s has a value


def test_a_series_with_one_sample_keeps_the_five_minute_lookback():
    text = ["# TYPE g gauge", *lines("g", 'instance="a"', [(100.0, 7.0)])]
    engine = LocalEngine(parse_text("\n".join(text) + "\n# EOF\n", require_eof=True))
    assert engine.instant(Selector("g"), at(400))["value"].to_list() == [7.0]
    assert engine.instant(Selector("g"), at(400.001)).height == 0


def test_rates_hold_across_a_restart_under_a_new_instance():
    engine = restart_store()
    per_s = 2 / 15
    frame = engine.range(sum_by(rate(Selector("served_total"), 60)), at(60), at(1200), 15)
    values = {row["ts"].timestamp() - B: row["value"] for row in frame.iter_rows(named=True)}
    # inside each life the counter is linear: the extrapolated rate is exactly its slope
    for t in [*range(60, 601, 15), *range(705, 1201, 15)]:
        assert values[t] == pytest.approx(per_s, rel=1e-12), t
    # around the restart neither the reset (1080 -> 0) nor the two lives overlapping make a spike
    assert all(0 <= v <= per_s * (1 + 1e-12) for v in values.values())
    # and the increase over the whole span counts both lives: 80 + 74 requests, extrapolated to the edges
    total = engine.instant(sum_by(increase(Selector("served_total"), 1200)), at(1200))["value"][0]
    assert 2 * 40 + 2 * 37 <= total <= 2 * 40 + 2 * 37 + 2 * 3
