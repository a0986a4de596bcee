"""The fix, predicted before it ships (issue 26 item 3): each confirmed direction's remedy replayed
on the engine calibrated to the incident, and the prediction held against what the embedded
after-fix bundles recorded (the chunked-prefill rerun of the seed's §5.3 case, the rollback of the
regressing release), which the prediction never saw."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.app.whatif.base import config_from_bundle
from perfkit.app.whatif.remedy import MIN_GAIN, VERDICTS, _verdict, candidates, predict, slo_rows

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def _predict(name: str, directions: list[str]):
    base = config_from_bundle(SCENARIOS / name)
    return predict(SCENARIOS / name, base.cfg, directions, slo_ms=base.slo_ms,
                   usd_per_gpu_hour=base.usd_per_gpu_hour)  # fmt: skip


def _observed(name: str, signal: str, q: float) -> float:
    """The after-fix bundle's own number, read as every analysis reads it (ms)."""
    from perfkit.analyses.baseline import side_numbers
    from perfkit.engine.local import LocalEngine
    from perfkit.sources.bundle import load_bundle

    b = load_bundle(SCENARIOS / name)
    qs, _, _ = side_numbers(LocalEngine(b.store), b.incident.window, [])
    return qs[signal][q] * 1e3


@pytest.fixture(scope="module")
def demo():
    return _predict("p95-prefill-interference", ["prefill_decode_interference"])


@pytest.mark.slow
def test_chunked_prefill_is_predicted_to_halve_the_tail_at_the_same_throughput(demo):
    """Issue 26's done-when, and issue 36's: the row's setting (budget 2048, 512-token cap) halves the
    predicted TTFT p95 at the same throughput, but its ITL p95 breaks the 100 ms SLO that held in the
    incident: it trades off, and the search of its own knob recommends a setting that breaks none."""
    first = demo.tried[0]
    assert first["set"]["long_prefill_token_threshold"] == 512 and not first.get("searched")
    assert first["predicted"]["ttft_p95_ms"] <= 0.5 * demo.as_was["ttft_p95_ms"]
    assert first["predicted"]["output_throughput"] >= 0.95 * demo.as_was["output_throughput"]
    assert first["verdict"] == "trades off" and first["breaks"] == ["itl_p95"]
    rec = demo.recommended
    assert rec is not None and rec.get("searched") and rec["verdict"] == "helps"
    assert not [r for r in rec["slos"] if r["verdict"] == "newly_breaches"]
    assert rec["predicted"]["ttft_p95_ms"] <= 0.5 * demo.as_was["ttft_p95_ms"]
    assert rec["predicted"]["goodput"] > demo.as_was["goodput"]
    assert demo.trusted  # the replay as it was reproduces the incident within the tolerances
    text = demo.summary()
    assert rec["label"] in text and "newly breaches" in text and first["label"] in text


@pytest.mark.slow
def test_every_slo_is_judged_and_the_json_says_how(demo):
    """findings.predicted_fix.data.slos[]: one row per SLO of the incident, ITL and E2E included."""
    doc = demo.as_dict()
    assert doc["recommended"] == demo.recommended["label"]
    rows = {r["metric"]: r for r in doc["slos"]}
    assert set(rows) == {"ttft_p95", "tpot_p95", "itl_p95", "e2e_p99"}
    for r in rows.values():
        assert {"observed", "predicted", "replay_error", "verdict"} <= set(r) and r["verdict"] in VERDICTS
    # E2E p99 was 37 s against 20 s before the incident: no chunk setting brings it under
    assert rows["e2e_p99"]["verdict"] == "still_breaches" and doc["meets_every_slo"] is False
    assert "No setting of the" in demo.summary()


@pytest.mark.slow
def test_the_prediction_matches_the_bundle_recorded_after_the_fix(demo):
    """p95-prefill-interference-chunked is the same traffic served with the row's setting: its TTFT p95
    against the predicted one, within the 25 % the issue holds a reproduction to, and its ITL p95
    (148 ms, over the 100 ms SLO) against the predicted one within the replay's own error on ITL."""
    first = demo.tried[0]
    after = _observed("p95-prefill-interference-chunked", "ttft", 0.95)
    assert first["predicted"]["ttft_p95_ms"] == pytest.approx(after, rel=0.25)
    itl = next(r for r in first["slos"] if r["metric"] == "itl_p95")
    after_itl = _observed("p95-prefill-interference-chunked", "itl", 0.95)
    assert after_itl > itl["slo_ms"] and itl["verdict"] == "newly_breaches"
    assert itl["predicted_ms"] == pytest.approx(after_itl, rel=abs(itl["replay_error"]) + 0.05)


def test_an_slo_row_says_unknown_where_the_replay_cannot_tell():
    seen = {
        "ttft_p95": {"label": "TTFT p95", "slo_ms": 1500.0, "observed_ms": 4000.0, "replay_error": 0.1},
        "itl_p95": {"label": "ITL p95", "slo_ms": 100.0, "observed_ms": 90.0, "replay_error": -0.4},
        "tpot_p95": {"label": "TPOT p95", "slo_ms": 80.0, "observed_ms": 70.0, "replay_error": 0.05},
        "e2e_p99": {"label": "E2E p99", "slo_ms": 20000.0, "observed_ms": 30000.0, "replay_error": 0.02},
    }
    got = {r["metric"]: r for r in slo_rows(seen, {"ttft_p95": 1600.0, "itl_p95": 200.0, "tpot_p95": 95.0, "e2e_p99": 25000.0})}  # fmt: skip
    assert got["ttft_p95"]["verdict"] == "unknown" and "within the replay's error" in got["ttft_p95"]["why"]
    assert got["itl_p95"]["verdict"] == "unknown" and "untrusted" in got["itl_p95"]["why"]
    assert got["tpot_p95"]["verdict"] == "newly_breaches"  # held at 70 ms, predicted 95 ms
    assert got["e2e_p99"]["verdict"] == "still_breaches"
    assert slo_rows(seen, {"ttft_p95": 1000.0})[0]["verdict"] == "meets"


@pytest.mark.slow
def test_the_rollback_is_predicted_from_the_baselines_engine():
    """release-regression's remedy is the previous release's speed (the baseline window's calibrated
    engine); release-regression-rolled-back recorded the service after the rollback."""
    pred = _predict("release-regression", ["release_regression"])
    (back,) = pred.tried
    assert back["engine"] == "baseline" and back["verdict"] == "helps"
    assert back["predicted"]["tpot_p50_ms"] < 0.7 * pred.as_was["tpot_p50_ms"]
    after = _observed("release-regression-rolled-back", "itl", 0.5)
    assert back["predicted"]["tpot_p50_ms"] == pytest.approx(after, rel=0.25)


def test_a_remedy_that_moves_nothing_is_said_not_to_help_and_the_next_is_tried():
    # a KV remedy on the demo, whose KV cache is 12 % full: more room changes nothing
    pred = _predict("p95-prefill-interference", ["kv_cache_allocation"])
    assert [t["verdict"] for t in pred.tried] == ["does not help", "does not help"]
    assert all(t["gain"] is not None and t["gain"] <= t["needed"] for t in pred.tried)


def test_the_verdict_needs_more_than_the_replays_own_error():
    assert _verdict(1000.0, 850.0, 0.2) == (pytest.approx(0.15), 0.2, "does not help")
    assert _verdict(1000.0, 700.0, 0.2)[2] == "helps"
    assert _verdict(1000.0, 950.0, None) == (pytest.approx(0.05), MIN_GAIN, "does not help")
    assert _verdict(None, 700.0, 0.0)[2] == "not measured"


def test_remedies_follow_the_engines_settings():
    from dataclasses import replace

    cfg = config_from_bundle(SCENARIOS / "p95-prefill-interference").cfg
    assert candidates("prefill_decode_interference", cfg, True)[0].changes["enable_chunked_prefill"] is True
    done = replace(
        cfg, enable_chunked_prefill=True, max_num_batched_tokens=2048, long_prefill_token_threshold=512
    )
    assert candidates("prefill_decode_interference", done, True) == []  # already the remedy: nothing to try
    assert candidates("release_regression", cfg, False) == []  # no baseline engine to go back to
    assert candidates("memory_oversubscription", cfg, True) == []  # a crash is not replayed


@pytest.mark.parametrize("engine", ["sglang", "trtllm", "tgi"])
def test_an_engine_without_a_per_request_cap_is_never_predicted_one(engine):
    """Only vLLM has --long-prefill-token-threshold: SGLang, trtllm-serve and TGI are replayed and
    searched over chunk budgets alone, so the setting predicted is one the engine can be given."""
    from perfkit.app.whatif.remedy import command, searched

    cfg = config_from_bundle(SCENARIOS / "p95-prefill-interference").cfg
    tried = candidates("prefill_decode_interference", cfg, True, engine)
    tried += searched("prefill_decode_interference", cfg, [], engine)
    assert len(tried) >= 4 and len({c.changes["max_num_batched_tokens"] for c in tried}) == len(tried)
    for cand in tried:
        assert "long_prefill_token_threshold" not in cand.changes and "cap per request" not in cand.label
        assert "no " not in command(cand.changes, engine)  # every setting has the engine's own flag
    vllm = searched("prefill_decode_interference", cfg, [], "vllm")
    assert all(c.changes["long_prefill_token_threshold"] > 0 for c in vllm)
    assert searched("prefill_decode_interference", cfg, [], None) == vllm  # unknown engine: vLLM's knobs


def test_an_engine_that_already_chunks_without_a_cap_is_offered_a_smaller_budget():
    """SGLang chunks prefills by default (--chunked-prefill-size): its remedy is a smaller chunk, and
    none where its chunk is already as small as the row's."""
    from dataclasses import replace

    cfg = config_from_bundle(SCENARIOS / "p95-prefill-interference").cfg
    big = replace(cfg, enable_chunked_prefill=True, max_num_batched_tokens=8192)
    (cand,) = candidates("prefill_decode_interference", big, True, "sglang")
    assert cand.changes == {"enable_chunked_prefill": True, "max_num_batched_tokens": 2048}
    small = replace(cfg, enable_chunked_prefill=True, max_num_batched_tokens=2048)
    assert candidates("prefill_decode_interference", small, True, "sglang") == []
    assert candidates("prefill_decode_interference", big, True, "vllm")[0].changes[
        "long_prefill_token_threshold"
    ]
