"""Before/after comparison (perfkit.analyses.compare, compare_sides): the band's terms worked out by
hand, batch means on a hand-made store, order statistics against the exponential's known quantile
error, and the verdicts on the embedded incidents and their after-fix bundles."""

from __future__ import annotations

import math
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from perfkit.analyses.compare import BY_KEY, K, Measure, Side, judge
from perfkit.analyses.compare_sides import bench_side, window_side
from perfkit.app.runbooks.inference import open_incident
from perfkit.core.frames import Window
from perfkit.engine.local import LocalEngine
from perfkit.errors import ConfigError
from perfkit.sources.openmetrics import parse_text

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def side(
    values: dict[str, tuple[float | None, float | None]], *, kind="bench", requests=5000.0, **kw
) -> Side:
    return Side(kind, kw.pop("name", kind), {k: Measure(v, se) for k, (v, se) in values.items()},
                requests=requests, noise="order statistics", **kw)  # fmt: skip


# -- the band ---------------------------------------------------------------------------------------


def test_a_change_beyond_three_standard_errors_of_the_difference_moves():
    # se 0.1 s on each side: the difference's se is 0.1 x sqrt(2) = 0.1414 s; K = 3 -> band 0.4243 s,
    # wider than 10 % of 2 s (0.2 s) and the 2 ms floor
    band = 3 * math.sqrt(0.1**2 + 0.1**2)
    before = side({"ttft_p95": (2.0, 0.1)})
    inside = judge(before, side({"ttft_p95": (2.0 - band * 0.95, 0.1)}), symptom="ttft_p95")
    beyond = judge(before, side({"ttft_p95": (2.0 - band * 1.05, 0.1)}), symptom="ttft_p95")
    row = inside.get("ttft_p95")
    assert row.band == pytest.approx(band) and row.band_from == "noise"
    assert row.status == "within noise" and inside.overall == "within-noise" and inside.exit_code == 1
    assert (
        beyond.get("ttft_p95").status == "improved" and beyond.overall == "worked" and beyond.exit_code == 0
    )


def test_without_noise_the_gates_relative_and_absolute_terms_decide():
    # no standard errors: 10 % of 0.5 s = 50 ms for a latency; 5 % of 100 req/s for a bench throughput;
    # an error rate's floor is 1 point; a 3 ms ITL's band is its 1 ms floor, not 10 % of it
    before = side({"ttft_p95": (0.5, None), "request_throughput": (100.0, None), "error_rate": (0.0, None),
                   "itl_p50": (0.003, None)})  # fmt: skip
    after = side({"ttft_p95": (0.44, None), "request_throughput": (94.0, None), "error_rate": (0.011, None),
                  "itl_p50": (0.0039, None)})  # fmt: skip
    res = judge(before, after, symptom="ttft_p95")
    t, q, e, i = (res.get(k) for k in ("ttft_p95", "request_throughput", "error_rate", "itl_p50"))
    assert (t.band, t.band_from, t.status) == (pytest.approx(0.05), "relative", "improved")
    assert (q.band, q.band_from, q.status) == (pytest.approx(5.0), "relative", "regressed")
    assert (e.band, e.band_from, e.status) == (pytest.approx(0.01), "floor", "regressed")
    assert (i.band, i.band_from, i.status) == (pytest.approx(0.001), "floor", "within noise")
    assert res.overall == "mixed" and [r.metric for r in res.regressed] == [
        "request_throughput",
        "error_rate",
    ]
    assert "requests" in res.headline() and "error rate" in res.headline()
    assert not any("noise was estimated" in n for n in res.notes)  # "order statistics" on both sides
    before.noise = after.noise = "not estimated (no per-request records)"
    assert "neither side's noise was estimated" in " ".join(judge(before, after).notes)


def test_one_sides_error_stands_for_both_and_a_bench_throughput_has_its_counting_step():
    before = side({"ttft_p50": (1.0, 0.05)})
    res = judge(before, side({"ttft_p50": (1.0, None)}), symptom="ttft_p50")
    assert res.get("ttft_p50").band == pytest.approx(K * 0.05 * math.sqrt(2))
    # 2 requests over a 10 s run move req/s by 0.2: wider than 5 % of 2 req/s (0.1)
    b = Side("bench", "b", {"request_throughput": Measure(2.0, None, 0.2), "ttft_p50": Measure(1.0)})
    a = Side("bench", "a", {"request_throughput": Measure(1.85, None, 0.2), "ttft_p50": Measure(1.0)})
    row = judge(b, a, symptom="ttft_p50").get("request_throughput")
    assert (row.band, row.band_from, row.status) == (pytest.approx(0.2), "resolution", "within noise")


def test_a_p99_needs_a_thousand_requests_a_side():
    res = judge(
        side({"ttft_p99": (5.0, None)}, requests=999), side({"ttft_p99": (1.0, None)}), symptom="ttft_p99"
    )
    row = res.get("ttft_p99")
    assert row.status == "no data" and "1,000" in row.why and res.overall == "unusable" and res.exit_code == 2


def test_verdicts_mixed_accepted_regressed_unusable():
    before = side({"ttft_p95": (4.0, 0.1), "itl_p95": (0.09, 0.002)})
    after = side({"ttft_p95": (1.3, 0.1), "itl_p95": (0.15, 0.002)})
    traded = judge(before, after, symptom="ttft_p95")
    assert traded.overall == "mixed" and traded.exit_code == 1
    assert [r.metric for r in traded.regressed] == ["itl_p95"]
    accepted = judge(before, after, symptom="ttft_p95", accept=["itl_p95"])
    assert accepted.overall == "worked" and accepted.exit_code == 0
    assert "accepted as the fix's cost: ITL p95 +67 %" in accepted.headline()
    worse = judge(after, before, symptom="ttft_p95")
    assert worse.overall == "regressed" and worse.exit_code == 1
    missing = judge(side({"ttft_p95": (None, None)}), after, symptom="ttft_p95")
    assert missing.overall == "unusable" and missing.get("ttft_p95").why == "no value before"
    with pytest.raises(ConfigError, match="ttft_p42: not a compared metric"):
        judge(before, after, symptom="ttft_p42")
    refused = judge(before, after, symptom="ttft_p95")
    refused.reasons.append("not the same test: load.rate is 10 before and 20 after")
    assert refused.overall == "unusable" and refused.exit_code == 2 and "load.rate" in refused.headline()


def test_throughput_of_windows_is_load_and_kv_usage_is_context():
    def windows(tok: float, kv: float) -> Side:
        return side({"ttft_p95": (1.0, 0.01), "output_throughput": (tok, 1.0), "kv_cache_usage": (kv, 0.01)},
                    kind="window")  # fmt: skip

    res = judge(windows(1000.0, 0.2), windows(700.0, 0.6), symptom="ttft_p95")
    tok, kv = res.get("output_throughput"), res.get("kv_cache_usage")
    assert tok.status == "regressed" and not tok.counted and "load" in tok.why
    assert kv.status == "regressed" and not kv.counted
    assert res.overall == "within-noise"  # nothing that counts moved
    assert any(n.startswith("the load differs: output tokens") for n in res.notes)


def test_auto_symptom_is_what_worsened_most_against_the_own_baseline_else_what_moved_most():
    base = {"ttft_p95": 0.8, "itl_p95": 0.09, "ttft_p50": 0.2}
    before = side({"ttft_p95": (4.0, 0.1), "itl_p95": (0.1, 0.002), "ttft_p50": (0.21, 0.01)}, baseline=base)
    after = side({"ttft_p95": (1.3, 0.1), "itl_p95": (0.1, 0.002), "ttft_p50": (0.21, 0.01)})
    res = judge(before, after)
    assert res.symptom == "ttft_p95" and "5.00x" in res.symptom_why
    before.baseline = {}
    res = judge(before, after)
    assert res.symptom == "ttft_p95" and "moved most" in res.symptom_why


# -- the sides --------------------------------------------------------------------------------------

T0 = datetime(2026, 11, 12, 1, 0, tzinfo=UTC)


def _store(rates: list[float]) -> LocalEngine:
    """Scraped every 15 s for 20 minutes: vllm:generation_tokens_total at 1,000 tok/s in the first
    ten, then ten one-minute blocks at ``rates``; a TTFT histogram (buckets 0.1, 0.5, 1 s) that gets
    10 observations an interval: at 2 s before the window, then in (0, 0.1] in blocks 0-8 of the
    window and in (0.5, 1] in its block 9."""
    tokens, value = ["# TYPE vllm:generation_tokens counter"], 0.0
    ttft, cum = ["# TYPE vllm:time_to_first_token_seconds histogram"], [0.0, 0.0, 0.0, 0.0]
    for k in range(81):
        at = f"{(T0 + timedelta(seconds=15 * k)).timestamp():.0f}"
        if k:
            value += 15 * (1000.0 if k <= 40 else rates[(k - 41) // 4])
            bucket = 3 if k <= 40 else (0 if k <= 76 else 2)
            cum = [c + (10.0 if i >= bucket else 0.0) for i, c in enumerate(cum)]
        tokens.append(f'vllm:generation_tokens_total{{model_name="m"}} {value!r} {at}')
        for le, c in zip(("0.1", "0.5", "1", "+Inf"), cum, strict=True):
            ttft.append(f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="{le}"}} {c!r} {at}')
        ttft.append(f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {cum[-1]!r} {at}')
        ttft.append(f'vllm:time_to_first_token_seconds_sum{{model_name="m"}} 0.0 {at}')
    text = "\n".join([*tokens, *ttft]) + "\n# EOF\n"
    return LocalEngine(parse_text(text, require_eof=True))


def test_batch_means_use_the_windows_own_minutes():
    rates = [100.0, 110.0] * 5
    window = Window(T0 + timedelta(minutes=10), T0 + timedelta(minutes=20))
    s = window_side(_store(rates), window, "synthetic")
    m = s.values["output_throughput"]
    assert m.value == pytest.approx(105.0, rel=0.01)
    # ten blocks of a minute, each its own rate: stdev(100, 110, ...) / sqrt(10); the 1,000 tok/s
    # before the window stays out (one block shifted back would make the deviation ~280)
    assert m.se == pytest.approx(statistics.stdev(rates) / math.sqrt(10), rel=1e-6)
    assert s.noise == "10 blocks of 1 min (batch means, block jackknife)"
    assert s.values["itl_p95"].value is None and s.values["itl_p95"].se is None  # no ITL histogram


def test_a_quantiles_error_is_the_block_jackknife_of_the_pooled_histogram():
    # Pooled: 360 observations in (0, 0.1], 40 in (0.5, 1]: p95 rank 380 -> 0.5 + 0.5 x 20/40 = 0.75.
    # Without one of blocks 0-8 (320 and 40): rank 342 -> 0.5 + 0.5 x 22/40 = 0.775;
    # without block 9 (360 in the first bucket): rank 342 -> 0.1 x 342/360 = 0.095.
    # mean 0.707; se^2 = 9/10 x (9 x 0.068^2 + 0.612^2) = 0.374544: se = 0.612. (The blocks' own
    # p95s, 0.095 x 9 and 0.975, would give stdev/sqrt(10) = 0.088: the block that holds the whole
    # tail would look like noise of 88 ms.)
    window = Window(T0 + timedelta(minutes=10), T0 + timedelta(minutes=20))
    m = window_side(_store([100.0] * 10), window, "synthetic").values["ttft_p95"]
    assert m.value == pytest.approx(0.75) and m.se == pytest.approx(0.612, rel=1e-6)


def test_a_window_too_short_for_three_blocks_has_no_noise_estimate():
    s = window_side(
        _store([100.0] * 10), Window(T0 + timedelta(minutes=10), T0 + timedelta(seconds=750)), "w"
    )
    assert s.values["output_throughput"].se is None and s.noise == "not estimated"
    assert any("too short" in n for n in s.notes)


def test_order_statistics_give_a_quantiles_standard_error():
    # exponential(1): the p-quantile's asymptotic standard error is sqrt(p (1 - p) / n) / f(x_p), f = 1 - p
    rng = np.random.default_rng(7)
    n = 20_000
    ttft = rng.exponential(1.0, n)
    doc = {"completed": n, "failed": 0, "duration": 100.0, "percentiles": {"ttft_ms": {"95": 2995.7}}}
    s = bench_side(doc, "r.json", {"ttft": ttft})
    truth = math.sqrt(0.95 * 0.05 / n) / 0.05
    assert s.values["ttft_p95"].se == pytest.approx(truth, rel=0.15)
    assert s.values["ttft_p95"].value == pytest.approx(2.9957)
    assert s.noise == "order statistics of 20,000 requests"
    # throughput's counting step: 2 requests over the 100 s run
    assert s.values["request_throughput"].resolution == pytest.approx(0.02)


def test_a_bench_result_without_records_or_percentiles_falls_back_to_its_summary():
    doc = {"completed": 200, "failed": 5, "duration": 20.0, "median_ttft_ms": 50.0, "p99_ttft_ms": 90.0,
           "request_throughput": 10.0, "output_throughput": 200.0, "total_output_tokens": 4000,
           "validity": {"valid": False, "reasons": ["calibration failed"]},
           "server": {"preemptions": 4.0, "kv_cache_usage": {"mean": 0.4, "max": 0.7}}}  # fmt: skip
    s = bench_side(doc, "old.json")
    assert s.values["ttft_p50"].value == pytest.approx(0.05) and s.values["ttft_p99"].value == pytest.approx(
        0.09
    )
    assert s.values["ttft_p50"].se is None and "no per-request records" in s.notes[0]
    assert "marked invalid (calibration failed)" in s.notes[1]
    assert s.values["error_rate"].value == pytest.approx(5 / 205)
    assert s.values["error_rate"].se == pytest.approx(math.sqrt((5 / 205) * (200 / 205) / 205))
    assert s.values["preemptions_per_s"].value == pytest.approx(0.2)
    # 20 tokens a request: one request at each edge moves output tok/s by 2 x 20 / 20 s
    assert s.values["output_throughput"].resolution == pytest.approx(2.0)


# -- the embedded incidents and their after-fix bundles -----------------------------------------------


def _window(bundle: str, *, start: str = "", end: str = "", baseline: bool = False) -> Side:
    ctx = open_incident(str(SCENARIOS / bundle), start=start, end=end)
    assert ctx.error is None, ctx.error
    inc = ctx.incident
    return window_side(ctx.engine, inc.window, bundle, baseline=inc.baseline if baseline else None)


@pytest.fixture(scope="module")
def regression():
    return _window("release-regression", baseline=True)


@pytest.fixture(scope="module")
def rolled_back():
    return _window("release-regression-rolled-back")


def test_the_rollback_worked(regression, rolled_back):
    res = judge(regression, rolled_back)
    # the symptom named from the incident's own baseline: token latency (the decode step got slower)
    assert res.symptom in ("itl_p50", "itl_p95") and "own baseline" in res.symptom_why
    assert res.overall == "worked" and res.exit_code == 0, res.headline()
    for key in ("itl_p50", "itl_p95", "e2e_p95"):
        row = res.get(key)
        assert row.status == "improved" and row.change_pct < -30, row
    assert res.get("tpot_p50").status == "no data"  # vLLM 0.8.5 exports no per-request TPOT histogram
    assert regression.noise.startswith("10 blocks of")
    assert not any("noise was estimated" in n for n in res.notes)  # both sides' noise was estimated


def test_a_bundle_against_itself_is_within_noise(regression):
    res = judge(regression, regression)
    assert res.overall == "within-noise" and res.exit_code == 1
    assert all(r.status in ("within noise", "no data") for r in res.rows)
    assert "same window of the same evidence" in res.notes[-1]


def test_the_regression_direction_did_not_work(regression, rolled_back):
    res = judge(rolled_back, regression, symptom="itl_p50")
    assert res.overall == "regressed" and res.exit_code == 1
    assert {"itl_p50", "itl_p95", "e2e_p95"} <= {r.metric for r in res.regressed}


def test_two_ordinary_windows_of_a_healthy_service_are_within_noise():
    """A/A: the healthy control's baseline and incident windows (a deploy that changed nothing) must
    not read as a change: the bands are not narrower than the service's own variation."""
    base = _window("healthy-decoy-deploy", start="2026-11-26T15:02:00Z", end="2026-11-26T15:17:00Z")
    later = _window("healthy-decoy-deploy")
    res = judge(base, later, symptom="ttft_p95")
    moved = [f"{r.metric} {r.change_pct:+.0f}% (band {r.band:.3g})" for r in res.rows if r.counted and r.status != "within noise" and r.status != "no data"]  # fmt: skip
    assert moved == [] and res.overall == "within-noise"


def test_metric_keys_are_the_documented_ones():
    assert set(BY_KEY) >= {"ttft_p50", "ttft_p95", "ttft_p99", "tpot_p50", "tpot_p95", "itl_p50", "itl_p95",
                           "e2e_p95", "queue_p95", "request_throughput", "output_throughput", "error_rate",
                           "preemptions_per_s", "kv_cache_usage"}  # fmt: skip


def test_the_constants_are_the_gates():
    """The band reuses the release gate's terms (analyses may not import loadgen: checked here)."""
    from perfkit.analyses import compare
    from perfkit.loadgen import gate

    rules = {r.metric: r for r in gate.DEFAULT_RULES}
    assert rules["p99_ttft_ms"].k == compare.K and compare.P99_MIN_REQUESTS == gate.P99_MIN_REQUESTS
    for mine, theirs in (("ttft_p95", "median_ttft_ms"), ("itl_p50", "median_itl_ms"), ("tpot_p95", "median_tpot_ms"),
                         ("e2e_p95", "median_e2el_ms"), ("request_throughput", "request_throughput"),
                         ("output_throughput", "output_throughput"), ("error_rate", "errors.rate")):  # fmt: skip
        m, r = BY_KEY[mine], rules[theirs]
        scale = 1000.0 if m.unit == "s" else 1.0  # the gate's latencies are in ms
        assert (m.relative, m.floor * scale, m.direction) == (
            r.max_regression,
            pytest.approx(r.floor),
            r.direction,
        )


@pytest.mark.slow
def test_a_windows_standard_error_is_the_spread_of_other_seeds(tmp_path):
    """Calibration: one window's standard error against the spread of the same window over six
    seeds of a healthy service (15-minute runs, 7-minute windows). A missing sqrt(blocks), blocks
    shifted out of the window or the blocks' own p95s in place of the jackknife each leave the
    0.5-4x range (short windows read conservative: ~1-2.6x, see perfkit.analyses.compare)."""
    import dataclasses

    from perfkit.app.runner.embedded import specs
    from perfkit.lab.sim.bundle import compress

    spec, generate = specs()["healthy-decoy-deploy"]
    values: dict[str, list[float]] = {"ttft_p95": [], "e2e_p95": [], "output_throughput": []}
    errors: dict[str, list[float]] = {k: [] for k in values}
    for seed in range(1, 7):
        generate(compress(dataclasses.replace(spec(), seed=seed), 900), tmp_path / str(seed))
        ctx = open_incident(str(tmp_path / str(seed)))
        s = window_side(ctx.engine, ctx.incident.window, str(seed))
        for key in values:
            values[key].append(s.values[key].value)
            errors[key].append(s.values[key].se)
    for key in values:
        spread = statistics.stdev(values[key])
        rms = math.sqrt(statistics.fmean(e * e for e in errors[key]))
        assert 0.5 <= rms / spread <= 4.0, (key, rms, spread)


def test_a_quantile_in_the_first_bucket_is_only_judged_beyond_that_bucket():
    # Blocks 0-8 of the window put all their TTFTs in (0, 0.1]: 360 of 400 observations, so the
    # p50 (rank 200) lies in the first bucket: histogram_quantile's 0.1 x 200/360 = 0.056 says only
    # "at most 100 ms"; the p95 (in (0.5, 1]) is measured
    window = Window(T0 + timedelta(minutes=10), T0 + timedelta(minutes=20))
    s = window_side(_store([100.0] * 10), window, "synthetic")
    p50, p95 = s.values["ttft_p50"], s.values["ttft_p95"]
    assert p50.value == pytest.approx(0.1 * 200 / 360) and p50.bound == 0.1
    assert p95.bound is None
    assert any("TTFT p50 lies in its histogram's first bucket: at most 100 ms" in n for n in s.notes)

    def row(before, after):
        b, a = side({"ttft_p50": before[:2]}), side({"ttft_p50": after[:2]})
        b.values["ttft_p50"] = Measure(*before)
        a.values["ttft_p50"] = Measure(*after)
        return judge(b, a).get("ttft_p50")

    # both inside the bucket (56 ms -> 90 ms interpolated, far beyond their noise): no change is known
    r = row((0.056, 0.001, 0.0, 0.1), (0.09, 0.001, 0.0, 0.1))
    assert r.status == "within noise" and "first bucket" in r.why and r.change_pct is None
    assert (r.shown("before"), r.shown("after")) == ("≤ 100 ms", "≤ 100 ms")
    # before inside (at most 100 ms), after measured at 550 ms: at least +450 ms, a regression
    r = row((0.095, 0.001, 0.0, 0.1), (0.55, 0.001))
    assert r.status == "regressed" and r.shown("before") == "≤ 100 ms" and r.shown("after") == "550 ms"
    # before measured at 500 ms, after inside: at least 400 ms better against a 50 ms band (10 %)
    r = row((0.5, 0.0001), (0.05, 0.0001, 0.0, 0.1))
    assert r.status == "improved" and r.band == pytest.approx(0.05)
    # before inside, after measured at 130 ms: at least +30 ms against a band of 10 ms (10 % of the
    # bound; the interpolated 56 ms would have given 5.6 ms): a regression; at 105 ms (at least +5 ms),
    # within noise
    assert row((0.056, 0.0001, 0.0, 0.1), (0.13, 0.0001)).status == "regressed"
    assert row((0.056, 0.0001, 0.0, 0.1), (0.105, 0.0001)).status == "within noise"
