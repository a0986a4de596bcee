"""Hugging Face TGI's router telling the simulated incident (:mod:`perfkit.lab.sim.tellings` has its sources)."""

from __future__ import annotations

from typing import Any

from perfkit.lab.sim.telling_base import (
    Done,
    Recorder,
    Telling,
    linear_buckets,
    tgi_duration_buckets,
    validation_s,
)

TGI_HELP = {  # router/src/server.rs describe_* (none for tgi_request_failure, tgi_batch_max_total_tokens)
    "tgi_request_success": "Number of successful requests",
    "tgi_request_duration": "Total time spent processing the request",
    "tgi_request_validation_duration": "Time spent validating the request",
    "tgi_request_queue_duration": "Time spent in the queue per request",
    "tgi_request_inference_duration": "Request inference duration",
    "tgi_request_mean_time_per_token_duration": "Mean time per token per request",
    "tgi_request_generated_tokens": "Generated tokens per request",
    "tgi_batch_inference_count": "Inference calls per method (prefill or decode)",
    "tgi_request_count": "Total number of requests",
    "tgi_batch_inference_success": "Number of successful inference calls per method (prefill or decode)",
    "tgi_batch_current_size": "Current batch size",
    "tgi_queue_size": "Current queue size",
    "tgi_batch_current_max_tokens": "Maximum tokens for the current batch",
    "tgi_batch_inference_duration": "Batch inference duration",
    "tgi_batch_forward_duration": "Batch forward duration per method (prefill or decode)",
    "tgi_request_input_length": "Input token length per request",
}
TGI_DURATION = tgi_duration_buckets()


class TGI(Telling):
    """Text Generation Inference's router (v3 backend) over the simulated engine."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__(rec)
        cfg, spec = rec.cfg, rec.spec
        # the launch: --max-input-tokens at the engine's longest prompt, --max-total-tokens adding the
        # longest output the traffic asks for (the buckets of the token histograms follow them)
        self.max_input = int(cfg.max_prefill_tokens)
        self.max_total = int(cfg.max_prefill_tokens + spec.output.cap)
        self.input_buckets = linear_buckets(self.max_input)
        self.total_buckets = linear_buckets(self.max_total)

    def arrived(self, r: int, t: float, prompt: int) -> None:
        super().arrived(r, t, prompt)
        self.add("tgi_request_count")
        self.observe("tgi_request_input_length", self.input_buckets, prompt)
        self.touched.add("tgi_queue_size")

    def done(self, req: Done) -> None:
        validation = validation_s(req.prompt)
        inference = req.last - req.scheduled
        self.add("tgi_request_success")
        self.observe("tgi_request_duration", TGI_DURATION, validation + req.last - req.arrival)
        self.observe("tgi_request_validation_duration", TGI_DURATION, validation)
        self.observe("tgi_request_queue_duration", TGI_DURATION, req.scheduled - req.arrival)
        self.observe("tgi_request_inference_duration", TGI_DURATION, inference)
        self.observe(
            "tgi_request_mean_time_per_token_duration", TGI_DURATION, inference / max(1, req.generated)
        )
        self.observe("tgi_request_generated_tokens", self.total_buckets, req.generated)

    def step(self, start: float, end: float, prefill_tokens: int, prefill_seqs: int, n_decode: int) -> None:
        method = "prefill" if prefill_tokens else "decode"  # TGI's prefill call carries the running batch
        self.add("tgi_batch_inference_count", method=method)
        self.add("tgi_batch_inference_success", method=method)
        self.observe("tgi_batch_forward_duration", TGI_DURATION, end - start, method=method)
        self.observe("tgi_batch_inference_duration", TGI_DURATION, end - start, method=method)
        self.touched.update(("tgi_batch_current_size", "tgi_batch_current_max_tokens"))

    def scrape(self, t: float) -> None:
        ts = self.rec.spec.start.timestamp() + t
        running, waiting, kv = self.rec.state
        cfg = self.rec.cfg
        gauges = {
            "tgi_queue_size": waiting,
            "tgi_batch_current_size": running,
            # the batch's token budget: the KV tokens its requests hold
            "tgi_batch_current_max_tokens": int(round(kv * cfg.kv_capacity_tokens)),
            "tgi_batch_max_total_tokens": int(cfg.kv_capacity_tokens),  # backends/v3/src/lib.rs, at start-up
        }
        for name, value in gauges.items():
            if name in self.touched or name == "tgi_batch_max_total_tokens":
                self.put(name, "gauge", TGI_HELP.get(name, ""), {}, ts, value)
        self.write_counters(ts, TGI_HELP, {})
        self.write_histograms(ts, TGI_HELP, {})

    def startup(self, t: float, version: str, cfg: Any) -> None:
        """The launcher's lines that say the settings (launcher/src/main.rs ``resolve_attention``;
        the shard's ``globals.py`` lines forwarded by the launcher). Chunked prefill off is
        ``PREFILL_CHUNKING=0``, which TGI logs nowhere; prefix caching off is ``PREFIX_CACHING=0``."""
        attention = "flashinfer"
        prefix = "true" if cfg.prefix_cache_hit_frac > 0 else "0"
        stamp = self.stamp(t)
        self.log(
            t,
            f"{stamp}  INFO text_generation_launcher: Using attention {attention} - Prefix caching {prefix}",
        )
        self.log(t, f"{stamp}  INFO shard-manager: text_generation_launcher: Starting shard rank=0")
        later = self.stamp(t + 0.3)
        self.log(
            t + 0.3, f"{later}  INFO text_generation_launcher: Using prefix caching = {prefix == 'true'}"
        )
        self.log(t + 0.3, f"{later}  INFO text_generation_launcher: Using Attention = {attention}")
        ready = self.stamp(t + 0.5)
        self.log(t + 0.5, f"{ready}  INFO text_generation_launcher: Starting Webserver")

    def oom(self, t: float, error: str) -> None:
        """The shard's interceptor logs ``Method Decode encountered an error.`` with the traceback
        (server/text_generation_server/interceptor.py, forwarded by the launcher), and a
        ``RuntimeError`` shuts the shard down: ``Shard 0 crashed`` (launcher/src/main.rs)."""
        stamp = self.stamp(t - 0.1)
        lines = [
            f"{stamp} ERROR text_generation_launcher: Method Decode encountered an error.",
            "Traceback (most recent call last):",
            '  File "/usr/src/.venv/lib/python3.11/site-packages/text_generation_server/interceptor.py", line 24, in intercept',
            "    return await response",
            error,
            f"{self.stamp(t)} ERROR text_generation_launcher: Shard 0 crashed",
        ]
        for i, line in enumerate(lines):
            self.log(t - 0.1 + i * 1e-4, line)
