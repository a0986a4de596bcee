"""The request rate and the release correlation's watched series on an engine without an E2E histogram
(Triton's TensorRT-LLM backend: cumulative microsecond counters and a success counter only), and the
same analyses on vLLM, unchanged (issue 35)."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from vllm_store import BASELINE, INCIDENT, build, scenario

from perfkit.analyses.baseline import compare
from perfkit.analyses.release import WATCHED, correlate, watched_series
from perfkit.core.frames import EVENTS_SCHEMA, Window
from perfkit.engine import signals as S

REL = 1e-9
T = 'model="tensorrt_llm",version="1"'


def triton():
    """4 successes per 15 s on both sides; each took 1 s end to end in the baseline, 3 s in the incident
    (Triton counts microseconds); the executor held 2 then 12 requests, 1 then 4 scheduled."""
    return build(
        {},
        counters={
            f"nv_inference_request_success{{{T}}}": {"baseline": 4.0, "incident": 4.0},
            f"nv_inference_request_duration_us{{{T}}}": {"baseline": 4e6, "incident": 12e6},
            f"nv_inference_queue_duration_us{{{T}}}": {"baseline": 180.0, "incident": 180.0},
        },
        gauges={
            f'nv_trt_llm_request_metrics{{{T},request_type="scheduled"}}': {"baseline": 1.0, "incident": 4.0},
            f'nv_trt_llm_request_metrics{{{T},request_type="active"}}': {"baseline": 2.0, "incident": 12.0},
            f'nv_trt_llm_request_metrics{{{T},request_type="waiting"}}': {"baseline": 1.0, "incident": 8.0},
        },
    )


def test_requests_per_second_from_the_success_counter():
    """No E2E histogram: requests/s is the success counter's rate (4 per 15 s), so the bundle reads as a
    serving workload; running is the scheduled batch, not every request held."""
    result = compare(triton(), INCIDENT, BASELINE, {})
    row = result.get("requests_per_s")
    assert (row.baseline, row.incident) == (pytest.approx(4 / 15, rel=REL), pytest.approx(4 / 15, rel=REL))
    assert "sum (rate(nv_inference_request_success[10m]))" in result.queries
    assert result.get("running_avg").baseline == pytest.approx(1.0, rel=REL)
    assert result.get("waiting_max").incident == 8.0


def test_the_vllm_request_rate_is_its_e2e_histograms_as_before():
    result = compare(scenario(), INCIDENT, BASELINE, {})
    assert "sum (rate(vllm:e2e_request_latency_seconds_count[10m]))" in result.queries
    assert not any("request_success_total[10m]))" in q and "finished_reason" not in q for q in result.queries)


def test_watched_series_of_an_engine_without_histograms():
    """Triton: the E2E mean (from its microsecond counters) and requests/s (its success counter) are
    watched; there is no quantile to watch."""
    span = Window(BASELINE.start, INCIDENT.end)
    queries: list[str] = []
    series = watched_series(triton(), span, 60.0, queries)
    assert set(series) == {"E2E mean", "requests/s"}
    mean = series["E2E mean"].filter(pl.col("ts") >= INCIDENT.start + timedelta(minutes=2))["value"]
    assert mean.min() == pytest.approx(3.0, rel=1e-6) and mean.max() == pytest.approx(3.0, rel=1e-6)
    assert series["requests/s"]["value"].max() == pytest.approx(4 / 15, rel=1e-6)
    # the mean shifts at the incident: release correlation has a series to look for shifts in
    got = correlate(triton(), INCIDENT, BASELINE, pl.DataFrame(schema=EVENTS_SCHEMA))
    assert got.missing == []
    assert any(s.series == "E2E mean" and s.rel_change > 1.0 for s in got.shifts)


def test_vllm_watches_what_it_watched_before():
    """vLLM has E2E quantiles: no "E2E mean" series, and requests/s from its E2E histogram."""
    span = Window(BASELINE.start, INCIDENT.end)
    queries: list[str] = []
    series = watched_series(scenario(), span, 60.0, queries)
    assert "E2E mean" not in series and "requests/s" in series
    assert queries.count("sum (rate(vllm:e2e_request_latency_seconds_count[1m]))") == 1
    assert [name for name, *_ in WATCHED if name in series] == [n for n in series]
    assert S.resolve(scenario(), "e2e").found
