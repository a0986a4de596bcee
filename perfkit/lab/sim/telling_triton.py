"""Triton's TensorRT-LLM backend telling the simulated incident (:mod:`perfkit.lab.sim.tellings` has its
sources)."""

from __future__ import annotations

from typing import Any

import numpy as np

from perfkit.lab.sim.telling_base import TRITON_TOKEN_BUCKETS, Done, Recorder, Telling

NV = "nv_inference_"
TRITON_HELP = {  # the README's recorded page (tests/data/engines/triton_trtllm_metrics_docs.txt)
    f"{NV}request_success": "Number of successful inference requests, all batch sizes",
    f"{NV}request_failure": "Number of failed inference requests, all batch sizes",
    f"{NV}count": "Number of inferences performed (does not include cached requests)",
    f"{NV}exec_count": "Number of model executions performed (does not include cached requests)",
    f"{NV}request_duration_us": "Cumulative inference request duration in microseconds (includes cached requests)",
    f"{NV}queue_duration_us": "Cumulative inference queuing duration in microseconds (includes cached requests)",
    f"{NV}compute_input_duration_us": "Cumulative compute input duration in microseconds (does not include cached requests)",
    f"{NV}compute_infer_duration_us": "Cumulative compute inference duration in microseconds (does not include cached requests)",
    f"{NV}compute_output_duration_us": "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    f"{NV}pending_request_count": "Instantaneous number of pending requests awaiting execution per-model.",
    "nv_trt_llm_request_metrics": "TRT LLM request metrics",
    "nv_trt_llm_runtime_memory_metrics": "TRT LLM runtime memory metrics",
    "nv_trt_llm_kv_cache_block_metrics": "TRT LLM KV cache block metrics",
    "nv_trt_llm_inflight_batcher_metrics": "TRT LLM inflight_batcher-specific metrics",
    "nv_trt_llm_general_metrics": "General TRT LLM metrics",
    "nv_trt_llm_disaggregated_serving_metrics": "TRT LLM disaggregated serving metrics",
    "nv_llm_input_token_len": "TRT LLM response metrics",
    "nv_llm_output_token_len": "TRT LLM response metrics",
}
TRITON_TOKENS_PER_BLOCK = 64  # trtllm-build's --tokens_per_block default (the README page's tokens_per)
TRITON_QUEUE_US = 45  # Triton's scheduler hands a request to the backend at once: its queue time, in µs
TRITON_INPUT_US, TRITON_OUTPUT_US = 12, 6  # reading the request's tensors; releasing it


class Triton(Telling):
    """Triton's ``tensorrt_llm`` model (inflight batcher) over the simulated engine."""

    BASE = {"model": "tensorrt_llm", "version": "1"}

    def __init__(self, rec: Recorder) -> None:
        super().__init__(rec)
        self.last_step = (0, 0, 0)  # context requests, context tokens, generation requests
        self.iterations = 0
        self.reused_tokens = 0.0
        self.last_end = 0.0  # when the executor's last iteration ended
        self._zero()

    def _zero(self) -> None:
        for name in (
            "request_success",
            "request_failure",
            "count",
            "exec_count",
            "request_duration_us",
            "queue_duration_us",
            "compute_input_duration_us",
            "compute_infer_duration_us",
            "compute_output_duration_us",
        ):
            self.add(f"{NV}{name}", 0)
        for kind in ("kv_cache_transfer_ms", "request_count"):
            self.add("nv_trt_llm_disaggregated_serving_metrics", 0, disaggregated_serving_type=kind)
        for name, kind in (
            ("nv_llm_input_token_len", "total_input_tokens"),
            ("nv_llm_output_token_len", "total_output_tokens"),
        ):
            self.observe(name, TRITON_TOKEN_BUCKETS, np.empty(0), response_metric_type=kind)

    def reset(self, at: float) -> None:
        super().reset(at)
        self.iterations, self.reused_tokens, self.last_step = 0, 0.0, (0, 0, 0)
        self._zero()

    def prefix_hit(self, hit: int) -> None:
        self.reused_tokens += hit

    def done(self, req: Done) -> None:
        infer_us = int(round((req.last - req.arrival) * 1e6))  # the executor's time, its own waiting included
        for name, n in (
            ("request_success", 1),
            ("count", 1),
            ("exec_count", 1),
            ("queue_duration_us", TRITON_QUEUE_US),
            ("compute_input_duration_us", TRITON_INPUT_US),
            ("compute_infer_duration_us", infer_us),
            ("compute_output_duration_us", TRITON_OUTPUT_US),
            ("request_duration_us", TRITON_QUEUE_US + TRITON_INPUT_US + infer_us + TRITON_OUTPUT_US),
        ):
            self.add(f"{NV}{name}", n)
        self.observe(
            "nv_llm_input_token_len",
            TRITON_TOKEN_BUCKETS,
            req.prompt,
            response_metric_type="total_input_tokens",
        )
        self.observe(
            "nv_llm_output_token_len",
            TRITON_TOKEN_BUCKETS,
            req.generated,
            response_metric_type="total_output_tokens",
        )

    def step(self, start: float, end: float, prefill_tokens: int, prefill_seqs: int, n_decode: int) -> None:
        self.iterations += 1
        self.last_step = (prefill_seqs, prefill_tokens, n_decode)
        self.last_end = end

    def scrape(self, t: float) -> None:
        rec, cfg = self.rec, self.rec.cfg
        ts = rec.spec.start.timestamp() + t
        running, waiting, kv = rec.state
        context, context_tokens, generation = self.last_step
        blocks = cfg.kv_capacity_tokens // TRITON_TOKENS_PER_BLOCK
        used = int(round(kv * blocks))
        groups = {
            "nv_trt_llm_request_metrics": (
                "request_type",
                {
                    "active": running + waiting,
                    "context": context,
                    "max": cfg.max_num_seqs,
                    "scheduled": running,
                    "waiting": waiting,
                },
            ),
            "nv_trt_llm_runtime_memory_metrics": ("memory_type", {"cpu": 0, "gpu": 1610236, "pinned": 0}),
            "nv_trt_llm_kv_cache_block_metrics": (
                "kv_cache_block_type",
                {
                    "fraction": round(used / blocks, 6) if blocks else 0.0,
                    "free": blocks - used,
                    "max": blocks,
                    "reused": int(self.reused_tokens // TRITON_TOKENS_PER_BLOCK),
                    "tokens_per": TRITON_TOKENS_PER_BLOCK,
                    "used": used,
                },
            ),
            "nv_trt_llm_inflight_batcher_metrics": (
                "inflight_batcher_specific_metric",
                {
                    "generation_requests": generation,
                    "micro_batch_id": 0,
                    "paused_requests": 0,
                    "total_context_tokens": context_tokens,
                },
            ),
            "nv_trt_llm_general_metrics": (
                "general_type",
                {
                    "iteration_counter": self.iterations,
                    "timestamp": int(round((rec.spec.start.timestamp() + self.last_end) * 1e6)),
                },
            ),
        }
        for name, (label, values) in groups.items():
            for value_label, value in values.items():
                self.put(name, "gauge", TRITON_HELP[name], {**self.BASE, label: value_label}, ts, value)
        self.put(
            f"{NV}pending_request_count", "gauge", TRITON_HELP[f"{NV}pending_request_count"], self.BASE, ts, 0
        )
        self.write_counters(ts, TRITON_HELP, self.BASE)
        self.write_histograms(ts, TRITON_HELP, self.BASE)

    def glog(self, t: float, where: str, message: str) -> None:
        """Triton's glog line (``I0708 15:56:37.437140 1 grpc_server.cc:2562] "..."``, 25.06's quoting)."""
        stamp = self.rec.spec.at(t).strftime("%m%d %H:%M:%S.%f")
        self.log(t, f'I{stamp} 1 {where}] "{message}"')

    def startup(self, t: float, version: str, cfg: Any) -> None:
        """Triton loading the model, the backend's parameter warnings that say the settings
        (``model_instance_state.cc``: chunked context, KV-cache reuse), then the services."""
        self.glog(t, "model_lifecycle.cc:473", "loading: tensorrt_llm:1")
        warn = "[TensorRT-LLM][WARNING] "
        if cfg.chunked_prefill:
            self.log(
                t,
                warn + "enable_chunked_context is set to true, will use context chunking "
                "(requires building the model with use_paged_context_fmha).",
            )
        else:
            self.log(t, warn + "enable_chunked_context is not specified, will be set to false.")
        if cfg.prefix_cache_hit_frac > 0:
            self.log(t, warn + "enable_kv_cache_reuse is not specified, will be set to true")
        self.glog(t + 0.4, "model_lifecycle.cc:849", "successfully loaded 'tensorrt_llm'")
        self.glog(t + 0.5, "grpc_server.cc:2562", "Started GRPCInferenceService at 0.0.0.0:8001")
        self.glog(t + 0.5, "http_server.cc:4832", "Started HTTPService at 0.0.0.0:8000")
        self.glog(t + 0.5, "http_server.cc:358", "Started Metrics Service at 0.0.0.0:8002")

    def oom(self, t: float, error: str) -> None:
        """The executor's error when an allocation fails (``Executor::Impl::terminateActiveRequests``
        logs it; the message as NVIDIA/TensorRT-LLM#3636 records it from release 0.18): the C++ runtime
        has no PyTorch, so no ``torch.OutOfMemoryError``. TensorRT-LLM's logger prints no time
        (``[TensorRT-LLM][ERROR] ...``), and Triton logs nothing per request at its default verbosity,
        so the line has only the time of the glog line before it."""
        self.log(
            t - 0.1,
            "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] CUDA "
            "runtime error in ::cudaMallocAsync(ptr, n, mMemPool->getPool(), mCudaStream->get()): out of memory "
            "(/home/jenkins/agent/workspace/LLM/release-0.18/L0_Test-x86_64/tensorrt_llm/cpp/tensorrt_llm/"
            "runtime/tllmBuffers.h:125)",
        )
