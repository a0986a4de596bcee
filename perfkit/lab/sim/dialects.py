"""The serving simulator told in each engine's own words: vLLM, SGLang or TensorRT-LLM (``trtllm-serve``)
here; TGI, Dynamo and Triton in :mod:`perfkit.lab.sim.tellings`.

The simulated engine (:mod:`perfkit.lab.sim.engine`) is the same physics in every dialect; what
changes is what its exporter and its log say, each as the real engine says it:

``vllm``
    vLLM's ``vllm:*`` series, its stats line and start-up lines (:mod:`perfkit.lab.sim.exporters`).
``sglang``
    SGLang's ``sglang:*`` series with ``--enable-metrics`` and nothing else (so no token-length
    histograms: those need ``--collect-tokens-histogram``), SGLang's own buckets (TTFT from 0.1 s,
    queue time from 0.0), labels ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``; the
    scheduler's ``Prefill batch,`` line for every step that prefilled and ``Decode batch,`` line every 40
    decode steps (:func:`sglang_step`), and the start-up ``server_args=ServerArgs(…)`` line (abridged to
    the fields that decide latency). Names, buckets and formats:
    sgl-project/sglang ``python/sglang/srt/metrics/collector.py`` and
    ``python/sglang/srt/managers/scheduler_metrics_mixin.py`` (see ``docs/engines.md``).
``trtllm``
    ``trtllm-serve``'s ``trtllm_*`` series (NVIDIA/TensorRT-LLM ``tensorrt_llm/metrics/collector.py``,
    050f80d): TTFT, per-request TPOT (no inter-token histogram), E2E, queue, prefill, decode and
    inference time, token counters, the iteration gauges (running, waiting, KV utilisation) and its
    buckets; labels ``model_name``, ``engine_type``. No periodic stats line (the iteration log is off by
    default); the launcher's echo of the ``trtllm-serve serve`` command carries the settings.
``trtllm-1.1``
    The same server as TensorRT-LLM 1.1.0rc5 exported it (Dynamo's ``docs/backends/trtllm/prometheus.md``):
    five metrics only (success, E2E, TTFT, TPOT, queue), so what a row needs beyond them is missing.
``tgi``, ``dynamo-frontend``, ``dynamo``, ``triton``
    Hugging Face TGI, NVIDIA Dynamo's frontend (alone, or with its vLLM workers scraped) and Triton's
    TensorRT-LLM backend: :mod:`perfkit.lab.sim.tellings`, each with its upstream source.

The lab never imports a detector: these are the engines' formats, not the triage table's reading of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from perfkit.lab.sim.model import EngineConfig

Recorder = Any  # perfkit.lab.sim.exporters.Recorder, which imports this module (no import circles)

#: every telling: these four here, and TGI, Dynamo (frontend alone, or with its vLLM workers) and Triton's
#: TensorRT-LLM backend in :mod:`perfkit.lab.sim.tellings`
DIALECTS = ("vllm", "sglang", "trtllm", "trtllm-1.1", "tgi", "dynamo-frontend", "dynamo", "triton")
#: the tellings whose engine exports vLLM's own series (Dynamo's vLLM workers)
VLLM_SERIES = ("vllm", "dynamo")

# -- the Recorder's own (vLLM) names → each dialect's -----------------------------------------------

_TTFT, _E2E, _QUEUE = (
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)
_ITL, _TPOT = "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds"
_PREFILL, _DECODE, _INFERENCE = (
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
)

# vLLM's default buckets (vllm/v1/metrics/loggers.py); the token-count ones are perfkit's 1-2-5 ladder
TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
REQUEST_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
TOKEN_BUCKETS: list[float] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000]

# SGLang's default buckets (collector.py TokenizerMetricsCollector and SchedulerMetricsCollector)
SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_E2E = [
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1,
    2,
    4,
    6,
    8,
    10,
    20,
    40,
    60,
    80,
    100,
    200,
    400,
    600,
    1200,
    1800,
    2400,
]
SGLANG_ITL = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080]
SGLANG_ITL += [0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]
SGLANG_QUEUE = [0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300]
SGLANG_QUEUE += [400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000]
# trtllm-serve's (collector.py MetricsCollector): TTFT, E2E, queue, decode, inference as vLLM's; these differ
TRTLLM_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0]
TRTLLM_TPOT += [40.0, 80.0]
TRTLLM_PREFILL = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0]
TRTLLM_PREFILL += [160.0, 640.0, 2560.0]

#: dialect → {Recorder histogram: (exported base name, buckets or None for the Recorder's own)}
HISTOGRAMS: dict[str, dict[str, tuple[str, list[float] | None]]] = {
    "sglang": {
        _TTFT: ("sglang:time_to_first_token_seconds", SGLANG_TTFT),
        _ITL: ("sglang:inter_token_latency_seconds", SGLANG_ITL),
        _E2E: ("sglang:e2e_request_latency_seconds", SGLANG_E2E),
        _QUEUE: ("sglang:queue_time_seconds", SGLANG_QUEUE),
    },
    "trtllm": {
        _TTFT: ("trtllm_time_to_first_token_seconds", None),
        _TPOT: ("trtllm_time_per_output_token_seconds", TRTLLM_TPOT),
        _E2E: ("trtllm_e2e_request_latency_seconds", None),
        _QUEUE: ("trtllm_request_queue_time_seconds", None),
        _PREFILL: ("trtllm_request_prefill_time_seconds", TRTLLM_PREFILL),
        _DECODE: ("trtllm_request_decode_time_seconds", None),
        _INFERENCE: ("trtllm_request_inference_time_seconds", None),
    },
}
HISTOGRAMS["trtllm-1.1"] = {
    k: v for k, v in HISTOGRAMS["trtllm"].items() if k in (_TTFT, _TPOT, _E2E, _QUEUE)
}
#: dialect → {Recorder counter (no _total): exported counter family (no _total)}
COUNTERS: dict[str, dict[str, str]] = {
    "sglang": {
        "vllm:prompt_tokens": "sglang:prompt_tokens",
        "vllm:generation_tokens": "sglang:generation_tokens",
        "vllm:num_preemptions": "sglang:num_retracted_requests",
        "vllm:prefix_cache_hits": "sglang:cached_tokens",
    },
    "trtllm": {
        "vllm:prompt_tokens": "trtllm_prompt_tokens",
        "vllm:generation_tokens": "trtllm_generation_tokens",
        "vllm:prefix_cache_hits": "trtllm_prompt_cached_tokens",
    },
    "trtllm-1.1": {},
}
#: dialect → (running gauge, waiting gauge, KV-usage gauge, success counter family), None where absent
GAUGES: dict[str, tuple[str | None, str | None, str | None, str]] = {
    "sglang": (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:num_requests",
    ),
    "trtllm": (
        "trtllm_num_requests_running",
        "trtllm_num_requests_waiting",
        "trtllm_kv_cache_utilization",
        "trtllm_request_success",
    ),
    "trtllm-1.1": (None, None, None, "trtllm_request_success"),
}
LABELS = {
    "sglang": {"engine_type": "unified", "tp_rank": "0", "pp_rank": "0"},
    "trtllm": {"engine_type": "trtllm"},
    "trtllm-1.1": {"engine_type": "trtllm"},
}


def check(dialect: str) -> str:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown engine dialect {dialect!r}: one of {', '.join(DIALECTS)}")
    return dialect


def bounds(dialect: str, name: str, default: Sequence[float]) -> list[float]:
    """The buckets the dialect's exporter uses for the Recorder histogram ``name``."""
    own = HISTOGRAMS.get(dialect, {}).get(name)
    return list(own[1]) if own and own[1] is not None else [float(b) for b in default]


# -- /metrics ---------------------------------------------------------------------------------------


def scrape(rec: Recorder, t: float) -> None:
    """One scrape of a non-vLLM engine: the Recorder's state under the dialect's names."""
    spec, dialect = rec.spec, rec.spec.dialect
    base = {"model_name": spec.model, **LABELS[dialect]}
    ts = spec.start.timestamp() + t
    running, waiting, kv = rec.state
    run_name, wait_name, kv_name, success = GAUGES[dialect]
    for name, value in ((run_name, running), (wait_name, waiting), (kv_name, round(kv, 4))):
        if name is not None:
            rec.out.put(name, "gauge", f"{name}.", name, base, ts, value)
    for own, name in COUNTERS[dialect].items():
        rec.out.put(name, "counter", f"{name} counter.", f"{name}_total", base, ts, rec.counters[own])
    if dialect == "sglang":  # every finished request in one counter, aborted ones in their own
        done = sum(rec.success.values()) - rec.success["abort"]
        rec.out.put(success, "counter", "Number of requests processed.", f"{success}_total", base, ts, done)
        aborted = "sglang:num_aborted_requests"
        rec.out.put(aborted, "counter", "Aborted.", f"{aborted}_total", base, ts, rec.success["abort"])
    else:
        for reason, value in rec.success.items():
            labels = {**base, "finished_reason": reason}
            rec.out.put(success, "counter", "Successful requests.", f"{success}_total", labels, ts, value)
    if dialect == "trtllm":
        info = {**base, "enable_block_reuse": str(rec.cfg.prefix_cache_hit_frac > 0).lower()}
        info["tokens_per_block"] = str(rec.cfg.block_size)
        name = "trtllm_kv_cache_config_info"
        rec.out.put(name, "gauge", "KV cache configuration info", name, info, ts, 1)
    for own, (name, _) in HISTOGRAMS[dialect].items():
        h = rec.hist.get(own)
        if h is None:
            continue
        cum = np.cumsum(h.counts)
        for bound, c in zip([*h.bounds, math.inf], cum, strict=True):
            le = "+Inf" if math.isinf(bound) else repr(float(bound))
            rec.out.put(name, "histogram", f"{name}.", f"{name}_bucket", {**base, "le": le}, ts, int(c))
        rec.out.put(name, "histogram", f"{name}.", f"{name}_count", base, ts, int(cum[-1]))
        rec.out.put(name, "histogram", f"{name}.", f"{name}_sum", base, ts, round(h.total, 4))


# -- logs -------------------------------------------------------------------------------------------


def _sglang_log(rec: Recorder, t: float, message: str) -> None:
    """SGLang's log format (sglang/srt/utils ``configure_logger``: ``[%(asctime)s TP0] %(message)s``)."""
    stamp = rec.spec.at(t).strftime("%Y-%m-%d %H:%M:%S")
    rec.logs.append((t, f"[{stamp} TP0] {message}"))


DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default: one decode line every 40 decode steps


def prefill_batch(new_seq: int, new_token: int, cached: int, usage: float, running: int, queue: int) -> str:
    """SGLang's prefill line (scheduler_metrics_mixin.py ``log_prefill_stats`` at 01bb3c8: its field order
    and trailing ``, ``)."""
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached}, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
    )


def decode_batch(running: int, used: int, usage: float, gen_tps: float, queue: int) -> str:
    """SGLang's decode line (``log_decode_stats`` at 01bb3c8)."""
    return (
        f"Decode batch, #running-req: {running}, #token: {used}, token usage: {usage:.2f}, "
        f"cuda graph: True, gen throughput (token/s): {gen_tps:.2f}, #queue-req: {queue}, "
    )


class Batches:
    """What SGLang's scheduler has counted since its last decode line (the Recorder's ``batches``)."""

    def __init__(self, since: float) -> None:
        self.steps, self.tokens, self.since, self.cached = 0, 0, since, 0

    def decoded(self, end: float, n_decode: int) -> float | None:
        """Count one decode step of ``n_decode`` sequences ending at ``end``; on every
        :data:`DECODE_LOG_INTERVAL`-th, the generation throughput since the last decode line (SGLang's
        ``last_gen_throughput``: tokens over the time since), and the count starts again; else None."""
        self.steps, self.tokens = self.steps + 1, self.tokens + n_decode
        if self.steps < DECODE_LOG_INTERVAL:
            return None
        tps = self.tokens / max(end - self.since, 1e-9)
        self.steps, self.tokens, self.since = 0, 0, end
        return tps


def sglang_step(rec: Recorder, end: float, prefill_tokens: int, prefill_seqs: int, n_decode: int) -> None:
    """SGLang's scheduler lines for one engine step, as SGLang prints them: a prefill line for every
    step that prefilled (its own tokens: a long prompt without chunking is one large batch), and a
    decode line every :data:`DECODE_LOG_INTERVAL` decode steps with the tokens generated since the last
    one over the time since (``last_gen_throughput``)."""
    if rec.spec.dialect != "sglang" or not rec.up:
        return
    st = rec.batches
    running, waiting, kv = rec.state
    if prefill_tokens:
        line = prefill_batch(max(1, prefill_seqs), prefill_tokens, st.cached, kv, running, waiting)
        _sglang_log(rec, end, line)
        st.cached = 0
    if n_decode and (tps := st.decoded(end, n_decode)) is not None:
        _sglang_log(rec, end, decode_batch(running, int(kv * rec.cfg.kv_capacity_tokens), kv, tps, waiting))


def cached(rec: Recorder, hit: int) -> None:
    """Prefix-cache hits at admission, for the next prefill line's ``#cached-token``."""
    if rec.spec.dialect == "sglang":
        rec.batches.cached += hit


def oom_lines(rec: Recorder, t: float, error: str) -> list[str]:
    """How the engine logs a worker's CUDA out-of-memory death: SGLang's scheduler logs
    ``Scheduler hit an exception: {traceback}`` (managers/scheduler.py ``run_scheduler_process``); for
    trtllm-serve no recorded sample was found, so only PyTorch's own traceback is written."""
    lines = ["Traceback (most recent call last):", error]
    if rec.spec.dialect == "sglang":
        stamp = rec.spec.at(t).strftime("%Y-%m-%d %H:%M:%S")
        lines[0] = f"[{stamp} TP0] Scheduler hit an exception: {lines[0]}"
    return lines


def server_args(
    *,
    model_path: str,
    served: str,
    kv_cache_dtype: str,
    context_length: object,
    mem: str,
    max_running: int,
    chunk: int,
    max_prefill: int,
    tp: int,
    radix_off: bool,
) -> str:
    """SGLang's start-up ``server_args=ServerArgs(...)`` message, abridged to the fields that decide
    latency, in ``ServerArgs``' field order (tests/data/engines/sglang_log_lines.txt has real ones)."""
    return (
        f"server_args=ServerArgs(model_path='{model_path}', tokenizer_path='{model_path}', "
        f"tokenizer_mode='auto', skip_tokenizer_init=False, load_format='auto', trust_remote_code=False, "
        f"dtype='auto', kv_cache_dtype='{kv_cache_dtype}', quantization=None, context_length={context_length}, "
        f"device='cuda', served_model_name='{served}', chat_template=None, is_embedding=False, revision=None, "
        f"host='0.0.0.0', port=30000, mem_fraction_static={mem}, max_running_requests={max_running}, "
        f"max_total_tokens=None, chunked_prefill_size={chunk}, max_prefill_tokens={max_prefill}, "
        f"schedule_policy='fcfs', schedule_conservativeness=1.0, cpu_offload_gb=0, "
        f"tp_size={tp}, stream_interval=1, random_seed=0, log_level='info', "
        f"enable_metrics=True, decode_log_interval=40, "
        f"disable_radix_cache={radix_off}, enable_mixed_chunk=False)"
    )


READY = "The server is fired up and ready to roll!"  # SGLang's http_server.py, once it serves


def trtllm_command(
    stamp: str, model: str, tp: int, max_batch: int, max_tokens: int, mem: str, chunked: bool
) -> str:
    """A launcher's echo of the ``trtllm-serve serve`` command (tensorrt_llm/commands/serve.py's flags)."""
    return (
        f"{stamp} launcher: exec trtllm-serve serve {model} --backend pytorch --host 0.0.0.0 "
        f"--port 8000 --tp_size {tp} --max_batch_size {max_batch} --max_num_tokens {max_tokens} "
        f"--kv_cache_free_gpu_memory_fraction {mem}{' --enable_chunked_prefill' if chunked else ''}"
    )


def startup_logs(rec: Recorder, t: float, version: str, cfg: EngineConfig) -> None:
    """What each engine prints when it starts: SGLang its ``server_args`` line; trtllm-serve's launcher
    its command line (``--enable_chunked_prefill`` is off unless given)."""
    spec = rec.spec
    stamp = spec.at(t).strftime("%Y-%m-%d %H:%M:%S")
    if spec.dialect == "sglang":
        args = server_args(
            model_path=spec.model,
            served=spec.model,
            kv_cache_dtype="auto",
            context_length=None,
            mem="0.88",
            max_running=cfg.max_num_seqs,
            chunk=cfg.max_num_batched_tokens if cfg.chunked_prefill else -1,
            max_prefill=cfg.max_prefill_tokens,
            tp=spec.gpu_count,
            radix_off=cfg.prefix_cache_hit_frac <= 0,
        )
        _sglang_log(rec, t, args)
        _sglang_log(rec, t + 0.4, READY)
        return
    tokens = cfg.max_num_batched_tokens if cfg.chunked_prefill else cfg.max_prefill_tokens
    line = trtllm_command(
        stamp, spec.model, spec.gpu_count, cfg.max_num_seqs, tokens, "0.9", cfg.chunked_prefill
    )
    rec.logs.append((t, line))
