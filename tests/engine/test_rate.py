"""LocalEngine against Prometheus 2.x semantics, every number worked out by hand.

``extrapolatedRate`` (promql/functions.go, 2.x) in short: over the samples in [t - w, t]
(both ends included), result = last - first (+ the value before every drop, for counters);
durationToStart/End = distance from the first/last sample to the window edge; for a counter,
durationToStart is capped by durationToZero = sampled * first / result; each side is
extrapolated by its full distance when it is below 1.1 x the average sample gap, else by half
a gap; result *= extrapolated / sampled; rate divides by w.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from perfkit.engine.local import LocalEngine
from perfkit.engine.ops import (
    Aggregate,
    Binary,
    RangeFunction,
    Selector,
    aggregate,
    histogram_quantile,
    increase,
    over_time,
    rate,
    ratio,
    sum_by,
)
from perfkit.engine.promql import duration, to_promql
from perfkit.errors import QueryError
from perfkit.sources.openmetrics import parse_text

B = 1_795_996_800  # multiple of 60 and 7200


def at(offset: float) -> datetime:
    return datetime.fromtimestamp(B + offset, UTC)


def series(name: str, labels: str, points: list[tuple[float, float]]) -> str:
    """OpenMetrics sample lines; ``points`` are (offset s from B, value)."""
    block = f"{{{labels}}}" if labels else ""
    return "\n".join(f"{name}{block} {v!r} {B + t!r}" for t, v in points)


def engine_for(*families: str) -> LocalEngine:
    return LocalEngine(parse_text("\n".join(families) + "\n# EOF\n", require_eof=True))


def scalar(frame) -> float:
    assert frame.height == 1, frame
    return float(frame["value"][0])


# counter samples every 15 s; a non-linear one so extrapolation is visible
C = [(0, 100.0), (15, 110.0), (30, 130.0), (45, 160.0), (60, 170.0)]
C_NEAR_ZERO = [(0, 5.0), (15, 20.0), (30, 35.0), (45, 50.0)]
C_RESETS = [(0, 10.0), (15, 20.0), (30, 5.0), (45, 15.0), (60, 3.0), (75, 8.0)]


@pytest.fixture
def counters() -> LocalEngine:
    return engine_for(
        "# TYPE c counter",
        series("c_total", 'job="a"', C),
        "# TYPE z counter",
        series("z_total", "", C_NEAR_ZERO),
        "# TYPE r counter",
        series("r_total", "", C_RESETS),
    )


# -- rate / increase ---------------------------------------------------------------------------


def test_aligned_window_needs_no_extrapolation(counters):
    # [B, B+60] holds all 5 samples: 170 - 100 = 70; both edges hit a sample -> factor 1
    out = counters.instant(increase(Selector("c_total"), 60), at(60))
    assert out["job"].to_list() == ["a"]
    assert scalar(out) == pytest.approx(70.0, rel=1e-12)
    # rate = 70 / 60
    assert scalar(counters.instant(rate(Selector("c_total"), 60), at(60))) == pytest.approx(
        70 / 60, rel=1e-12
    )


def test_misaligned_window_extrapolates_to_both_edges(counters):
    # at B+50, w=60: [B-10, B+50] holds t=0..45 -> 160 - 100 = 60, sampled 45, avg gap 15,
    # threshold 16.5; to start 10 (< 16.5, durationToZero 45 * 100/60 = 75 is larger), to end 5
    # -> extrapolated 45 + 10 + 5 = 60; increase = 60 * 60 / 45 = 80; rate = 80 / 60
    assert scalar(counters.instant(increase(Selector("c_total"), 60), at(50))) == pytest.approx(
        80.0, rel=1e-12
    )
    assert scalar(counters.instant(rate(Selector("c_total"), 60), at(50))) == pytest.approx(
        80 / 60, rel=1e-12
    )


def test_far_edge_extrapolates_only_half_an_interval(counters):
    # at B+60, w=120: [B-60, B+60] holds all 5 -> 70, sampled 60, avg 15, threshold 16.5;
    # to start 60 >= 16.5 (durationToZero 60 * 100/70 = 85.7 is larger) -> + 7.5; to end 0
    # -> 67.5; increase = 70 * 67.5 / 60 = 78.75; rate = 78.75 / 120 = 0.65625
    assert scalar(counters.instant(increase(Selector("c_total"), 120), at(60))) == pytest.approx(
        78.75, rel=1e-12
    )
    assert scalar(counters.instant(rate(Selector("c_total"), 120), at(60))) == pytest.approx(
        0.65625, rel=1e-12
    )


def test_counter_is_not_extrapolated_below_zero(counters):
    # z: 5, 20, 35, 50 at 0..45. At B+45, w=120: [B-75, B+45]: result 45, sampled 45, avg 15;
    # to start 75, but durationToZero = 45 * 5 / 45 = 5 -> 5 < 16.5 -> + 5; to end 0
    # -> 50; increase = 45 * 50 / 45 = 50 (without the clamp: 45 * 52.5 / 45 = 52.5)
    assert scalar(counters.instant(increase(Selector("z_total"), 120), at(45))) == pytest.approx(
        50.0, rel=1e-12
    )
    assert scalar(counters.instant(rate(Selector("z_total"), 120), at(45))) == pytest.approx(
        50 / 120, rel=1e-12
    )


def test_counter_resets_add_the_value_before_the_drop(counters):
    # r: 10, 20, 5, 15, 3, 8 at 0..75. [B, B+75]: 8 - 10 + 20 (drop 20->5) + 15 (drop 15->3) = 33
    assert scalar(counters.instant(increase(Selector("r_total"), 75), at(75))) == pytest.approx(
        33.0, rel=1e-12
    )
    # [B, B+45]: 15 - 10 + 20 = 25 -> rate 25 / 45 (Prometheus 2.42 answered 0.5555555555555556)
    assert scalar(counters.instant(rate(Selector("r_total"), 45), at(45))) == pytest.approx(
        25 / 45, rel=1e-12
    )
    # [B+45, B+75] holds 15, 3, 8: a drop before the window does not count: 8 - 15 + 15 = 8
    assert scalar(counters.instant(increase(Selector("r_total"), 30), at(75))) == pytest.approx(
        8.0, rel=1e-12
    )


def test_fewer_than_two_samples_give_no_output(counters):
    # [B+5, B+15] and [B+5, B+20] hold only the sample at B+15
    assert counters.instant(rate(Selector("c_total"), 10), at(15)).height == 0
    assert counters.instant(rate(Selector("c_total"), 15), at(20)).height == 0
    # both ends are inclusive in Prometheus 2.x: [B, B+15] holds two -> (110 - 100) / 15
    assert scalar(counters.instant(rate(Selector("c_total"), 15), at(15))) == pytest.approx(
        10 / 15, rel=1e-12
    )


def test_range_query_omits_steps_without_two_samples(counters):
    out = counters.range(increase(Selector("c_total"), 30), at(-30), at(90), 30)
    # steps -30 (no sample), 0 ([-30, 0]: one), 90 ([60, 90]: one) are omitted;
    # 30: [0, 30] -> 130 - 100 = 30; 60: [30, 60] -> 170 - 130 = 40; both edges aligned
    assert out["ts"].to_list() == [at(30), at(60)]
    assert out["value"].to_list() == [pytest.approx(30.0, rel=1e-12), pytest.approx(40.0, rel=1e-12)]


# -- instant selectors -------------------------------------------------------------------------


@pytest.fixture
def gauges() -> LocalEngine:
    """Without the staleness emulation (tests/engine/test_staleness.py): the plain 5-minute lookback."""
    engine = engine_for(
        "# TYPE g gauge",
        series("g", 'job="a"', [(0, 1.0), (60, 2.0)]),
    )
    return LocalEngine(engine.store, staleness=False)


def test_instant_selector_looks_back_five_minutes(gauges):
    assert gauges.instant(Selector("g"), at(-1)).height == 0
    assert scalar(gauges.instant(Selector("g"), at(0))) == 1.0
    assert scalar(gauges.instant(Selector("g"), at(30))) == 1.0
    assert scalar(gauges.instant(Selector("g"), at(60))) == 2.0
    # the lookback is [t - 5m, t]: a sample exactly 300 s old still counts in Prometheus 2.x
    assert scalar(gauges.instant(Selector("g"), at(360))) == 2.0
    assert gauges.instant(Selector("g"), at(360.001)).height == 0


def test_range_query_of_a_selector(gauges):
    out = gauges.range(Selector("g").where(job="a"), at(-60), at(420), 60)
    # -60: nothing yet; 0: 1; 60..360: 2; 420: older than 5 min
    assert out["ts"].to_list() == [at(t) for t in (0, 60, 120, 180, 240, 300, 360)]
    assert out["value"].to_list() == [1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    assert out["job"].unique().to_list() == ["a"]
    assert gauges.instant(Selector("g").where(job="b"), at(60)).height == 0
    assert gauges.instant(Selector("g").where(zone="x"), at(60)).height == 0
    assert gauges.instant(Selector("nope"), at(60)).height == 0


# -- aggregations ------------------------------------------------------------------------------


@pytest.fixture
def three() -> LocalEngine:
    # per-second rates 1, 2, 4 (increments 15, 30, 60 per 15 s), all starting at 10
    def linear(per_s: float) -> list[tuple[float, float]]:
        return [(t, 10.0 + per_s * t) for t in (0, 15, 30, 45, 60)]

    return engine_for(
        "# TYPE q counter",
        series("q_total", 'job="a",inst="1"', linear(1)),
        series("q_total", 'job="a",inst="2"', linear(2)),
        series("q_total", 'job="b",inst="3"', linear(4)),
    )


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("sum", {"a": 3.0, "b": 4.0}),  # 1 + 2, 4
        ("avg", {"a": 1.5, "b": 4.0}),  # (1 + 2) / 2
        ("max", {"a": 2.0, "b": 4.0}),
        ("min", {"a": 1.0, "b": 4.0}),
        ("count", {"a": 2.0, "b": 1.0}),
    ],
)
def test_aggregations_by_label(three, op, expected):
    # aligned [B, B+60]: each rate is exactly its slope
    out = three.instant(aggregate(op, rate(Selector("q_total"), 60), "job"), at(60))
    assert [c for c in out.columns if c not in ("ts", "value")] == ["job"]
    got = dict(zip(out["job"], out["value"], strict=True))
    assert got == {k: pytest.approx(v, rel=1e-12) for k, v in expected.items()}


def test_aggregation_without_labels_and_by_a_missing_label(three):
    assert scalar(three.instant(sum_by(rate(Selector("q_total"), 60)), at(60))) == pytest.approx(
        7.0, rel=1e-12
    )
    # no series has "zone": they all group together, under the empty value
    out = three.instant(sum_by(rate(Selector("q_total"), 60), "zone"), at(60))
    assert out["zone"].to_list() == [""]
    assert scalar(out) == pytest.approx(7.0, rel=1e-12)


def test_aggregation_over_a_range(three):
    out = three.range(sum_by(increase(Selector("q_total"), 30), "job"), at(30), at(60), 30)
    # each 30 s window is aligned: increases 30, 60 (job a) and 120 (job b) at both steps
    assert out.sort(["job", "ts"])["value"].to_list() == [
        pytest.approx(v, rel=1e-12) for v in (90.0, 90.0, 120.0, 120.0)
    ]


# -- binary operator ---------------------------------------------------------------------------


@pytest.fixture
def latency() -> LocalEngine:
    def lin(per_s: float) -> list[tuple[float, float]]:
        return [(t, per_s * t) for t in (0, 15, 30, 45, 60)]

    return engine_for(
        "# TYPE lat histogram",
        series("lat_sum", 'model="m1"', lin(0.5)),
        series("lat_sum", 'model="m2"', lin(3.0)),
        series("lat_sum", 'model="m3"', lin(1.0)),
        series("lat_count", 'model="m1"', lin(2.0)),
        series("lat_count", 'model="m2"', lin(4.0)),
        "# TYPE other gauge",
        series("other", 'model="m1",zone="x"', [(0, 1.0)]),
        series("plain", 'model="m1"', [(0, 4.0)]),
    )


def test_ratio_matches_series_with_identical_labels(latency):
    expr = ratio(rate(Selector("lat_sum"), 60), rate(Selector("lat_count"), 60))
    out = latency.instant(expr, at(60))
    got = dict(zip(out["model"], out["value"], strict=True))
    # m1: 0.5 / 2 = 0.25 s; m2: 3 / 4 = 0.75 s; m3 has no _count series -> dropped
    assert got == {"m1": pytest.approx(0.25, rel=1e-12), "m2": pytest.approx(0.75, rel=1e-12)}


def test_ratio_of_sums(latency):
    expr = ratio(sum_by(rate(Selector("lat_sum"), 60)), sum_by(rate(Selector("lat_count"), 60)))
    # (0.5 + 3 + 1) / (2 + 4) = 0.75
    assert scalar(latency.instant(expr, at(60))) == pytest.approx(0.75, rel=1e-12)


def test_ratio_does_not_match_different_label_sets(latency):
    # {model="m1",zone="x"} vs {model="m1"}: no one-to-one match in Prometheus (checked on 2.42)
    assert latency.instant(ratio(Selector("other"), Selector("plain")), at(0)).height == 0
    assert latency.instant(ratio(Selector("plain"), Selector("other")), at(0)).height == 0
    out = latency.instant(ratio(Selector("plain"), Selector("plain")), at(0))
    assert out["model"].to_list() == ["m1"] and scalar(out) == 1.0


# -- *_over_time -------------------------------------------------------------------------------


@pytest.fixture
def wiggle() -> LocalEngine:
    return engine_for(
        "# TYPE w gauge", series("w", "", [(0, 3.0), (15, 1.0), (30, 4.0), (45, 1.0), (60, 5.0)])
    )


@pytest.mark.parametrize(
    ("fn", "full", "part"),
    [
        # [B, B+60]: 3 1 4 1 5          [B+15, B+45]: 1 4 1
        ("avg", 14 / 5, 2.0),
        ("max", 5.0, 4.0),
        ("min", 1.0, 1.0),
        ("sum", 14.0, 6.0),
        ("count", 5.0, 3.0),
        ("last", 5.0, 1.0),
    ],
)
def test_over_time(wiggle, fn, full, part):
    assert scalar(wiggle.instant(over_time(fn, Selector("w"), 60), at(60))) == pytest.approx(full, rel=1e-12)
    assert scalar(wiggle.instant(over_time(fn, Selector("w"), 30), at(45))) == pytest.approx(part, rel=1e-12)


def test_over_time_misaligned_and_empty(wiggle):
    # [B+20, B+50]: 4, 1 -> avg 2.5 (no extrapolation for *_over_time)
    assert scalar(wiggle.instant(over_time("avg", Selector("w"), 30), at(50))) == pytest.approx(
        2.5, rel=1e-12
    )
    # one sample is enough for *_over_time; none gives nothing
    assert scalar(wiggle.instant(over_time("max", Selector("w"), 5), at(62))) == 5.0
    assert wiggle.instant(over_time("max", Selector("w"), 5), at(70)).height == 0


# -- histogram_quantile over rate --------------------------------------------------------------


def test_p95_of_summed_bucket_rates():
    # increases over [B, B+60] per le: a: 40, 120, 124; b: 20, 60, 62 (linear, starting at 0)
    def lin(total: float) -> list[tuple[float, float]]:
        return [(t, total * t / 60) for t in (0, 15, 30, 45, 60)]

    engine = engine_for(
        "# TYPE x histogram",
        series("x_bucket", 'inst="a",le="0.1"', lin(40)),
        series("x_bucket", 'inst="a",le="0.5"', lin(120)),
        series("x_bucket", 'inst="a",le="+Inf"', lin(124)),
        series("x_bucket", 'inst="b",le="0.1"', lin(20)),
        series("x_bucket", 'inst="b",le="0.5"', lin(60)),
        series("x_bucket", 'inst="b",le="+Inf"', lin(62)),
    )
    expr = histogram_quantile(0.95, sum_by(rate(Selector("x_bucket"), 60), "le"))
    assert to_promql(expr) == "histogram_quantile(0.95, sum by (le) (rate(x_bucket[1m])))"
    # aligned window, first value 0 -> rates are increase / 60: 60/60, 180/60, 186/60
    # rank 0.95 * 186/60; bucket (0.1, 0.5]: 0.1 + 0.4 * (176.7 - 60) / (180 - 60) = 0.489
    assert scalar(engine.instant(expr, at(60))) == pytest.approx(0.489, rel=1e-12)


# -- errors ------------------------------------------------------------------------------------


def test_bad_queries_are_query_errors(counters):
    with pytest.raises(QueryError):
        counters.range(rate(Selector("c_total"), 60), at(0), at(60), 0)
    with pytest.raises(QueryError):
        counters.range(rate(Selector("c_total"), 60), at(60), at(0), 15)
    with pytest.raises(QueryError):
        counters.instant(RangeFunction("irate", Selector("c_total"), 60), at(60))
    with pytest.raises(QueryError):
        counters.instant(rate(Selector("c_total"), 0), at(60))
    with pytest.raises(QueryError):
        counters.instant(Aggregate("median", Selector("c_total")), at(60))


# -- PromQL text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (Selector("x"), "x"),
        (Selector("x").where(b="2", a="1"), 'x{a="1",b="2"}'),
        (Selector("x").where(path='a"b\\c\nd'), 'x{path="a\\"b\\\\c\\nd"}'),
        (rate(Selector("x_total"), 60), "rate(x_total[1m])"),
        (increase(Selector("x_total"), 90), "increase(x_total[90s])"),
        (increase(Selector("x_total"), 5400), "increase(x_total[90m])"),
        (over_time("avg", Selector("g"), 3600), "avg_over_time(g[1h])"),
        (over_time("max", Selector("g"), 86400), "max_over_time(g[1d])"),
        (over_time("last", Selector("g"), 1.5), "last_over_time(g[1500ms])"),
        (sum_by(rate(Selector("x"), 60), "le"), "sum by (le) (rate(x[1m]))"),
        (aggregate("avg", Selector("g")), "avg (g)"),
        (aggregate("max", Selector("g"), "a", "b"), "max by (a, b) (g)"),
        (
            histogram_quantile(0.99, sum_by(rate(Selector("x_bucket").where(m="1"), 300), "le", "m")),
            'histogram_quantile(0.99, sum by (le, m) (rate(x_bucket{m="1"}[5m])))',
        ),
        (
            histogram_quantile(0.123456789, Selector("x_bucket")),
            "histogram_quantile(0.123456789, x_bucket)",
        ),
        (histogram_quantile(1, Selector("x_bucket")), "histogram_quantile(1, x_bucket)"),
        (
            ratio(sum_by(rate(Selector("a_sum"), 300)), sum_by(rate(Selector("a_count"), 300))),
            "(sum (rate(a_sum[5m]))) / (sum (rate(a_count[5m])))",
        ),
    ],
)
def test_to_promql(expr, text):
    assert to_promql(expr) == text


def test_duration_literals():
    assert [duration(s) for s in (15, 60, 90, 120, 3600, 7200, 86400, 0.25)] == [
        "15s",
        "1m",
        "90s",
        "2m",
        "1h",
        "2h",
        "1d",
        "250ms",
    ]


def test_to_promql_validates():
    with pytest.raises(QueryError):
        to_promql(rate(Selector("x"), -1))
    with pytest.raises(QueryError):
        to_promql(aggregate("median", Selector("x")))
    with pytest.raises(QueryError):
        to_promql(Binary("%", Selector("a"), Selector("b")))
