"""What the catalogue reads of TGI, Dynamo and Triton (issue 35), against the engines' recorded pages and
name lists (tests/data/engines/SOURCES.md): histogram series narrowed by a label (TGI's forward time per
method), a gauge that is a ratio of two (TGI's KV usage), bucket bounds as Rust and C++ exporters write
them (``le="7400"``, not ``"7400.0"``), Dynamo's frontend gauges that are no queue length, and the request
rate of an engine without an E2E histogram."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from perfkit.core.frames import Window
from perfkit.engine import dialects
from perfkit.engine import signals as S
from perfkit.engine.local import LocalEngine
from perfkit.sources.openmetrics import parse_text

DATA = Path(__file__).resolve().parents[1] / "data" / "engines"
T0 = datetime(2026, 11, 12, 1, 0, tzinfo=UTC)
WINDOW = Window(T0 - timedelta(minutes=2), T0 + timedelta(minutes=8))


def _rows(table: str) -> list[list[str]]:
    """The rows of a Markdown table in ``table``'s file under its first ``| name | type |`` header."""
    out = []
    for line in (DATA / table).read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and not line.startswith(("| name", "|---")):
            out.append([c.strip() for c in line.strip("|").split("|")])
    return out


def _catalogue(d: dialects.Dialect) -> dict[str, str]:
    """Every name of dialect ``d`` (matchers kept) → the type the catalogue reads it as."""
    out = {n: "histogram" for names in d.histograms.values() for n in names}
    out |= {n: "gauge" for names in d.gauges.values() for n in names}
    out |= {n: "gauge" for pair in d.ratios.values() for n in pair}
    out |= {n: "counter" for names in d.counters.values() for n in names}
    out |= {n: "counter" for t, c, _ in d.means.values() for n in (t, c)}
    return out


def test_tgi_names_are_tgis_own():
    """Every TGI name is in TGI's documented table or emitted in its code (tgi_names.md), with the type
    the catalogue reads it as, and a label it narrows by is one TGI sets (``method``)."""
    known = {row[0]: row for row in _rows("tgi_names.md") if row[0].startswith("tgi_")}
    for name, kind in _catalogue(dialects.TGI).items():
        row = known.get(dialects.family(name))
        assert row is not None, f"{name} is not a TGI metric"
        assert row[1].startswith(kind), f"{name}: TGI's is a {row[1]}, the catalogue reads a {kind}"
        for label in dialects.matchers(name):
            assert f"`{label}`" in row[-1], f"{name}: TGI sets no {label} label"


def test_triton_names_are_the_backends_own():
    """Every Triton name is one the TensorRT-LLM backend or Triton itself exports (triton_trtllm_names.md),
    with the type the catalogue reads, and a matcher picks a label value the backend writes."""
    rows = _rows("triton_trtllm_names.md")
    families = {row[0]: row for row in rows if row[0].startswith("nv_")}
    text = (DATA / "triton_trtllm_names.md").read_text(encoding="utf-8")
    for name, kind in _catalogue(dialects.TRITON).items():
        fam = dialects.family(name)
        if fam.startswith("nv_inference_"):  # Triton's own counters, listed in the prose
            assert f"`{fam}`" in text
            continue
        values = {v.strip() for row in rows if row[0] == fam for v in row[3].split(",")}
        assert families[fam][1] == kind, name
        for label, value in dialects.matchers(name).items():
            assert families[fam][2] == label and value in values, name


def _scrapes(series: dict[str, tuple[float, float]], types: dict[str, str]) -> LocalEngine:
    """Each sample line ``name{labels}`` at ``a`` before T0 and ``b`` from T0, every 15 s (20 minutes)."""
    lines = [f"# TYPE {fam} {kind}" for fam, kind in types.items()]
    for k in range(-20, 41):
        at = f"{(T0 + timedelta(seconds=15 * k)).timestamp():.0f}"
        for head, (a, b) in series.items():
            lines.append(f"{head} {b if k >= 0 else a!r} {at}")
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))


def _tgi_forward() -> LocalEngine:
    """TGI's tgi_batch_forward_duration with both methods (bounds as metrics-exporter-prometheus writes
    Rust f64s: 0.0001 x 1.5^k, no ``.0``), its batch gauges and its KV budget."""
    bounds = [0.0001 * 1.5**k for k in range(1, 36)]
    series: dict[str, tuple[float, float]] = {}
    # prefill calls: 10, all between bounds[20] (0.3325 s) and bounds[21]; decode calls: 1000, all
    # at or under bounds[5] (0.00114 s)
    for method, n, first in (("prefill", 10.0, 21), ("decode", 1000.0, 5)):
        for i, b in enumerate(bounds):
            le = f"{b}".rstrip("0") if "e" not in f"{b}" else f"{b:.20f}".rstrip("0")
            series[f'tgi_batch_forward_duration_bucket{{method="{method}",le="{le}"}}'] = (
                0.0,
                n if i >= first else 0.0,
            )
        series[f'tgi_batch_forward_duration_bucket{{method="{method}",le="+Inf"}}'] = (0.0, n)
        series[f'tgi_batch_forward_duration_count{{method="{method}"}}'] = (0.0, n)
        series[f'tgi_batch_forward_duration_sum{{method="{method}"}}'] = (
            0.0,
            n * (0.4 if method == "prefill" else 0.001),
        )
    series["tgi_batch_current_max_tokens"] = (1000.0, 30000.0)
    series["tgi_batch_max_total_tokens"] = (40000.0, 40000.0)
    series["tgi_batch_current_size"] = (1.0, 12.0)
    types = {
        "tgi_batch_forward_duration": "histogram",
        "tgi_batch_current_max_tokens": "gauge",
        "tgi_batch_max_total_tokens": "gauge",
        "tgi_batch_current_size": "gauge",
    }
    return _scrapes(series, types)


def test_a_histogram_signal_narrowed_by_a_label():
    """TGI's prefill_forward is tgi_batch_forward_duration{method="prefill"}: its mean, quantiles, counts
    and bucket counts are the prefill calls' alone, never pooled with the thousand decode calls."""
    e = _tgi_forward()
    res = S.resolve(e, "prefill_forward")
    assert (res.engine, res.metric, res.matchers) == (
        "tgi",
        "tgi_batch_forward_duration",
        {"method": "prefill"},
    )
    assert S.window_mean(e, "prefill_forward", WINDOW) == pytest.approx(0.4)
    assert S.window_mean(e, "decode_forward", WINDOW) == pytest.approx(0.001)
    assert S.window_count(e, "prefill_forward", WINDOW) == pytest.approx(10.0, rel=0.02)
    p50 = S.window_quantiles(e, "prefill_forward", (0.5,), WINDOW)[0.5]
    assert 0.0001 * 1.5**21 < p50 <= 0.0001 * 1.5**22
    queries: list[str] = []
    S.window_quantiles(e, "decode_forward", (0.5,), WINDOW, queries)
    assert 'method="decode"' in queries[0]
    # a bound as TGI writes it ("0.33215..." without an exponent): counted all the same
    assert S.window_count(e, "prefill_forward", WINDOW, le=0.0001 * 1.5**21) == pytest.approx(0.0, abs=1e-9)
    assert S.window_count(e, "prefill_forward", WINDOW, le=0.0001 * 1.5**22) == pytest.approx(10.0, rel=0.02)


def test_tgis_kv_usage_is_its_batch_tokens_over_the_kv_budget():
    """TGI exports no KV usage gauge: tgi_batch_current_max_tokens (the KV tokens the running batch was
    allocated) over tgi_batch_max_total_tokens (what the KV cache holds) stands in."""
    e = _tgi_forward()
    res = S.resolve(e, "kv_cache_usage")
    assert (res.engine, res.metric, res.divisor) == (
        "tgi",
        "tgi_batch_current_max_tokens",
        "tgi_batch_max_total_tokens",
    )
    assert S.gauge_stat(e, "kv_cache_usage", WINDOW, "max", combine="max") == pytest.approx(0.75)
    assert 0.025 < S.gauge_stat(e, "kv_cache_usage", WINDOW, "avg", combine="max") < 0.75
    frame = S.gauge_series(e, "kv_cache_usage", WINDOW, 60.0, combine="max")
    assert frame["value"].max() == pytest.approx(0.75) and frame["value"].min() == pytest.approx(0.025)
    # an engine with a KV gauge of its own is read through it, never through the ratio
    assert "tgi_batch_max_total_tokens" in dialects.TGI.families()


def _page(name: str) -> str:
    return "\n".join(
        ln for ln in (DATA / name).read_text(encoding="utf-8").splitlines() if not ln.startswith("# Source")
    )


def _twice(text: str, zero: bool) -> LocalEngine:
    """A recorded page as two scrapes: every sample at 0 (``zero``) or as printed before T0, as printed
    from T0 (the page's one request arrives in the window)."""
    out = []
    samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    types = [ln for ln in text.splitlines() if ln.startswith("# TYPE")]
    out.extend(types)
    for k in range(-20, 41):
        at = f"{(T0 + timedelta(seconds=15 * k)).timestamp():.0f}"
        for ln in samples:
            head, value = ln.rsplit(" ", 1)
            v = 0.0 if (zero and k < 0) else float(value)
            out.append(f"{head} {v!r} {at}")
    return LocalEngine(parse_text("\n".join(out) + "\n# EOF\n", require_eof=True))


def test_dynamo_bucket_bounds_as_rust_writes_them():
    """Dynamo's frontend writes le="7400" (Rust's f64 Display): a count up to a bound reads the bucket
    whatever its spelling (the one request of the recorded page had a prompt of 100 tokens or less)."""
    e = _twice(_page("dynamo_metrics_docs.txt"), zero=True)
    bounds = re.findall(
        r'dynamo_frontend_input_sequence_tokens_bucket\{[^}]*le="([^"]+)"\} (\S+)',
        _page("dynamo_metrics_docs.txt"),
    )
    assert ("7400", "1") in bounds and ("7400.0", "1") not in bounds
    total = S.window_count(e, "prompt_tokens", WINDOW)
    assert total == pytest.approx(1.0, rel=0.02)
    queries: list[str] = []
    assert S.window_count(e, "prompt_tokens", WINDOW, le=7400.0, queries=queries) == pytest.approx(total)
    assert queries == ['sum (increase(dynamo_frontend_input_sequence_tokens_bucket{le="7400"}[10m]))']
    step = S.rate_series(e, "prompt_tokens", WINDOW, 60.0, histogram_count=True, le=7400.0)
    assert step.height and step["value"].max() > 0


def test_dynamo_frontend_gauges_are_no_queue_length():
    """dynamo_frontend_queued_requests counts requests until their first token (prefill included) and
    dynamo_frontend_inflight_requests until their last (metrics.rs): neither answers "waiting" or
    "running"; they are read under their own names."""
    page = _page("dynamo_metrics_docs.txt")
    e = _twice(page, zero=False)
    assert not S.resolve(e, "waiting").found and not S.resolve(e, "running").found
    assert S.resolve(e, "awaiting_first_token").metric == "dynamo_frontend_queued_requests"
    assert S.resolve(e, "inflight").metric == "dynamo_frontend_inflight_requests"
    assert "prefill included" in (dialects.lacks("dynamo", "waiting") or "")
    # the worker's system port: its KV usage, a fraction despite the name (vLLM's own gauge first
    # where the worker's vLLM series are scraped too)
    worker = _page("vllm_dynamo_worker_metrics.txt")
    alone = "\n".join(ln for ln in worker.splitlines() if "vllm:" not in ln)
    assert S.resolve(_twice(alone, zero=False), "kv_cache_usage").metric == (
        "dynamo_component_kvstats_gpu_cache_usage_percent"
    )
    assert S.resolve(_twice(worker, zero=False), "kv_cache_usage").metric == "vllm:kv_cache_usage_perc"
    assert S.resolve(e, "generation_tokens_total").metric == "dynamo_frontend_output_tokens_total"


def test_triton_token_histograms_as_the_backend_writes_them():
    """nv_llm_input_token_len / nv_llm_output_token_len: one observation per finished request, buckets
    10, 50, 100, 500, 1000 written without ".0" (the backend's CI test reads le="10" ... le="+Inf")."""
    series: dict[str, tuple[float, float]] = {}
    for fam, kind, counts in (
        ("nv_llm_input_token_len", "total_input_tokens", (0, 0, 2, 5, 9, 10)),
        ("nv_llm_output_token_len", "total_output_tokens", (0, 1, 4, 10, 10, 10)),
    ):
        for le, n in zip(("10", "50", "100", "500", "1000", "+Inf"), counts, strict=True):
            labels = f'model="tensorrt_llm",response_metric_type="{kind}",version="1"'
            series[f'{fam}_bucket{{{labels},le="{le}"}}'] = (0.0, float(n))
        series[f"{fam}_count{{{labels}}}"] = (0.0, 10.0)
        series[f"{fam}_sum{{{labels}}}"] = (0.0, 4000.0 if kind == "total_input_tokens" else 800.0)
    e = _scrapes(series, {"nv_llm_input_token_len": "histogram", "nv_llm_output_token_len": "histogram"})
    assert S.resolve(e, "prompt_tokens").engine == "triton"
    assert S.window_count(e, "prompt_tokens", WINDOW, le=500.0) == pytest.approx(5.0, rel=0.02)
    assert S.window_count(e, "generation_tokens", WINDOW, le=100.0) == pytest.approx(4.0, rel=0.02)
    assert S.window_mean(e, "prompt_tokens", WINDOW) == pytest.approx(400.0)
    assert 500 < S.window_quantiles(e, "prompt_tokens", (0.9,), WINDOW)[0.9] <= 1000


def test_request_rate_is_the_e2e_histograms_where_there_is_one():
    """vLLM (an E2E histogram): the histogram's observations per second, as always; an engine with a
    finished-request counter only: its rate."""
    series = {
        'vllm:e2e_request_latency_seconds_bucket{le="1.0"}': (0.0, 600.0),
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf"}': (0.0, 600.0),
        "vllm:e2e_request_latency_seconds_count": (0.0, 600.0),
        "vllm:e2e_request_latency_seconds_sum": (0.0, 300.0),
        'vllm:request_success_total{finished_reason="stop"}': (0.0, 999.0),
    }
    e = _scrapes(series, {"vllm:e2e_request_latency_seconds": "histogram", "vllm:request_success": "counter"})
    queries: list[str] = []
    assert S.request_rate(e, WINDOW, queries) == S.histogram_rate(e, "e2e", WINDOW)
    assert queries == ["sum (rate(vllm:e2e_request_latency_seconds_count[10m]))"]
    only = _scrapes(
        {'nv_inference_request_success{model="tensorrt_llm",version="1"}': (0.0, 600.0)},
        {"nv_inference_request_success": "counter"},
    )
    assert not S.resolve(only, "e2e").found
    assert S.request_rate(only, WINDOW) == S.counter_rate(only, "request_success", WINDOW)
    assert S.request_rate_series(only, WINDOW, 60.0).height


@pytest.mark.parametrize(
    ("bound", "spellings"),
    [
        (7400.0, ("7400.0", "7400")),  # prometheus_client, then Rust / prometheus-cpp
        (0.0019, ("0.0019",)),
        (1e-05, ("1e-05", "0.00001")),  # Python and Go, then Rust
        (1e6, ("1000000.0", "1000000", "1e+06")),  # Go's shortest %g
        (float("inf"), ("+Inf",)),
    ],
)
def test_bucket_bound_spellings(bound, spellings):
    from perfkit.engine.buckets import le_spellings

    assert le_spellings(bound) == spellings
