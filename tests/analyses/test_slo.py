"""SLO attainment from histograms on the hand-made store of vllm_store.py (answers worked out by hand).

Over a window every histogram gained 40 x its per-interval counts. In the shared scenario:

    TTFT  baseline: all 160 in (0, 0.1]            incident: cumulative [0, 80, 80, 160, 160]
    E2E   baseline: all 160 in (0.5, 1]            incident: cumulative [0, 0, 80, 160, 160]
    TPOT  both windows: all 160 in (0, 0.1]
    queue incident: cumulative [80, 80, 80, 160, 160]

over the edges 0.1, 0.5, 1, 5, +Inf.
"""

from __future__ import annotations

import math

import pytest
from vllm_store import BASELINE, INCIDENT, build, scenario

from perfkit.analyses.slo import AT_LEAST, EXACT, INTERPOLATED, attainment, parse_slo_key, share_under
from perfkit.engine import signals as S

REL = 1e-9


@pytest.fixture(scope="module")
def engine():
    return scenario()


def row(res, key):
    return next(r for r in res.rows if r.key == key)


def test_a_bound_on_a_bucket_edge_is_exact(engine):
    res = attainment(engine, INCIDENT, BASELINE, {"ttft_p95_s": 1.0})
    r = row(res, "ttft_p95_s")
    # incident: 80 of 160 at or under le="1"; baseline: all 160
    assert (r.incident.share, r.incident.under, r.incident.total, r.incident.method) == (0.5, 80, 160, EXACT)
    assert (r.baseline.share, r.baseline.method) == (1.0, EXACT)
    assert r.target == 0.95 and r.met is False and r.as_dict()["met_baseline"] is True
    assert res.queries == ["sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[10m]))"]


def test_a_bound_inside_a_bucket_is_interpolated_and_labelled(engine):
    res = attainment(engine, INCIDENT, BASELINE, {"e2e_p99_s": 2.0, "tpot_p95_s": 0.05})
    e2e = row(res, "e2e_p99_s")
    # incident E2E: 80 under le=1, 80 more in (1, 5]: 80 + 80 * (2 - 1) / (5 - 1) = 100 of 160
    assert e2e.incident.share == pytest.approx(100 / 160, rel=REL)
    assert (e2e.incident.method, e2e.incident.lower, e2e.incident.upper) == (INTERPOLATED, 1.0, 5.0)
    assert e2e.incident.how() == "interpolated in (1, 5]"
    # baseline E2E: all 160 under le=1 and under le=5: interpolation inside (1, 5] gives 160
    assert e2e.baseline.share == pytest.approx(1.0, rel=REL) and e2e.met is False
    # TPOT: all 160 in the first bucket (0, 0.1]; it starts at 0: 160 * 0.05 / 0.1 = 80
    tpot = row(res, "tpot_p95_s")
    assert tpot.incident.share == pytest.approx(0.5, rel=REL)
    assert (tpot.incident.lower, tpot.incident.upper) == (0.0, 0.1)
    table = res.table()
    assert table["how"].to_list() == ["interpolated in (1, 5]", "interpolated in (0, 0.1]"]
    assert table["incident %"].to_list() == [62.5, 50.0] and table["met"].to_list() == ["NO", "NO"]
    assert res.summary() == (
        "E2E ≤ 2 s for 62.5 % of requests (target 99 %); TPOT ≤ 50 ms for 50.0 % of requests (target 95 %)"
    )


def test_attainment_agrees_with_histogram_quantile(engine):
    """The share at the p95 bound is exactly 0.95: the inverse of histogram_quantile's interpolation."""
    p95 = S.window_quantiles(engine, "ttft", (0.95,), INCIDENT)[0.95]
    assert p95 == pytest.approx(4.6, rel=REL)  # worked out in test_baseline.py
    res = attainment(engine, INCIDENT, BASELINE, {"ttft_p95_s": p95})
    assert row(res, "ttft_p95_s").incident.share == pytest.approx(0.95, rel=REL)
    assert (
        row(res, "ttft_p95_s").met is True
    )  # p95 at the bound is not above it: the SLO holds, as in baseline
    just_above = attainment(engine, INCIDENT, None, {"ttft_p95_s": p95 * 1.01})
    just_below = attainment(engine, INCIDENT, None, {"ttft_p95_s": p95 * 0.99})
    assert row(just_above, "ttft_p95_s").met is True and row(just_below, "ttft_p95_s").met is False


def test_above_the_last_edge_only_a_lower_bound_is_known():
    # incident TTFT: 2 per interval in (1, 5], 2 above 5 s: cumulative [0, 0, 0, 80, 160]
    engine = build(
        {
            "vllm:time_to_first_token_seconds": {
                "baseline": ((4, 0, 0, 0, 0), 0.3),
                "incident": ((0, 0, 0, 2, 2), 30.0),
            }
        }
    )
    res = attainment(engine, INCIDENT, BASELINE, {"ttft_p95_s": 8.0, "ttft_p50_s": 8.0})
    r = row(res, "ttft_p95_s")
    assert (r.incident.share, r.incident.method, r.incident.lower) == (0.5, AT_LEAST, 5.0)
    assert r.met is None  # 50 % or more: cannot tell whether 95 % were under 8 s
    assert row(res, "ttft_p50_s").met is True  # at least 50 % reaches a 50 % target
    assert res.summary() == "TTFT ≤ 8 s for ≥ 50.0 % of requests (target 95 %, undecided); 1 other met"
    assert res.table()["met"].to_list() == ["?", "yes"]


def test_missing_histograms_empty_windows_and_other_slos_are_said():
    engine = build(
        {
            "vllm:time_to_first_token_seconds": {
                "baseline": ((0, 0, 0, 0, 0), 0.0),
                "incident": ((1, 0, 0, 0, 0), 0.05),
            }
        }
    )
    res = attainment(
        engine,
        INCIDENT,
        BASELINE,
        {"ttft_p95_s": 0.5, "itl_p95_s": 0.1, "availability": 0.999, "ttft_p100_s": 1.0, "e2e_p99_s": 0.0},
    )
    assert [r.key for r in res.rows] == ["ttft_p95_s"]
    ttft = res.rows[0]
    assert ttft.incident.share == 1.0 and ttft.baseline.share is None  # no request in the baseline window
    assert res.missing == ["slo attainment: no itl histogram for itl_p95_s"]
    assert [s.split(":")[0] for s in res.skipped] == ["availability", "ttft_p100_s", "e2e_p99_s"]
    assert res.as_dict()["rows"][0]["baseline"]["share"] is None


def test_share_under_edge_cases():
    # edges given as "1" and "1.0" by two exporters are one edge; counts made monotonic
    assert share_under({0.5: 2, 1.0: 3, 1.0 + 1e-12: 1, math.inf: 8}, 1.0).share == pytest.approx(4 / 8)
    assert share_under({0.5: 5, 1.0: 4, math.inf: 10}, 1.0).under == 5  # non-monotonic: 4 -> 5
    assert share_under({0.5: 5, 1.0: 6}, 1.0).share is None  # no +Inf bucket: no total
    assert share_under({math.inf: 0}, 1.0).share is None
    assert share_under({math.inf: 4}, 1.0).method == AT_LEAST


def test_slo_keys():
    assert parse_slo_key("ttft_p95_s") == ("ttft", 0.95)
    assert parse_slo_key("e2e_p999_s") == ("e2e", 0.999)
    assert parse_slo_key("queue_p50_s") == ("queue", 0.5)
    assert parse_slo_key("ttft_p95_ms") is None and parse_slo_key("ttft_p100_s") is None
