"""Sweep rates and the knee, on synthetic latency-versus-load curves with a known answer."""

from __future__ import annotations

import math

import pytest

from perfkit.errors import ConfigError
from perfkit.loadgen.sweep import find_knee, sweep_rates

# The knee's two limits, stated here rather than imported from the module under test (README, "perfkit bench"):
# a server keeps up while it achieves >= 90% of the offered rate; queueing has taken over once p99 TTFT
# has doubled over the lowest load's.
KEEPS_UP_FRAC = 0.9
P99_GROWTH = 2.0


def test_sweep_rates_are_geometric_and_hit_both_ends():
    rates = sweep_rates(1, 16, 5)
    assert rates[0] == 1.0 and rates[-1] == 16.0 and rates == pytest.approx([1, 2, 4, 8, 16])
    odd = sweep_rates(0.5, 40, 7)
    ratios = [b / a for a, b in zip(odd, odd[1:], strict=False)]
    assert ratios == pytest.approx([80 ** (1 / 6)] * 6)
    assert sweep_rates(3, 3, 4) == [3.0]


@pytest.mark.parametrize(
    "args", [(0, 10, 5), (10, 5, 3), (1, float("inf"), 3), (1, 10, 1), (1, 10, 0), (1, 10, 1000), ("a", 2, 3)]
)
def test_bad_sweeps_are_refused(args):
    with pytest.raises(ConfigError):
        sweep_rates(*args)


def mm1_curve(rates, capacity=10.0, service_p99_ms=50.0):
    """An M/M/1-like server: p99 TTFT grows as 1/(1 - rho); past capacity it serves only capacity."""
    points = []
    for r in rates:
        rho = r / capacity
        p99 = service_p99_ms / (1 - rho) if rho < 0.98 else service_p99_ms * 50
        points.append(
            {"offered_rate": r, "achieved_rate": min(r, capacity), "p99_ttft_ms": p99, "p50_ttft_ms": 40}
        )
    return points


def test_the_knee_of_a_queueing_curve_is_where_its_p99_doubles():
    rates = sweep_rates(1, 16, 9)  # 1, 1.41, 2, 2.83, 4, 5.66, 8, 11.3, 16
    knee = find_knee(mm1_curve(rates))
    # p99 = 50/(1 - r/10) doubles over the lowest load's (50/0.9) once r > 5.5: 4 is the last before
    base = 50 / (1 - rates[0] / 10)
    first_over = next(i for i, r in enumerate(rates) if r >= 10 or 50 / (1 - r / 10) > P99_GROWTH * base)
    expected = rates[first_over - 1]
    assert knee["point"]["offered_rate"] == expected == pytest.approx(4.0)
    assert knee["saturated_by"] == "latency" and knee["next"]["offered_rate"] == pytest.approx(rates[5])
    assert "p99 TTFT" in knee["reason"] and "5.66" in knee["reason"]
    assert knee["limits"] == {
        "achieved_min_frac": KEEPS_UP_FRAC,
        "p99_ttft_max_growth": P99_GROWTH,
    }


def test_the_knee_where_throughput_stops_following_load():
    rates = [2, 4, 6, 8, 10, 12]
    points = [{"offered_rate": r, "achieved_rate": min(r, 9.5), "p99_ttft_ms": 80} for r in rates]
    knee = find_knee(points)
    # 10 offered, 9.5 achieved is 95 %: still keeping up; 12 offered, 9.5 achieved is 79 %
    assert knee["point"]["offered_rate"] == 10 and knee["saturated_by"] == "throughput"
    assert "79%" in knee["reason"]


def test_points_in_any_order_and_without_latency():
    points = [
        {"offered_rate": 8, "achieved_rate": 6.0, "p99_ttft_ms": None},
        {"offered_rate": 2, "achieved_rate": 2.0},
        {"offered_rate": 4, "achieved_rate": 3.9, "p99_ttft_ms": None},
    ]
    assert find_knee(points)["point"]["offered_rate"] == 4


def test_no_saturation_and_saturation_from_the_start():
    flat = find_knee([{"offered_rate": r, "achieved_rate": r, "p99_ttft_ms": 60} for r in (1, 2, 3)])
    assert flat["point"]["offered_rate"] == 3 and flat["saturated_by"] is None and flat["next"] is None
    assert "above it" in flat["reason"]
    low = find_knee(
        [{"offered_rate": 5, "achieved_rate": 2, "p99_ttft_ms": 900}, {"offered_rate": 9, "achieved_rate": 2}]
    )
    assert low["point"] is None and "below the lowest load" in low["reason"]
    assert find_knee([]) is None


def test_a_noisy_but_stable_server_has_no_early_knee():
    """p99 wandering by +-40 % and a 5 % throughput shortfall stay below both cut-offs."""
    wobble = [1.0, 1.4, 0.8, 1.3, 0.7, 1.4]
    points = [
        {"offered_rate": r, "achieved_rate": r * 0.95, "p99_ttft_ms": 100 * w}
        for r, w in zip([1, 2, 3, 4, 5, 6], wobble, strict=True)
    ]
    assert find_knee(points)["saturated_by"] is None


@pytest.mark.parametrize(
    "point, phrase",
    [
        ({"achieved_rate": 1}, "offered_rate is missing"),
        ({"offered_rate": 0, "achieved_rate": 1}, "offered_rate is missing or 0"),
        ({"offered_rate": 1}, "achieved_rate is missing"),
        ({"offered_rate": 1, "achieved_rate": math.nan}, "achieved_rate must be"),
        ({"offered_rate": "1", "achieved_rate": 1}, "offered_rate must be"),
        ({"offered_rate": 1, "achieved_rate": 1, "p99_ttft_ms": -3}, "p99_ttft_ms must be"),
    ],
)
def test_a_bad_point_is_named(point, phrase):
    good = {"offered_rate": 0.5, "achieved_rate": 0.5, "p99_ttft_ms": 50}
    with pytest.raises(ConfigError, match=f"sweep point 1: {phrase}"):
        find_knee([good, point])
