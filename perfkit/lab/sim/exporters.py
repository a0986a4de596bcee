"""Aggregate a simulated engine's events into what real exporters emit.

* vLLM's Prometheus exporter: histograms (TTFT, ITL, TPOT, e2e, queue, prefill, decode,
  inference, prompt/generation tokens) with vLLM's default buckets, counters and gauges, reset at
  every restart (a deploy restarts the server, as it does in production) and absent while the
  server is down;
* vLLM's periodic stats log line (every ``stats_interval_s``);
* dcgm-exporter (per GPU: utilisation, framebuffer, DCP activity, power, clocks);
* node-exporter (CPU seconds by mode, network bytes).

Each target is scraped every ``scrape_interval_s`` with its own small phase offset, as
Prometheus spreads scrapes; samples carry the scrape time.
"""

from __future__ import annotations

import math

import numpy as np

from perfkit.lab.sim import dialects, tellings
from perfkit.lab.sim.dialects import ITL_BUCKETS, REQUEST_BUCKETS, TOKEN_BUCKETS, TTFT_BUCKETS
from perfkit.lab.sim.model import EngineConfig, Release, ScenarioSpec
from perfkit.lab.sim.series import Histogram, SeriesSet

#: vLLM V1's speculative-decoding counters (``_total`` appended on the wire)
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)


def _speculates(spec: ScenarioSpec) -> bool:
    return spec.dialect in dialects.VLLM_SERIES and (
        spec.engine.spec_tokens > 0 or any(r.engine_changes.get("spec_tokens") for r in spec.releases)
    )


def _torch_oom(running: int) -> str:
    """PyTorch 2.x's out-of-memory error (c10/cuda/CUDACachingAllocator.cpp), as any engine's worker dies of it."""
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.63 GiB. GPU 0 has a total capacity "
        "of 79.19 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.96 GiB "
        "memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 2.31 GiB is reserved by "
        f"PyTorch but unallocated. ({running} running requests)"
    )


class Recorder:
    """Receives engine events; keeps vLLM's counters; snapshots every target at each scrape."""

    def __init__(self, spec: ScenarioSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self.rng = rng
        legacy = spec.legacy_metric_names and dialects.check(spec.dialect) == "vllm"
        self.itl_name = "vllm:time_per_output_token_seconds" if legacy else "vllm:inter_token_latency_seconds"
        self.prefix_queries = "vllm:gpu_prefix_cache_queries" if legacy else "vllm:prefix_cache_queries"
        self.prefix_hits = "vllm:gpu_prefix_cache_hits" if legacy else "vllm:prefix_cache_hits"
        self.stats_queries = self.stats_hits = 0.0
        self.kv_name = "vllm:gpu_cache_usage_perc" if legacy else "vllm:kv_cache_usage_perc"
        own = {
            "vllm:time_to_first_token_seconds": TTFT_BUCKETS,
            self.itl_name: ITL_BUCKETS,
            **dict.fromkeys(
                ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"), REQUEST_BUCKETS
            ),
            "vllm:request_prefill_time_seconds": REQUEST_BUCKETS,
            "vllm:request_decode_time_seconds": REQUEST_BUCKETS,
            "vllm:request_inference_time_seconds": REQUEST_BUCKETS,
            "vllm:request_prompt_tokens": TOKEN_BUCKETS,
            "vllm:request_generation_tokens": TOKEN_BUCKETS,
        }
        if not legacy:
            own["vllm:request_time_per_output_token_seconds"] = ITL_BUCKETS
        self.hist = {name: Histogram(dialects.bounds(spec.dialect, name, b)) for name, b in own.items()}
        self.counters = {
            "vllm:prompt_tokens": 0.0,
            "vllm:generation_tokens": 0.0,
            "vllm:num_preemptions": 0.0,
            self.prefix_queries: 0.0,
            self.prefix_hits: 0.0,
        }
        if _speculates(
            spec
        ):  # vLLM creates these only with a speculative config (vllm/v1/spec_decode/metrics.py)
            self.counters.update(dict.fromkeys(SPEC_COUNTERS, 0.0))
        self.spec_since = [0, 0, 0]  # drafts, draft tokens, accepted tokens since the last stats line
        self.success = {"stop": 0.0, "length": 0.0, "abort": 0.0}
        self.out = SeriesSet()
        self.logs: list[tuple[float, str]] = []
        self.records: list[tuple] = []  # per-request truth (for answer keys and tests)
        self.version = spec.initial_version
        self.cfg: EngineConfig = spec.engine
        self.up = True
        # scrape schedule per target (phase offsets spread scrapes as Prometheus does)
        si = spec.scrape_interval_s
        self.next_scrape = {"vllm": 0.213, "dcgm": 3.107, "node": 7.911}
        self.interval = si
        self.next_stats = spec.stats_interval_s
        self.busy: dict[str, float] = {"dcgm": 0.0, "node": 0.0}
        self.prefill_busy = 0.0
        self.decode_busy = 0.0
        self.stats_prompt = 0.0
        self.stats_gen = 0.0
        self.batches = dialects.Batches(0.0)  # SGLang's scheduler-line counts (dialects.sglang_step)
        self.cpu = np.zeros((8, 4))  # cpu x (user, system, idle, iowait) seconds
        self.net = [0.0, 0.0]
        self.arrivals_since = 0
        self.prompt_bytes_since = 0.0
        self.xid = 0.0
        self.state = (0, 0, 0.0)  # running, waiting, kv frac
        self.pid = 4100 + int(rng.integers(0, 800))
        self.side_logs: dict[str, list[tuple[float, str]]] = {}  # another process's log (Dynamo's frontend)
        # TGI, Dynamo, Triton: the engine's own exporter and log over the same events (draws no numbers)
        self.told = tellings.telling_for(self)

    # -- engine callbacks ------------------------------------------------------------------------

    def start(self, at: float, version: str, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self._startup_logs(at, version, cfg)

    def arrived(self, r: int, reqs) -> None:
        self.arrivals_since += 1
        self.prompt_bytes_since += float(reqs.prompt[r]) * 4.2
        if self.told:
            self.told.arrived(r, float(reqs.arrival[r]), int(reqs.prompt[r]))

    def prefix_cache(self, queried: int, hit: int) -> None:
        """vLLM counts prefix-cache queries and hits in tokens, at admission."""
        self.counters[self.prefix_queries] += queried
        self.counters[self.prefix_hits] += hit
        dialects.cached(self, hit)
        if self.told:
            self.told.prefix_hit(hit)
        self.stats_queries += queried
        self.stats_hits += hit

    def itl(self, values: np.ndarray, emitted: np.ndarray | int = 1) -> None:
        """One decode step's interval per sequence; ``emitted``: the tokens each sequence got from it
        (more than one with speculative decoding), for engines that observe per token."""
        self.hist[self.itl_name].observe(values)
        if self.told:
            self.told.itl(values, emitted)

    def spec_decode(self, drafts: int, draft_tokens: int, accepted: int) -> None:
        """One step's speculative decoding: drafts proposed, their tokens, the tokens accepted."""
        for i, (name, n) in enumerate(zip(SPEC_COUNTERS, (drafts, draft_tokens, accepted), strict=True)):
            if name in self.counters:
                self.counters[name] += n
            self.spec_since[i] += n

    def first_token(self, r: int, ttft: float) -> None:
        self.hist["vllm:time_to_first_token_seconds"].observe(ttft)
        if self.told:
            self.told.first_token(r, ttft)

    def preempted(self, r: int) -> None:
        self.counters["vllm:num_preemptions"] += 1

    def finished(self, r, *, prompt, generated, arrival, scheduled, first, last, preemptions) -> None:
        queue = scheduled - arrival
        prefill = first - scheduled
        decode = last - first
        h = self.hist
        h["vllm:e2e_request_latency_seconds"].observe(last - arrival)
        h["vllm:request_queue_time_seconds"].observe(queue)
        h["vllm:request_prefill_time_seconds"].observe(prefill)
        h["vllm:request_decode_time_seconds"].observe(decode)
        h["vllm:request_inference_time_seconds"].observe(last - scheduled)
        h["vllm:request_prompt_tokens"].observe(prompt)
        h["vllm:request_generation_tokens"].observe(generated)
        if generated > 1 and "vllm:request_time_per_output_token_seconds" in h:
            h["vllm:request_time_per_output_token_seconds"].observe(decode / (generated - 1))
        self.counters["vllm:prompt_tokens"] += prompt
        self.counters["vllm:generation_tokens"] += generated
        self.stats_prompt += prompt
        self.stats_gen += generated
        reason = "length" if generated >= self.spec.output.cap else "stop"
        self.success[reason] += 1
        self.records.append(
            (arrival, queue, prefill, decode, last - arrival, prompt, generated, preemptions, self.version)
        )
        if self.told:
            self.told.finished(r, prompt, generated, arrival, scheduled, first, last)

    def step(
        self,
        start,
        end,
        prefill_tokens,
        n_decode,
        running,
        waiting,
        used_blocks,
        total_blocks,
        prefill_seqs=0,
    ) -> None:
        dur = end - start
        self.busy["dcgm"] += dur
        if prefill_tokens:
            self.prefill_busy += dur * min(
                1.0, prefill_tokens * self.cfg.prefill_s_per_token / max(dur, 1e-9)
            )
        self.decode_busy += dur * (n_decode > 0)
        self.state = (len(running), len(waiting), used_blocks / total_blocks)
        if self.told:
            self.told.step(start, end, prefill_tokens, prefill_seqs, n_decode)
        self._advance(end)
        dialects.sglang_step(self, end, prefill_tokens, prefill_seqs, n_decode)

    def idle(self, now, until, running, waiting, used_blocks, total_blocks) -> float:
        self.state = (len(running), len(waiting), used_blocks / total_blocks)
        self._advance(until)
        return until

    def reconfigure(self, cfg: EngineConfig) -> None:
        """A change that needs no restart (a GPU starting to throttle, a neighbour on the node)."""
        self.cfg = cfg

    def restart(self, rel: Release, now: float, cfg: EngineConfig, running, waiting) -> float:
        """A deploy (or a crash): the server goes down for a moment and comes back with fresh counters."""
        if rel.oom:
            self._oom_traceback(now)
        self.up = False
        self._advance(now + rel.restart_pause_s)
        for h in self.hist.values():
            h.reset()
        for k in self.counters:
            self.counters[k] = 0.0
        for k in self.success:
            self.success[k] = 0.0
        self.version = rel.version
        self.cfg = cfg
        self.pid += 97
        self.up = True
        if self.told:
            self.told.reset(now + rel.restart_pause_s)
        self._startup_logs(now + rel.restart_pause_s, rel.version, cfg)
        return now + rel.restart_pause_s

    def close(self, end: float) -> None:
        self._advance(end)

    # -- scrapes ---------------------------------------------------------------------------------

    def _advance(self, until: float) -> None:
        while self.next_stats <= until:
            self._stats_line(self.next_stats)
            self.next_stats += self.spec.stats_interval_s
        for target in ("vllm", "dcgm", "node"):
            while self.next_scrape[target] <= until:
                t = self.next_scrape[target]
                getattr(self, f"_scrape_{target}")(t)
                self.next_scrape[target] += self.interval

    def _scrape_vllm(self, t: float) -> None:
        if not self.up:
            return
        if self.told:
            self.told.scrape(t)
        if self.spec.dialect not in dialects.VLLM_SERIES:
            if not self.told:
                dialects.scrape(self, t)
            return
        base = {"engine": "0", "model_name": self.spec.model}
        ts = self.spec.start.timestamp() + t
        running, waiting, kv = self.state
        self.out.put(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            "vllm:num_requests_running",
            base,
            ts,
            running,
        )
        self.out.put(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            "vllm:num_requests_waiting",
            base,
            ts,
            waiting,
        )
        self.out.put(
            self.kv_name,
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            self.kv_name,
            base,
            ts,
            round(kv, 4),
        )
        for name, value in self.counters.items():
            self.out.put(name, "counter", f"{name} counter.", f"{name}_total", base, ts, value)
        for reason, value in self.success.items():
            self.out.put(
                "vllm:request_success",
                "counter",
                "Count of successfully processed requests.",
                "vllm:request_success_total",
                {**base, "finished_reason": reason},
                ts,
                value,
            )
        cfg = self.cfg
        info = {
            **base,
            "block_size": str(cfg.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(self.cfg.prefix_cache_hit_frac > 0),
            "gpu_memory_utilization": "0.9",
            "num_gpu_blocks": str(cfg.kv_capacity_tokens // cfg.block_size),
        }
        self.out.put(
            "vllm:cache_config_info",
            "gauge",
            "Information of the LLMEngine CacheConfig",
            "vllm:cache_config_info",
            info,
            ts,
            1,
        )
        for name, h in self.hist.items():
            cum = np.cumsum(h.counts)
            for bound, c in zip([*h.bounds, math.inf], cum, strict=True):
                le = "+Inf" if math.isinf(bound) else repr(float(bound))
                self.out.put(
                    name,
                    "histogram",
                    f"Histogram of {name}.",
                    f"{name}_bucket",
                    {**base, "le": le},
                    ts,
                    int(c),
                )
            self.out.put(name, "histogram", f"Histogram of {name}.", f"{name}_count", base, ts, int(cum[-1]))
            self.out.put(
                name, "histogram", f"Histogram of {name}.", f"{name}_sum", base, ts, round(h.total, 4)
            )

    def _scrape_dcgm(self, t: float) -> None:
        spec = self.spec
        ts = spec.start.timestamp() + t
        busy = min(1.0, self.busy["dcgm"] / self.interval)
        prefill = min(1.0, self.prefill_busy / self.interval)
        self.busy["dcgm"] = self.prefill_busy = self.decode_busy = 0.0
        running, _, kv = self.state
        total_mib = 81559
        for gpu in range(spec.gpu_count):
            jitter = 1.0 + 0.02 * self.rng.standard_normal()
            labels = {
                "gpu": str(gpu),
                "UUID": f"GPU-{spec.seed:08x}-{gpu:04x}-4c1e-9a7b-{gpu:012x}",
                "device": f"nvidia{gpu}",
                "modelName": spec.gpu,
                "Hostname": f"{spec.service}-0",
                "DCGM_FI_DRIVER_VERSION": "570.124.06",
            }
            util = 100.0 * min(1.0, busy * jitter) if self.up else 0.0
            used = (71000 + 2000 * kv) if self.up else 1200
            tensor = (
                min(1.0, (0.65 * prefill + 0.12 * busy * min(1.0, running / 64)) * jitter) if self.up else 0.0
            )
            self.out.put(
                "DCGM_FI_DEV_GPU_UTIL",
                "gauge",
                "GPU utilization (in %).",
                "DCGM_FI_DEV_GPU_UTIL",
                labels,
                ts,
                round(util),
            )
            self.out.put(
                "DCGM_FI_DEV_FB_USED",
                "gauge",
                "Framebuffer memory used (in MiB).",
                "DCGM_FI_DEV_FB_USED",
                labels,
                ts,
                round(used),
            )
            self.out.put(
                "DCGM_FI_DEV_FB_FREE",
                "gauge",
                "Framebuffer memory free (in MiB).",
                "DCGM_FI_DEV_FB_FREE",
                labels,
                ts,
                round(total_mib - used),
            )
            self.out.put(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "gauge",
                "Ratio of time the graphics engine is active.",
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                labels,
                ts,
                round(0.92 * util / 100, 4),
            )
            self.out.put(
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                "gauge",
                "Ratio of cycles the tensor pipe is active.",
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                labels,
                ts,
                round(tensor, 4),
            )
            self.out.put(
                "DCGM_FI_PROF_DRAM_ACTIVE",
                "gauge",
                "Ratio of cycles the device memory interface is active.",
                "DCGM_FI_PROF_DRAM_ACTIVE",
                labels,
                ts,
                round(min(1.0, 0.7 * util / 100 * jitter), 4),
            )
            self.out.put(
                "DCGM_FI_DEV_POWER_USAGE",
                "gauge",
                "Power draw (in W).",
                "DCGM_FI_DEV_POWER_USAGE",
                labels,
                ts,
                round(95 + 5.4 * util * jitter, 1),
            )
            self.out.put(
                "DCGM_FI_DEV_SM_CLOCK",
                "gauge",
                "SM clock frequency (in MHz).",
                "DCGM_FI_DEV_SM_CLOCK",
                labels,
                ts,
                round(self.cfg.sm_clock_mhz) if util > 5 else 345,
            )
            self.out.put(
                "DCGM_FI_DEV_GPU_TEMP",
                "gauge",
                "GPU temperature (in C).",
                "DCGM_FI_DEV_GPU_TEMP",
                labels,
                ts,
                round(34 + 0.35 * util),
            )
            self.out.put(
                "DCGM_FI_DEV_XID_ERRORS",
                "gauge",
                "Value of the last XID error encountered.",
                "DCGM_FI_DEV_XID_ERRORS",
                labels,
                ts,
                self.xid,
            )

    def _scrape_node(self, t: float) -> None:
        spec = self.spec
        ts = spec.start.timestamp() + t
        rps = self.arrivals_since / self.interval
        busy = min(0.9, 0.06 + 0.02 * rps)  # tokenisation and detokenisation scale with traffic
        for cpu in range(self.cpu.shape[0]):
            u = busy * (1 + 0.05 * self.rng.standard_normal())
            u = min(max(u, 0.0), 0.95)
            self.cpu[cpu] += self.interval * np.array([u * 0.8, u * 0.2, 1 - u - 0.005, 0.005])
            for i, mode in enumerate(("user", "system", "idle", "iowait")):
                self.out.put(
                    "node_cpu_seconds_total",
                    "counter",
                    "Seconds the CPUs spent in each mode.",
                    "node_cpu_seconds_total",
                    {"cpu": str(cpu), "mode": mode, "instance": f"{spec.service}-0:9100"},
                    ts,
                    round(self.cpu[cpu, i], 2),
                )
        self.net[0] += self.prompt_bytes_since + 1200 * self.interval
        self.net[1] += self.arrivals_since * 900 + 1500 * self.interval
        for i, name in enumerate(("node_network_receive_bytes_total", "node_network_transmit_bytes_total")):
            self.out.put(
                name,
                "counter",
                "Network device statistic.",
                name,
                {"device": "eth0", "instance": f"{spec.service}-0:9100"},
                ts,
                round(self.net[i]),
            )
        self.arrivals_since = 0
        self.prompt_bytes_since = 0.0

    # -- logs ------------------------------------------------------------------------------------

    def _log(self, t: float, level: str, where: str, message: str, process: str = "APIServer") -> None:
        stamp = self.spec.at(t).strftime("%m-%d %H:%M:%S")
        self.logs.append((t, f"({process} pid={self.pid}) {level} {stamp} [{where}] {message}"))

    def _stats_line(self, t: float) -> None:
        if not self.up:
            return
        running, waiting, kv = self.state
        dt = self.spec.stats_interval_s
        if self.spec.dialect == "vllm":
            self._log(
                t,
                "INFO",
                "loggers.py:123",
                f"Engine 000: Avg prompt throughput: {self.stats_prompt / dt:.1f} tokens/s, "
                f"Avg generation throughput: {self.stats_gen / dt:.1f} tokens/s, Running: {running} reqs, "
                f"Waiting: {waiting} reqs, GPU KV cache usage: {100 * kv:.1f}%, "
                f"Prefix cache hit rate: {100 * self.stats_hits / self.stats_queries if self.stats_queries else 0:.1f}%",
            )
            drafts, drafted, accepted = self.spec_since
            if drafts:  # SpecDecodingLogging.log (vllm/v1/spec_decode/metrics.py, 0.10.1), per-position rates left out
                self._log(
                    t,
                    "INFO",
                    "metrics.py:96",
                    f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                    f"Accepted throughput: {accepted / dt:.2f} tokens/s, Drafted throughput: {drafted / dt:.2f} "
                    f"tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
                    f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%",
                )
        self.spec_since = [0, 0, 0]
        self.stats_prompt = self.stats_gen = 0.0
        self.stats_queries = self.stats_hits = 0.0

    def _oom_traceback(self, t: float) -> None:
        """What a vLLM worker prints when a batch's activations/logits do not fit (PyTorch 2.x wording)."""
        running = self.state[0]
        if self.told:  # TGI's, Dynamo's, Triton's own lines (perfkit.lab.sim.tellings)
            self.told.oom(t, _torch_oom(running))
            return
        if self.spec.dialect != "vllm":  # the engine's own wrapper (dialects.oom_lines) around PyTorch's line
            for i, line in enumerate(dialects.oom_lines(self, t, _torch_oom(running))):
                self.logs.append((t - 0.1 + i * 1e-4, line))
            return
        self._log(
            t - 0.2, "ERROR", "core.py:588", "EngineCore encountered a fatal error.", process="EngineCore_0"
        )
        stamp = self.spec.at(t).strftime("%m-%d %H:%M:%S")
        tail = [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/sample/sampler.py", line 91, in forward',
            "    logits = self.apply_temperature(logits, sampling_metadata.temperature)",
            _torch_oom(running),
            f"(APIServer pid={self.pid}) ERROR {stamp} [async_llm.py:420] AsyncLLM output_handler failed.",
        ]
        for i, line in enumerate(tail):
            self.logs.append((t - 0.1 + i * 1e-4, line))

    def _startup_logs(self, t: float, version: str, cfg: EngineConfig) -> None:
        spec = self.spec
        if self.told:
            self.told.startup(t, version, cfg)
            return
        if spec.dialect != "vllm":
            dialects.startup_logs(self, t, version, cfg)
            return
        self._log(t, "INFO", "api_server.py:1875", f"vLLM API server version {spec.vllm_version}")
        self._log(t, "INFO", "api_server.py:1876", f"service {spec.service} release {version}")
        tokens = cfg.max_num_batched_tokens if cfg.chunked_prefill else cfg.max_prefill_tokens
        args: dict[str, object] = {
            "model": spec.model,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": tokens,
        }
        if cfg.chunked_prefill and cfg.long_prefill_token_threshold:
            args["long_prefill_token_threshold"] = cfg.long_prefill_token_threshold
        speculative = "None"
        if cfg.spec_tokens:
            draft = f"{spec.model}-draft"
            args["speculative_config"] = {"model": draft, "num_speculative_tokens": cfg.spec_tokens}
            speculative = (
                f"SpeculativeConfig(method='draft_model', model='{draft}', num_spec_tokens={cfg.spec_tokens})"
            )
        self._log(t, "INFO", "utils.py:326", f"non-default args: {args}")
        notice = f"Chunked prefill is enabled with max_num_batched_tokens={tokens}."
        if cfg.chunked_prefill:
            self._log(t, "INFO", "scheduler.py:222", notice)
        text = (  # vLLM 0.10.1's VllmConfig.__str__, compilation_config abridged (docs/formats.md)
            f"Initializing a V1 LLM engine (v{spec.vllm_version}) with config: model='{spec.model}', speculative_config={speculative}, tokenizer='{spec.model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, override_neuron_config={{}}, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len={cfg.max_prefill_tokens}, download_dir=None, load_format=auto, tensor_parallel_size={spec.gpu_count}, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, decoding_config=DecodingConfig(backend='auto', disable_fallback=False, disable_any_whitespace=False, disable_additional_properties=False, reasoning_backend=''), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, served_model_name={spec.model}, "
            f'enable_prefix_caching={cfg.prefix_cache_hit_frac > 0}, chunked_prefill_enabled={cfg.chunked_prefill}, use_async_output_proc=True, pooler_config=None, compilation_config={{"level":3,"use_inductor":true,"use_cudagraph":true,"max_capture_size":512}}'
        )
        self._log(t, "INFO", "core.py:74", text, process="EngineCore_0")
        self._log(
            t,
            "INFO",
            "kv_cache_utils.py:716",
            f"GPU KV cache size: {cfg.kv_capacity_tokens:,} tokens",
            process="EngineCore_0",
        )
        self._log(t + 0.5, "INFO", "launcher.py:29", "Starting vLLM API server 0 on http://0.0.0.0:8000")
