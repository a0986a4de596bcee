"""stages.breakdown on the hand-made store of vllm_store.py."""

from __future__ import annotations

import pytest
from vllm_store import BASELINE, HISTOGRAMS, INCIDENT, build, scenario

from perfkit.analyses.stages import breakdown

REL = 1e-9


@pytest.fixture(scope="module")
def result():
    return breakdown(scenario(), INCIDENT, BASELINE)


def test_means_are_sum_over_count(result):
    # mean = per-interval sum / 4 observations (the 40 intervals cancel)
    expected = {
        "baseline": {
            "queue": 0.1 / 4,
            "prefill": 0.2 / 4,
            "decode": 3.2 / 4,
            "ttft": 0.3 / 4,
            "e2e": 3.6 / 4,
            "inference": 3.4 / 4,
        },
        "incident": {
            "queue": 6.1 / 4,
            "prefill": 1.0 / 4,
            "decode": 3.2 / 4,
            "ttft": 7.0 / 4,
            "e2e": 11.0 / 4,
            "inference": 4.2 / 4,
        },
    }
    for side, means in expected.items():
        for stage, mean in means.items():
            assert result.means[side][stage] == pytest.approx(mean, rel=REL), (side, stage)
    # frontend = e2e - queue - inference: 0.9 - 0.025 - 0.85 = 0.025; 2.75 - 1.525 - 1.05 = 0.175
    assert result.means["baseline"]["frontend"] == pytest.approx(0.025, rel=1e-6)
    assert result.means["incident"]["frontend"] == pytest.approx(0.175, rel=1e-6)


def test_p95_per_stage(result):
    # baseline: (0, 0.1] stages -> 0.1 * 0.95; (0.5, 1] stages -> 0.5 + 0.5 * 0.95
    # incident queue/ttft/e2e: rank 152 in (1, 5] above 80 -> 1 + 4 * 72/80 = 4.6; prefill 0.1 + 0.4 * 0.95
    expected = {
        "baseline": {"queue": 0.095, "prefill": 0.095, "decode": 0.975, "ttft": 0.095, "e2e": 0.975},
        "incident": {"queue": 4.6, "prefill": 0.48, "decode": 0.975, "ttft": 4.6, "e2e": 4.6},
    }
    for side, p95 in expected.items():
        for stage, value in p95.items():
            assert result.p95[side][stage] == pytest.approx(value, rel=REL), (side, stage)


def test_a_p95_in_the_first_bucket_is_only_an_upper_bound(result):
    # baseline queue, prefill and TTFT: every observation in (0, 0.1], so their p95 of 95 ms is
    # histogram_quantile's interpolation from 0: only "at most 100 ms" is known; the incident's are not
    assert result.p95_under["baseline"] == {"queue": 0.1, "prefill": 0.1, "ttft": 0.1}
    assert result.p95_under["incident"] == {}
    rows = {r["stage"]: r for r in result.table().iter_rows(named=True)}
    assert rows["queue"]["note"] == "p95 baseline ≤ 100 ms (first bucket: interpolated from 0)"
    assert rows["decode"]["note"] == ""
    assert rows["queue"]["p95_delta_s"] == pytest.approx(
        4.6 - 0.1, rel=REL
    )  # at least: the baseline is at most 0.1


def test_queue_owns_the_tail_and_ttft_growth(result):
    # p95 ratios: queue 4.6 / 0.095 = 48.4, prefill 0.48 / 0.095 = 5.05, decode per token
    # (TPOT) unchanged -> queue. TTFT: queue mean +1.5 s vs prefill +0.2 s -> queue.
    assert result.tail_owner == "queue"
    assert result.ttft_owner == "queue"
    assert (
        result.summary() == "the queue stage owns the tail: p95 ≤ 100 ms → 4.60 s; TTFT grew mostly in queue"
    )
    assert result.missing == []
    table = result.table()
    assert table["stage"].to_list() == ["queue", "prefill", "decode", "frontend", "ttft", "e2e"]
    queue = table.row(0, named=True)
    assert queue["p95_delta_s"] == pytest.approx(4.6 - 0.1, rel=REL)  # the baseline is at most 0.1
    assert table.row(3, named=True)["p95_baseline_s"] is None  # no frontend histogram
    assert result.queries[0] == (
        "(sum (increase(vllm:request_queue_time_seconds_sum[10m]))) / "
        "(sum (increase(vllm:request_queue_time_seconds_count[10m])))"
    )


def test_prefill_owns_the_tail_when_only_prefill_grew():
    hist = dict(HISTOGRAMS)
    hist["vllm:request_queue_time_seconds"] = {
        "baseline": ((4, 0, 0, 0, 0), 0.1),
        "incident": ((4, 0, 0, 0, 0), 0.1),
    }
    # prefill: all 160 in (1, 5] -> p95 1 + 4 * 0.95 = 4.8; mean 12 / 4 = 3 s
    hist["vllm:request_prefill_time_seconds"] = {
        "baseline": ((4, 0, 0, 0, 0), 0.2),
        "incident": ((0, 0, 0, 4, 0), 12.0),
    }
    result = breakdown(build(hist), INCIDENT, BASELINE)
    assert result.p95["incident"]["prefill"] == pytest.approx(4.8, rel=REL)
    assert result.tail_owner == "prefill" and result.ttft_owner == "prefill"


def test_a_change_too_small_to_feel_owns_nothing():
    hist = dict(HISTOGRAMS)
    # queue: 39 of 40 per interval in (0, 0.1], 1 in (0.1, 0.5]: cumulative [1560, 1600, ...];
    # p95 rank 1520 -> 0.1 * 1520 / 1560 = 0.0974 (+2.4 ms over 0.095: not felt, under 100 ms)
    hist["vllm:request_queue_time_seconds"] = {
        "baseline": ((4, 0, 0, 0, 0), 0.1),
        "incident": ((39, 1, 0, 0, 0), 1.0),
    }
    hist["vllm:request_prefill_time_seconds"] = {
        "baseline": ((4, 0, 0, 0, 0), 0.2),
        "incident": ((4, 0, 0, 0, 0), 0.2),
    }
    result = breakdown(build(hist), INCIDENT, BASELINE)
    assert result.p95["incident"]["queue"] == pytest.approx(0.1 * 1520 / 1560, rel=REL)
    assert result.tail_owner is None
    assert result.ttft_owner is None  # the queue and prefill means did not move: nothing made TTFT grow
    prefill = result.table().row(1, named=True)  # in the first bucket on both sides: no delta to show
    assert prefill["stage"] == "prefill" and prefill["p95_delta_s"] is None
    assert prefill["note"] == "p95 both ≤ 100 ms (first bucket: interpolated from 0)"
    assert "TTFT grew" not in result.summary()
    assert result.missing == []


def test_summary_does_not_blame_missing_histograms_when_nothing_changed():
    hist = dict(HISTOGRAMS)
    same = {"baseline": ((4, 0, 0, 0, 0), 0.1), "incident": ((4, 0, 0, 0, 0), 0.1)}
    hist["vllm:request_queue_time_seconds"] = same
    hist["vllm:request_prefill_time_seconds"] = same
    result = breakdown(build(hist), INCIDENT, BASELINE)
    assert result.tail_owner is None and result.missing == []
    assert "missing" not in result.summary()


def test_without_a_baseline_the_slowest_stage_is_named():
    result = breakdown(scenario(), INCIDENT, None)
    # incident p95: queue 4.6, prefill 0.48, TPOT 0.095 -> queue
    assert result.tail_owner == "queue" and result.ttft_owner is None
    assert "baseline" not in result.means
    assert result.missing == [
        "stages: no baseline window; the tail owner is the slowest stage, not the one that grew"
    ]


def test_missing_stage_histograms_are_listed():
    hist = {k: v for k, v in HISTOGRAMS.items() if k != "vllm:request_decode_time_seconds"}
    result = breakdown(build(hist), INCIDENT, BASELINE)
    assert result.missing == ["stages: decode: no vllm:request_decode_time_seconds histogram"]
    assert result.means["incident"]["decode"] is None
    assert result.tail_owner == "queue"  # decode is judged per token (TPOT), which is present


def _backlog_store():
    """10 minutes of 4 requests per 15 s scrape: 10 ms queue and 100 ms prefill each, except two
    minutes where a restarted server drains its backlog (every request waited 20 s)."""
    from datetime import UTC, datetime

    from perfkit.core.frames import Window
    from perfkit.engine.local import LocalEngine
    from perfkit.sources.openmetrics import parse_text

    b = 1_795_996_800
    per = {  # name -> (sum per ordinary interval, sum per backlog interval)
        "vllm:request_queue_time_seconds": (0.04, 80.0),
        "vllm:request_prefill_time_seconds": (0.4, 0.4),
        "vllm:time_to_first_token_seconds": (0.44, 80.4),
    }
    lines = []
    for name, (calm, backlog) in per.items():
        lines.append(f"# TYPE {name} histogram")
        total = count = 0.0
        for k in range(41):
            if k:
                total += backlog if 12 <= k < 20 else calm
                count += 4
            for le in ("0.5", "+Inf"):
                lines.append(f'{name}_bucket{{le="{le}"}} {count!r} {b + 15 * k}')
            lines.append(f"{name}_count {count!r} {b + 15 * k}")
            lines.append(f"{name}_sum {total!r} {b + 15 * k}")
    engine = LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))
    return engine, Window(datetime.fromtimestamp(b, UTC), datetime.fromtimestamp(b + 600, UTC))


def test_shares_of_ttft_are_the_typical_minutes_not_a_backlogs():
    engine, window = _backlog_store()
    res = breakdown(engine, window, None)
    mean_share = res.means["incident"]["queue"] / res.means["incident"]["ttft"]
    assert mean_share > 0.9  # the two backlog minutes own the window's mean
    assert res.shares["queue"] == pytest.approx(0.04 / 0.44, abs=0.01)
    assert res.shares["prefill"] == pytest.approx(0.4 / 0.44, abs=0.01)
