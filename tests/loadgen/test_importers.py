"""Other tools' load-test results converted to ``perfkit.bench/1`` (perfkit/loadgen/importers/):
the mappings, on hand-written samples (``synthetic_*``; tests/loadgen/data/SOURCES.md). The files
the tools wrote, recorded from their repositories, are tested in test_importers_real.py.

The synthetic samples are the author's reading of each format (a misreading would be shared by
sample and importer, which is why the recorded files are tested too); every key in them is one the
tool writes:

* ``synthetic_vllm_*.json``: vllm-project/vllm ``vllm/benchmarks/serve.py`` (``main_async``: ``result_json``,
  ``benchmark``: ``result`` and ``process_one_metric``) at commit 009e6d4 (2026, after v0.33.0):
  ``--save-result``, and ``--save-detailed --metric-percentiles 50,90,99 --goodput``; error text as
  ``vllm/benchmarks/lib/endpoint_request_func.py`` keeps it (a reason phrase, or a traceback).
* ``synthetic_guidellm_*.json``: vllm-project/guidellm 0.8.1 ``GenerativeBenchmarksReport``
  (``src/guidellm/benchmark/schemas/report.py``, ``benchmark.py``, ``base.py``, ``metrics.py``,
  ``src/guidellm/schemas/statistics.py``; goodput fields from ``schemas/benchmark/goodput.py``).
* ``synthetic_inference_perf_*.json``: kubernetes-sigs/inference-perf ``inference_perf/reportgen/base.py``
  (``summarize_requests``, ``summarize``, ``build_error_counts``) at v0.6.1-29 (7de5ef2, 2026-08),
  the report layout of PyPI 0.7.0.

Expected numbers are worked out here from the sample's raw values (seconds to ms, totals over
durations), never read back from what the importer wrote.
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path

import pytest

from perfkit.errors import PerfkitError
from perfkit.loadgen import importers
from perfkit.loadgen.importers import ForeignResultError, convert, convert_all, detect, read_foreign
from perfkit.loadgen.importers.inference_perf import error_kind as ip_error_kind
from perfkit.loadgen.importers.vllm import error_kind as vllm_error_kind
from perfkit.loadgen.result import SCHEMA, check

DATA = Path(__file__).parent / "data"
VLLM = DATA / "synthetic_vllm_serve_concurrency16.json"
VLLM_DETAILED = DATA / "synthetic_vllm_serve_detailed_chunked.json"
GUIDELLM = DATA / "synthetic_guidellm_concurrent_sweep.json"
IP_STAGE = DATA / "synthetic_inference_perf_stage_1_lifecycle_metrics.json"
IP_SUMMARY = DATA / "synthetic_inference_perf_summary_lifecycle_metrics.json"


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def notes(doc: dict) -> str:
    return " | ".join(doc["source"]["notes"])


# --- detection -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "tool"),
    [
        (VLLM, "vllm"),
        (VLLM_DETAILED, "vllm"),
        (GUIDELLM, "guidellm"),
        (IP_STAGE, "inference-perf"),
        (IP_SUMMARY, "inference-perf"),
    ],
)
def test_each_sample_is_detected_as_its_tool(path, tool):
    assert detect(load(path)) == tool


def test_a_perfkit_document_and_other_json_are_not_foreign_results():
    perfkit_doc = {"schema": SCHEMA, "completed": 1, "duration": 1.0, "mean_ttft_ms": 5.0}
    assert detect(perfkit_doc) is None
    assert detect({"completed": 3}) is None
    assert detect([1, 2]) is None
    assert detect({"benchmarks": []}) is None
    with pytest.raises(
        ForeignResultError,
        match=r"x\.json: not a vllm bench serve, guidellm, inference-perf or aiperf result",
    ):
        convert({"hello": 1, "world": 2}, "x.json")
    with pytest.raises(ForeignResultError, match=r"found: list"):
        convert([1, 2], "x.json")


def test_every_converted_document_passes_the_result_check():
    for path in (VLLM, VLLM_DETAILED, GUIDELLM, IP_STAGE, IP_SUMMARY):
        for doc in convert_all(load(path), path.name):
            check(doc, path.name)
            json.dumps(doc, allow_nan=False)  # what result.write_json writes
            assert doc["schema"] == SCHEMA and doc["records"] is None
            assert doc["source"]["file"] == path.name


# --- vLLM ----------------------------------------------------------------------------------------


def test_vllm_save_result_headline_numbers_land_on_perfkit_fields():
    raw = load(VLLM)
    doc = convert(raw, VLLM.name)
    assert (doc["completed"], doc["failed"], doc["duration"]) == (9, 1, 0.7302)
    assert doc["total_output_tokens"] == 576 and doc["output_throughput"] == raw["output_throughput"]
    assert doc["mean_ttft_ms"] == 52.31 and doc["p99_ttft_ms"] == 55.93
    assert doc["percentiles"]["ttft_ms"]["50"] == 51.87 and doc["percentiles"]["ttft_ms"]["99"] == 55.93
    assert doc["mean_tpot_ms"] == 10.02
    # ITL/TPOT = 1.00 and no speculative decoding: one token per chunk, so the chunk gaps are the token ITL
    assert doc["mean_itl_ms"] == 10.03 and doc["percentiles"]["itl_chunk_ms"]["99"] == 11.2
    assert doc["percentiles"]["itl_ms"]["99"] == 11.2
    assert doc["max_output_tokens_per_s"] == 576.0
    # E2EL is not in vLLM's default --percentile-metrics: from `latencies` (s), the failed one's 0.0 left out
    completed = [0.6812, 0.6845, 0.6790, 0.6901, 0.6833, 0.6870, 0.6799, 0.6822, 0.6856]
    assert doc["mean_e2el_ms"] == pytest.approx(sum(completed) / 9 * 1000)
    assert doc["median_e2el_ms"] == pytest.approx(683.3)
    assert doc["errors"] == {"total": 1, "rate": 0.1, "by_kind": {"other": 1}}
    load_ = doc["load"]
    assert (load_["shape"], load_["concurrency"], load_["requested_rate"]) == ("concurrency", 16, None)
    assert (load_["num_requests"], load_["endpoint"]) == (10, "completions")
    assert doc["meta"]["model"] == "Qwen/Qwen3-4B"
    assert doc["meta"]["labels"] == {"hardware": "H100-80GB", "tp": "1"}  # --metadata hardware=... tp=1
    assert doc["meta"]["started"] is None and doc["goodput"] is None
    text = notes(doc)
    assert "assumed one token per chunk (mean ITL / TPOT = 1.00)" in text
    assert "first chunk with choices" in text
    assert "errors: not classified" in text
    assert "20260814-101502 is local time" in text


def test_vllm_chunk_gaps_are_not_token_itl_when_chunks_hold_several_tokens():
    raw = load(VLLM)
    raw.update(mean_itl_ms=40.1, median_itl_ms=40.0, p99_itl_ms=44.0)  # 4 tokens per chunk: 4 x TPOT
    doc = convert(raw, "v.json")
    assert doc["mean_itl_ms"] is None and doc["percentiles"]["itl_ms"]["50"] is None
    assert doc["percentiles"]["itl_chunk_ms"]["50"] == 40.0
    assert doc["max_output_tokens_per_s"] is None  # vLLM's counts chunks
    assert "chunks hold several tokens (mean ITL / TPOT = 4.00)" in notes(doc)
    spec = load(VLLM)
    spec["spec_decode_acceptance_length"] = 2.7
    doc = convert(spec, "v.json")
    assert doc["mean_itl_ms"] is None and "speculative decoding" in notes(doc)


def test_vllm_detailed_arrays_give_every_percentile_tokens_per_chunk_and_error_kinds():
    doc = convert(load(VLLM_DETAILED), VLLM_DETAILED.name)
    assert (doc["completed"], doc["failed"]) == (3, 1)
    # TTFT of the three completed requests: 50, 52, 51 ms (the failed one's 31 ms is not counted)
    assert doc["mean_ttft_ms"] == pytest.approx(51.0)
    assert doc["percentiles"]["ttft_ms"]["90"] == pytest.approx(51.8)  # linear between 51 and 52
    assert doc["percentiles"]["ttft_ms"]["95"] == pytest.approx(51.9)  # not in the file: recomputed
    # TPOT = (latency - TTFT) / (8 - 1): 60/7, 62/7, 61/7 ms
    assert doc["mean_tpot_ms"] == pytest.approx(61 / 7)
    # chunk gaps of the completed requests: 20 21 19 20 20 22 21 20 20 ms
    assert doc["percentiles"]["itl_chunk_ms"]["50"] == pytest.approx(20.0)
    assert doc["percentiles"]["itl_chunk_ms"]["99"] == pytest.approx(21.92)
    # 8 tokens in 4 chunks: the gaps are not per-token times, so no token ITL
    assert doc["mean_itl_ms"] is None and doc["percentiles"]["itl_ms"]["50"] is None
    assert doc["tokens_per_chunk"] == {"mean": 2.0, "max": None}
    assert doc["max_output_tokens_per_s"] is None
    assert doc["mean_e2el_ms"] == pytest.approx(112.0)
    assert doc["errors"]["by_kind"] == {"disconnect": 1} and doc["errors"]["rate"] == 0.25
    assert doc["goodput"] == {
        "slo_ms": None,
        "attainment": 0.5,
        "requests_per_s": 2 / 1.02,
        "met": 2,
        "judged": 4,
    }
    load_ = doc["load"]
    assert (load_["shape"], load_["rate"], load_["arrival"], load_["burstiness"]) == (
        "rate",
        4.0,
        "poisson",
        1.0,
    )
    assert load_["achieved_rate"] == pytest.approx(4.0)  # 3 gaps over 0.75 s of start times
    assert (load_["prompt_tokens"], load_["output_tokens"], load_["endpoint"]) == (128, 8, "chat")
    assert "SLOs" in notes(doc) and "tokens per chunk: the mean only" in notes(doc)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Internal Server Error", "http_5xx"),
        ("Service Unavailable", "http_5xx"),
        ("Bad Request", "http_4xx"),
        ("Too Many Requests", "http_4xx"),
        (
            "Never received a valid chunk to calculate TTFT.This response will be marked as failed!",
            "malformed",
        ),
        (
            'Traceback (most recent call last):\n  File "x.py", line 1\naiohttp.client_exceptions.'
            "ClientConnectorError: Cannot connect to host 127.0.0.1:8000 ssl:default",
            "connect",
        ),
        ("Traceback (most recent call last):\nTimeoutError\n", "timeout"),
        ("Traceback (most recent call last):\naiohttp.client_exceptions.ClientPayloadError: x", "disconnect"),
        ("Traceback (most recent call last):\njson.decoder.JSONDecodeError: Expecting value", "malformed"),
        ("", "other"),
        ("something odd", "other"),
    ],
)
def test_vllm_error_text_is_classified(text, kind):
    assert vllm_error_kind(text) == kind


@pytest.mark.parametrize(
    ("rate", "burstiness", "concurrency", "expected"),
    [
        ("inf", 1.0, None, ("burst", None, None)),
        (math.inf, 1.0, None, ("burst", None, None)),  # vLLM writes Infinity for a float inf
        (2.0, 0.5, None, ("rate", 2.0, "gamma")),
        (2.0, math.inf, None, ("rate", 2.0, "constant")),
        (2.0, 1.0, 8, ("rate", 2.0, "poisson")),
    ],
)
def test_vllm_load_shape_from_rate_burstiness_and_concurrency(rate, burstiness, concurrency, expected):
    raw = load(VLLM)
    raw.update(request_rate=rate, burstiness=burstiness, max_concurrency=concurrency)
    load_ = convert(raw, "v.json")["load"]
    assert (load_["shape"], load_["rate"], load_["arrival"]) == expected


# --- guidellm ------------------------------------------------------------------------------------


def test_guidellm_sweep_needs_an_index_and_convert_all_gives_each_benchmark():
    raw = load(GUIDELLM)
    with pytest.raises(ForeignResultError, match=r"2 benchmarks \(a sweep\): choose one with index 0\.\.1"):
        convert(raw, GUIDELLM.name)
    with pytest.raises(ForeignResultError, match=r"no benchmark 2: the report holds 2"):
        convert(raw, GUIDELLM.name, index=2)
    docs = convert_all(raw, GUIDELLM.name)
    assert [d["load"]["concurrency"] for d in docs] == [1, 16]
    assert convert(raw, GUIDELLM.name, index=1) == docs[1]


def test_guidellm_metrics_map_onto_perfkit_definitions():
    raw = load(GUIDELLM)
    b = raw["benchmarks"][1]["metrics"]
    doc = convert(raw, GUIDELLM.name, index=1)
    assert (doc["completed"], doc["duration"]) == (218, 20.0)
    ttft = b["time_to_first_token_ms"]["successful"]
    assert doc["mean_ttft_ms"] == ttft["mean"] and doc["std_ttft_ms"] == ttft["std_dev"]
    assert doc["percentiles"]["ttft_ms"]["99.9"] == ttft["percentiles"]["p999"]
    # request_latency is in seconds
    assert doc["mean_e2el_ms"] == pytest.approx(b["request_latency"]["successful"]["mean"] * 1000)
    assert doc["p99_e2el_ms"] == pytest.approx(
        b["request_latency"]["successful"]["percentiles"]["p99"] * 1000
    )
    # guidellm's ITL is vLLM's TPOT (fixed 64-token outputs: its token weighting changes nothing)
    itl = b["inter_token_latency_ms"]["successful"]
    assert (
        doc["mean_tpot_ms"] == itl["mean"]
        and doc["percentiles"]["tpot_ms"]["90"] == itl["percentiles"]["p90"]
    )
    assert doc["mean_itl_ms"] == itl["mean"] and doc["median_itl_ms"] is None
    # its time_per_output_token_ms includes TTFT and is not used anywhere
    tpot_incl = b["time_per_output_token_ms"]["successful"]["mean"]
    assert tpot_incl not in (doc["mean_tpot_ms"], doc["mean_itl_ms"])
    assert doc["tokens_per_chunk"] == {
        "mean": b["output_tokens_per_iteration"]["successful"]["mean"],
        "max": 2,
    }
    # totals over the measured 20 s
    assert doc["total_output_tokens"] == 218 * 64 and doc["output_throughput"] == pytest.approx(218 * 64 / 20)
    assert doc["request_throughput"] == pytest.approx(218 / 20)
    assert doc["total_token_throughput"] == pytest.approx(218 * (128 + 64) / 20)
    # 231 sent: 218 completed, 2 errored, 11 cut at the end of the window
    assert doc["failed"] == 13
    assert doc["errors"]["by_kind"] == {"cancelled": 11, "other": 2}
    assert doc["errors"]["rate"] == pytest.approx(13 / 231)
    # slo_attainment 0.9 over 220 judged (218 + 2 errored) = 198 met; perfkit's share is of 231 sent
    gp = doc["goodput"]
    assert (gp["met"], gp["judged"], gp["slo_ms"]) == (198, 231, {"ttft": 200.0, "tpot": 50.0})
    assert gp["attainment"] == pytest.approx(198 / 231) and doc["request_goodput"] == pytest.approx(198 / 20)
    load_ = doc["load"]
    assert (load_["shape"], load_["prompt_tokens"], load_["output_tokens"]) == ("concurrency", 128, 64)
    meta = doc["meta"]
    assert meta["model"] == "fake-model" and meta["labels"] == {"hardware": "H100-80GB", "name": "nightly"}
    assert meta["started"] == "2026-08-14T09:33:50Z"  # start_time 1786700030 (epoch s)
    assert meta["host"]["python"] == "3.11.7"
    # the backend target carried a password and a key in its query: neither survives
    assert meta["target"] == "http://127.0.0.1:8011/v1"
    assert "hunter2" not in json.dumps(doc) and "key=abc" not in json.dumps(doc)
    text = notes(doc)
    for said in (
        "inter_token_latency_ms",
        "time_per_output_token_ms not mapped",
        "request_latency",
        "cancelled",
    ):
        assert said in text
    assert convert(raw, GUIDELLM.name, index=0)["goodput"] is None  # no SLO on the first benchmark


def test_guidellm_tpot_left_empty_when_output_lengths_vary():
    raw = load(GUIDELLM)
    raw["benchmarks"][1]["metrics"]["output_token_count"]["successful"]["std_dev"] = 20.0  # CV 0.31
    doc = convert(raw, "g.json", index=1)
    assert doc["mean_tpot_ms"] is None and doc["percentiles"]["tpot_ms"]["50"] is None
    assert (
        doc["mean_itl_ms"] == raw["benchmarks"][1]["metrics"]["inter_token_latency_ms"]["successful"]["mean"]
    )
    assert "TPOT: left empty" in notes(doc)


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ({"type_": "synchronous"}, ("concurrency", 1, None, None)),
        ({"type_": "throughput", "max_concurrency": 512}, ("burst", 512, None, None)),
        ({"type_": "constant", "rate": 5.0}, ("rate", None, 5.0, "constant")),
        ({"type_": "poisson", "rate": 20.0, "random_seed": 42}, ("rate", None, 20.0, "poisson")),
    ],
)
def test_guidellm_strategies_map_to_load_shapes(strategy, expected):
    raw = load(GUIDELLM)
    raw["benchmarks"][0]["config"]["strategy"] = strategy
    load_ = convert(raw, "g.json", index=0)["load"]
    assert (load_["shape"], load_["concurrency"], load_["rate"], load_["arrival"]) == expected


def test_guidellm_benchmark_stopped_by_over_saturation_is_invalid():
    raw = load(GUIDELLM)
    raw["benchmarks"][1]["scheduler_state"]["end_processing_constraints"] = {"over_saturation": {}}
    validity = convert(raw, "g.json", index=1)["validity"]
    assert validity["valid"] is False and "over_saturation" in validity["reasons"][0]


# --- inference-perf ------------------------------------------------------------------------------


def test_inference_perf_stage_report_converts_seconds_and_keeps_token_itl():
    raw = load(IP_STAGE)
    lat = raw["successes"]["latency"]
    doc = convert(raw, IP_STAGE.name)
    assert (doc["completed"], doc["failed"], doc["duration"]) == (345, 3, raw["benchmark_time_seconds"])
    assert doc["mean_ttft_ms"] == pytest.approx(lat["time_to_first_token"]["mean"] * 1000)
    assert doc["percentiles"]["ttft_ms"]["99.9"] == pytest.approx(lat["time_to_first_token"]["p99.9"] * 1000)
    assert doc["median_tpot_ms"] == pytest.approx(lat["time_per_output_token"]["median"] * 1000)
    assert doc["p99_e2el_ms"] == pytest.approx(lat["request_latency"]["p99"] * 1000)
    assert doc["std_ttft_ms"] is None  # inference-perf reports no standard deviation
    # min ITL > 0: no chunk held two tokens, so its per-token gaps are perfkit's token ITL
    assert doc["median_itl_ms"] == pytest.approx(lat["inter_token_latency"]["median"] * 1000)
    assert doc["percentiles"]["itl_ms"]["90"] == pytest.approx(lat["inter_token_latency"]["p90"] * 1000)
    assert doc["tokens_per_chunk"] == {"mean": 1.0, "max": 1}
    assert doc["request_throughput"] == raw["successes"]["throughput"]["requests_per_sec"]
    assert doc["total_output_tokens"] == 345 * 64 and doc["token_mismatches"] == 3
    assert doc["errors"]["by_kind"] == {"http_5xx": 2, "connect": 1} and doc["errors"][
        "rate"
    ] == pytest.approx(3 / 348)
    gp = doc["goodput"]
    assert (gp["met"], gp["judged"]) == (327, 348) and gp["attainment"] == pytest.approx(327 / 348)
    load_ = doc["load"]
    assert (load_["shape"], load_["rate"], load_["achieved_rate"]) == (
        "rate",
        20.0,
        raw["load_summary"]["achieved_rate"],
    )
    assert load_["schedule_lag_ms"]["90"] == pytest.approx(
        raw["load_summary"]["schedule_delay"]["p90"] * 1000
    )
    assert load_["schedule_lag_ms"]["max"] == pytest.approx(
        raw["load_summary"]["schedule_delay"]["max"] * 1000
    )
    assert doc["meta"]["model"] is None and "config.yaml" in notes(doc)
    for said in ("use_server_output_tokens", "NTPOT", "request_latency"):
        assert said in notes(doc)


def test_inference_perf_summary_with_multi_token_chunks_keeps_only_the_itl_mean():
    raw = load(IP_SUMMARY)
    doc = convert(raw, IP_SUMMARY.name)
    itl = raw["successes"]["latency"]["inter_token_latency"]
    assert itl["min"] == 0 and itl["median"] == 0  # every token of a 4-token chunk has the chunk's time
    assert doc["mean_itl_ms"] == pytest.approx(itl["mean"] * 1000)
    assert doc["median_itl_ms"] is None and doc["percentiles"]["itl_ms"]["50"] is None
    assert doc["load"]["shape"] is None and "import a stage_N file" in notes(doc)
    assert "ITL: the mean only" in notes(doc)


@pytest.mark.parametrize(
    ("label", "kind"),
    [("504 - Gateway Timeout", "http_5xx"), ("400 - Invalid JSON", "http_4xx"), ("429 - Rate Limit", "http_4xx"),
     ("Timeout", "timeout"), ("Connection Error", "connect"), ("clientpayloaderror", "other")],
)  # fmt: skip
def test_inference_perf_error_labels_become_kinds(label, kind):
    assert ip_error_kind(label) == kind


CONFIG_YAML = """\
api: {type: completion, streaming: true}
server: {type: vllm, model_name: fake-model, base_url: "http://127.0.0.1:8011", api_key: sk-do-not-copy}
load: {type: poisson, stages: [{rate: 5, duration: 20}, {rate: 20, duration: 20}], num_workers: 1, base_seed: 7}
report:
  request_lifecycle: {summary: true, per_stage: true, per_request: false}
  goodput: {constraints: {ttft: 0.2, tpot: 0.05, itl: 0.03}}
"""


def test_inference_perf_config_yaml_beside_the_report_gives_model_slos_and_arrival(tmp_path):
    report = tmp_path / "reports-20260814-101500" / IP_STAGE.name
    report.parent.mkdir()
    report.write_text(IP_STAGE.read_text(encoding="utf-8"), encoding="utf-8")
    (report.parent / "config.yaml").write_text(CONFIG_YAML, encoding="utf-8")
    doc = read_foreign(report)
    assert doc["meta"]["model"] == "fake-model" and doc["meta"]["target"] == "http://127.0.0.1:8011"
    assert doc["meta"]["seed"] == 7
    assert doc["goodput"]["slo_ms"] == pytest.approx({"ttft": 200.0, "tpot": 50.0})
    assert "itl and ntpot SLOs have no perfkit equivalent" in notes(doc)
    assert (doc["load"]["arrival"], doc["load"]["endpoint"]) == ("poisson", "completions")
    assert "sk-do-not-copy" not in json.dumps(doc)


def test_inference_perf_server_side_report_is_refused_with_what_to_import_instead():
    prometheus = {
        "benchmark_time_seconds": 0.0,
        "load_summary": {},
        "failures": {},
        "successes": {"count": 12},
    }
    with pytest.raises(
        ForeignResultError, match=r"p\.json: successes\.latency: no latency section.*summary_lifecycle"
    ):
        convert(prometheus, "p.json")


# --- hostile and broken input --------------------------------------------------------------------


def test_wrong_types_name_the_file_and_the_key_path():
    g = load(GUIDELLM)
    g["benchmarks"][0]["metrics"]["time_to_first_token_ms"] = 5
    with pytest.raises(ForeignResultError) as err:
        convert(g, "result.json", index=0)
    assert str(err.value) == "result.json: benchmarks[0].metrics.time_to_first_token_ms: expected an object"
    cases = [
        ({"mean_ttft_ms": "fast"}, "vllm.json: mean_ttft_ms: expected a number, found 'fast'"),
        ({"mean_ttft_ms": math.nan}, "vllm.json: mean_ttft_ms: not a finite number (nan)"),
        ({"completed": -3}, "vllm.json: completed: expected at least 0, found -3"),
        ({"completed": 2.5}, "vllm.json: completed: expected a whole number, found 2.5"),
        ({"duration": "1 s"}, "vllm.json: duration: expected a number, found '1 s'"),
        ({"model_id": ["a"]}, "vllm.json: model_id: expected text, found ['a']"),
        ({"latencies": [0.5, "x"]}, "vllm.json: latencies[1]: expected a number >= 0, found 'x'"),
    ]
    for change, message in cases:
        raw = load(VLLM)
        raw.update(change)
        with pytest.raises(ForeignResultError) as err:
            convert(raw, "vllm.json")
        assert str(err.value) == message
    d = load(VLLM_DETAILED)
    d["itls"][1][2] = -0.5
    with pytest.raises(
        ForeignResultError, match=r"^d\.json: itls\[1\]\[2\]: expected a number >= 0, found -0\.5$"
    ):
        convert(d, "d.json")
    ip = load(IP_STAGE)
    ip["failures"]["by_label"]["Connection Error"] = "1"
    with pytest.raises(ForeignResultError, match=r"failures\.by_label\.Connection Error: expected an object"):
        convert(ip, "ip.json")
    assert issubclass(ForeignResultError, PerfkitError)


def test_sizes_are_bounded_and_text_is_cleaned(monkeypatch):
    from perfkit.loadgen.importers import _common

    monkeypatch.setattr(_common, "MAX_REQUESTS", 4)
    with pytest.raises(ForeignResultError, match=r"latencies: expected a list of at most 4 numbers"):
        convert(load(VLLM), "v.json")  # ten latencies
    monkeypatch.setattr(_common, "MAX_ITEMS", 1)
    with pytest.raises(ForeignResultError, match=r"benchmarks: 2 entries, more than the 1 perfkit reads"):
        convert_all(load(GUIDELLM), "g.json")
    monkeypatch.undo()
    raw = load(VLLM)
    raw["model_id"] = "evil\x1b[31m\nmodel" + "x" * 500
    raw["note"] = "line1\r\nline2"  # a --metadata value
    doc = convert(raw, "v.json")
    assert "\x1b" not in doc["meta"]["model"] and "\n" not in doc["meta"]["model"]
    assert len(doc["meta"]["model"]) <= 200 and "\n" not in doc["meta"]["labels"]["note"]


def test_a_run_where_nothing_completed_is_marked_invalid():
    raw = load(VLLM)
    raw.update(completed=0, failed=10, latencies=[0.0] * 10)
    doc = convert(raw, "v.json")
    assert doc["validity"] == {"valid": False, "reasons": ["no request completed"], "calibration": None}
    assert doc["errors"]["rate"] == 1.0


def test_read_foreign_reads_appended_vllm_results_and_refuses_what_is_not_a_result(tmp_path, monkeypatch):
    first, second = load(VLLM), load(VLLM)
    second["model_id"] = "second-model"
    appended = tmp_path / "openai-infqps.json"
    appended.write_text(json.dumps(first) + "\n" + json.dumps(second), encoding="utf-8")  # --append-result
    with pytest.raises(ForeignResultError, match=r"2 appended results: choose one with index 0\.\.1"):
        read_foreign(appended)
    assert read_foreign(appended, index=1)["meta"]["model"] == "second-model"
    assert read_foreign(VLLM) == convert(load(VLLM), str(VLLM))
    broken = tmp_path / "broken.json"
    broken.write_text('{\n "completed": 3,\n "duration": \n}', encoding="utf-8")
    with pytest.raises(ForeignResultError, match=r"broken\.json:4: not JSON: Expecting value \(column 1\)"):
        read_foreign(broken)
    (tmp_path / "empty.json").write_text("  \n", encoding="utf-8")
    with pytest.raises(ForeignResultError, match=r"empty\.json: empty file"):
        read_foreign(tmp_path / "empty.json")
    with pytest.raises(ForeignResultError, match=r"refused: not a regular file \(a folder\)"):
        read_foreign(tmp_path)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.json")
        with pytest.raises(ForeignResultError, match=r"refused: not a regular file \(a FIFO\)"):
            read_foreign(tmp_path / "fifo.json")  # refused without blocking on the open
    monkeypatch.setattr(importers, "MAX_FILE_BYTES", 100)
    with pytest.raises(ForeignResultError, match=r"refused: .*over the 100 bytes limit"):
        read_foreign(VLLM)


def test_messages_are_one_line():
    raw = copy.deepcopy(load(GUIDELLM))
    raw["benchmarks"][0]["metrics"]["request_totals"]["successful"] = "many\nlines\x1b"
    with pytest.raises(ForeignResultError) as err:
        convert(raw, "g.json", index=0)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)
