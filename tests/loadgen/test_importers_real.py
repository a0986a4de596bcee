"""The importers on files the tools wrote, recorded unchanged from the tools' own repositories
(tests/loadgen/data/SOURCES.md: repository, path, commit, version, licence).

Every expected number is read from the recorded file itself (or worked out from its raw values:
seconds to ms, counts over durations), never from what the importer wrote: the file says
``ttft.avg`` 2343.219..., so the document must say 2343.219....
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from perfkit.loadgen.importers import ForeignResultError, convert, detect, read_foreign
from perfkit.loadgen.importers.aiperf import error_kind, read_csv, tag_of
from perfkit.loadgen.result import check, read_result

DATA = Path(__file__).parent / "data"
IP_STAGE = DATA / "inference_perf_kubecon_stage_0_lifecycle_metrics.json"
IP_SUMMARY = DATA / "inference_perf_kubecon_summary_lifecycle_metrics.json"
IP_CONFIG = DATA / "inference_perf_kubecon_config.yaml"
GUIDELLM_03 = DATA / "guidellm_0.3.0_benchmarks_stripped.json"
AIPERF_JSON = DATA / "aiperf_0.1.1_profile_export_aiperf.json"
AIPERF_CSV = DATA / "aiperf_0.1.1_profile_export_aiperf.csv"
AIPERF_08 = DATA / "aiperf_0.8.0_profile_export_aiperf_trimmed.json"
VLLM_MTP = DATA / "vllm_bench_serving_inferencex_qwen35_mtp_conc64.json"
VLLM_DISAGG = DATA / "vllm_bench_serving_inferencex_gptoss_disagg_conc4.json"
GENAI_PERF_CSV = DATA / "genai_perf_cloudai_doc_profile_export_genai_perf.csv"
GENAI_PERF_002 = DATA / "genai_perf_0.0.2dev_profile_export_genai_perf.csv"
REAL = {
    IP_STAGE: "inference-perf",
    IP_SUMMARY: "inference-perf",
    GUIDELLM_03: "guidellm",
    AIPERF_JSON: "aiperf",
    AIPERF_CSV: "aiperf",
    AIPERF_08: "aiperf",
    VLLM_MTP: "vllm",
    VLLM_DISAGG: "vllm",
    GENAI_PERF_CSV: "aiperf",
}


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def notes(doc: dict) -> str:
    return " | ".join(doc["source"]["notes"])


@pytest.mark.parametrize("path", list(REAL), ids=lambda p: p.name)
def test_each_recorded_file_is_read_as_its_tool_and_passes_the_result_check(path):
    doc = read_foreign(path)
    check(doc, path.name)
    json.dumps(doc, allow_nan=False)
    assert doc["source"]["tool"] == REAL[path] and doc["source"]["file"] == path.name
    assert read_result(path) == doc  # what `perfkit bench --import`, `baseline add` and `compare` read
    if path.suffix == ".json":
        assert detect(load(path)) == REAL[path]


# --- inference-perf: the KubeCon NA 2025 demo's reports (before 0.3) ------------------------------


def test_inference_perf_stage_report_without_benchmark_time_keeps_the_tools_throughput():
    raw = load(IP_STAGE)
    assert "benchmark_time_seconds" not in raw  # what made perfkit refuse these files
    s, lat, tp = raw["successes"], raw["successes"]["latency"], raw["successes"]["throughput"]
    doc = read_foreign(IP_STAGE)
    assert (doc["completed"], doc["failed"]) == (s["count"], raw["failures"]["count"]) == (60, 0)
    # the tool's figures, as it reported them
    assert doc["request_throughput"] == tp["requests_per_sec"] == 1.0171575756131475
    assert doc["output_throughput"] == tp["output_tokens_per_sec"]
    assert doc["total_token_throughput"] == tp["total_tokens_per_sec"]
    # duration: inference-perf's own window behind those figures (first send to last answer),
    # longer than load_summary.send_duration (first to last send)
    assert doc["duration"] == pytest.approx(60 / tp["requests_per_sec"])
    assert doc["duration"] > raw["load_summary"]["send_duration"]
    # the token totals agree with the tool's token rates over that window
    assert doc["total_input_tokens"] == round(s["prompt_len"]["mean"] * 60) == 12246
    assert doc["total_input_tokens"] == pytest.approx(tp["input_tokens_per_sec"] * doc["duration"], rel=1e-9)
    ttft, e2el = lat["time_to_first_token"], lat["request_latency"]
    assert doc["mean_ttft_ms"] == pytest.approx(ttft["mean"] * 1000)
    assert doc["median_ttft_ms"] == pytest.approx(ttft["median"] * 1000)
    assert doc["percentiles"]["ttft_ms"]["99.9"] == pytest.approx(ttft["p99.9"] * 1000)
    assert doc["p99_e2el_ms"] == pytest.approx(e2el["p99"] * 1000)
    load_ = doc["load"]
    assert (load_["shape"], load_["rate"], load_["achieved_rate"]) == (
        "rate",
        raw["load_summary"]["requested_rate"],
        raw["load_summary"]["achieved_rate"],
    )
    assert load_["schedule_lag_ms"]["90"] == pytest.approx(
        raw["load_summary"]["schedule_delay"]["p90"] * 1000
    )
    assert "no benchmark_time_seconds" in notes(doc)


def test_inference_perf_before_0_3_timed_sse_lines_so_its_tpot_and_itl_are_not_taken():
    raw = load(IP_STAGE)
    s, lat = raw["successes"], raw["successes"]["latency"]
    # the file's own means: a request decodes (E2EL - TTFT) over (tokens - 1) gaps of about 7.2 ms,
    # yet its TPOT says 3.47 ms and half its ITLs are microseconds (the blank line after each event)
    decode = (lat["request_latency"]["mean"] - lat["time_to_first_token"]["mean"]) / (
        s["output_len"]["mean"] - 1
    )
    assert decode / lat["time_per_output_token"]["mean"] == pytest.approx(2.08, abs=0.01)
    assert lat["inter_token_latency"]["median"] < 0.0001 < lat["inter_token_latency"]["p90"]
    doc = read_foreign(IP_STAGE)
    assert doc["mean_tpot_ms"] is None and doc["percentiles"]["tpot_ms"]["50"] is None
    assert doc["mean_itl_ms"] is None and doc["percentiles"]["itl_chunk_ms"]["50"] is None
    assert doc["tokens_per_chunk"] == {"mean": None, "max": None}
    assert "= 2.08, two intervals per token" in notes(doc) and "3.473 ms" in notes(doc)


def test_inference_perf_run_config_beside_the_report_names_model_target_and_arrival(tmp_path):
    (tmp_path / IP_STAGE.name).write_bytes(IP_STAGE.read_bytes())
    (tmp_path / "config.yaml").write_bytes(IP_CONFIG.read_bytes())  # as inference-perf leaves them
    doc = read_foreign(tmp_path / IP_STAGE.name)
    meta, load_ = doc["meta"], doc["load"]
    assert meta["model"] == "meta-llama/Meta-Llama-3-8B-Instruct"  # server.model_name
    assert meta["target"] == "http://vllm-service.test-ns.svc.cluster.local:8000"
    assert (load_["arrival"], load_["endpoint"]) == ("constant", "completions")  # load.type, api.type
    assert "<your-hf-token>" not in json.dumps(doc)  # tokenizer.token is never copied


def test_inference_perf_summary_over_all_stages():
    raw = load(IP_SUMMARY)
    s, tp = raw["successes"], raw["successes"]["throughput"]
    doc = read_foreign(IP_SUMMARY)
    assert doc["completed"] == s["count"] == 38717
    assert doc["request_throughput"] == tp["requests_per_sec"] == 63.46125084268033
    assert doc["duration"] == pytest.approx(38717 / 63.46125084268033)
    assert doc["p99_ttft_ms"] == pytest.approx(s["latency"]["time_to_first_token"]["p99"] * 1000)
    assert doc["mean_tpot_ms"] is None and "= 2.10, two intervals per token" in notes(doc)
    assert doc["load"]["shape"] is None and "import a stage_N file" in notes(doc)


def test_inference_perf_chunks_of_several_tokens_leave_tpot_empty_too():
    raw = load(IP_STAGE)
    raw["successes"]["output_len"]["mean"] = 4 * 63.15  # as if the tokens were 4x the timed intervals
    doc = convert(raw, "x.json")
    assert doc["mean_tpot_ms"] is None and "one interval per several tokens" in notes(doc)


def test_inference_perf_with_nothing_completed_falls_back_to_the_send_window_and_has_no_latency():
    raw = load(IP_STAGE)
    raw["successes"]["count"], raw["failures"]["count"] = 0, 60
    raw["successes"]["throughput"]["requests_per_sec"] = 0.0
    doc = convert(raw, "x.json")
    assert doc["duration"] == raw["load_summary"]["send_duration"]
    assert "send_duration (first to last send" in notes(doc)
    assert doc["mean_ttft_ms"] is None and doc["percentiles"]["e2el_ms"]["99"] is None
    assert doc["validity"]["valid"] is False and "no request completed" in notes(doc)


# --- guidellm 0.3 (request_totals, args, worker per benchmark) -------------------------------------


def test_guidellm_0_3_report_is_read_and_shows_the_tools_rates():
    raw = load(GUIDELLM_03)
    b = raw["benchmarks"][0]
    m = b["metrics"]
    doc = read_foreign(GUIDELLM_03)
    assert (doc["completed"], doc["failed"]) == (b["request_totals"]["successful"], 1) == (46, 1)
    assert doc["errors"]["by_kind"] == {"cancelled": 1}  # the one incomplete at the window's end
    assert doc["duration"] == b["duration"]
    rps = m["requests_per_second"]["successful"]["mean"]
    assert doc["request_throughput"] == rps == 1.5481806532737452
    assert doc["source"]["recomputed"]["request_throughput"] == pytest.approx(46 / b["duration"])
    assert doc["output_throughput"] == m["output_tokens_per_second"]["successful"]["mean"]
    # guidellm's total token rate (a rate series' mean) is far from totals / duration: both shown
    assert doc["total_token_throughput"] == m["tokens_per_second"]["successful"]["mean"]
    mine = (11827 + 5888) / b["duration"]
    assert doc["source"]["recomputed"]["total_token_throughput"] == pytest.approx(mine)
    assert (
        "tokens_per_second (successful, mean) 992.687 kept; perfkit's recomputation 590.555 (-40.5 %)"
        in notes(doc)
    )
    assert (doc["total_input_tokens"], doc["total_output_tokens"]) == (11827, 5888)
    ttft = m["time_to_first_token_ms"]["successful"]
    assert (
        doc["mean_ttft_ms"] == ttft["mean"]
        and doc["percentiles"]["ttft_ms"]["99.9"] == ttft["percentiles"]["p999"]
    )
    # fixed 128-token outputs: guidellm's token-weighted inter_token_latency_ms is TPOT
    assert doc["mean_tpot_ms"] == m["inter_token_latency_ms"]["successful"]["mean"]
    assert doc["mean_e2el_ms"] == pytest.approx(m["request_latency"]["successful"]["mean"] * 1000)
    load_ = doc["load"]
    assert (load_["shape"], load_["concurrency"]) == ("concurrency", 1)  # args.strategy synchronous
    assert (load_["prompt_tokens"], load_["output_tokens"]) == (
        256,
        128,
    )  # "prompt_tokens=256,output_tokens=128"
    assert doc["meta"]["model"] == b["worker"]["backend_model"]
    started = datetime.fromtimestamp(b["start_time"], UTC).isoformat().replace("+00:00", "Z")
    assert doc["meta"]["started"] == started
    assert "guidellm 0.2-0.4" in notes(doc)


def test_guidellm_report_without_request_counts_names_where_it_looked():
    raw = load(GUIDELLM_03)
    del raw["benchmarks"][0]["request_totals"]
    with pytest.raises(ForeignResultError, match=r"^g\.json: benchmarks\[0\]: no request counts \(metrics\.request_totals, request_totals or scheduler_metrics\.requests_made\)$"):  # fmt: skip
        convert(raw, "g.json")


# --- AIPerf ----------------------------------------------------------------------------------------


def test_aiperf_0_1_json_export_maps_its_metrics():
    r = load(AIPERF_JSON)["records"]
    doc = read_foreign(AIPERF_JSON)
    assert (
        (doc["completed"], doc["failed"])
        == (r["request_count"]["avg"], r["error_request_count"]["avg"])
        == (89, 11)
    )
    # error_summary: 11 x HTTP 499 RequestCancellationError (--request-cancellation-rate 10)
    assert doc["errors"]["by_kind"] == {"cancelled": 11} and doc["errors"]["rate"] == pytest.approx(0.11)
    assert doc["duration"] == r["benchmark_duration"]["avg"] == 9.317788951  # unit sec
    assert doc["request_throughput"] == r["request_throughput"]["avg"] == 9.551622221540914
    assert doc["request_throughput"] == pytest.approx(89 / 9.317788951)  # AIPerf's own formula
    assert doc["output_throughput"] == r["output_token_throughput"]["avg"]
    assert (doc["total_input_tokens"], doc["total_output_tokens"]) == (48950, 21624)  # total_isl, total_osl
    ttft = r["ttft"]
    assert (doc["mean_ttft_ms"], doc["median_ttft_ms"], doc["std_ttft_ms"]) == (
        ttft["avg"],
        ttft["p50"],
        ttft["std"],
    )
    assert doc["percentiles"]["ttft_ms"] == {
        "50": ttft["p50"], "90": ttft["p90"], "95": ttft["p95"], "99": ttft["p99"], "99.9": None,
    }  # fmt: skip
    # AIPerf's inter_token_latency is (latency - TTFT) / (OSL - 1): vLLM's TPOT
    assert doc["mean_tpot_ms"] == r["inter_token_latency"]["avg"] == 27.763065454471807
    chunk = r["inter_chunk_latency"]
    assert doc["percentiles"]["itl_chunk_ms"]["99"] == chunk["p99"]
    assert doc["mean_itl_ms"] == chunk["avg"]  # chunk gaps / TPOT = 1.00: one token per chunk
    assert (
        doc["mean_e2el_ms"] == r["request_latency"]["avg"]
        and doc["p99_e2el_ms"] == r["request_latency"]["p99"]
    )
    load_, meta = doc["load"], doc["meta"]
    assert (load_["shape"], load_["concurrency"], load_["num_requests"], load_["endpoint"]) == (
        "concurrency",
        100,
        100,
        "chat",
    )
    assert (meta["model"], meta["target"]) == ("openai/gpt-oss-20b", "localhost:9000")
    assert "includes reasoning tokens" in notes(doc) and "0.1-0.3 layout" in notes(doc)


def test_aiperf_csv_export_states_the_same_run_rounded():
    from_json, from_csv = read_foreign(AIPERF_JSON), read_foreign(AIPERF_CSV)
    # the CSV states 2 decimals: the document takes them as stated
    assert from_csv["mean_ttft_ms"] == 2343.22 and from_csv["request_throughput"] == 9.55
    assert from_csv["duration"] == 9.32 and from_csv["completed"] == 89 and from_csv["failed"] == 11
    for key in (
        "mean_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "mean_e2el_ms",
        "median_e2el_ms",
        "mean_itl_ms",
    ):
        assert from_csv[key] == pytest.approx(from_json[key], abs=0.005), key
    for q in ("50", "90", "95", "99"):
        assert from_csv["percentiles"]["itl_chunk_ms"][q] == pytest.approx(
            from_json["percentiles"]["itl_chunk_ms"][q], abs=0.005
        )
    # the CSV has no error_summary: the 11 are unclassified
    assert from_csv["errors"]["by_kind"] == {"other": 11} and "no error_summary" in notes(from_csv)
    # total token rate is not in the export: recomputed, and said so
    assert from_csv["total_token_throughput"] == pytest.approx((48950 + 21624) / 9.32)
    assert "total_token_throughput: recomputed by perfkit" in notes(from_csv)


def test_aiperf_0_8_export_has_metrics_at_the_top_level():
    raw = load(AIPERF_08)
    doc = read_foreign(AIPERF_08)
    assert (doc["completed"], doc["failed"]) == (64, 0)
    assert doc["duration"] == raw["benchmark_duration"]["avg"]
    assert doc["request_throughput"] == raw["request_throughput"]["avg"]
    assert doc["total_token_throughput"] == raw["total_token_throughput"]["avg"]
    lat = raw["request_latency"]
    assert (doc["mean_e2el_ms"], doc["percentiles"]["e2el_ms"]["95"]) == (lat["avg"], lat["p95"])
    assert doc["mean_ttft_ms"] is None and doc["mean_tpot_ms"] is None  # not streamed: no TTFT in the export
    load_, meta = doc["load"], doc["meta"]
    assert (load_["shape"], load_["concurrency"], load_["num_requests"], meta["seed"]) == (
        "concurrency",
        4,
        64,
        42,
    )
    assert meta["model"] == "mock-model"
    assert meta["target"] == "http://aiperf-mock-server.default.svc.cluster.local:8000/v1"
    assert "aiperf 0.8.0, export schema 1.0" in notes(doc)


def test_aiperf_export_derives_one_of_count_and_duration_and_refuses_without_both():
    raw = load(AIPERF_08)
    del raw["benchmark_duration"]
    doc = convert(raw, "a.json")
    assert doc["duration"] == pytest.approx(64 / raw["request_throughput"]["avg"])
    assert "request_count / request_throughput" in notes(doc)
    del raw["request_count"]
    with pytest.raises(
        ForeignResultError,
        match=r"^a\.json: request_count: no request_count, and no benchmark_duration to derive",
    ):
        convert(raw, "a.json")


def test_aiperf_time_units_are_converted():
    raw = load(AIPERF_08)
    raw["request_latency"] = {"unit": "sec", "avg": 0.5, "p50": 0.4}
    raw["benchmark_duration"] = {"unit": "ns", "avg": 2.0e9}
    doc = convert(raw, "a.json")
    assert (doc["mean_e2el_ms"], doc["median_e2el_ms"], doc["duration"]) == (500.0, 400.0, 2.0)
    raw["request_latency"]["unit"] = "tokens"
    with pytest.raises(ForeignResultError, match=r"request_latency\.unit: not a time unit: 'tokens'"):
        convert(raw, "a.json")


@pytest.mark.parametrize(
    ("header", "tag"),
    [
        ("Time to First Token (ms)", ("time_to_first_token", "ms")),
        ("Time To First Token (ms)", ("time_to_first_token", "ms")),  # genai-perf's spelling
        ("Request Throughput (requests/sec)", ("request_throughput", "requests/sec")),
        ("Total Output Sequence Length (tokens)", ("total_osl", "tokens")),
        ("Error Request Count", ("error_request_count", None)),
    ],
)
def test_csv_headers_name_aiperf_tags(header, tag):
    assert tag_of(header) == tag


def test_a_broken_csv_names_the_line():
    with pytest.raises(
        ForeignResultError, match=r"^x\.csv:2: Request Latency \(ms\): avg: not a number \('fast'\)$"
    ):
        read_csv("Metric,avg,p50\nRequest Latency (ms),fast,1\n", "x.csv")
    with pytest.raises(ForeignResultError, match=r"^x\.csv:1: expected a 'Metric,\.\.\.' header line first$"):
        read_csv("Request Count,3\n", "x.csv")


@pytest.mark.parametrize(
    ("code", "kind", "expected"),
    [(499, "RequestCancellationError", "cancelled"), (503, "HTTPError", "http_5xx"), (429, "", "http_4xx"),
     (None, "TimeoutError", "timeout"), (None, "ClientConnectorError", "connect"), (None, "ValueError", "other")],
)  # fmt: skip
def test_aiperf_error_summary_entries_become_kinds(code, kind, expected):
    assert error_kind(code, kind) == expected


# --- vLLM benchmarks/benchmark_serving.py --save-result, as vendored by InferenceX ------------------


def test_vllm_benchmark_serving_result_carries_the_tools_figures_as_stated():
    raw = load(VLLM_DISAGG)
    assert "failed" not in raw and "request_goodput:" in raw  # benchmark_serving.py's keys
    doc = read_foreign(VLLM_DISAGG)
    assert (
        (doc["completed"], doc["failed"])
        == (raw["completed"], raw["num_prompts"] - raw["completed"])
        == (40, 0)
    )
    assert "failed: num_prompts - completed" in notes(doc)
    assert doc["duration"] == raw["duration"] == 89.19548447802663
    assert doc["request_throughput"] == raw["request_throughput"] == pytest.approx(40 / raw["duration"])
    for key in ("output_throughput", "total_token_throughput", "total_input_tokens", "total_output_tokens"):
        assert doc[key] == raw[key], key
    for m in ("ttft", "tpot", "itl", "e2el"):  # --percentile-metrics ttft,tpot,itl,e2el
        assert [doc[f"{s}_{m}_ms"] for s in ("mean", "median", "std", "p99")] == [
            raw[f"{s}_{m}_ms"] for s in ("mean", "median", "std", "p99")
        ], m
        # --metric-percentiles 90,99,99.9: no p95 in the file, none in the document
        by_q = doc["percentiles"]["itl_chunk_ms" if m == "itl" else f"{m}_ms"]
        assert (by_q["90"], by_q["99.9"], by_q["95"]) == (raw[f"p90_{m}_ms"], raw[f"p99.9_{m}_ms"], None), m
    # chunk gaps equal TPOT (8.387 ms both): one token per chunk, so the gaps are the token ITL too
    assert raw["mean_itl_ms"] / raw["mean_tpot_ms"] == pytest.approx(1.0, abs=0.001)
    assert doc["percentiles"]["itl_ms"]["99.9"] == raw["p99.9_itl_ms"]
    load_ = doc["load"]
    assert (load_["shape"], load_["concurrency"], load_["num_requests"], load_["endpoint"]) == (
        "concurrency",
        raw["max_concurrency"],
        raw["num_prompts"],
        "completions",  # --backend openai: /v1/completions
    )
    assert doc["meta"]["model"] == raw["model_id"] and doc["meta"]["started"] is None
    assert doc["request_goodput"] is None and doc["goodput"] is None  # "request_goodput:": null


def test_vllm_benchmark_serving_with_speculative_decoding_keeps_chunk_gaps_apart_from_token_itl():
    raw = load(VLLM_MTP)
    doc = read_foreign(VLLM_MTP)
    assert (doc["completed"], doc["failed"], doc["duration"]) == (640, 0, raw["duration"])
    assert doc["total_input_tokens"] == raw["total_input_tokens"] == sum(raw["input_lens"]) == 4729077
    assert doc["total_output_tokens"] == raw["total_output_tokens"] == sum(raw["output_lens"]) == 588102
    assert doc["mean_tpot_ms"] == raw["mean_tpot_ms"] == 32.20908514635708
    # MTP drafts several tokens per step: the chunk gaps are 2.88 x TPOT, so they are no token ITL
    assert doc["percentiles"]["itl_chunk_ms"]["99"] == raw["p99_itl_ms"]
    assert doc["mean_itl_ms"] is None and doc["percentiles"]["itl_ms"]["50"] is None
    assert "chunks hold several tokens (mean ITL / TPOT = 2.88)" in notes(doc)
    # this copy of benchmark_serving.py writes the start as time.time(): a UTC instant
    started = datetime.fromtimestamp(raw["benchmark_start_time_unix"], UTC)
    assert (
        doc["meta"]["started"] == started.isoformat().replace("+00:00", "Z") == "2026-08-06T13:23:14.990249Z"
    )
    assert raw["benchmark_end_time_unix"] - raw["benchmark_start_time_unix"] == pytest.approx(doc["duration"])


# --- genai-perf CSV export ----------------------------------------------------------------------------


def test_genai_perf_csv_numbers_grouped_by_thousands_are_read_as_stated():
    text = GENAI_PERF_CSV.read_text(encoding="utf-8")
    assert '"1,146.31"' in text  # genai-perf's f"{value:,.2f}": what made perfkit refuse these files
    doc = read_foreign(GENAI_PERF_CSV)
    # Time To First Token (ms),"1,146.31",249.48,"3,485.23","3,457.97","3,349.56","3,215.06",...,640.07
    assert (doc["mean_ttft_ms"], doc["median_ttft_ms"], doc["p99_ttft_ms"]) == (1146.31, 640.07, 3457.97)
    assert (doc["percentiles"]["ttft_ms"]["95"], doc["percentiles"]["ttft_ms"]["90"]) == (3349.56, 3215.06)
    # Request Latency (ms),"6,406.20",...,p50 "5,690.23"; Inter Token Latency is the TPOT formula
    assert (doc["mean_e2el_ms"], doc["median_e2el_ms"], doc["mean_tpot_ms"]) == (6406.20, 5690.23, 30.35)
    # Metric,Value: Request Throughput (per sec),1.50; Request Count (count),40.00
    assert (doc["completed"], doc["failed"], doc["request_throughput"]) == (40, 0, 1.50)
    assert doc["output_throughput"] == 261.25
    assert doc["duration"] == pytest.approx(40 / 1.50)
    assert "request_count / request_throughput" in notes(doc)
    # no totals in a genai-perf export: mean sequence length x count, said so
    assert (doc["total_input_tokens"], doc["total_output_tokens"]) == (
        round(3000.05 * 40),
        round(174.45 * 40),
    )
    assert "total_output_tokens: the mean OSL x request_count" in notes(doc)
    assert doc["mean_itl_ms"] is None  # genai-perf states no chunk gaps


def test_genai_perf_0_0_2_csv_states_no_count_and_is_refused_naming_what_is_missing():
    text = GENAI_PERF_002.read_text(encoding="utf-8")
    assert "Time To First Token (ns)" in text and "Request Count" not in text
    tags = read_csv(text, GENAI_PERF_002.name)
    assert tags["time_to_first_token"] == {
        "unit": "ns", "avg": 5964158.0, "min": 5360334.0, "max": 18392486.0, "p99": 6875790.0,
        "p95": 6783848.0, "p90": 6688377.0, "p75": 6059403.0, "p50": 5806016.0, "p25": 5618224.0,
    }  # fmt: skip
    assert tags["request_throughput"] == {"unit": "per sec", "avg": 10.95}
    with pytest.raises(ForeignResultError) as err:
        read_foreign(GENAI_PERF_002)
    assert str(err.value) == (
        f"{GENAI_PERF_002}: request_count: no request_count, and no benchmark_duration to derive it from "
        "(genai-perf named no count before its 'Request Count' row of December 2024)"
    )
