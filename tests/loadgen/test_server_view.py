"""The server-side view of a load test: deltas of the server's histograms between two scrapes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from perfkit.loadgen.server_view import _histogram_delta, disagreement
from perfkit.sources.openmetrics import parse_text

NAME = "vllm:time_to_first_token_seconds"


def _scrape(buckets: dict[str, float], total: float, count: float):
    lines = [f"# TYPE {NAME} histogram"]
    lines += [f'{NAME}_bucket{{le="{le}"}} {v}' for le, v in buckets.items()]
    lines += [f"{NAME}_sum {total}", f"{NAME}_count {count}"]
    return parse_text("\n".join(lines) + "\n", default_ts=datetime.now(UTC))


def test_only_what_happened_between_the_scrapes_counts():
    before = _scrape({"0.05": 100, "0.1": 100, "+Inf": 100}, 4.0, 100)  # earlier traffic: all under 50 ms
    after = _scrape({"0.05": 100, "0.1": 300, "+Inf": 300}, 4.0 + 15.0, 300)  # the run: 200 in (50, 100] ms
    got = _histogram_delta(before, after, (NAME,))
    assert got["count"] == 200
    assert got["mean"] == pytest.approx(75.0)  # 15 s over 200 requests
    assert got["p50"] == pytest.approx(75.0)  # halfway through the (50, 100] bucket, as histogram_quantile
    assert got["p99"] == pytest.approx(99.5)


def test_a_server_that_observed_only_zeros_is_not_reported_at_half_a_bucket():
    before = _scrape({"0.3": 0, "1": 0, "+Inf": 0}, 0.0, 0)
    after = _scrape({"0.3": 50, "1": 50, "+Inf": 50}, 0.0, 50)
    got = _histogram_delta(before, after, (NAME,))
    assert got["mean"] == 0.0
    assert got["p50"] is None and got["p99"] is None
    assert got["under_first_bucket_ms"] == 300.0


def test_a_restart_between_scrapes_gives_no_numbers():
    before = _scrape({"0.05": 100, "+Inf": 100}, 4.0, 100)
    after = _scrape({"0.05": 10, "+Inf": 10}, 0.4, 10)  # counters went down: a new process
    assert _histogram_delta(before, after, (NAME,)) is None


def test_disagreement_names_a_gap_outside_the_engine():
    client = {"mean_ttft_ms": 90.0, "mean_e2el_ms": 700.0}
    server = {"ttft_ms": {"mean": 50.0}, "e2el_ms": {"mean": 698.0}}
    rows = {r["metric"]: r for r in disagreement(client, server)}
    assert rows["ttft"]["disagree"] and rows["ttft"]["gap_ms"] == pytest.approx(40.0)
    assert not rows["e2el"]["disagree"]  # 2 ms: a loopback round trip


def test_a_server_above_the_client_is_a_clock_disagreement_not_time_outside():
    client = {"mean_ttft_ms": 50.0, "mean_e2el_ms": 700.0}
    server = {"ttft_ms": {"mean": 500.0}, "e2el_ms": {"mean": 701.0}}
    rows = {r["metric"]: r for r in disagreement(client, server)}
    assert rows["ttft"]["clocks_disagree"] and not rows["ttft"]["disagree"]
    assert "another clock" in rows["ttft"]["note"]
    assert not rows["e2el"]["clocks_disagree"] and "note" not in rows["e2el"]
    # a simulator at --speed 10 (its perfkit_lab_servesim_speed gauge): its times are virtual
    rows = {r["metric"]: r for r in disagreement(client, {**server, "virtual_speed": 10.0})}
    assert "10x faster than wall time" in rows["ttft"]["note"]
    assert "virtual" in rows["e2el"]["note"]
