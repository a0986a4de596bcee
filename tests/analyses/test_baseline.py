"""baseline.compare on the hand-made store of vllm_store.py (all numbers worked out by hand)."""

from __future__ import annotations

import pytest
from vllm_store import BASELINE, INCIDENT, scenario

from perfkit.analyses.baseline import compare

REL = 1e-9


@pytest.fixture(scope="module")
def result():
    return compare(scenario(), INCIDENT, BASELINE, {"ttft_p95_s": 1.0, "e2e_p99_s": 10.0})


# Over a window every histogram gained 40 x its per-interval counts: 160 observations.
# Baseline TTFT: all 160 in (0, 0.1]: pQ = 0.1 * (Q * 160) / 160 = 0.1 * Q.
# Incident TTFT: cumulative [0, 80, 80, 160, 160] over le 0.1, 0.5, 1, 5, +Inf:
#   p50: rank 80 -> (0.1, 0.5]: 0.1 + 0.4 * 80/80 = 0.5
#   p95: rank 152 -> (1, 5]: 1 + 4 * (152 - 80)/80 = 4.6;  p99: 1 + 4 * (158.4 - 80)/80 = 4.92
# E2E baseline: all in (0.5, 1]: 0.5 + 0.5 * Q -> 0.75, 0.975, 0.995
# E2E incident: cumulative [0, 0, 80, 160, 160]: p50 rank 80 -> 0.5 + 0.5 * 80/80 = 1.0; p95 4.6; p99 4.92
# Queue incident: cumulative [80, 80, 80, 160, 160]: p50 rank 80 -> first bucket 0.1 * 80/80 = 0.1
# Prefill incident: all in (0.1, 0.5]: 0.1 + 0.4 * Q -> 0.3, 0.48, 0.496
EXPECTED = {
    "TTFT": {"baseline": (0.05, 0.095, 0.099), "incident": (0.5, 4.6, 4.92)},
    "TPOT": {"baseline": (0.05, 0.095, 0.099), "incident": (0.05, 0.095, 0.099)},
    "E2E": {"baseline": (0.75, 0.975, 0.995), "incident": (1.0, 4.6, 4.92)},
    "queue": {"baseline": (0.05, 0.095, 0.099), "incident": (0.1, 4.6, 4.92)},
    "prefill": {"baseline": (0.05, 0.095, 0.099), "incident": (0.3, 0.48, 0.496)},
    "decode": {"baseline": (0.75, 0.975, 0.995), "incident": (0.75, 0.975, 0.995)},
}


@pytest.mark.parametrize("label", sorted(EXPECTED))
def test_latency_quantiles(result, label):
    for i, p in enumerate((50, 95, 99)):
        row = result.get(f"{label} p{p}")
        assert row is not None and row.unit == "s"
        assert row.baseline == pytest.approx(EXPECTED[label]["baseline"][i], rel=REL)
        assert row.incident == pytest.approx(EXPECTED[label]["incident"][i], rel=REL)


def test_rows_order_slo_breach_and_headline(result):
    latency = [r.metric for r in result.rows if r.unit == "s"]
    assert latency == [
        f"{s} p{p}"
        for s in ("TTFT", "TPOT", "ITL", "E2E", "queue", "prefill", "decode")
        for p in (50, 95, 99)
    ]
    itl = result.get("ITL p95")
    assert (itl.baseline, itl.incident, itl.ratio) == (None, None, None)
    ttft95 = result.get("TTFT p95")
    assert ttft95.slo == 1.0 and ttft95.breach is True
    assert ttft95.ratio == pytest.approx(4.6 / 0.1, rel=REL)  # at least: the baseline is in the first bucket
    e2e99 = result.get("E2E p99")
    assert e2e99.slo == 10.0 and e2e99.breach is False
    assert result.get("TTFT p50").slo is None and result.get("TTFT p50").breach is None
    # user-facing ratios: TTFT 10, 48.4, 49.7; TPOT 1; E2E 1.33, 4.72, 4.94 -> TTFT p99
    assert result.headline().metric == "TTFT p99"
    assert result.missing == ["baseline: no itl histogram in the incident window"]
    assert result.q("incident", "ttft", 0.95) == pytest.approx(4.6, rel=REL)


def test_throughput_and_gauges(result):
    def row(name):
        r = result.get(name)
        return r.baseline, r.incident

    # e2e _count gains 160 per window: 160 / 600 req/s on both sides
    assert row("requests_per_s") == (pytest.approx(160 / 600, rel=REL), pytest.approx(160 / 600, rel=REL))
    # 40 x 3000 / 600 = 200 and 40 x 1500 / 600 = 100 tok/s
    assert row("generated_tokens_per_s") == (pytest.approx(200.0, rel=REL), pytest.approx(100.0, rel=REL))
    assert row("prompt_tokens_per_s") == (pytest.approx(400.0, rel=REL), pytest.approx(400.0, rel=REL))
    # finished_reason="abort": 0 then 40 per window (no "error" series at all)
    assert row("errors_per_s") == (0.0, pytest.approx(40 / 600, rel=REL))
    assert row("preemptions_per_s") == (None, None)
    # avg_over_time over [end - 10m, end] holds 41 scrapes; the incident's first is a middle one
    assert row("running_avg") == (pytest.approx(4.0, rel=REL), pytest.approx((6 + 40 * 10) / 41, rel=REL))
    assert row("waiting_avg") == (0.0, pytest.approx((1 + 39 * 3 + 12) / 41, rel=REL))
    assert row("waiting_max") == (0.0, 12.0)
    assert row("kv_cache_usage_avg") == (
        pytest.approx(0.3, rel=REL),
        pytest.approx((0.5 + 40 * 0.9) / 41, rel=REL),
    )
    assert row("kv_cache_usage_max") == (0.3, 0.9)
    assert result.get("generated_tokens_per_s").ratio == pytest.approx(0.5, rel=REL)


def test_queries_are_recorded_as_promql(result):
    assert result.queries[0] == (
        "histogram_quantile(0.5, sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[10m])))"
    )
    assert 'sum (rate(vllm:request_success_total{finished_reason="abort"}[10m]))' in result.queries
    assert "max (max_over_time(vllm:kv_cache_usage_perc[10m]))" in result.queries


def test_without_a_baseline():
    result = compare(scenario(), INCIDENT, None, {})
    assert result.get("TTFT p95").baseline is None
    assert result.get("TTFT p95").incident == pytest.approx(4.6, rel=REL)
    assert result.headline() is None
    assert result.missing[0] == "baseline: no baseline window given; showing the incident alone"


def test_quantiles_in_the_first_bucket_are_upper_bounds(result):
    # TPOT: every observation in (0, 0.1] on both sides: its quantiles are histogram_quantile's
    # interpolation from 0 (0.1 x Q) and say only "at most 100 ms": no ratio between them
    tpot = result.get("TPOT p50")
    assert tpot.under == (True, True) and tpot.bound == 0.1 and tpot.ratio is None
    assert tpot.note == "both ≤ 100 ms (first bucket: interpolated from 0)"
    # queue p50: the incident's rank 80 is the last of the 80 in the first bucket: at most 100 ms too
    assert result.get("queue p50").under == (True, True)
    # TTFT p95: the baseline is a bound, the incident's 4.6 s is measured: the ratio is the growth
    # the histogram guarantees (4.6 / 0.1, not the interpolated 4.6 / 0.095), and says so
    ttft = result.get("TTFT p95")
    assert ttft.under == (True, False) and ttft.ratio == pytest.approx(4.6 / 0.1, rel=REL)
    assert ttft.ratio_text == "≥ 46.00x" and ttft.note.startswith("baseline ≤ 100 ms")
    e2e = result.get("E2E p95")
    assert e2e.note == "" and e2e.under == (False, False) and e2e.ratio_text == f"{4.6 / 0.975:.2f}x"
    assert result.headline().metric == "TTFT p99"  # >= 4.92 / 0.1: the largest growth
    notes = dict(zip(result.table()["metric"].to_list(), result.table()["note"].to_list(), strict=True))
    assert notes["TPOT p95"].startswith("both") and notes["E2E p99"] == ""


def test_an_slo_above_the_bound_is_met_and_one_below_it_is_unknown():
    from perfkit.analyses.baseline import Row

    assert Row("TTFT p95", "s", 0.05, 0.095, 0.2, 0.1, (True, True)).breach is False
    assert Row("TTFT p95", "s", 0.05, 0.095, 0.05, 0.1, (True, True)).breach is None
    assert Row("TTFT p95", "s", 0.05, 0.095, 0.05).breach is True  # a measured value is judged
