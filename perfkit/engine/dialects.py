"""Each serving engine's names for the signals perfkit reads: one catalogue, every engine's dialect.

A *signal* is what an analysis wants (``ttft``, ``waiting``); a *dialect* is one engine's exporter,
which names the signal its own way. :mod:`perfkit.engine.signals` resolves a signal to the first
name a source has, engine by engine in :data:`DIALECTS` order (vLLM first, the frontends last: a
Dynamo frontend in front of vLLM workers is read through the workers' own series when both are
there). Within a dialect, the current name comes first and the names it replaced after it.

Every name below was read in the engine's own source or documentation (the file and version beside
each dialect; ``docs/engines.md`` has the whole table with types, units and buckets, and the
engines' real ``/metrics`` examples recorded in ``tests/data/engines/`` are parsed against it by
``tests/engine/test_dialects.py``). All latencies listed are histograms in seconds with Prometheus'
``_bucket``/``_sum``/``_count``; KV usage is a fraction in [0, 1] in every dialect.

What a dialect does not export is absent here, and :func:`lacks` says which server flag turns it
on when one does (SGLang's token-length histograms need ``--collect-tokens-histogram``).

A catalogue name may carry label matchers (``family{label="value"}``): a gauge, counter or histogram
series of one family narrowed to those labels (Triton's ``nv_trt_llm_request_metrics{request_type=
"scheduled"}``, TGI's ``tgi_batch_forward_duration{method="prefill"}``). Two readings stand in where an
engine has no series of the signal's own: a mean from cumulative time and count counters
(:attr:`Dialect.means`, Triton's microsecond counters) and a gauge that is the ratio of two of the
engine's gauges (:attr:`Dialect.ratios`, TGI's KV tokens allocated over the most the KV cache holds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Dialect:
    """One engine's exporter: its names for each signal, how to recognise it, where that came from."""

    name: str  # the --engine value
    title: str  # how a person names the engine
    source: str  # the upstream file (and version) the names were read from
    histograms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gauges: dict[str, tuple[str, ...]] = field(default_factory=dict)
    counters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: signal → what the engine lacks and how to get it ("" when no flag helps)
    flags: dict[str, str] = field(default_factory=dict)
    #: info metrics whose labels carry the engine's settings
    info: tuple[str, ...] = ()
    #: histogram signal → (time counter, count counter, seconds per unit): a mean the engine gives only
    #: as cumulative counters (Triton's, in microseconds); the mean over a window is Δtime / Δcount x unit
    means: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    #: gauge signal → (numerator gauge, denominator gauge): a gauge the engine gives only as the ratio
    #: of two of its gauges, each the whole family (read where no engine has a gauge of the signal)
    ratios: dict[str, tuple[str, str]] = field(default_factory=dict)

    def families(self) -> frozenset[str]:
        """Every sample name of this dialect in the catalogue (histograms with their suffixes)."""
        names = {f"{family(b)}{s}" for bases in self.histograms.values() for b in bases for s in _SUFFIXES}
        names |= {family(n) for group in (self.gauges, self.counters) for ns in group.values() for n in ns}
        names |= {n for t, c, _ in self.means.values() for n in (t, c)}
        names |= {n for pair in self.ratios.values() for n in pair}
        return frozenset(names | set(self.info))

    def recognise(self) -> tuple[str, ...]:
        """Sample names whose presence says this engine served: its TTFT or E2E histogram's
        ``_count``, its running gauge, its success counter (whichever it has)."""
        out = [f"{family(b)}_count" for sig in ("ttft", "e2e") for b in self.histograms.get(sig, ())]
        out += [family(n) for sig in ("running",) for n in self.gauges.get(sig, ())]
        out += [family(n) for sig in ("request_success",) for n in self.counters.get(sig, ())]
        return tuple(out)


_SUFFIXES = ("_bucket", "_sum", "_count")
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')


def family(name: str) -> str:
    """A catalogue name's metric family (``nv_trt_llm_request_metrics{request_type="active"}`` → the part
    before the braces)."""
    return name.split("{", 1)[0]


def matchers(name: str) -> dict[str, str]:
    """The label matchers a catalogue name carries (``{request_type="active"}`` → that pair)."""
    return dict(_MATCHER.findall(name.split("{", 1)[1])) if "{" in name else {}


VLLM = Dialect(
    "vllm",
    "vLLM",
    "vllm-project/vllm vllm/v1/metrics/loggers.py (0.10.1, 0.33.0) and vllm/engine/metrics.py (V0, 0.6.3)",
    histograms={
        "ttft": ("vllm:time_to_first_token_seconds",),
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "tpot": ("vllm:request_time_per_output_token_seconds",),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
        "prefill": ("vllm:request_prefill_time_seconds",),
        "decode": ("vllm:request_decode_time_seconds",),
        "inference": ("vllm:request_inference_time_seconds",),
        "prompt_tokens": ("vllm:request_prompt_tokens",),
        "generation_tokens": ("vllm:request_generation_tokens",),
    },
    gauges={
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    },
    counters={
        "prompt_tokens_total": ("vllm:prompt_tokens_total",),
        "generation_tokens_total": ("vllm:generation_tokens_total",),
        "request_success": ("vllm:request_success_total",),
        "preemptions": ("vllm:num_preemptions_total",),
        "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        # speculative decoding, only with a speculative config (vllm/v1/spec_decode/metrics.py; V0 had
        # the two token counters under the same names and no drafts counter)
        "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
        "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
        "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
    },
    info=("vllm:cache_config_info",),
)

SGLANG = Dialect(
    "sglang",
    "SGLang",
    "sgl-project/sglang python/sglang/srt/metrics/collector.py (00ae9c1, 2026) and "
    "docs/references/production_metrics.md; exported with --enable-metrics",
    histograms={
        "ttft": ("sglang:time_to_first_token_seconds",),
        # the per-token interval; SGLang before 0.4.7 called it time_per_output_token_seconds
        "itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "e2e": ("sglang:e2e_request_latency_seconds",),
        "queue": ("sglang:queue_time_seconds",),
        "prompt_tokens": ("sglang:prompt_tokens_histogram",),
        "generation_tokens": ("sglang:generation_tokens_histogram",),
    },
    gauges={
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),  # used / max_total_num_tokens of the KV pool
    },
    counters={
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "generation_tokens_total": ("sglang:generation_tokens_total",),
        "request_success": ("sglang:num_requests_total",),  # every finished request, aborted ones too
        "request_aborted": ("sglang:num_aborted_requests_total",),
        "preemptions": ("sglang:num_retracted_requests_total",),  # a retraction is SGLang's preemption
        "prefix_cache_queries": ("sglang:prompt_tokens_total",),  # every prompt token is looked up
        "prefix_cache_hits": ("sglang:cached_tokens_total",),
    },
    flags={
        "prompt_tokens": "SGLang exports its prompt-length histogram only with --collect-tokens-histogram",
        "generation_tokens": "SGLang exports its output-length histogram only with --collect-tokens-histogram",
        "prefill": "SGLang exports no per-request prefill-time histogram (TTFT less queue time stands in)",
        "decode": "SGLang exports no per-request decode-time histogram (E2E less TTFT stands in)",
        "tpot": "SGLang exports no per-request TPOT histogram (its inter-token latency stands in)",
    },
)

TRTLLM = Dialect(
    "trtllm",
    "TensorRT-LLM",
    "NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py (050f80d, 2026: trtllm_ prefix); "
    "Dynamo's docs/backends/trtllm/prometheus.md for 1.1.0rc5 (five metrics) and the older trtllm: prefix",
    histograms={
        "ttft": ("trtllm_time_to_first_token_seconds", "trtllm:time_to_first_token_seconds"),
        "tpot": ("trtllm_time_per_output_token_seconds", "trtllm:time_per_output_token_seconds"),
        "e2e": ("trtllm_e2e_request_latency_seconds", "trtllm:e2e_request_latency_seconds"),
        "queue": ("trtllm_request_queue_time_seconds", "trtllm:request_queue_time_seconds"),
        "prefill": ("trtllm_request_prefill_time_seconds",),
        "decode": ("trtllm_request_decode_time_seconds",),
        "inference": ("trtllm_request_inference_time_seconds",),
    },
    gauges={
        "running": ("trtllm_num_requests_running",),
        "waiting": ("trtllm_num_requests_waiting",),
        "kv_cache_usage": ("trtllm_kv_cache_utilization",),
    },
    counters={
        "prompt_tokens_total": ("trtllm_prompt_tokens_total",),
        "generation_tokens_total": ("trtllm_generation_tokens_total",),
        "request_success": ("trtllm_request_success_total", "trtllm:request_success_total"),
        "prefix_cache_queries": ("trtllm_prompt_tokens_total",),
        "prefix_cache_hits": ("trtllm_prompt_cached_tokens_total",),
    },
    flags={
        "itl": "trtllm-serve exports no inter-token histogram (its per-request TPOT stands in)",
        "preemptions": "trtllm-serve exports no preemption counter",
        "running": "trtllm-serve before the iteration metrics (1.1, 1.2) exports no running gauge",
        "waiting": "trtllm-serve before the iteration metrics (1.1, 1.2) exports no waiting gauge",
        "kv_cache_usage": "trtllm-serve before the iteration metrics (1.1, 1.2) exports no KV-cache usage",
        "prefill": "trtllm-serve before the per-request stage metrics (1.1, 1.2) exports no prefill-time "
        "histogram (TTFT less queue time stands in)",
        "prompt_tokens": "trtllm-serve exports no prompt-length histogram",
        "generation_tokens": "trtllm-serve exports no output-length histogram",
    },
    info=("trtllm_kv_cache_config_info",),
)

DYNAMO = Dialect(
    "dynamo",
    "NVIDIA Dynamo (frontend)",
    "ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs (0014908a; the fe.log version, ce30a764) and "
    "docs/observability/metrics.md; the workers' kvstats gauges as docs/observability/metrics_examples/vllm.log shows them",
    histograms={
        "ttft": ("dynamo_frontend_time_to_first_token_seconds",),
        "itl": ("dynamo_frontend_inter_token_latency_seconds",),
        "e2e": ("dynamo_frontend_request_duration_seconds",),
        # per request, observed with its first token (input) and when it ends (output)
        "prompt_tokens": ("dynamo_frontend_input_sequence_tokens",),
        "generation_tokens": ("dynamo_frontend_output_sequence_tokens",),
    },
    gauges={
        # metrics.rs: "Inflight tracks requests from HTTP handler start until complete response is
        # finished. HTTP queue tracks requests from HTTP handler start until first token generation
        # begins (including prefill time)". Neither is a queue length nor a running batch: the first
        # counts waiting and running requests together, the second waiting and prefilling ones
        "inflight": ("dynamo_frontend_inflight_requests",),
        "awaiting_first_token": ("dynamo_frontend_queued_requests",),
        # the worker's system port (vLLM and TensorRT-LLM workers publish it): a fraction 0-1 despite
        # the name ("GPU cache usage as a percentage (0.0-1.0)", docs/observability/metrics.md)
        "kv_cache_usage": ("dynamo_component_kvstats_gpu_cache_usage_percent",),
    },
    counters={
        "request_success": ("dynamo_frontend_requests_total",),  # every finished request, errors too
        "request_failure": ('dynamo_frontend_requests_total{status="error"}',),
        # "Total number of output tokens generated (updates in real-time)": counted as they stream
        "generation_tokens_total": ("dynamo_frontend_output_tokens_total",),
    },
    flags={
        "kv_cache_usage": "the Dynamo frontend exports no KV usage: scrape the workers' system port "
        "(dynamo_component_kvstats_gpu_cache_usage_percent) or their engine metrics",
        "running": "the Dynamo frontend exports no running count (dynamo_frontend_inflight_requests counts "
        "waiting and running requests together): scrape the workers' engine metrics",
        "waiting": "the Dynamo frontend exports no queue length (dynamo_frontend_queued_requests counts "
        "requests until their first token, prefill included): scrape the workers' engine metrics",
        "queue": "the Dynamo frontend exports no queue-time histogram",
    },
)

TGI = Dialect(
    "tgi",
    "Hugging Face TGI",
    "huggingface/text-generation-inference docs/source/reference/metrics.md, router/src/server.rs and "
    "backends/v3/src/{backend,queue,lib}.rs (db931fcf, 3.3.6-dev0)",
    histograms={
        "e2e": ("tgi_request_duration",),  # validation + queue + inference
        "queue": ("tgi_request_queue_duration",),
        "inference": ("tgi_request_inference_duration",),
        # TGI's per-token time is NOT decode-only: server.rs records inference time (prefill included)
        # / generated tokens, so a long prefill raises it as much as slower decode steps do. Kept as
        # TGI's per-request TPOT, the only per-token signal TGI has; a row that reads it names this
        "tpot": ("tgi_request_mean_time_per_token_duration",),
        "prompt_tokens": ("tgi_request_input_length",),
        "generation_tokens": ("tgi_request_generated_tokens",),
        # one engine step's forward pass, by the kind of call (backend.rs): a prefill call computes the
        # new requests' prompts (with the running batch carried along), a decode call one token each
        "prefill_forward": ('tgi_batch_forward_duration{method="prefill"}',),
        "decode_forward": ('tgi_batch_forward_duration{method="decode"}',),
    },
    gauges={"running": ("tgi_batch_current_size",), "waiting": ("tgi_queue_size",)},
    counters={
        "request_success": ("tgi_request_success",),
        "request_arrivals": ("tgi_request_count",),  # every request the router received (server.rs)
        # err: validation, generation, overloaded, incomplete, dropped, template
        "request_failure": ("tgi_request_failure",),
    },
    # KV usage: tgi_batch_current_max_tokens is the running batch's num_blocks x BLOCK_SIZE (the
    # server's flash_causal_lm.py CachedBatch.max_tokens): the KV blocks its requests were allocated,
    # each for its prompt and max_new_tokens at admission (backends/v3/src/queue.rs). And
    # tgi_batch_max_total_tokens is what warmup found the KV cache holds (num_blocks x BLOCK_SIZE,
    # backends/v3/src/lib.rs). Their ratio is the share of the KV cache's blocks allocated, what
    # vLLM's kv_cache_usage_perc measures, except that TGI allocates a request's blocks up front (it
    # reaches 1 while vLLM's would still grow) and counts a prefix block two requests share twice
    ratios={"kv_cache_usage": ("tgi_batch_current_max_tokens", "tgi_batch_max_total_tokens")},
    flags={
        "ttft": "TGI exports no time-to-first-token histogram",
        "itl": "TGI exports no inter-token histogram (its mean time per token per request includes prefill)",
    },
)

TRITON = Dialect(
    "triton",
    "Triton (TensorRT-LLM backend)",
    "NVIDIA/TensorRT-LLM triton_backend/inflight_batcher_llm/src/custom_metrics_reporter/"
    "custom_metrics_reporter.cc (0d5352f5) and model_instance_state.cc (0c8de69a); "
    'triton-inference-server/tensorrtllm_backend README "Triton Metrics" (0b9d7d5a) and '
    "triton-inference-server/server docs/user_guide/metrics.md",
    histograms={
        # per request when it ends (reportCustomMetrics), buckets 10, 50, 100, 500, 1000
        "prompt_tokens": ("nv_llm_input_token_len",),
        "generation_tokens": ("nv_llm_output_token_len",),
    },
    gauges={
        # one family, the request state in a label (a ``{k="v"}`` name selects that series), from the
        # executor's iteration stats (model_instance_state.cc WaitForStats): "active" is every request
        # the executor holds (numActiveRequests), "scheduled" the ones in this iteration's batch
        # (numScheduledRequests), "waiting" active less scheduled
        "running": ('nv_trt_llm_request_metrics{request_type="scheduled"}',),
        "waiting": ('nv_trt_llm_request_metrics{request_type="waiting"}',),
        "inflight": ('nv_trt_llm_request_metrics{request_type="active"}',),
        # used / max KV blocks of the executor's kvCacheStats
        "kv_cache_usage": ('nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}',),
    },
    counters={
        "request_success": ("nv_inference_request_success",),
        "request_failure": ("nv_inference_request_failure",),
    },
    # Triton's cumulative microsecond counters over the successes (reportBaseMetrics). The backend takes
    # a request from Triton's scheduler at once, so nv_inference_queue_duration_us is Triton's own
    # queue (microseconds), not the executor's, whose waiting is inside compute_infer: read as
    # "server_queue", never as the engine's queue time
    means={
        "e2e": ("nv_inference_request_duration_us", "nv_inference_request_success", 1e-6),
        "server_queue": ("nv_inference_queue_duration_us", "nv_inference_request_success", 1e-6),
    },
    flags={
        "ttft": "Triton's TensorRT-LLM backend exports no TTFT histogram "
        "(nv_inference_first_response_histogram_ms is for decoupled models with histogram latencies on)",
        "itl": "Triton exports no inter-token histogram",
        "queue": "Triton's TensorRT-LLM backend exports no queue time of the executor "
        "(nv_inference_queue_duration_us is Triton's own scheduler queue, which the backend leaves at once)",
    },
)

#: the engines, in the order a signal is looked for
DIALECTS: tuple[Dialect, ...] = (VLLM, SGLANG, TRTLLM, DYNAMO, TGI, TRITON)
BY_NAME = {d.name: d for d in DIALECTS}

#: mean latencies an engine gives only as cumulative counters (:attr:`Dialect.means`): signal →
#: (time counter, count counter, seconds per unit), engine by engine
COUNTER_MEANS: dict[str, tuple[tuple[str, str, float], ...]] = {
    s: tuple(d.means[s] for d in DIALECTS if s in d.means) for d in DIALECTS for s in d.means
}
#: gauges an engine gives only as the ratio of two of its gauges (:attr:`Dialect.ratios`): signal →
#: (numerator, denominator), engine by engine
GAUGE_RATIOS: dict[str, tuple[tuple[str, str], ...]] = {
    s: tuple(d.ratios[s] for d in DIALECTS if s in d.ratios) for d in DIALECTS for s in d.ratios
}


def names(kind: str, signal: str) -> tuple[str, ...]:
    """Every engine's names for ``signal`` (``kind``: histograms, gauges or counters), in lookup order."""
    out: list[str] = []
    for d in DIALECTS:
        for n in getattr(d, kind).get(signal, ()):
            if n not in out:
                out.append(n)
    return tuple(out)


@cache
def dialect_of(metric: str) -> Dialect | None:
    """The engine a catalogue name belongs to (None for a name no dialect lists)."""
    base = metric.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
    for d in DIALECTS:
        fams = d.families()
        if metric in fams or f"{base}_count" in fams:
            return d
    return None


class OnlyEngine:
    """An engine (local or live) that shows only one serving engine's families (``--engine``): where a
    Prometheus holds vLLM and SGLang servers, the rows read the chosen engine's names, not the first
    found. Every other family (DCGM, node exporter, train_*) passes; everything else is the inner
    engine's."""

    def __init__(self, inner: Any, engine: str) -> None:
        if engine not in BY_NAME:
            raise ValueError(f"unknown serving engine {engine!r}: one of {', '.join(BY_NAME)}")
        self.inner, self.only = inner, BY_NAME[engine]

    def has(self, metric: str) -> bool:
        d = dialect_of(metric)
        return (d is None or d is self.only) and bool(self.inner.has(metric))

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def is_legacy(d: Dialect, metric: str) -> bool:
    """Whether ``metric`` is an older name of its signal in dialect ``d``."""
    for group in (d.histograms, d.gauges, d.counters):
        for names_ in group.values():
            if metric in names_[1:]:
                return True
    return False


def lacks(engine: str, signal: str) -> str | None:
    """What ``engine`` says about a signal it does not export (the flag that turns it on), or None."""
    d = BY_NAME.get(engine)
    return d.flags.get(signal) if d else None


#: the fix for a setting, in each engine's own knobs (vLLM's engine arguments, SGLang's server arguments,
#: trtllm-serve's flags); ``{now}`` is the value in force when the engine's logs said it
KNOBS: dict[str, dict[str, str]] = {
    "chunked_prefill": {
        "vllm": "vLLM: --enable-chunked-prefill --max-num-batched-tokens 2048 (now {now})",
        "sglang": "SGLang: --chunked-prefill-size 4096 (now {now})",
        "trtllm": "trtllm-serve: --enable_chunked_prefill with --max_num_tokens 8192 (now {now})",
    },
}


def knob(setting: str, engine: str | None, now: object) -> str | None:
    """The fix for ``setting`` in ``engine``'s own words (None when perfkit knows no knob for it)."""
    text = KNOBS.get(setting, {}).get(engine or "vllm")
    return text.format(now=now) if text else None


TRAINING_REVERT = "revert the config change that raised memory (micro-batch size, sequence length); else "
"""A training OOM's first advice where the change it started with is not known; the postmortem names
the change instead where it is (:func:`perfkit.report.postmortem.build`)."""

#: a triage row's advice in each engine's own words: ``{key}`` in a row's next step or action
#: (perfkit.triage.rows) is filled from the incident's serving engine (:func:`words`). Flags as the
#: engines spell them: vLLM's engine arguments, SGLang's server arguments (python/sglang/srt/
#: server_args.py), trtllm-serve's options (docs/source/commands/trtllm-serve.rst), TGI's launcher
#: (text-generation-launcher --help), Dynamo's workers run one of these engines. ``""``: no engine
#: known, every engine's words; ``"training"``: a training job's.
WORDS: dict[str, dict[str, str]] = {
    "kv_knobs": {
        "vllm": "gpu_memory_utilization / num_gpu_blocks, prefix caching, KV-cache dtype (fp8); cut "
        "max_num_seqs if preemptions recompute prompts",
        "sglang": "--mem-fraction-static / --max-total-tokens, the radix (prefix) cache, --kv-cache-dtype "
        "fp8_e5m2; cut --max-running-requests if retractions recompute prompts",
        "trtllm": "--kv_cache_free_gpu_memory_fraction, KV block reuse, an fp8 KV cache; cut --max_batch_size "
        "if requests are paused for KV room",
        "tgi": "--cuda-memory-fraction and --max-batch-total-tokens (the tokens TGI's KV cache holds), prefix "
        "caching; cut --max-concurrent-requests",
        "": "the KV cache's share of GPU memory (vLLM gpu_memory_utilization, SGLang --mem-fraction-static, "
        "trtllm-serve --kv_cache_free_gpu_memory_fraction, TGI --cuda-memory-fraction), prefix caching, an "
        "fp8 KV cache; cut the running-request limit if preemptions recompute prompts",
    },
    "batch_knobs": {
        "vllm": "max_num_seqs / max_num_batched_tokens",
        "sglang": "--max-running-requests / --chunked-prefill-size",
        "trtllm": "--max_batch_size / --max_num_tokens",
        "tgi": "--max-concurrent-requests / --max-batch-total-tokens / --max-batch-prefill-tokens",
        "": "the engine's running-request and batched-token limits (vLLM max_num_seqs / "
        "max_num_batched_tokens, SGLang --max-running-requests, trtllm-serve --max_batch_size, TGI "
        "--max-concurrent-requests)",
    },
    "chunking": {
        "vllm": "vLLM: --enable-chunked-prefill --max-num-batched-tokens 2048 --long-prefill-token-threshold 512",
        "sglang": "SGLang: --chunked-prefill-size 4096",
        "trtllm": "trtllm-serve: --enable_chunked_prefill with --max_num_tokens 8192",
        "tgi": "TGI: --max-batch-prefill-tokens 4096 (TGI chunks prefills by that budget)",
        "": "vLLM: --enable-chunked-prefill --max-num-batched-tokens 2048 --long-prefill-token-threshold 512; "
        "SGLang: --chunked-prefill-size 4096; trtllm-serve: --enable_chunked_prefill; the verification names "
        "the engine's",
    },
    "oom_knobs": {
        "vllm": "lower gpu_memory_utilization or max_model_len, quantize, or shard wider",
        "sglang": "lower --mem-fraction-static or --context-length, quantize, or shard wider (--tp)",
        "trtllm": "lower --kv_cache_free_gpu_memory_fraction or --max_seq_len, quantize, or shard wider (--tp_size)",
        "tgi": "lower --cuda-memory-fraction or --max-total-tokens, quantize, or shard wider (--num-shard)",
        "training": TRAINING_REVERT + "turn on activation recomputation, shard optimizer state (ZeRO / FSDP) "
        "or lower the micro-batch",
        "": "lower the engine's memory share or context length, quantize, or shard wider",
    },
}


def words(engine: str | None, workload: str | None = None) -> dict[str, str]:
    """Every :data:`WORDS` key in ``engine``'s words (a Dynamo worker's: vLLM's, SGLang's or trtllm's
    by its backend where known, else every engine's); a training job's where ``workload`` is training."""
    key = "training" if workload == "training" else (engine or "")
    return {name: by.get(key, by.get(engine or "", by[""])) for name, by in WORDS.items()}


def waiting_name(engine: str | None) -> str:
    """The engine's waiting-requests gauge (vLLM's name where the engine is not known or has none)."""
    d = BY_NAME.get(engine or "")
    if d is None:
        return VLLM.gauges["waiting"][0]
    own = d.gauges.get("waiting") or d.gauges.get("awaiting_first_token")
    return own[0] if own else f"the queue length ({d.title} exports no waiting-requests gauge)"


def absent(engine: str | None, kind: str, signal: str) -> str:
    """A signal the evidence lacks, in the serving engine's words: its own name for it, or what the
    engine says about not exporting it (:func:`lacks`); vLLM's name where no engine is known."""
    noun = {"histograms": "histogram", "counters": "counter"}.get(kind, "series")
    d = BY_NAME.get(engine or "")
    if not any(signal in getattr(x, kind) for x in DIALECTS):  # not a serving engine's (DCGM, node)
        return f"no {signal} {noun}"
    if d is None or d is VLLM:
        return (
            f"no {getattr(VLLM, kind)[signal][0]} {noun}"
            if signal in getattr(VLLM, kind)
            else f"no {signal} {noun}"
        )
    own = getattr(d, kind).get(signal)
    if own:  # the engine names it, and may say how to turn it on
        hint = d.flags.get(signal)
        return f"no {own[0]} {noun}" + (f" ({hint})" if hint else "")
    return d.flags.get(signal) or f"{d.title} exports no {signal} {noun}"
