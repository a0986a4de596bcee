"""The live simulator told in SGLang's or TensorRT-LLM's own words (``dialect: sglang | trtllm`` in the
engine config): the same engine, its ``/metrics`` and its log lines as that engine writes them.

The names, types, buckets and labels are the recorded simulator's tables
(:mod:`perfkit.lab.sim.dialects`, each with its upstream source), so a live drill and a recorded one
in the same dialect export the same families; the vLLM histograms of :class:`.metrics.EngineMetrics`
are kept under their vLLM names and renamed here (their buckets are the dialect's from the start,
:func:`bounds`).

``sglang``
    ``sglang:*`` with ``--enable-metrics``: TTFT, inter-token latency, E2E and queue time with SGLang's
    buckets; ``num_running_reqs``, ``num_queue_reqs``, ``token_usage``; the counters of prompt,
    generation and cached tokens, finished (``num_requests``: not aborted), aborted (the engine's
    drops and the clients that left) and retracted (preempted) requests. Labels ``model_name``,
    ``engine_type="unified"``, ``tp_rank="0"``, ``pp_rank="0"``. The log: the scheduler's
    ``Prefill batch,`` line of every step that prefilled and a ``Decode batch,`` line every 40 decode
    steps (written by :meth:`.metrics.StatsLog.step` with :mod:`perfkit.lab.sim.dialects`' formats), in
    SGLang's record format ``[YYYY-mm-dd HH:MM:SS TP0] message``, and the start-up
    ``server_args=ServerArgs(...)`` line (abridged to the fields that decide latency).
``trtllm``
    ``trtllm-serve``'s ``trtllm_*``: TTFT, per-request TPOT, E2E, queue, prefill, decode and inference
    time; the running, waiting and KV-utilisation gauges; prompt, generation and cached prompt tokens;
    ``trtllm_request_success_total{finished_reason}`` and ``trtllm_kv_cache_config_info``. Labels
    ``model_name``, ``engine_type="trtllm"``. No periodic stats line (its iteration log is off by
    default): the launcher's echo of the ``trtllm-serve serve`` command carries the settings.

In every dialect the GPU (DCGM) series and ``build_info`` stay as they are (:mod:`.metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from perfkit.lab.sim.dialects import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    LABELS,
    READY,
    bounds,
    server_args,
    trtllm_command,
)

if TYPE_CHECKING:
    from perfkit.lab.serve_clock import Histogram
    from perfkit.lab.servesim.config import SimConfig

__all__ = ["bounds", "exposition", "labels", "sglang_record", "startup_lines"]

#: help texts as the engines write them (tests/data/engines/: SGLang's docs and a trtllm-serve scrape);
#: a name not listed gets ``"<name>."``, as the recorded simulator writes it
HELP = {
    "sglang:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "sglang:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "sglang:e2e_request_latency_seconds": "Histogram of End-to-end request latency in seconds",
    "sglang:queue_time_seconds": "Histogram of queueing time in seconds.",
    "sglang:num_running_reqs": "The number of running requests.",
    "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
    "sglang:token_usage": "The token usage.",
    "sglang:prompt_tokens": "Number of prefill tokens processed.",
    "sglang:generation_tokens": "Number of generation tokens processed.",
    "sglang:num_requests": "Number of requests processed.",
    "trtllm_time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "trtllm_time_per_output_token_seconds": "Histogram of time per output token in seconds.",
    "trtllm_e2e_request_latency_seconds": "Histogram of end to end request latency in seconds.",
    "trtllm_request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "trtllm_request_success": "Count of successfully processed requests.",
    "trtllm_kv_cache_config_info": "KV cache configuration info",
}


class Out(Protocol):
    """What the exposition writes to (:class:`.metrics.Exposition`)."""

    def family(self, name: str, kind: str, help_: str, samples: Iterable[str]) -> None: ...


class Engine(Protocol):
    """What the exposition reads (:class:`.metrics.EngineMetrics`)."""

    cfg: SimConfig
    hist: dict[str, Histogram]
    counters: dict[str, float]
    success: dict[str, int]
    running: int
    waiting: int
    kv_usage: float
    client_aborts: int


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(pairs: dict[str, object]) -> str:
    """The Prometheus text format's label list (``a="1",b="2"``), values escaped."""
    return ",".join(f'{key}="{_label(value)}"' for key, value in pairs.items())


def _help(name: str) -> str:
    return HELP.get(name, f"{name}.")


def _sample(name: str, pairs: dict[str, object], value: float) -> str:
    return f"{name}{{{labels(pairs)}}} {float(value)!r}"


def exposition(m: Engine, out: Out) -> None:
    """The engine's series under the dialect's names (``m.cfg.dialect``: sglang or trtllm)."""
    dialect = m.cfg.dialect
    base: dict[str, object] = {"model_name": m.cfg.served_model_name, **LABELS[dialect]}
    run_name, wait_name, kv_name, success = GAUGES[dialect]
    for name, value in ((run_name, m.running), (wait_name, m.waiting), (kv_name, m.kv_usage)):
        if name is not None:
            out.family(name, "gauge", _help(name), [_sample(name, base, value)])
    for own, name in COUNTERS[dialect].items():
        out.family(f"{name}_total", "counter", _help(name), [_sample(f"{name}_total", base, m.counters[own])])
    if dialect == "sglang":  # finished requests in one counter, aborted ones in their own
        done = sum(m.success.values()) - m.success["abort"]
        out.family(f"{success}_total", "counter", _help(success), [_sample(f"{success}_total", base, done)])
        aborted = "sglang:num_aborted_requests_total"
        value = m.success["abort"] + m.client_aborts
        out.family(aborted, "counter", "Number of requests aborted.", [_sample(aborted, base, value)])
    else:
        rows = [
            _sample(f"{success}_total", {**base, "finished_reason": why}, n) for why, n in m.success.items()
        ]
        out.family(f"{success}_total", "counter", _help(success), rows)
        info = "trtllm_kv_cache_config_info"
        pairs = {**base, "enable_block_reuse": str(m.cfg.enable_prefix_caching).lower()}
        pairs["tokens_per_block"] = str(m.cfg.block_size)
        out.family(info, "gauge", _help(info), [_sample(info, pairs, 1)])
    text = labels(base)
    for own, (name, _) in HISTOGRAMS[dialect].items():
        out.family(name, "histogram", _help(name), m.hist[own].lines(name, text))


# -- log lines -------------------------------------------------------------------------------------


def sglang_record(when: float, message: str) -> str:
    """SGLang's log record (sglang/srt/utils ``configure_logger``: ``[%(asctime)s TP0] %(message)s``)
    at UNIX second ``when``, in UTC."""
    stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp} TP0] {message}"


def startup_lines(cfg: SimConfig, when: float) -> list[str]:
    """What a non-vLLM engine prints when it starts, whole records: SGLang its ``server_args`` line and
    its ready line; trtllm-serve's launcher its command line (``--enable_chunked_prefill`` only when
    on), as :func:`perfkit.lab.sim.dialects.startup_logs` writes them, from this engine's settings."""
    name, path = cfg.served_model_name, cfg.model.name
    mem = f"{cfg.gpu_memory_utilization:g}"
    if cfg.dialect == "sglang":
        args = server_args(
            model_path=path,
            served=name,
            kv_cache_dtype=cfg.kv_cache_dtype,
            context_length=cfg.max_model_len,
            mem=mem,
            max_running=cfg.max_num_seqs,
            chunk=cfg.max_num_batched_tokens if cfg.enable_chunked_prefill else -1,
            max_prefill=cfg.max_num_batched_tokens,
            tp=cfg.tensor_parallel_size,
            radix_off=not cfg.enable_prefix_caching,
        )
        return [sglang_record(when, args), sglang_record(when + 0.4, READY)]
    if cfg.dialect != "trtllm":
        return []
    stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return [
        trtllm_command(
            stamp,
            name,
            cfg.tensor_parallel_size,
            cfg.max_num_seqs,
            cfg.max_num_batched_tokens,
            mem,
            cfg.enable_chunked_prefill,
        )
    ]
