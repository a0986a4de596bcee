"""The engine dialects (issue 24) against the engines' own recorded output (tests/data/engines/SOURCES.md):
every name perfkit's catalogue gives SGLang, TensorRT-LLM and Dynamo is in a real /metrics page of that
engine with the type the catalogue reads it as, and SGLang's real log lines give its stats and settings."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from perfkit.core.frames import Window
from perfkit.engine import dialects
from perfkit.engine import signals as S
from perfkit.sources.engine_config import engine_config_from_logs
from perfkit.sources.engine_lines import is_trtllm_launch, sglang_stats
from perfkit.sources.logs import parse_lines

DATA = Path(__file__).resolve().parents[1] / "data" / "engines"
_TYPE = re.compile(r"^# TYPE (\S+) (\w+)$", re.MULTILINE)


def families(*names: str) -> dict[str, str]:
    """family → type of real expositions (prometheus_client writes counters' TYPE without ``_total``)."""
    out = {}
    for name in names:
        for fam, kind in _TYPE.findall((DATA / name).read_text(encoding="utf-8")):
            out[fam + ("_total" if kind == "counter" and not fam.endswith("_total") else "")] = kind
    return out


def current_names(d: dialects.Dialect, kind: str) -> set[str]:
    """The current (first) name of each signal of ``kind`` in dialect ``d``, its family (matchers off)."""
    return {dialects.family(names[0]) for names in getattr(d, kind).values()}


@pytest.mark.parametrize(
    ("dialect", "sample", "optional"),
    [
        # SGLang's token-length histograms need --collect-tokens-histogram, which the recorded worker lacks;
        # its retraction, abort and cached-token counters are newer than that worker (they are in
        # collector.py at 00ae9c1, sglang_collector_names.md)
        (
            dialects.SGLANG,
            "sglang_dynamo_worker_metrics.txt",
            {
                "sglang:prompt_tokens_histogram",
                "sglang:num_retracted_requests_total",
                "sglang:num_aborted_requests_total",
                "sglang:cached_tokens_total",
            },
        ),
        # the frontend's page and a worker's system port (the kvstats gauges)
        (dialects.DYNAMO, ("dynamo_metrics_docs.txt", "vllm_dynamo_worker_metrics.txt"), set()),
    ],
)
def test_catalogue_names_are_in_the_engines_real_metrics(dialect, sample, optional):
    real = families(*((sample,) if isinstance(sample, str) else sample))
    for kind, want in (("histograms", "histogram"), ("gauges", "gauge"), ("counters", "counter")):
        for name in current_names(dialect, kind) - optional - {"sglang:generation_tokens_histogram"}:
            assert real.get(name) == want, (
                f"{dialect.name}: {name} is {real.get(name)} in {sample}, not {want}"
            )


def test_trtllm_names_of_a_real_trtllm_worker():
    """TensorRT-LLM 1.1 (under Dynamo) exports five metrics; each is the catalogue's current name."""
    real = families("trtllm_dynamo_worker_metrics.txt")
    exported = {f for f in real if f.startswith("trtllm_") and not f.endswith("_created")}
    catalogue = {n for kind in ("histograms", "counters") for n in current_names(dialects.TRTLLM, kind)}
    assert exported and exported <= catalogue
    for sig in ("ttft", "e2e", "queue", "tpot"):
        assert real[dialects.TRTLLM.histograms[sig][0]] == "histogram"


class _Has:
    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.name = "fake"

    def has(self, metric: str) -> bool:
        return metric in self.names


@pytest.mark.parametrize(
    ("sample", "engine"),
    [
        ("sglang_dynamo_worker_metrics.txt", "sglang"),
        ("trtllm_dynamo_worker_metrics.txt", "trtllm"),
        ("vllm_metrics_docs_example.txt", "vllm"),
    ],
)
def test_signals_resolve_to_the_engine_that_served(sample, engine):
    path = DATA / sample if (DATA / sample).exists() else DATA.parent / sample
    text = path.read_text(encoding="utf-8")
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
    res = S.resolve(_Has(samples), "ttft")
    assert res.found and res.engine == engine and res.metric + "_bucket" in samples
    # a signal the engine lacks resolves to nothing, never to another engine's name
    if engine == "trtllm":
        assert not S.resolve(_Has(samples), "itl").found
        assert "inter-token" in (dialects.lacks("trtllm", "itl") or "")


def _window() -> Window:
    return Window(datetime(2025, 1, 23, tzinfo=UTC), datetime(2025, 1, 24, tzinfo=UTC))


def test_sglang_real_log_lines_give_stats_rows_and_settings():
    lines = (DATA / "sglang_log_lines.txt").read_text(encoding="utf-8").splitlines()
    real = [ln for ln in lines if not ln.startswith("#")]
    parsed = parse_lines(real[:33], window=_window(), source="sglang.log")  # one server's start and run
    kinds = parsed.records["kind"].to_list()
    assert "sglang" in kinds  # the server_args line
    assert kinds.count("sglang_prefill") >= 1 and kinds.count("sglang_decode") >= 1
    stats = parsed.stats
    assert stats.height == kinds.count("sglang_prefill") + kinds.count("sglang_decode")
    assert stats["ts"].null_count() == 0 and stats["running"].min() >= 0
    config = engine_config_from_logs(parsed.records)
    # that line: chunked_prefill_size=8192, mem_fraction_static=0.88, max_running_requests=None,
    # disable_radix_cache=False
    assert config == {
        "chunked_prefill": True,
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.88,
        "prefix_caching": True,
    }


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "Decode batch. #running-req: 3, #token: 1234, token usage: 0.05, gen throughput (token/s): 123.45, "
            "#queue-req: 2",
            ("decode", None, 123.45, 3, 2, 0.05),
        ),
        # newer SGLang: a comma after "batch" and fields between (read by name, unknown ones skipped)
        (
            "Decode batch, #running-req: 1, #token: 10, token usage: 0.00, cuda graph: True, "
            "gen throughput (token/s): 5.81, #queue-req: 0,",
            ("decode", None, 5.81, 1, 0, 0.0),
        ),
        ("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00", None),
        ("Decode batch. #running-req: -1, #queue-req: 0", None),
        ("a user wrote: Decode batch. #running-req: 1e309, #queue-req: nan", None),
    ],
)
def test_sglang_scheduler_line_fields(line, want):
    got = sglang_stats(line)
    if want is None:
        assert got is None or got[3] >= 0 and got[4] >= 0 and got == got
    else:
        assert got == want


def test_trtllm_serve_command_line_settings():
    cmd = (
        "2026-12-02 10:00:00 launcher: exec trtllm-serve serve meta-llama/Llama-3.1-8B --backend pytorch "
        "--max_batch_size 64 --max_num_tokens 8192 --kv_cache_free_gpu_memory_fraction 0.85"
    )
    assert is_trtllm_launch(cmd)
    parsed = parse_lines(
        [cmd], window=Window(datetime(2026, 12, 2, tzinfo=UTC), datetime(2026, 12, 3, tzinfo=UTC))
    )
    assert parsed.records["kind"].to_list() == ["vllm_launch"]
    # chunked prefill is off unless --enable_chunked_prefill: trtllm-serve's default
    assert engine_config_from_logs(parsed.records) == {
        "chunked_prefill": False,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 64,
        "gpu_memory_utilization": 0.85,
    }
    with_options = parse_lines(
        [cmd + " --extra_llm_api_options extra.yaml"],
        window=Window(datetime(2026, 12, 2, tzinfo=UTC), datetime(2026, 12, 3, tzinfo=UTC)),
    )
    assert "chunked_prefill" not in engine_config_from_logs(with_options.records)  # the file may turn it on


def _triton_scrapes(extra_s: float) -> str:
    """The recorded Triton page's series at t0 as it printed them, and a minute later with 100 more
    successes that queued ``extra_s`` and took 2 s each (Triton's counters count microseconds)."""
    real = [ln for ln in (DATA / "triton_trtllm_metrics_docs.txt").read_text(encoding="utf-8").splitlines()]
    samples = [ln for ln in real if ln and not ln.startswith("#")]
    t0, t1 = 1_700_000_000, 1_700_000_060
    out = [ln for ln in real if ln.startswith("# TYPE")]
    later = {
        "nv_inference_request_success": 100,
        "nv_inference_queue_duration_us": 100 * extra_s * 1e6,
        "nv_inference_request_duration_us": 100 * 2.0 * 1e6,
    }
    for ln in samples:
        head, value = ln.rsplit(" ", 1)
        name = head.split("{")[0]
        out.append(f"{head} {value} {t0}")
        out.append(f"{head} {float(value) + later.get(name, 0.0)} {t1}")
    return "\n".join(out) + "\n# EOF\n"


def test_triton_gauges_by_label_and_microsecond_counters_in_seconds():
    """Triton's TensorRT-LLM backend: running, waiting, every request held and KV usage are series of two
    families picked by label, and its latencies are microsecond counters: the E2E mean comes out in
    seconds, and Triton's own scheduler queue is never read as the engine's queue time."""
    from perfkit.engine.local import LocalEngine
    from perfkit.sources.openmetrics import parse_text

    engine = LocalEngine(parse_text(_triton_scrapes(0.25), require_eof=True))
    window = Window(datetime.fromtimestamp(1_700_000_000, UTC), datetime.fromtimestamp(1_700_000_060, UTC))
    waiting = S.resolve(engine, "waiting")
    assert waiting.engine == "triton" and waiting.matchers == {"request_type": "waiting"}
    # the recorded page: request_type "waiting" 1, "scheduled" 1, "active" 0 (not the sum of the
    # family's five series); the running batch is "scheduled" (model_instance_state.cc: numScheduledRequests),
    # "active" every request the executor holds (numActiveRequests, waiting ones too)
    assert S.resolve(engine, "running").matchers == {"request_type": "scheduled"}
    assert S.gauge_stat(engine, "waiting", window, "max") == 1.0
    assert S.gauge_stat(engine, "running", window, "max") == 1.0
    assert S.gauge_stat(engine, "inflight", window, "max") == 0.0
    # KV usage: the backend's used/max blocks fraction, as the page printed it
    assert S.gauge_stat(engine, "kv_cache_usage", window, "max", combine="max") == pytest.approx(0.4875)
    assert S.window_mean(engine, "e2e", window) == pytest.approx(2.0)
    # nv_inference_queue_duration_us: Triton's scheduler queue, which the backend leaves at once
    assert S.window_mean(engine, "queue", window) is None and "queue" in (
        dialects.lacks("triton", "queue") or ""
    )
    assert S.window_mean(engine, "server_queue", window) == pytest.approx(0.25)
    assert not S.resolve(engine, "ttft").found and "TTFT" in (dialects.lacks("triton", "ttft") or "")
    # no E2E histogram: requests per second from the success counter (100 in 60 s)
    assert S.request_rate(engine, window) == pytest.approx(100 / 60, rel=0.01)


def test_speculative_decoding_counters_are_vllms_own_names():
    """The catalogue's spec_decode names are the counters vllm/v1/spec_decode/metrics.py declares
    (recorded in vllm_spec_decode_names.md), each as it appears on the wire."""
    table = (DATA / "vllm_spec_decode_names.md").read_text(encoding="utf-8")
    wire = set(re.findall(r"^\| (vllm:spec_decode_\w+) \| counter \|", table, re.MULTILINE))
    ours = {
        n
        for sig in ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")
        for n in dialects.VLLM.counters[sig]
    }
    assert ours and ours <= wire
