"""NVIDIA Dynamo's frontend, alone or with its vLLM worker's system port, telling the simulated incident
(:mod:`perfkit.lab.sim.tellings` has its sources)."""

from __future__ import annotations

from typing import Any

import numpy as np

from perfkit.lab.sim.telling_base import (
    COMPONENT_BUCKETS,
    FRONTEND_OUT_S,
    Done,
    Recorder,
    Telling,
    dynamo_log_buckets,
    frontend_in_s,
)

FE = "dynamo_frontend_"
FE_HELP = {  # lib/llm/src/http/service/metrics.rs (the fe.log version)
    f"{FE}requests_total": "Total number of LLM requests processed",
    f"{FE}inflight_requests": "Number of inflight requests",
    f"{FE}disconnected_clients": "Number of disconnected clients",
    f"{FE}queued_requests": "Number of requests in HTTP processing queue",
    f"{FE}request_duration_seconds": "Duration of LLM requests",
    f"{FE}input_sequence_tokens": "Input sequence length in tokens",
    f"{FE}output_sequence_tokens": "Output sequence length in tokens",
    f"{FE}output_tokens_total": "Total number of output tokens generated (updates in real-time)",
    f"{FE}time_to_first_token_seconds": "Time to first token in seconds",
    f"{FE}inter_token_latency_seconds": "Inter-token latency in seconds",
    f"{FE}model_total_kv_blocks": "Total KV cache blocks available for a worker serving the model",
    f"{FE}model_max_num_seqs": "Maximum number of sequences for a worker serving the model",
    f"{FE}model_max_num_batched_tokens": "Maximum number of batched tokens for a worker serving the model",
    f"{FE}model_context_length": "Maximum context length in tokens for a worker serving the model",
    f"{FE}model_kv_cache_block_size": "KV cache block size in tokens for a worker serving the model",
    f"{FE}model_migration_limit": "Maximum number of request migrations allowed for the model",
}
FE_BUCKETS = {
    f"{FE}request_duration_seconds": dynamo_log_buckets(1.0, 256.0, 10),
    f"{FE}input_sequence_tokens": dynamo_log_buckets(50.0, 128000.0, 12),
    f"{FE}output_sequence_tokens": dynamo_log_buckets(50.0, 32000.0, 10),
    f"{FE}time_to_first_token_seconds": dynamo_log_buckets(0.001, 480.0, 18),
    f"{FE}inter_token_latency_seconds": dynamo_log_buckets(0.001, 2.0, 13),
}
WC = "dynamo_component_"
WORKER_HELP = {  # the worker's system port (docs/observability/metrics_examples/vllm.log)
    f"{WC}inflight_requests": "Number of requests currently being processed by work handler",
    f"{WC}requests_total": "Total number of requests processed by work handler",
    f"{WC}request_duration_seconds": "Time spent processing requests by work handler",
    f"{WC}request_bytes_total": "Total number of bytes received in requests by work handler",
    f"{WC}response_bytes_total": "Total number of bytes sent in responses by work handler",
    f"{WC}kvstats_active_blocks": "Number of active KV cache blocks currently in use",
    f"{WC}kvstats_total_blocks": "Total number of KV cache blocks available",
    f"{WC}kvstats_gpu_cache_usage_percent": "GPU cache usage as a percentage (0.0-1.0)",
    f"{WC}kvstats_gpu_prefix_cache_hit_rate": "GPU prefix cache hit rate as a percentage (0.0-1.0)",
    f"{WC}uptime_seconds": "Total uptime of the DistributedRuntime in seconds",
}


class Dynamo(Telling):
    """Dynamo's frontend (``workers=False``) or the frontend and its vLLM worker's system port."""

    def __init__(self, rec: Recorder, *, workers: bool) -> None:
        super().__init__(rec)
        self.workers = workers
        self.model = rec.spec.model.lower()  # request series carry the name lower-cased
        self.worker_labels = {
            "dynamo_component": "backend",
            "dynamo_endpoint": "generate",
            "dynamo_namespace": "dynamo",
            "model": rec.spec.model,
        }
        self.hit_since = self.query_since = 0.0

    def _fe(self, name: str, values: Any) -> None:
        self.observe(f"{FE}{name}", FE_BUCKETS[f"{FE}{name}"], values, model=self.model)

    def arrived(self, r: int, t: float, prompt: int) -> None:
        super().arrived(r, t, prompt)
        self.touched.update((f"{FE}inflight_requests", f"{FE}queued_requests"))
        if self.workers:
            self.add(f"{WC}requests_total", **self.worker_labels)
            self.add(f"{WC}request_bytes_total", 1058 + 6 * prompt, **self.worker_labels)
            self.touched.add(f"{WC}inflight_requests")

    def first_token(self, r: int, ttft: float) -> None:
        super().first_token(r, ttft)
        prompt = self.prompts.get(r, 0)
        self._fe("time_to_first_token_seconds", ttft + frontend_in_s(prompt))
        self._fe("input_sequence_tokens", prompt)  # published with the first token (metrics.rs)
        self.add(f"{FE}output_tokens_total", 1, model=self.model)

    def itl(self, values: np.ndarray, emitted: Any) -> None:
        n = np.broadcast_to(np.asarray(emitted, dtype=np.int64), values.shape)
        self._fe("inter_token_latency_seconds", np.repeat(values / n, n))  # each token of a chunk
        self.add(f"{FE}output_tokens_total", float(n.sum()), model=self.model)

    def prefix_hit(self, hit: int) -> None:
        self.hit_since += hit

    def done(self, req: Done) -> None:
        self.query_since += req.prompt
        self._fe(
            "request_duration_seconds", frontend_in_s(req.prompt) + req.last - req.arrival + FRONTEND_OUT_S
        )
        self._fe("output_sequence_tokens", req.generated)
        self.add(
            f"{FE}requests_total",
            model=self.model,
            endpoint="chat_completions",
            request_type="stream",
            status="success",
        )
        if self.workers:
            self.observe(
                f"{WC}request_duration_seconds",
                COMPONENT_BUCKETS,
                req.last - req.arrival,
                **self.worker_labels,
            )
            self.add(f"{WC}response_bytes_total", 61 * req.generated + 21, **self.worker_labels)

    def scrape(self, t: float) -> None:
        rec, cfg = self.rec, self.rec.cfg
        ts = rec.spec.start.timestamp() + t
        running, waiting, kv = rec.state
        fe = {"model": self.model}
        gauges = {
            f"{FE}inflight_requests": self.arrived_n - self.finished_n,
            f"{FE}queued_requests": self.arrived_n - self.first_n,
        }
        self.put(f"{FE}disconnected_clients", "gauge", FE_HELP[f"{FE}disconnected_clients"], {}, ts, 0)
        for name, value in gauges.items():
            if name in self.touched:
                self.put(name, "gauge", FE_HELP[name], fe, ts, value)
        card = {"model": rec.spec.model}  # the worker's card: display name, settings
        blocks = cfg.kv_capacity_tokens // cfg.block_size
        batched = cfg.max_num_batched_tokens if cfg.chunked_prefill else cfg.max_prefill_tokens
        for name, value in (
            ("model_context_length", cfg.max_prefill_tokens),
            ("model_kv_cache_block_size", cfg.block_size),
            ("model_max_num_batched_tokens", batched),
            ("model_max_num_seqs", cfg.max_num_seqs),
            ("model_migration_limit", 0),
            ("model_total_kv_blocks", blocks),
        ):
            self.put(f"{FE}{name}", "gauge", FE_HELP[f"{FE}{name}"], card, ts, int(value))
        helps = {**FE_HELP, **WORKER_HELP}
        self.write_counters(ts, helps, {})
        self.write_histograms(ts, helps, {})
        if not self.workers:
            return
        if f"{WC}inflight_requests" in self.touched:
            self.put(
                f"{WC}inflight_requests",
                "gauge",
                helps[f"{WC}inflight_requests"],
                self.worker_labels,
                ts,
                running + waiting,
            )
        kv_labels = {"dynamo_component": "backend", "dynamo_namespace": "dynamo"}
        hit_rate = self.hit_since / self.query_since if self.query_since else 0.0
        self.hit_since = self.query_since = 0.0
        kvstats: list[tuple[str, float]] = [
            ("kvstats_active_blocks", int(round(kv * blocks))),
            ("kvstats_gpu_cache_usage_percent", round(kv, 4)),
            ("kvstats_gpu_prefix_cache_hit_rate", round(hit_rate, 4)),
            ("kvstats_total_blocks", blocks),
        ]
        for name, stat in kvstats:
            self.put(f"{WC}{name}", "gauge", helps[f"{WC}{name}"], kv_labels, ts, stat)
        self.put(
            f"{WC}uptime_seconds",
            "gauge",
            helps[f"{WC}uptime_seconds"],
            {},
            ts,
            round(t - self.started_at, 3),
        )

    def startup(self, t: float, version: str, cfg: Any) -> None:
        """The frontend's start (``service_v2``; the discovery watcher adding the worker's model) and,
        with the workers, the worker's lines through Dynamo's log handler (docs/observability/logging.md:
        ``main.init``, ``main.get_engine_cache_info``) with vLLM's engine line among them."""
        spec = self.rec.spec
        front = [
            (
                t,
                f"{self.stamp(t)}  INFO dynamo_llm::http::service::service_v2: Starting HTTP service on: "
                '0.0.0.0:8000 address="0.0.0.0:8000"',
            ),
            (
                t + 0.6,
                f"{self.stamp(t + 0.6)}  INFO dynamo_llm::discovery::watcher: added model "
                f'model_name="{spec.model}"',
            ),
        ]
        if not self.workers:
            self.rec.logs.extend(front)
            return
        self.rec.side_logs.setdefault("dynamo-frontend", []).extend(front)
        batched = cfg.max_num_batched_tokens if cfg.chunked_prefill else cfg.max_prefill_tokens
        engine = (
            f"Initializing a V1 LLM engine (v{spec.vllm_version}) with config: model='{spec.model}', "
            f"tokenizer='{spec.model}', dtype=torch.bfloat16, max_seq_len={cfg.max_prefill_tokens}, "
            f"tensor_parallel_size={spec.gpu_count}, pipeline_parallel_size=1, seed=0, "
            f"served_model_name={spec.model}, enable_prefix_caching={cfg.prefix_cache_hit_frac > 0}, "
            f"chunked_prefill_enabled={cfg.chunked_prefill}"
        )
        blocks = cfg.kv_capacity_tokens // cfg.block_size
        for dt, where, message in (
            (0.0, "core.__init__", engine),
            (0.4, "main.init", f"VllmWorker for {spec.model} has been initialized"),
            (0.4, "main.init", "Getting engine runtime configuration metadata from vLLM engine..."),
            (0.4, "main.get_engine_cache_info", f"Cache config values: {{'num_gpu_blocks': {blocks}}}"),
            (
                0.4,
                "main.get_engine_cache_info",
                f"Scheduler config values: {{'max_num_seqs': {cfg.max_num_seqs}, 'max_num_batched_tokens': {batched}}}",
            ),
        ):
            self.log(t + dt, f"{self.stamp(t + dt)}  INFO {where}: {message}")

    def oom(self, t: float, error: str) -> None:
        """vLLM's EngineCore death through Dynamo's handler (its formatter appends the traceback to the
        message); the frontend alone logs no engine line."""
        if not self.workers:
            return
        lines = [
            f"{self.stamp(t - 0.1)} ERROR core.run_engine_core: EngineCore encountered a fatal error.",
            "Traceback (most recent call last):",
            '  File "/opt/dynamo/venv/lib/python3.12/site-packages/vllm/v1/sample/sampler.py", line 91, in forward',
            "    logits = self.apply_temperature(logits, sampling_metadata.temperature)",
            error,
        ]
        for i, line in enumerate(lines):
            self.log(t - 0.1 + i * 1e-4, line)
