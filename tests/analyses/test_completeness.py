"""completeness on a tiny store with a deliberate gap."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

from perfkit.analyses.completeness import completeness
from perfkit.core.frames import EVENTS_SCHEMA, Window, iso
from perfkit.engine.local import LocalEngine
from perfkit.sources.openmetrics import parse_text

B = 1_795_996_800  # a multiple of 15 s
T0 = B + 5  # scrapes at 5 s past each 15 s: phase 5 s
GAP = range(10, 17)  # scrapes 10..16 of the running gauge are lost


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def store() -> LocalEngine:
    lines = ["# TYPE vllm:time_to_first_token_seconds histogram"]
    for k in range(41):
        t = T0 + 15 * k
        lines += [
            f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="0.1"}} {k} {t}',
            f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="+Inf"}} {2 * k} {t}',
            f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {2 * k} {t}',
            f'vllm:time_to_first_token_seconds_sum{{model_name="m"}} {0.3 * k!r} {t}',
        ]
    lines.append("# TYPE vllm:num_requests_running gauge")
    lines += [
        f'vllm:num_requests_running{{model_name="m"}} 3 {T0 + 15 * k}' for k in range(41) if k not in GAP
    ]
    lines.append("# TYPE vllm:gpu_cache_usage_perc gauge")  # the pre-0.9 name of kv_cache_usage
    lines += [f'vllm:gpu_cache_usage_perc{{model_name="m"}} 0.5 {T0 + 15 * k}' for k in range(41)]
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))


def test_gap_interval_phase_and_coverage():
    result = completeness(store(), Window(at(T0), at(T0 + 600)))
    rows = {r.signal: r for r in result.rows}

    ttft = rows["ttft"]
    assert (ttft.metric, ttft.legacy, ttft.series, ttft.samples) == (
        "vllm:time_to_first_token_seconds",
        False,
        1,
        41,
    )
    assert ttft.scrape_s == 15.0 and ttft.phase_s == 5.0
    # holes: 0 (start -> first), 40 x 15, 0 (last -> end); each counted up to one interval: 600/600
    assert ttft.coverage_frac == pytest.approx(1.0) and ttft.gaps == []

    running = rows["running"]
    assert (running.series, running.samples) == (1, 41 - 7)
    assert running.scrape_s == 15.0 and running.phase_s == 5.0
    # scrape 9 (T0+135) is followed by scrape 17 (T0+255): a 120 s hole > 2.5 x 15 s
    assert running.gaps == [(iso(at(T0 + 135)), 120.0)]
    # covered: 32 holes of 15 s + the 120 s hole counted as one interval (15) = 495 of 600 s
    assert running.coverage_frac == pytest.approx(495 / 600)

    kv = rows["kv_cache_usage"]
    assert (kv.metric, kv.legacy, kv.samples) == ("vllm:gpu_cache_usage_perc", True, 41)

    assert result.sources == {"vLLM exporter": True, "DCGM exporter": False, "node exporter": False}
    assert result.verdict == "degraded"  # coverage below 90 % and sources missing
    assert result.missing == [
        "DCGM exporter: no series in the window",
        "node exporter: no series in the window",
        "itl: no vllm:inter_token_latency_seconds histogram",
        "tpot: no vllm:request_time_per_output_token_seconds histogram",
        "e2e: no vllm:e2e_request_latency_seconds histogram",
        "queue: no vllm:request_queue_time_seconds histogram",
        "prefill: no vllm:request_prefill_time_seconds histogram",
        "decode: no vllm:request_decode_time_seconds histogram",
        "prompt_tokens: no vllm:request_prompt_tokens histogram",
        "waiting: no vllm:num_requests_waiting series",
        "gpu_util: no DCGM_FI_DEV_GPU_UTIL series",
        "fb_used: no DCGM_FI_DEV_FB_USED series",
        "tensor_active: no DCGM_FI_PROF_PIPE_TENSOR_ACTIVE series",
    ]

    table = result.table()
    by_signal = {r["signal"]: r for r in table.iter_rows(named=True)}
    assert by_signal["running"]["coverage_pct"] == 82.5
    assert by_signal["running"]["gaps"] == 1 and by_signal["running"]["longest_gap_s"] == 120.0
    assert by_signal["kv_cache_usage"]["metric"] == "vllm:gpu_cache_usage_perc (older name)"
    assert by_signal["itl"]["metric"] == "—" and by_signal["itl"]["samples"] == 0
    assert result.as_dict()["gaps"] == {"running": [(iso(at(T0 + 135)), 120.0)]}


def test_a_window_opening_before_the_data_starts_with_a_gap():
    result = completeness(store(), Window(at(T0 - 100), at(T0 + 600)))
    ttft = next(r for r in result.rows if r.signal == "ttft")
    # the first hole (window start -> first scrape) is 100 s > 37.5 s
    assert ttft.gaps == [(iso(at(T0 - 100)), 100.0)]
    # covered: min(100, 15) + 40 x 15 + 0 = 615 of 700 s
    assert ttft.coverage_frac == pytest.approx(615 / 700)


def test_samples_outside_the_window_do_not_count_and_events_are_checked():
    events = pl.DataFrame(schema=EVENTS_SCHEMA)
    result = completeness(store(), Window(at(T0 + 10_000), at(T0 + 10_600)), events=events)
    ttft = next(r for r in result.rows if r.signal == "ttft")
    assert ttft.metric == "vllm:time_to_first_token_seconds" and ttft.samples == 0
    assert ttft.coverage_frac == 0.0
    assert "ttft: vllm:time_to_first_token_seconds has no samples in the window" in result.missing
    assert result.missing[-1] == "events: no deploy or alert events (release history unknown)"
    assert "no vLLM stats log lines" in result.skew_note and result.clock_skew_s is None


# -- restarts ----------------------------------------------------------------------------------------

R1, R2 = 10, 25  # scrape numbers: an in-place restart (counters reset), then a new pod (new instance)


def restart_store() -> LocalEngine:
    """A vLLM server scraped every 15 s for 40 scrapes (k = 0..40). At scrape 10 its container restarts
    in place (counters from zero, same labels); from scrape 27 it runs in a new pod (scrapes 25 and 26
    find nothing). A second replica, another pod, runs the whole time and never restarts."""

    def pod(k: int) -> str:
        return 'instance="10.0.0.1:8000",pod="chat-1"' if k < R2 else 'instance="10.0.0.9:8000",pod="chat-2"'

    other = 'instance="10.0.0.5:8000",pod="chat-7"'
    lines = ["# TYPE vllm:request_success counter"]
    for k in range(41):
        t = T0 + 15 * k
        if k in (R2, R2 + 1):
            continue
        life_start = 0 if k < R1 else R1 if k < R2 else R2 + 2
        lines.append(f'vllm:request_success_total{{model_name="m",{pod(k)}}} {5 * (k - life_start) + 3} {t}')
        lines.append(f'vllm:request_success_total{{model_name="m",{other}}} {500 + 4 * k} {t}')
    lines.append("# TYPE vllm:num_requests_running gauge")
    for k in range(41):
        if k not in (R2, R2 + 1):
            lines.append(f'vllm:num_requests_running{{model_name="m",{pod(k)}}} 4 {T0 + 15 * k}')
        lines.append(f'vllm:num_requests_running{{model_name="m",{other}}} 6 {T0 + 15 * k}')
    lines.append("# TYPE train_tokens counter")  # four ranks of a job relaunched at scrape 30
    for rank in range(4):
        for k in range(41):
            lines.append(
                f'train_tokens_total{{job="j",rank="{rank}"}} {1000 * (k if k < 30 else k - 30)} {T0 + 15 * k}'
            )
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))


def test_restarts_are_events_with_their_time():
    result = completeness(restart_store(), Window(at(T0), at(T0 + 600)))
    got = [(r.ts, r.source, r.how, r.series, r.last_before) for r in result.restarts]
    assert got == [
        # the in-place restart: one counter series drops
        (iso(at(T0 + 15 * R1)), "vLLM exporter", "counter reset", 1, iso(at(T0 + 15 * (R1 - 1)))),
        # the new pod: the counter and the gauge continue under new labels after two lost scrapes
        (iso(at(T0 + 15 * (R2 + 2))), "vLLM exporter", "new instance", 2, iso(at(T0 + 15 * (R2 - 1)))),
        # the job: four ranks' counters reset at the same scrape, one restart
        (iso(at(T0 + 15 * 30)), "training exporter", "counter reset", 4, iso(at(T0 + 15 * 29))),
    ]
    moved = result.restarts[1].detail
    assert "instance 10.0.0.1:8000 -> 10.0.0.9:8000" in moved and "pod chat-1 -> chat-2" in moved
    assert "chat-7" not in " ".join(r.detail for r in result.restarts)  # the steady replica is no restart
    restarts = result.as_dict()["restarts"]
    assert [r["ts"] for r in restarts] == [got[0][0], got[1][0], got[2][0]]
    assert set(restarts[0]) == {"ts", "source", "how", "series", "last_before", "detail"}


def test_no_restart_in_a_steady_store_and_none_outside_the_window():
    assert completeness(store(), Window(at(T0), at(T0 + 600))).restarts == []
    late = completeness(restart_store(), Window(at(T0 + 15 * 31), at(T0 + 600)))
    assert late.restarts == []  # every restart happened before this window
