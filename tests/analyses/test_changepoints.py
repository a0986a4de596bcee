"""changepoints.detect: level shifts found where they are built, and not where they are not."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from perfkit.analyses.changepoints import ChangePoint, detect

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def minutes(n: int) -> list[datetime]:
    return [T0 + timedelta(minutes=i) for i in range(n)]


def test_clean_step_gives_one_change_point_at_the_first_new_point():
    values = np.array([0.2] * 20 + [0.5] * 20)
    points = detect(minutes(40), values)
    assert len(points) == 1
    cp = points[0]
    assert cp.index == 20
    assert cp.ts == T0 + timedelta(minutes=20)
    # medians of the raw values on each side
    assert cp.before == pytest.approx(0.2)
    assert cp.after == pytest.approx(0.5)
    assert cp.rel_change == pytest.approx((0.5 - 0.2) / 0.2)  # +150 %
    assert cp.score > 5.0


def test_step_down_on_a_linear_scale():
    values = np.array([100.0] * 12 + [40.0] * 12)
    (cp,) = detect(minutes(24), values, log_scale=False)
    assert (cp.index, cp.before, cp.after) == (12, 100.0, 40.0)
    assert cp.rel_change == pytest.approx(-0.6)


def test_noisy_step_is_still_found_at_its_index():
    rng = np.random.default_rng(7)
    values = np.r_[np.full(30, 1.0), np.full(30, 2.0)] * (1 + 0.02 * rng.standard_normal(60))
    (cp,) = detect(minutes(60), values)
    assert cp.index == 30
    assert cp.before == pytest.approx(1.0, rel=0.05) and cp.after == pytest.approx(2.0, rel=0.05)


def test_two_point_blip_is_not_a_change():
    # a rolling median of 5 removes a 2-point spike: windows around it hold 3 base values
    values = np.full(40, 0.2)
    values[15:17] = 5.0
    assert detect(minutes(40), values) == []


def test_ten_percent_shift_is_below_min_rel():
    values = np.array([1.0] * 20 + [1.1] * 20)
    assert detect(minutes(40), values) == []  # min_rel=0.2 by default
    # the same shift is reported once the bar is lowered, so it is min_rel that kept it out
    (cp,) = detect(minutes(40), values, min_rel=0.05)
    assert cp.index == 20 and cp.rel_change == pytest.approx(0.1)


def test_nans_are_ignored_and_indices_refer_to_the_input():
    values = np.array([0.2] * 20 + [0.5] * 20)
    values[[3, 10, 25, 33]] = np.nan
    ts = minutes(40)
    (cp,) = detect(ts, values)
    assert cp.index == 20 and cp.ts == ts[20]
    assert cp.before == pytest.approx(0.2) and cp.after == pytest.approx(0.5)
    # a NaN right at the step: the first kept point of the new level is reported
    values[20] = np.nan
    (cp,) = detect(ts, values)
    assert cp.index == 21


def test_too_short_or_flat_series_give_nothing():
    assert detect(minutes(15), np.array([0.2] * 8 + [0.5] * 7)) == []  # < 2 * min_size points
    assert detect(minutes(40), np.full(40, 0.3)) == []
    assert detect(minutes(40), np.full(40, np.nan)) == []


def test_two_steps_are_both_found_strongest_first():
    values = np.array([1.0] * 20 + [4.0] * 20 + [2.0] * 20)
    points = detect(minutes(60), values)
    assert sorted(p.index for p in points) == [20, 40]
    assert points[0].score >= points[1].score
    by_index = {p.index: p for p in points}
    assert (by_index[20].before, by_index[20].after) == (1.0, 4.0)
    assert (by_index[40].before, by_index[40].after) == (4.0, 2.0)


def test_rel_change_of_a_zero_baseline_is_infinite():
    assert math.isinf(ChangePoint(T0, 0, 0.0, 1.0, 9.0).rel_change)
