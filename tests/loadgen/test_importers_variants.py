"""Variants of the tools' files, made from the hand-written samples (``synthetic_*``) and the
recorded ones (tests/loadgen/data/SOURCES.md) by removing or changing what the variant lacks: vLLM
results without ``completed`` or ``duration`` (forks and scripts that write vLLM's keys), a run
where every request failed, the tool's stated figure against perfkit's recomputation, a
benchmark_serving.py result run with ``--goodput``, a CSV cell that is not genai-perf's grouping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.loadgen.importers import ForeignResultError, convert, detect
from perfkit.loadgen.importers._common import keep_stated, skeleton
from perfkit.loadgen.importers.aiperf import read_csv
from perfkit.loadgen.result import check

DATA = Path(__file__).parent / "data"
VLLM = DATA / "synthetic_vllm_serve_concurrency16.json"
VLLM_DETAILED = DATA / "synthetic_vllm_serve_detailed_chunked.json"
GUIDELLM = DATA / "synthetic_guidellm_concurrent_sweep.json"
VLLM_SERVING = DATA / "vllm_bench_serving_inferencex_gptoss_disagg_conc4.json"  # recorded


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def notes(doc: dict) -> str:
    return " | ".join(doc["source"]["notes"])


def test_vllm_result_without_completed_derives_it_from_throughput_and_duration():
    raw = load(VLLM)
    del raw["completed"]
    assert detect(raw) == "vllm"
    doc = check(convert(raw, "v.json"), "v.json")
    assert doc["completed"] == round(raw["request_throughput"] * raw["duration"]) == 9
    assert "completed: request_throughput x duration = 9" in notes(doc)


def test_vllm_result_without_duration_derives_it():
    raw = load(VLLM)
    del raw["duration"]
    doc = convert(raw, "v.json")
    assert doc["duration"] == pytest.approx(raw["completed"] / raw["request_throughput"])
    assert "duration: completed / request_throughput" in notes(doc)


def test_vllm_result_without_failed_takes_it_from_num_prompts():
    raw = load(VLLM)
    del raw["failed"]
    raw["latencies"] = [
        x for x in raw["latencies"] if x > 0
    ]  # an older file: no per-request arrays of failures
    doc = convert(raw, "v.json")
    assert doc["failed"] == raw["num_prompts"] - raw["completed"] == 1
    assert "failed: num_prompts - completed" in notes(doc)


def test_vllm_result_with_neither_count_nor_duration_is_refused_naming_what_it_found():
    raw = {
        "request_throughput": 3.2,
        "output_throughput": 410.0,
        "median_ttft_ms": 52.0,
        "median_tpot_ms": 9.0,
    }
    assert detect(raw) == "vllm"
    with pytest.raises(ForeignResultError) as err:
        convert(raw, "ascend.json")
    assert str(err.value) == (
        "ascend.json: completed: missing, and not derivable: it needs duration and request_throughput "
        "(found: request_throughput, output_throughput, median_ttft_ms, median_tpot_ms)"
    )


@pytest.mark.parametrize("path", [VLLM, VLLM_DETAILED], ids=lambda p: p.name)
def test_a_vllm_run_where_every_request_failed_has_no_latency_figures(path):
    raw = load(path)
    sent = raw["completed"] + raw["failed"]
    # what vLLM writes then: np.mean([] or 0) * 1000 = 0.0 for every latency statistic
    raw.update({k: 0.0 for k in raw if k.endswith("_ms")}, completed=0, failed=sent)
    raw.update(request_throughput=0.0, output_throughput=0.0, total_output_tokens=0)
    if "latencies" in raw:
        raw["latencies"] = [0.0] * sent
    if "ttfts" in raw:
        raw.update(ttfts=[0.0] * sent, itls=[[] for _ in range(sent)], output_lens=[0] * sent)
    doc = check(convert(raw, "v.json"), "v.json")
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert [doc[f"{s}_{m}_ms"] for s in ("mean", "median", "std", "p99")] == [None] * 4, m
    assert all(v is None for by_q in doc["percentiles"].values() for v in by_q.values())
    assert doc["validity"] == {"valid": False, "reasons": ["no request completed"], "calibration": None}
    assert doc["errors"]["rate"] == 1.0


def test_a_vllm_failed_run_note_names_the_zero_figures():
    raw = load(VLLM)
    raw.update({k: 0.0 for k in raw if k.endswith("_ms")}, completed=0, failed=10, latencies=[0.0] * 10)
    assert "the file's mean_ttft_ms, median_ttft_ms" in notes(convert(raw, "v.json"))


def test_a_guidellm_stated_rate_is_kept_and_the_recomputed_one_labelled():
    raw = load(GUIDELLM)
    raw["benchmarks"][1]["metrics"]["requests_per_second"]["successful"]["mean"] = 8.2  # 218 / 20 s = 10.9
    doc = convert(raw, "g.json", index=1)
    assert doc["request_throughput"] == 8.2
    assert doc["source"]["recomputed"]["request_throughput"] == pytest.approx(10.9)
    assert "requests_per_second (successful, mean) 8.2 kept; perfkit's recomputation 10.9 (+32.9 %)" in notes(
        doc
    )


def test_keep_stated_labels_a_figure_only_perfkit_computed_and_quietly_keeps_agreeing_ones():
    doc, said = skeleton("x", "x.json"), []
    keep_stated(doc, "request_throughput", None, 2.0, "rps", said)
    keep_stated(doc, "output_throughput", 100.0, 100.2, "tps", said)
    keep_stated(doc, "total_token_throughput", None, None, "tts", said)
    assert (doc["request_throughput"], doc["output_throughput"], doc["total_token_throughput"]) == (
        2.0,
        100.0,
        None,
    )
    assert doc["source"]["recomputed"] == {"output_throughput": 100.2}
    assert said == [
        "request_throughput: recomputed by perfkit (rps is not in the file)"
    ]  # 0.2 % apart: no note


def test_benchmark_serving_goodput_under_its_key_with_a_colon_is_read():
    raw = load(VLLM_SERVING)
    raw["request_goodput:"] = 0.3363  # what --goodput would have written there (0.75 of 40 over 89.2 s)
    doc = check(convert(raw, "v.json"), "v.json")
    assert doc["request_goodput"] == 0.3363
    assert doc["goodput"]["met"] == round(0.3363 * raw["duration"]) == 30
    assert doc["goodput"]["attainment"] == pytest.approx(30 / 40)
    assert "goodput: benchmark_serving.py's key 'request_goodput:' (with the colon)" in notes(doc)


def test_a_start_time_that_is_no_unix_time_is_refused_naming_the_key():
    raw = load(VLLM_SERVING)
    raw["benchmark_start_time_unix"] = 1e300
    with pytest.raises(ForeignResultError, match=r"^v\.json: benchmark_start_time_unix: not a Unix time \(1e\+300\)$"):  # fmt: skip
        convert(raw, "v.json")


@pytest.mark.parametrize("cell", ["1,5", "12,34.5", "1,2345.0", ",123"])
def test_a_csv_cell_with_commas_other_than_thousands_groups_is_no_number(cell):
    with pytest.raises(ForeignResultError, match=r"^x\.csv:2: Request Latency \(ms\): avg: not a number"):
        read_csv(f'Metric,avg\nRequest Latency (ms),"{cell}"\n', "x.csv")


def test_csv_thousands_groups_are_read_whole():
    doc = read_csv('Metric,avg,p99\nRequest Latency (ms),"1,234,567.5","1,000"\n', "x.csv")
    assert doc["request_latency"] == {"unit": "ms", "avg": 1234567.5, "p99": 1000.0}
