"""The gate's rules: comparability, direction, the noise band's terms, policies, the verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from bench_docs import bench_doc

from perfkit.errors import ConfigError
from perfkit.loadgen import store
from perfkit.loadgen.gate import Policy, gate, judge, metric_value

LATENCIES = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p99")]


def history(values: list[float], metric: str = "ttft", **kw: Any) -> list[dict[str, Any]]:
    """Baselines a day apart whose ``metric`` (the builder's argument) takes ``values``, oldest first."""
    return [
        {
            **bench_doc(started=f"2025-02-{day:02d}T10:00:00Z", **{metric: v}, **kw),
            "baseline": {"id": f"b{day}"},
        }
        for day, v in enumerate(values, start=1)
    ]


def row(verdict: Any, metric: str) -> Any:
    return next(r for r in verdict.rows if r.metric == metric)


def test_same_values_pass() -> None:
    v = judge(bench_doc(), history([50.0, 50.0, 50.0]))
    assert v.overall == "pass" and v.exit_code == 0
    assert {r.status for r in v.rows} == {"pass"}
    assert {r.metric for r in v.rows} == {
        *LATENCIES,
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "goodput.attainment",
        "errors.rate",
    }


def test_latency_up_is_bad_and_down_is_better() -> None:
    base = history([50.0, 50.0, 50.0])
    slow = judge(bench_doc(ttft=65.0), base)  # +30 %
    assert slow.overall == "regress" and slow.exit_code == 1
    assert {r.metric for r in slow.regressed} == {"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"}
    assert slow.rows[0].status == "regressed"  # regressed rows come first
    assert row(slow, "p99_ttft_ms").change_pct == pytest.approx(30.0)
    fast = judge(bench_doc(ttft=35.0), base)
    assert fast.overall == "pass"
    assert {r.metric for r in fast.improved} == {"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"}


def test_throughput_down_is_bad_and_up_is_better() -> None:
    base = history([10.0, 10.0, 10.0], metric="rps")
    low = judge(bench_doc(rps=8.0), base)  # -20 %
    assert {r.metric for r in low.regressed} == {
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
    }
    high = judge(bench_doc(rps=12.0), base)
    assert high.overall == "pass" and row(high, "request_throughput").status == "improved"


def test_attainment_down_is_bad() -> None:
    base = history([0.98, 0.98, 0.97], metric="attainment")
    assert row(judge(bench_doc(attainment=0.90), base), "goodput.attainment").status == "regressed"
    assert row(judge(bench_doc(attainment=0.97), base), "goodput.attainment").status == "pass"


def test_attainment_under_other_slos_is_not_compared() -> None:
    new = bench_doc(attainment=0.80)
    new["goodput"]["slo_ms"] = {"ttft": 200}  # a stricter SLO: a lower attainment is no regression
    v = judge(new, history([0.98, 0.98], metric="attainment"))
    assert row(v, "goodput.attainment").status == "no-data" and row(v, "goodput.attainment").n == 0
    assert "goodput.attainment: baseline b2 judged other SLOs; left out" in v.notes


def test_error_rate_up_by_more_than_a_point_is_bad() -> None:
    base = history([0, 0, 0], metric="failed")
    bad = judge(bench_doc(completed=1140, failed=60), base)  # 5 % of sent
    assert row(bad, "errors.rate").status == "regressed" and bad.overall == "regress"
    assert bad.headline().endswith("errors.rate 0 % -> 5 %")  # no relative change from zero
    few = judge(bench_doc(completed=1194, failed=6), base)  # 0.5 %: under the 1-point floor
    assert row(few, "errors.rate").status == "pass"
    assert row(few, "errors.rate").band_from == "floor"


def test_failures_are_said_first() -> None:
    v = judge(bench_doc(completed=1140, failed=60), history([50.0]))
    assert v.notes[0].startswith("the new result has 60 failed requests of 1200 sent (5.0%; timeout 60)")


def test_a_p99_of_few_requests_is_not_judged() -> None:
    """Without records nothing says how many requests are independent: a p99 needs 1,000 (compare's
    rule; above the 658 independent ones its 99.73 % order-statistic interval needs, ln(0.00135) /
    ln(0.99))."""
    base = history([50.0, 50.0, 50.0], completed=200)
    v = judge(bench_doc(ttft=58.0, completed=200), base)  # +16 %, on 200 requests: 2 beyond the p99
    p99 = row(v, "p99_ttft_ms")
    assert p99.status == "no-data" and p99.new == pytest.approx(58.0 * 1.3)
    assert p99.why == "too few requests for p99: n=200; without records a p99 needs 1,000"
    assert row(v, "median_ttft_ms").status == "regressed"  # the median rests on all 200
    assert any(
        n.startswith("not judged: p99_ttft_ms, p99_tpot_ms, p99_itl_ms, p99_e2el_ms: too few")
        for n in v.notes
    )
    enough = history([50.0, 50.0, 50.0], completed=1000)
    assert row(judge(bench_doc(ttft=58.0, completed=1000), enough), "p99_ttft_ms").status == "regressed"
    assert row(judge(bench_doc(ttft=58.0, completed=999), enough), "p99_ttft_ms").status == "no-data"
    strict = Policy.from_mapping({"metrics": {"p99_ttft_ms": {"min_requests": 5000}}})
    assert row(judge(bench_doc(ttft=58.0), history([50.0] * 3), strict), "p99_ttft_ms").status == "no-data"


def test_without_records_a_p99_needs_three_baselines_and_a_mean_uses_the_reported_deviation() -> None:
    one = judge(bench_doc(ttft=80.0), history([50.0]))
    p99 = row(one, "p99_ttft_ms")
    assert p99.status == "no-data" and p99.why.startswith("no records: the noise of a p99 is unknown")
    mean = row(one, "mean_ttft_ms")  # std 8 ms of 1,200 requests: 3 x sqrt(2) x 8 / sqrt(1200) = 0.98 ms
    assert mean.noise_from == "tool-reported, no records" and mean.within == pytest.approx(
        3 * 2**0.5 * 8 / 1200**0.5
    )
    assert mean.status == "regressed" and mean.band_from == "relative"
    three = judge(bench_doc(ttft=80.0), history([50.0, 50.5, 49.5]))
    assert (
        row(three, "p99_ttft_ms").status == "regressed"
        and row(three, "p99_ttft_ms").noise_from == "history only"
    )
    assert any(n.startswith("no per-request records with the result") for n in three.notes)


def test_the_spread_term_absorbs_noise_a_tight_history_flags() -> None:
    tight = history([50.0, 50.2, 49.9, 50.1, 50.0])
    noisy = history([40.0, 60.0, 45.0, 55.0, 50.0])  # median 50, MAD 5: band 3 x 1.4826 x 5 = 22.2 ms
    new = bench_doc(ttft=58.0)  # +16 %
    flagged = row(judge(new, tight), "median_ttft_ms")
    assert flagged.status == "regressed" and flagged.band_from == "relative"
    assert flagged.band == pytest.approx(5.0)
    absorbed = row(judge(new, noisy), "median_ttft_ms")
    assert (
        absorbed.status == "pass" and absorbed.band_from == "noise" and absorbed.noise_from == "history only"
    )
    assert absorbed.spread == pytest.approx(1.4826 * 5.0)
    assert absorbed.band == pytest.approx(3 * 1.4826 * 5.0)
    # the band is robust: one wild run does not widen it
    outlier = history([50.0, 50.2, 49.9, 50.1, 400.0])
    assert row(judge(new, outlier), "median_ttft_ms").status == "regressed"


def test_the_measured_noise_is_shown_beside_a_band_the_policy_set() -> None:
    """The expert's case: a 5 ms band from the 10 % policy over a history whose spread is a fraction
    of a millisecond; the row carries both, so a reader sees the policy, not the noise, set the band."""
    tight = judge(bench_doc(ttft=51.0), history([50.0, 50.1, 49.9, 50.0, 50.05]))
    median = row(tight, "median_ttft_ms")
    assert median.band_from == "relative" and median.band == pytest.approx(5.0)
    assert median.noise == pytest.approx(3 * median.spread) and median.noise < median.band / 10


def test_a_pass_says_what_it_did_not_judge() -> None:
    base = history([50.0, 50.0, 50.0], completed=200)
    off = Policy.from_mapping({"metrics": {"errors.rate": {"enabled": False}}}, source="strict.yaml")
    v = judge(bench_doc(completed=200), base, off)
    assert v.overall == "pass"
    assert v.unjudged == ["p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "errors.rate"]
    assert v.headline().endswith(
        "; 5 not judged: p99_ttft_ms, p99_tpot_ms, p99_itl_ms, p99_e2el_ms, errors.rate"
    )
    assert "not judged: errors.rate: turned off by the policy (strict.yaml)" in v.notes
    assert all(r.metric != "errors.rate" for r in v.rows)
    assert "not judged" not in judge(bench_doc(), history([50.0, 50.0, 50.0])).headline()


def test_a_single_baseline_gets_the_relative_band() -> None:
    base = history([100.0])
    assert row(judge(bench_doc(ttft=105.0), base), "median_ttft_ms").status == "pass"
    assert row(judge(bench_doc(ttft=120.0), base), "median_ttft_ms").status == "regressed"


def test_the_floor_keeps_tiny_latencies_from_flagging_jitter() -> None:
    base = history([0.4, 0.4, 0.4], metric="itl")
    jitter = row(judge(bench_doc(itl=0.9), base), "median_itl_ms")  # +125 %, but only 0.5 ms
    assert jitter.status == "pass" and jitter.band_from == "floor" and jitter.band == 1.0
    real = row(judge(bench_doc(itl=1.6), base), "median_itl_ms")
    assert real.status == "regressed"


def test_the_counting_resolution_of_a_short_run() -> None:
    # 10 s at 2 req/s: one request at each edge of the window is 0.2 req/s, 10 %
    short = dict(duration=10.0, completed=20, judged=20)
    base = history([2.0, 2.0, 2.0], metric="rps", **short)
    r = row(judge(bench_doc(rps=1.85, **short), base), "request_throughput")  # -7.5 %
    assert r.status == "pass" and r.band_from == "resolution" and r.band == pytest.approx(0.2)
    long = dict(duration=300.0, completed=600)
    base = history([2.0, 2.0, 2.0], metric="rps", **long)
    assert row(judge(bench_doc(rps=1.85, **long), base), "request_throughput").status == "regressed"


def test_only_the_newest_n_comparable_baselines() -> None:
    older = history([100.0, 100.0, 100.0, 100.0])  # days 1-4: slow
    newer = [
        {**bench_doc(ttft=50.0, started=f"2025-02-{d}T10:00:00Z"), "baseline": {"id": f"n{d}"}}
        for d in (10, 11, 12)
    ]
    v = judge(bench_doc(ttft=62.0), older + newer, Policy(history=3))
    assert [h["id"] for h in v.history] == ["n12", "n11", "n10"]
    assert row(v, "median_ttft_ms").median == 50.0 and v.overall == "regress"
    assert judge(bench_doc(ttft=62.0), older + newer, Policy(history=7)).overall == "pass"  # median 100


@pytest.mark.parametrize(
    "change, expected",
    [
        (dict(model="qwen"), "model (baselines llama, this run qwen)"),
        (dict(concurrency=16), "load.concurrency (baselines 8, this run 16)"),
        (
            dict(shape="rate", concurrency=None, rate=5.0),
            "load.shape (baselines concurrency, this run rate); load.concurrency (baselines 8, this run none); "
            "load.rate (baselines none, this run 5.0)",
        ),
        (dict(labels={"hardware": "a100"}), "hardware (baselines h200, this run a100)"),
        (dict(labels={}), "hardware (baselines h200, this run none)"),
    ],
)
def test_no_comparable_history_is_unusable_and_says_what_differs(change: dict, expected: str) -> None:
    base = history([50.0, 50.0], labels={"hardware": "h200"})
    v = judge(bench_doc(**{"labels": {"hardware": "h200"}, **change}), base)
    assert v.overall == "unusable" and v.exit_code == 2 and not v.rows
    assert v.reasons[0].startswith(
        "no comparable baseline among 2: the nearest, b2 (like 1 other), differs in "
    )
    assert expected in v.reasons[0]


def test_the_hardware_label_given_to_the_gate_counts() -> None:
    base = history([50.0], labels={"hardware": "h200"})
    assert judge(bench_doc(), base).overall == "unusable"
    assert judge(bench_doc(), base, labels={"hardware": "h200"}).overall == "pass"


def test_replays_of_different_traces_are_not_comparable() -> None:
    def replay(source: str) -> dict[str, Any]:
        doc = bench_doc(shape="replay", concurrency=None)
        doc["load"]["replay"] = {"source": source, "requests": 500, "time_scale": 1.0}
        return doc

    base = [{**replay("logs/monday.jsonl"), "baseline": {"id": "b1"}}]
    assert judge(replay("other/dir/monday.jsonl"), base).overall == "pass"  # the file name counts
    v = judge(replay("logs/tuesday.jsonl"), base)
    assert v.overall == "unusable" and "load.replay.source (baselines monday.jsonl" in v.reasons[0]


def test_min_history() -> None:
    v = judge(bench_doc(), history([50.0, 50.0]), Policy(history=5, min_history=3))
    assert v.overall == "unusable" and v.reasons == [
        "2 comparable baselines, the policy needs 3 (min_history)"
    ]


def test_an_empty_history_is_unusable() -> None:
    v = judge(bench_doc(), [])
    assert v.overall == "unusable" and "perfkit baseline add" in v.reasons[0]


def test_an_invalid_run_is_unusable_unless_allowed() -> None:
    new = bench_doc(valid=False, ttft=80.0)
    v = judge(new, history([50.0]))
    assert v.overall == "unusable" and "marked invalid (client overhead 14 % of ITL)" in v.reasons[0]
    allowed = judge(new, history([50.0]), allow_invalid=True)
    assert allowed.overall == "regress"
    assert any("judged although the run is marked invalid" in n for n in allowed.notes)


def test_the_result_is_left_out_of_its_own_history() -> None:
    new = bench_doc(ttft=80.0)
    v = judge(new, [{**new, "baseline": {"id": "self"}}, *history([50.0])])
    assert [h["id"] for h in v.history] == ["b1"] and v.overall == "regress"
    assert any("baseline self" in n for n in v.notes)


def test_a_baseline_with_a_non_number_is_left_out_of_that_metric() -> None:
    broken = history([50.0])[0]
    broken["goodput"]["attainment"] = "high"
    v = judge(bench_doc(), [broken, *history([50.0, 50.0])])
    assert row(v, "goodput.attainment").n == 2
    assert any("goodput.attainment is 'high'" in w for w in v.warnings)


def test_metric_value_paths() -> None:
    doc = bench_doc()
    doc["percentiles"] = {"ttft_ms": {"99.9": 71.5, "50": 50.0}}
    assert metric_value(doc, "percentiles.ttft_ms.99.9") == 71.5
    assert metric_value(doc, "goodput.attainment") == 0.98
    assert metric_value(doc, "no.such.field") is None
    del doc["errors"]["rate"]
    doc.update(completed=90, failed=10)
    assert metric_value(doc, "errors.rate") == pytest.approx(0.1)


# ---- policies -------------------------------------------------------------------------------


def write_policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_policy_overrides(tmp_path: Path) -> None:
    policy = Policy.from_file(
        write_policy(
            tmp_path,
            "history: 3\nk: 4\nmetrics:\n"
            "  p99_ttft_ms: {max_regression: 50%}\n"
            "  median_ttft_ms: {max_regression: 0.4, floor: 3}\n"
            "  errors.rate: {enabled: false}\n"
            "  max_output_tokens_per_s: {direction: higher_is_better, max_regression: 0.05}\n",
        )
    )
    assert policy.history == 3
    base = history([50.0, 50.0, 50.0], max_output_tokens_per_s=900.0)
    v = judge(bench_doc(ttft=65.0, max_output_tokens_per_s=700.0), base, policy)  # TTFT +30 %
    assert row(v, "p99_ttft_ms").status == "pass" and row(v, "median_ttft_ms").status == "pass"
    assert row(v, "mean_ttft_ms").status == "regressed"
    assert row(v, "max_output_tokens_per_s").status == "regressed"
    assert "errors.rate" not in {r.metric for r in v.rows}
    assert policy.as_dict()["metrics"]["request_throughput"]["k"] == 4


def test_history_override_cannot_go_below_min_history() -> None:
    with pytest.raises(ConfigError, match="--history 2: fewer than the policy's min_history"):
        Policy(min_history=3).with_history(2)


@pytest.mark.parametrize(
    "text, message",
    [
        ("histroy: 3\n", "policy.yaml: histroy: unknown key"),
        ("history: 0\n", "policy.yaml: history: expected a whole number from 1 to 1000"),
        ("history: 2\nmin_history: 3\n", "policy.yaml: min_history: 3 is more than history"),
        ("metrics: [p99_ttft_ms]\n", "policy.yaml: metrics: expected a mapping"),
        (
            "metrics:\n  p99_ttft_ms: {max_regresion: 0.2}\n",
            "policy.yaml: metrics.p99_ttft_ms.max_regresion: unknown key",
        ),
        (
            "metrics:\n  p99_ttft_ms: {max_regression: lots}\n",
            "policy.yaml: metrics.p99_ttft_ms.max_regression: expected a number",
        ),
        (
            "metrics:\n  p99_ttft_ms: {max_regression: 'x%'}\n",
            "metrics.p99_ttft_ms.max_regression: expected a fraction",
        ),
        (
            "metrics:\n  p99_ttft_ms: {floor: -1}\n",
            "policy.yaml: metrics.p99_ttft_ms.floor: expected a number from 0",
        ),
        ("metrics:\n  p99_ttft_ms: {k: .nan}\n", "policy.yaml: metrics.p99_ttft_ms.k: expected a number"),
        (
            "metrics:\n  p99_ttft_ms: {min_requests: 1.5}\n",
            "metrics.p99_ttft_ms.min_requests: expected a whole",
        ),
        (
            "metrics:\n  p99_ttft_ms: {enabled: 'no'}\n",
            "policy.yaml: metrics.p99_ttft_ms.enabled: expected true or false",
        ),
        (
            "metrics:\n  p99_ttft_ms: {direction: up}\n",
            "policy.yaml: metrics.p99_ttft_ms.direction: expected lower_is_better",
        ),
        (
            "metrics:\n  my_metric: {floor: 1}\n",
            "policy.yaml: metrics.my_metric: not gated by default; give its direction",
        ),
        ("metrics:\n  ../x: {direction: lower_is_better}\n", "policy.yaml: metrics.../x: not a metric name"),
        ("metrics:\n  p99_ttft_ms: 0.2\n", "policy.yaml: metrics.p99_ttft_ms: expected a mapping"),
        ("- 1\n", "policy.yaml: expected a mapping"),
        ("metrics: {p99_ttft_ms: [\n", "policy.yaml:2: invalid YAML"),
    ],
)
def test_bad_policy_files_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Policy.from_file(write_policy(tmp_path, text))


def test_a_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such policy file"):
        Policy.from_file(tmp_path / "nope.yaml")


# ---- the verdict ----------------------------------------------------------------------------


def test_verdict_json(tmp_path: Path) -> None:
    runs, st = tmp_path / "runs", tmp_path / "store"
    runs.mkdir()
    for day, ttft in ((1, 50.0), (2, 51.0), (3, 49.0)):
        path = runs / f"b{day}.json"
        path.write_text(json.dumps(bench_doc(ttft=ttft, started=f"2025-02-0{day}T10:00:00Z")))
        store.add(path, st, {"version": f"1.{day}"})
    new = runs / "new.json"
    new.write_text(json.dumps(bench_doc(ttft=70.0, labels={"version": "1.4"})))
    doc = json.loads(json.dumps(gate(new, st).as_dict(), allow_nan=False))
    assert doc["schema"] == "perfkit.gate/1"
    assert set(doc) == {
        *("schema", "verdict", "exit_code", "summary", "regressed", "improved", "reasons", "notes"),
        *("warnings", "skipped", "result", "history", "policy", "metrics"),
    }
    assert doc["skipped"] == []  # every stored file was read
    assert doc["verdict"] == "regress" and doc["exit_code"] == 1
    assert doc["regressed"] == ["mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"]
    assert doc["summary"].startswith("REGRESSION in 3 metrics against 3 baselines: mean_ttft_ms +40.0 %")
    assert doc["result"]["file"] == "new.json" and doc["result"]["labels"] == {"version": "1.4"}
    assert [h["labels"]["version"] for h in doc["history"]] == ["1.3", "1.2", "1.1"]
    first = doc["metrics"][0]
    assert first["metric"] == "mean_ttft_ms" and first["status"] == "regressed"
    assert first["median"] == 50.0 and first["new"] == 70.0 and first["n"] == 3
    assert first["spread"] == pytest.approx(1.4826)
    assert first["band"] == pytest.approx(5.0) and first["band_from"] == "relative"  # 10 % > 3 x 1.48
    assert first["limit"] == pytest.approx(55.0)
    assert doc["policy"]["metrics"]["errors.rate"] == {
        "direction": "lower_is_better",
        "max_regression": 0.0,
        "floor": 0.01,
        "k": 3.0,
        "enabled": True,
        "min_requests": 0,
    }


def test_gate_skips_a_corrupt_store_file(tmp_path: Path) -> None:
    runs, st = tmp_path / "runs", tmp_path / "store"
    runs.mkdir()
    (runs / "b.json").write_text(json.dumps(bench_doc()))
    store.add(runs / "b.json", st)
    (st / "baselines" / "20250101T000000Z-llama-0000000a.json").write_text("{not json")
    seen: list[str] = []
    v = gate(runs / "b.json", st, warn=seen.append)  # the run itself: left out, nothing else
    assert v.overall == "unusable"
    assert len(seen) == 1 and "0000000a.json:1: invalid JSON" in seen[0] and seen == v.warnings
