"""histogram_quantile against Prometheus 2.x' definition (promql/quantile.go, bucketQuantile).

Every expected value is worked out by hand from that definition: rank = q * observations, the
first bucket (the +Inf one excluded) whose cumulative count reaches the rank, then
``start + (end - start) * (rank - below) / (count - below)``, with 0 as the start of the first
bucket.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest

from perfkit.engine.local import LocalEngine, bucket_quantile, histogram_quantile_frame
from perfkit.engine.ops import Selector, histogram_quantile, sum_by
from perfkit.errors import QueryError
from perfkit.sources.openmetrics import parse_text

INF = math.inf
B = 1_795_996_800  # a multiple of 7200 s, so every window below is easy to reason about
UPPER = np.array([0.1, 0.5, 1.0, INF])


def quantile(q: float, upper, counts) -> float:
    """One row through the vectorised function."""
    out = bucket_quantile(q, np.asarray(upper, dtype=np.float64), np.array([counts], dtype=np.float64))
    assert out.shape == (1,)
    return float(out[0])


def om(body: str) -> str:
    return body.strip("\n") + "\n# EOF\n"


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


# -- bucket_quantile ---------------------------------------------------------------------------


def test_linear_interpolation_inside_the_bucket():
    # cumulative [10, 30, 40, 40]; q=0.5: rank 20 -> bucket (0.1, 0.5] (30 >= 20)
    # 0.1 + (0.5 - 0.1) * (20 - 10) / (30 - 10) = 0.1 + 0.4 * 0.5 = 0.3
    assert quantile(0.5, UPPER, [10, 30, 40, 40]) == pytest.approx(0.3, rel=1e-12)
    # q=0.9: rank 36 -> bucket (0.5, 1]: 0.5 + 0.5 * (36 - 30) / (40 - 30) = 0.8
    assert quantile(0.9, UPPER, [10, 30, 40, 40]) == pytest.approx(0.8, rel=1e-12)


def test_first_bucket_starts_at_zero_when_its_bound_is_positive():
    # rank 0.2 * 40 = 8 -> first bucket: 0 + 0.1 * 8 / 10 = 0.08
    assert quantile(0.2, UPPER, [10, 30, 40, 40]) == pytest.approx(0.08, rel=1e-12)


def test_q_zero_and_one():
    # q=0: rank 0 -> first bucket, 0 + 0.1 * 0 / 10 = 0
    assert quantile(0.0, UPPER, [10, 30, 40, 40]) == 0.0
    # q=1: rank 40 -> first bucket with count >= 40 is (0.5, 1]: 0.5 + 0.5 * 10 / 10 = 1.0
    assert quantile(1.0, UPPER, [10, 30, 40, 40]) == pytest.approx(1.0, rel=1e-12)


def test_q_zero_with_an_empty_first_bucket_is_nan_as_in_prometheus():
    # rank 0 -> bucket 0 (0 >= 0), then 0 + 0.1 * (0 / 0) = NaN: Prometheus 2.x' own quirk
    assert math.isnan(quantile(0.0, UPPER, [0, 10, 10, 10]))


def test_rank_in_the_inf_bucket_returns_the_second_highest_bound():
    # cumulative [10, 30, 40, 50]; q=0.9: rank 45 > 40, so it lies in (1, +Inf] -> 1.0
    assert quantile(0.9, UPPER, [10, 30, 40, 50]) == 1.0
    assert quantile(1.0, UPPER, [10, 30, 40, 50]) == 1.0


def test_without_an_inf_bucket_the_answer_is_nan():
    assert math.isnan(quantile(0.5, [0.1, 0.5, 1.0], [10, 30, 40]))


def test_fewer_than_two_buckets_is_nan():
    assert math.isnan(quantile(0.5, [INF], [5]))


def test_zero_observations_is_nan():
    assert math.isnan(quantile(0.5, UPPER, [0, 0, 0, 0]))


@pytest.mark.parametrize(
    ("q", "expected"),
    [(-0.1, -INF), (1.01, INF), (-5.0, -INF), (2.0, INF)],
)
def test_q_out_of_range_gives_infinities(q, expected):
    assert quantile(q, UPPER, [10, 30, 40, 40]) == expected
    # the q check comes before the bucket checks in Prometheus: even with no +Inf bucket
    assert quantile(q, [0.1, 0.5], [1, 2]) == expected


def test_q_nan_is_nan():
    assert math.isnan(quantile(math.nan, UPPER, [10, 30, 40, 40]))


def test_non_monotonic_counts_are_made_monotonic():
    # [10, 8, 40, 40] becomes [10, 10, 40, 40]; q=0.5: rank 20 -> bucket (0.5, 1]:
    # 0.5 + 0.5 * (20 - 10) / (40 - 10) = 0.5 + 0.5 / 3 = 0.666...
    # (taken as is it would be 0.5 + 0.5 * (20 - 8) / (40 - 8) = 0.6875)
    assert quantile(0.5, UPPER, [10, 8, 40, 40]) == pytest.approx(0.5 + 0.5 / 3, rel=1e-12)


def test_a_first_bucket_with_a_non_positive_bound_returns_that_bound():
    # bounds [0, 1, +Inf], counts [5, 10, 10]; q=0.25: rank 2.5 -> bucket 0 whose bound is 0 -> 0
    assert quantile(0.25, [0.0, 1.0, INF], [5, 10, 10]) == 0.0
    # bounds [-0.5, 1, +Inf], counts [4, 8, 8]; q=0.25: rank 2 -> bucket 0 -> -0.5
    assert quantile(0.25, [-0.5, 1.0, INF], [4, 8, 8]) == -0.5
    # the next bucket still interpolates from the negative bound:
    # q=0.75: rank 6 -> (-0.5, 1]: -0.5 + 1.5 * (6 - 4) / (8 - 4) = 0.25
    assert quantile(0.75, [-0.5, 1.0, INF], [4, 8, 8]) == pytest.approx(0.25, rel=1e-12)


def test_empty_buckets_between_populated_ones_are_skipped():
    upper = [1.0, 2.0, 4.0, 8.0, INF]
    counts = [4, 4, 4, 8, 8]  # nothing in (1, 2] nor (2, 4]
    # q=0.5: rank 4 -> first bucket with count >= 4 is (0, 1]: 0 + 1 * 4 / 4 = 1.0
    assert quantile(0.5, upper, counts) == pytest.approx(1.0, rel=1e-12)
    # q=0.75: rank 6 -> (4, 8]: 4 + 4 * (6 - 4) / (8 - 4) = 6.0
    assert quantile(0.75, upper, counts) == pytest.approx(6.0, rel=1e-12)


def test_many_rows_at_once():
    counts = np.array([[10, 30, 40, 40], [0, 0, 0, 0], [10, 30, 40, 50], [40, 40, 40, 40]], dtype=float)
    out = bucket_quantile(0.5, UPPER, counts)
    # row 0: 0.3 (above); row 1: no observations; row 2: rank 25 -> 0.1 + 0.4 * 15 / 20 = 0.4;
    # row 3: rank 20 -> first bucket: 0.1 * 20 / 40 = 0.05
    assert out[0] == pytest.approx(0.3, rel=1e-12)
    assert math.isnan(out[1])
    assert out[2] == pytest.approx(0.4, rel=1e-12)
    assert out[3] == pytest.approx(0.05, rel=1e-12)


# -- histogram_quantile_frame and the engine ---------------------------------------------------


def test_equal_bounds_written_differently_are_coalesced():
    # Two exporters writing "1" and "1.0": sum by (le) keeps them apart, histogram_quantile merges.
    store = parse_text(
        om(
            f"""
# TYPE x histogram
x_bucket{{instance="a",le="1"}} 3 {B}
x_bucket{{instance="a",le="2"}} 4 {B}
x_bucket{{instance="a",le="+Inf"}} 5 {B}
x_bucket{{instance="b",le="1.0"}} 2 {B}
x_bucket{{instance="b",le="2.0"}} 4 {B}
x_bucket{{instance="b",le="+Inf"}} 5 {B}
"""
        )
    )
    engine = LocalEngine(store)
    # coalesced: le 1 -> 3 + 2 = 5, le 2 -> 4 + 4 = 8, +Inf -> 10
    # q=0.5: rank 5 -> (0, 1]: 1 * 5 / 5 = 1.0   (uncoalesced, [3, 3, 8, ...] would give 1.4)
    # q=0.6: rank 6 -> (1, 2]: 1 + 1 * (6 - 5) / (8 - 5) = 1.333...
    for q, expected in ((0.5, 1.0), (0.6, 1 + 1 / 3)):
        out = engine.instant(histogram_quantile(q, sum_by(Selector("x_bucket"), "le")), at(B))
        assert out.columns == ["ts", "value"]
        assert out["value"].to_list() == [pytest.approx(expected, rel=1e-12)]


def test_groups_by_every_label_but_le_and_ignores_unparsable_bounds():
    store = parse_text(
        om(
            f"""
# TYPE x histogram
x_bucket{{model="m1",le="0.1"}} 10 {B}
x_bucket{{model="m1",le="0.5"}} 30 {B}
x_bucket{{model="m1",le="1"}} 40 {B}
x_bucket{{model="m1",le="+Inf"}} 40 {B}
x_bucket{{model="m1",le="junk"}} 1000 {B}
x_bucket{{model="m2",le="0.1"}} 40 {B}
x_bucket{{model="m2",le="0.5"}} 40 {B}
x_bucket{{model="m2",le="1"}} 40 {B}
x_bucket{{model="m2",le="+Inf"}} 40 {B}
"""
        )
    )
    out = LocalEngine(store).instant(histogram_quantile(0.5, Selector("x_bucket")), at(B))
    assert sorted(c for c in out.columns if c not in ("ts", "value")) == ["model"]
    got = dict(zip(out["model"], out["value"], strict=True))
    # m1: rank 20 -> 0.1 + 0.4 * 10 / 20 = 0.3; m2: rank 20 -> 0.1 * 20 / 40 = 0.05
    assert got == {"m1": pytest.approx(0.3, rel=1e-12), "m2": pytest.approx(0.05, rel=1e-12)}


def test_a_bucket_absent_at_a_step_is_left_out_not_counted_as_zero():
    # le="4" has no sample within the 5 min lookback at B+400, so at that step Prometheus sees
    # only [1: 2, +Inf: 4]. q=0.75: rank 3 > 2 -> +Inf bucket -> the bound below it, 1.
    # At B all three are present: rank 3 -> (1, 4]: 1 + 3 * (3 - 2) / (4 - 2) = 2.5.
    # (Counting the absent bucket as 0, then monotonic, would give 4 at B+400.)
    # Both answers were checked against Prometheus 2.42.
    store = parse_text(
        om(
            f"""
# TYPE k gauge
k{{le="1"}} 2 {B}
k{{le="1"}} 2 {B + 400}
k{{le="4"}} 4 {B}
k{{le="+Inf"}} 4 {B}
k{{le="+Inf"}} 4 {B + 400}
"""
        )
    )
    out = LocalEngine(store).range(histogram_quantile(0.75, Selector("k")), at(B), at(B + 400), 400)
    assert out["value"].to_list() == [pytest.approx(2.5, rel=1e-12), 1.0]


def test_a_step_without_the_inf_bucket_is_nan():
    store = parse_text(
        om(
            f"""
# TYPE k gauge
k{{le="1"}} 2 {B}
k{{le="1"}} 2 {B + 400}
k{{le="+Inf"}} 4 {B}
"""
        )
    )
    out = LocalEngine(store).range(histogram_quantile(0.5, Selector("k")), at(B), at(B + 400), 400)
    # at B: rank 2 -> (0, 1]: 1 * 2 / 2 = 1.0; at B+400 only le="1" is left -> NaN (no +Inf)
    values = out["value"].to_list()
    assert values[0] == pytest.approx(1.0, rel=1e-12)
    assert math.isnan(values[1])


def test_only_an_inf_bucket_is_nan():
    store = parse_text(om(f'# TYPE k gauge\nk{{le="+Inf"}} 7 {B}'))
    out = LocalEngine(store).instant(histogram_quantile(0.5, Selector("k")), at(B))
    assert out.height == 1 and math.isnan(out["value"][0])


def test_frame_function_directly():
    frame = pl.DataFrame(
        {
            "le": ["0.1", "0.5", "1", "+Inf", "0.1", "0.5", "1", "+Inf"],
            "ts": [0, 0, 0, 0, 1000, 1000, 1000, 1000],
            "value": [10.0, 30.0, 40.0, 40.0, 10.0, 8.0, 40.0, 40.0],
        }
    )
    out = histogram_quantile_frame(0.5, frame).sort("ts")
    # ts 0: 0.3 (see above); ts 1000: non-monotonic [10, 8, 40, 40] -> 0.5 + 0.5 / 3
    assert out["ts"].to_list() == [0, 1000]
    assert out["value"].to_list() == [pytest.approx(0.3, rel=1e-12), pytest.approx(0.5 + 0.5 / 3, rel=1e-12)]


def test_frame_without_le_is_an_error_and_an_empty_frame_gives_nothing():
    with pytest.raises(QueryError, match="le"):
        histogram_quantile_frame(0.5, pl.DataFrame({"job": ["a"], "ts": [0], "value": [1.0]}))
    empty = pl.DataFrame(schema={"le": pl.Utf8, "job": pl.Utf8, "ts": pl.Int64, "value": pl.Float64})
    out = histogram_quantile_frame(0.5, empty)
    assert out.height == 0 and "le" not in out.columns and "job" in out.columns
