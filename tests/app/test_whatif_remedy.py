"""The fix, predicted before it ships (issue 26 item 3): each confirmed direction's remedy replayed
on the engine calibrated to the incident, and the prediction held against what the embedded
after-fix bundles recorded (the chunked-prefill rerun of the seed's §5.3 case, the rollback of the
regressing release), which the prediction never saw."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.app.whatif.base import config_from_bundle
from perfkit.app.whatif.remedy import MIN_GAIN, _verdict, candidates, predict

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
    """Issue 26's done-when: with the recommended settings (budget 2048, 512-token cap) the predicted
    TTFT p95 is at most half the replay as it was, output throughput at least 0.95x."""
    (fix,) = demo.tried
    assert fix["verdict"] == "helps" and fix["set"]["long_prefill_token_threshold"] == 512
    assert fix["predicted"]["ttft_p95_ms"] <= 0.5 * demo.as_was["ttft_p95_ms"]
    assert fix["predicted"]["output_throughput"] >= 0.95 * demo.as_was["output_throughput"]
    assert fix["predicted"]["goodput"] > demo.as_was["goodput"]
    assert demo.trusted  # the replay as it was reproduces the incident within the tolerances
    assert "→" in demo.summary() and "helps" in demo.summary()


@pytest.mark.slow
def test_the_prediction_matches_the_bundle_recorded_after_the_fix(demo):
    """p95-prefill-interference-chunked is the same traffic served with the fix: its TTFT p95 against
    the predicted one, within the 25 % the issue holds a reproduction to."""
    (fix,) = demo.tried
    after = _observed("p95-prefill-interference-chunked", "ttft", 0.95)
    assert fix["predicted"]["ttft_p95_ms"] == pytest.approx(after, rel=0.25)


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
