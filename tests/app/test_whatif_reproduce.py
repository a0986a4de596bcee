"""Reproduce before predicting (issue 26 item 1): the incident bundle's windows replayed as they
were, simulated beside observed, and a what-if that says when its replay cannot be trusted.

The observed numbers are the bundle's histograms read as every analysis reads them; what is
tested here is that the simulated side is read the same way (through the same buckets), that the
errors and the trust verdict follow from the rows, and that the reproduction answers to the engine
it replays (a faster engine gives faster simulated TPOT)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from perfkit.app.whatif.reproduce import TOLERANCE, _time_weighted, as_histogram, reproduce

DEMO = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "p95-prefill-interference"


def test_simulated_values_are_read_through_the_observed_buckets():
    """vLLM's queue-time histogram starts at 0.3 s: requests queued 10 ms read as 0.15 s at p50 (the
    interpolation inside the first bucket), so the simulated side must read the same, not 10 ms."""
    upper = np.array([0.3, 0.5, 0.8, math.inf])
    waits = np.full(1000, 0.010)
    assert as_histogram(waits, upper, 0.5) == pytest.approx(0.15)
    # past the first bucket: 90 % at 10 ms and 10 % at 0.6 s put p95 halfway into (0.5, 0.8]
    mixed = np.concatenate([np.full(900, 0.010), np.full(100, 0.6)])
    assert as_histogram(mixed, upper, 0.95) == pytest.approx(0.5 + 0.3 * 0.5)
    assert as_histogram(np.array([]), upper, 0.5) is None


def test_gauges_are_time_weighted_over_the_window():
    # 2 running from t=0 to 10 s, then 6 until 20 s, then idle (0) until 40 s: (20 + 60 + 0) / 40
    start = np.array([0.0, 10.0, 20.0])
    assert _time_weighted(start, np.array([2, 6, 0]), 40.0) == pytest.approx(2.0)
    assert _time_weighted(np.array([50.0]), np.array([9]), 40.0) == 0.0


@pytest.fixture(scope="module")
def demo_base():
    from perfkit.app.whatif.base import config_from_bundle

    return config_from_bundle(str(DEMO)).cfg


@pytest.fixture(scope="module")
def demo(demo_base):
    return reproduce(DEMO, demo_base, seed=0)


def test_both_windows_are_replayed_and_every_error_follows_from_its_row(demo):
    windows = {r["window"] for r in demo.rows}
    assert windows == {"incident", "baseline"}
    for r in demo.rows:
        if r["error"] is not None:
            assert r["error"] == pytest.approx(r["simulated"] / r["observed"] - 1)
    metrics = {r["metric"] for r in demo.rows}
    assert {"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "running_avg", "generated_tokens_per_s"} <= metrics


def test_the_trust_verdict_names_every_number_outside_its_tolerance(demo):
    incident = {r["metric"]: r for r in demo.rows if r["window"] == "incident"}
    outside = [m for m, tol in TOLERANCE.items() if abs(incident[m]["error"]) > tol]
    assert demo.trusted == (not outside)
    for m in outside:
        assert any(w.startswith(m) for w in demo.why)


def test_the_reproduction_answers_to_the_engine_it_replays(demo, demo_base):
    """Twice the tensor parallelism streams the weights from twice the HBM: simulated decode gets
    faster, and the observed side does not move."""
    from perfkit.lab.servesim.config import with_changes

    faster = reproduce(DEMO, with_changes(demo_base, {"tensor_parallel_size": 2 * demo_base.tensor_parallel_size}, "test"))  # fmt: skip
    key = ("baseline", "tpot_p50_ms")
    before = next(r for r in demo.rows if (r["window"], r["metric"]) == key)
    after = next(r for r in faster.rows if (r["window"], r["metric"]) == key)
    assert after["observed"] == before["observed"]
    assert after["simulated"] < before["simulated"]


def test_the_whatif_carries_the_reproduction_and_marks_untrusted_rows():
    from perfkit.app.whatif.replay import run_whatif

    doc = run_whatif(str(DEMO), ["enable_chunked_prefill=false,true"], minutes=2).as_dict()
    rep = doc["reproduction"]
    assert rep is not None and rep["rows"]
    if not rep["trusted"]:
        assert any(n.startswith("the replay of the incident as it was misses") for n in doc["notes"])
