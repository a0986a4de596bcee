"""Charts leave a gap where data is missing (issue 36, item 6): no line drawn across a restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from perfkit.report.figures import timeseries, with_gaps

T0 = datetime(2026, 12, 16, 15, 0, tzinfo=UTC)


def test_a_restart_breaks_the_line_and_a_late_scrape_does_not() -> None:
    ts = [T0 + timedelta(seconds=60 * k) for k in range(10)]
    ts += [T0 + timedelta(seconds=60 * 9 + 90)]  # one scrape 30 s late: still the line
    ts += [T0 + timedelta(minutes=20 + k) for k in range(5)]  # 9.5 min with nothing: a restart
    values = list(range(len(ts)))
    x, y = with_gaps(ts, values)
    assert y.count(None) == 1
    gap = y.index(None)
    assert x[gap - 1] < x[gap] < x[gap + 1] and y[gap - 1] == 10 and y[gap + 1] == 11
    fig = timeseries(
        {"step time": pl.DataFrame({"ts": ts, "value": [float(v) for v in values]})}, title="t", ytitle="s"
    )
    assert list(fig.data[0].y).count(None) == 1 and fig.data[0].connectgaps is False


def test_short_series_are_left_as_they_are() -> None:
    assert with_gaps([T0, T0 + timedelta(hours=1)], [1, 2]) == (
        [x.isoformat().replace("+00:00", "Z") for x in (T0, T0 + timedelta(hours=1))],
        [1, 2],
    )
