"""A training job's net progress across relaunches: new steps, steps run again, time down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from perfkit.analyses.training_progress import progress
from perfkit.core.frames import Window

T0 = datetime(2026, 12, 16, 15, 0, tzinfo=UTC)
WINDOW = Window(T0 + timedelta(minutes=20), T0 + timedelta(minutes=40))
LINE_S, STEPS_PER_LINE = 15.0, 10  # a line every 10 steps, 1.5 s a step


def _run(start_s: float, first_step: int, lines: int) -> list[tuple[datetime, int]]:
    return [
        (T0 + timedelta(seconds=start_s + k * LINE_S), first_step + k * STEPS_PER_LINE) for k in range(lines)
    ]


def test_a_job_that_never_stopped_loses_nothing() -> None:
    points = _run(0.0, 1000, 160)  # 40 minutes of lines
    p = progress(points, WINDOW)
    assert p is not None
    assert p.restarts == [] and p.steps_redone == 0
    assert p.down_s == pytest.approx(0.0)
    # 20 min at 40 steps a minute: 800 steps, every one new
    assert p.steps_new == pytest.approx(800, abs=STEPS_PER_LINE)
    assert p.net_share == pytest.approx(1.0)
    assert not p.crash_loop


def test_a_crash_loop_that_resumes_from_one_checkpoint_gains_nothing() -> None:
    # ran to step 2530 before the window; every relaunch resumes at 2500 and dies two lines later
    points = _run(0.0, 2200, 34)  # 15:00-15:08:15, steps 2200..2530
    t = 20 * 60.0
    while t < 40 * 60.0:
        points += _run(t + 90.0, 2500, 2)  # 90 s to load, then 2 lines, then an OOM
        t += 220.0
    p = progress(sorted(points), WINDOW)
    assert p is not None
    assert p.steps_new == 0 and p.frontier_end == 2530
    assert len(p.restarts) >= 5 and {r.resumed_step for r in p.restarts} == {2500}
    assert p.crash_loop and p.net_share == 0.0
    assert p.steps_redone == p.steps_run > 0
    # each 220 s cycle holds one ordinary interval of work and ~190 s of nothing
    assert 0.6 < p.down_s / WINDOW.seconds < 0.95


def test_steps_run_again_after_one_crash_are_not_progress() -> None:
    before = _run(0.0, 1000, 100)  # to step 1990 at 24:45
    after = _run(26 * 60.0, 1500, 56)  # relaunched at 26:00 from step 1500, runs to 2050
    p = progress(before + after, WINDOW)
    assert p is not None and [r.resumed_step for r in p.restarts] == [1500]
    assert p.restarts[0].to_redo == 1990 - 1500
    assert p.frontier_end == 2050 and p.steps_new == 2050 - p.frontier_start
    assert p.steps_redone == 1990 - 1500
    # down from the last line at 24:45 to the first at 26:00, less one ordinary interval
    assert p.down_s == pytest.approx(75.0 - LINE_S, abs=1.0)


def test_a_hang_the_job_came_back_from_is_time_down() -> None:
    points = _run(0.0, 0, 100) + _run(100 * LINE_S + 600.0, 1000, 60)  # 10 min without a line
    p = progress(points, WINDOW)
    assert p is not None and p.restarts == []
    assert p.down_s == pytest.approx(600.0, abs=1.0)
    assert p.steps_redone == 0


def test_logs_that_stop_early_say_nothing_of_the_minutes_after() -> None:
    points = _run(0.0, 0, 120)  # lines until 29:45
    seen = T0 + timedelta(minutes=30)  # the logs' last line of any kind
    p = progress(points, WINDOW, seen_until=seen)
    assert p is not None and p.down_s == pytest.approx(0.0)
    p = progress(points, WINDOW, seen_until=WINDOW.end)  # the logs went on: the job did not
    # from the last line at 29:45 to 40:00, less the one interval a line was not yet due
    assert p is not None and p.down_s == pytest.approx(615.0 - LINE_S, abs=1.0)


def test_no_step_line_in_the_window_is_no_answer() -> None:
    assert progress(_run(0.0, 0, 60), WINDOW) is None  # lines until 14:45 only
    assert progress(_run(20 * 60.0, 0, 2), WINDOW) is None  # too few lines to know an interval
