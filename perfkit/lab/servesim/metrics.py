"""What the live simulator exports: vLLM's Prometheus series, dcgm-exporter-like GPU series and
vLLM's stats log lines, all in **virtual** seconds (``perfkit lab serve --speed``).

**vLLM series** (names, types, help texts, labels ``model_name`` and ``engine="0"`` and bucket bounds
from vllm/v1/metrics/loggers.py ``PrometheusStatLogger``, vLLM >= 0.11 names; the bucket lists are
those of :mod:`perfkit.lab.sim.exporters`): TTFT, inter-token latency (one sample per decoded token),
request-level TPOT (``vllm:request_time_per_output_token_seconds``: a request's decode time over its
output tokens minus one), E2E, queue, prefill, decode and inference (RUNNING-phase) times, prompt and
generation tokens per request and ``max_tokens`` (1-2-5 buckets up to ``max_model_len``, vLLM's
``build_1_2_5_buckets``), tokens per engine step (``vllm:iteration_tokens_total``: here the tokens the
step scheduled, prefill plus decode), running/waiting/KV usage gauges, and the counters of
preemptions, prompt/generation tokens, prefix-cache queries/hits (tokens) and finished requests by
``finished_reason``. As in vLLM, a request counts its prompt tokens and its TTFT when its first
token appears, and an aborted request (client gone) is in no histogram; one the engine dropped
because it can never fit a live config change counts as ``finished_reason="abort"``. ``vllm:cache_config_info``
carries ``str()`` of the CacheConfig fields vLLM 0.10 exports (vllm/config/cache.py ``metrics_info``:
no ``model_name``), read back by :mod:`perfkit.sources.engine_config`.

**Release**: ``build_info{version, vllm_version, model_name}`` = 1; its ``version`` is what a
``deploy`` fault bumps (``perfkit ... --release-metric build_info:version``, see
:func:`perfkit.sources.releases.info_metric_releases`).

**GPU series** (dcgm-exporter names and labels: ``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``, ``DCGM_FI_DRIVER_VERSION``), one per tensor-parallel rank, from the engine's steps over
the last :data:`GPU_WINDOW_S` virtual seconds: ``busy`` (share of the window inside a step) and
``prefill_share`` (share of that busy time spent on prefill, estimated from the roofline's two
bounds: prompt tokens x 2 FLOP per parameter at peak FLOP/s, against one read of the weights at
peak HBM bandwidth for the decode). See :class:`GpuSeries` for each series' formula.

**Stats log line** every :data:`STATS_INTERVAL_S` virtual seconds, vLLM's LoggingStatLogger format
(``Engine 000: Avg prompt throughput: ... Prefix cache hit rate: ...%``) with vLLM's record prefix
``(APIServer pid=N) INFO MM-DD HH:MM:SS [loggers.py:123]`` (vllm/logger.py ``_FORMAT`` and
``decorate_logs``), stamped in UTC at the server's start plus the virtual time; an idle interval
after an idle one writes nothing (vLLM logs it at DEBUG). Start-up lines as vLLM 0.10.1's (server
version, non-default args, chunked-prefill notice, ``Initializing a V1 LLM engine ... with config``,
GPU KV cache size) are written at start and again after every live config change, so
:mod:`perfkit.sources.engine_config` reads the settings in force.

**Dialects** (``dialect`` in the engine config): ``sglang`` and ``trtllm`` export the same engine under
SGLang's or trtllm-serve's names and write their log lines instead (:mod:`.dialect_metrics`); the
GPU series and ``build_info`` are the same in every dialect.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from perfkit.lab.serve_clock import Histogram
from perfkit.lab.servesim import dialect_metrics as dialects
from perfkit.lab.sim.dialects import Batches, decode_batch, prefill_batch
from perfkit.lab.sim.exporters import ITL_BUCKETS, REQUEST_BUCKETS, TTFT_BUCKETS

if TYPE_CHECKING:
    from perfkit.lab.servesim.config import SimConfig
    from perfkit.lab.servesim.core import Finished, StepResult

STATS_INTERVAL_S = 10.0  # vLLM's default --log-stats interval (envs.VLLM_LOG_STATS_INTERVAL = 10 s)
GPU_WINDOW_S = 1.0  # DCGM's default field update interval for profiling metrics is 1 s (dcgmi dmon -d 1000)
PREFIX_WINDOW = 1000  # vLLM's PrefixCachingMetrics(max_recent_requests=1000): the hit rate is recent
ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]  # loggers.py
FINISH_REASONS = ("stop", "length", "abort")  # vllm/v1/engine/__init__.py FinishReason, str() of each
MIB = 2**20

#: (SM clock under load in MHz, board power limit in W) by GPU key fragment, from each datasheet /
#: ``nvidia-smi -q`` "Max Clocks": A100 SXM4 1410 MHz 400 W (NVIDIA A100 datasheet); H100 SXM5 and
#: H200 SXM 1980 MHz 700 W (H100/H200 datasheets); B200 1965 MHz 1000 W (DGX B200 datasheet: 1,000 W
#: per GPU); L40S 2520 MHz boost 350 W (L40S datasheet); MI300X 2100 MHz 750 W (AMD MI300X datasheet).
GPU_CLOCKS = {
    "a100": (1410.0, 400.0),
    "h100": (1980.0, 700.0),
    "h200": (1980.0, 700.0),
    "b200": (1965.0, 1000.0),
    "l40s": (2520.0, 350.0),
    "mi300x": (2100.0, 750.0),
}
IDLE_CLOCK_MHZ = 345.0  # what an idle H100 reports (the lowest P-state's SM clock)
IDLE_POWER_FRAC = 0.1  # an idle data-centre GPU draws ~10 % of its limit (H100 SXM: ~70 W of 700 W)
IDLE_TEMP_C, HOT_TEMP_C = 33.0, 88.0  # idle; and about where Hopper's thermal slowdown starts (~87-90 C)
DEGREES_PER_UTIL = 0.4  # a liquid/air-cooled SXM board settles near 70 C at 100 % utilisation


_labels = dialects.labels


def one_two_five(top: int) -> list[float]:
    """vLLM's ``build_1_2_5_buckets(max_model_len)``: 1, 2, 5, 10, 20, 50 ... up to ``top``."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > top:
                return out
            out.append(float(m * scale))
        scale *= 10


class Exposition:
    """Lines of the Prometheus text format (0.0.4), one family at a time."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str, samples: Iterable[str]) -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", *samples]

    def value(self, name: str, kind: str, help_: str, labels: str, value: float) -> None:
        self.family(name, kind, help_, [f"{name}{{{labels}}} {float(value)!r}"])

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@dataclass
class _Tracked:
    arrival: float
    prompt_tokens: int
    max_tokens: int
    last: float = 0.0  # when its latest token came out


_HISTOGRAMS = {  # name: (help, bounds or None for 1-2-5 token buckets)
    "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request.",
        ITL_BUCKETS,
    ),
    "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", REQUEST_BUCKETS),
    "vllm:request_queue_time_seconds": (
        "Histogram of time spent in WAITING phase for request.",
        REQUEST_BUCKETS,
    ),
    "vllm:request_inference_time_seconds": (
        "Histogram of time spent in RUNNING phase for request.",
        REQUEST_BUCKETS,
    ),
    "vllm:request_prefill_time_seconds": (
        "Histogram of time spent in PREFILL phase for request.",
        REQUEST_BUCKETS,
    ),
    "vllm:request_decode_time_seconds": (
        "Histogram of time spent in DECODE phase for request.",
        REQUEST_BUCKETS,
    ),
    "vllm:request_prompt_tokens": ("Number of prefill tokens processed.", None),
    "vllm:request_generation_tokens": ("Number of generation tokens processed.", None),
    "vllm:request_params_max_tokens": ("Histogram of the max_tokens request parameter.", None),
    "vllm:iteration_tokens_total": ("Histogram of number of tokens per engine_step.", ITERATION_BUCKETS),
}
_COUNTERS = {
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
}

#: vllm/v1/spec_decode/metrics.py (SpecDecodingProm): name → help
_SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "Number of spec decoding drafts.",
    "vllm:spec_decode_num_draft_tokens": "Number of draft tokens.",
    "vllm:spec_decode_num_accepted_tokens": "Number of accepted tokens.",
}


class EngineMetrics:
    """vLLM's series, fed with the engine's steps: ``admitted`` each request, ``step`` each result."""

    def __init__(self, cfg: SimConfig, version: str) -> None:
        self.cfg, self.version = cfg, version
        tokens = one_two_five(cfg.max_model_len)
        self.hist = {  # the dialect's buckets where it exports the histogram under its own name
            name: Histogram(list(dialects.bounds(cfg.dialect, name, bounds or tokens)))
            for name, (_, bounds) in _HISTOGRAMS.items()
        }
        self.counters = dict.fromkeys(_COUNTERS, 0.0)
        # vLLM creates its speculative-decoding counters only with a speculative config
        self.spec = dict.fromkeys(_SPEC_COUNTERS, 0.0) if cfg.num_speculative_tokens else {}
        self.success = dict.fromkeys(FINISH_REASONS, 0)
        self.running = self.waiting = 0
        self.kv_usage = 0.0
        self.tracked: dict[str, _Tracked] = {}
        # for the stats log line: tokens since the last line, prefix figures of recent admissions
        self.interval_prompt = self.interval_generation = 0
        self.client_aborts = 0  # admitted requests whose client left (SGLang counts them aborted)
        self.recent_prefix: deque[tuple[int, int]] = deque(maxlen=PREFIX_WINDOW)
        self.completed = 0

    def admitted(self, rid: str, arrival: float, prompt_tokens: int, max_tokens: int) -> None:
        self.tracked[rid] = _Tracked(arrival, prompt_tokens, max_tokens)

    def aborted(self, rid: str) -> None:
        if self.tracked.pop(rid, None) is not None:
            self.client_aborts += 1

    def step(self, res: StepResult) -> None:
        """Record one engine step; its tokens count at its end (``res.start + res.duration_s``)."""
        end = res.start + res.duration_s
        hist, counters = self.hist, self.counters
        for out in res.outputs:
            track = self.tracked.get(out.rid)
            if track is None:  # aborted while the step ran: vLLM's output processor drops it
                continue
            counters["vllm:generation_tokens"] += out.new_tokens
            self.interval_generation += out.new_tokens
            if out.first:
                hist["vllm:time_to_first_token_seconds"].observe(end - track.arrival)
                counters["vllm:prompt_tokens"] += track.prompt_tokens
                self.interval_prompt += track.prompt_tokens
            else:  # the gap since its previous token (a preempted request's includes the recompute)
                hist["vllm:inter_token_latency_seconds"].observe(end - track.last)
            track.last = end
        for done in res.finished:
            self._finished(done)
        for rid, _ in res.dropped:  # can never fit a changed config: finished as aborted, in no histogram
            if self.tracked.pop(rid, None) is not None:
                self.success["abort"] += 1
        counters["vllm:num_preemptions"] += res.preemptions  # a live reconfigure's too (StepResult)
        counters["vllm:prefix_cache_queries"] += res.prefix_queries
        counters["vllm:prefix_cache_hits"] += res.prefix_hits
        if self.spec and res.spec_drafts:
            for name, n in zip(
                _SPEC_COUNTERS,
                (res.spec_drafts, res.spec_drafts * self.cfg.num_speculative_tokens, res.spec_accepted),
                strict=True,
            ):
                self.spec[name] += n
        if res.prefix_queries:
            self.recent_prefix.append((res.prefix_queries, res.prefix_hits))
        if res.prefill_tokens or res.decode_seqs:
            hist["vllm:iteration_tokens_total"].observe(res.prefill_tokens + res.decode_seqs)
        self.gauges(res.num_running, res.num_waiting, res.kv_usage)

    def gauges(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running, self.waiting, self.kv_usage = running, waiting, kv_usage

    def _finished(self, done: Finished) -> None:
        track = self.tracked.pop(done.rid, None)
        h = self.hist
        h["vllm:e2e_request_latency_seconds"].observe(done.last_token - done.arrival)
        h["vllm:request_queue_time_seconds"].observe(done.scheduled - done.arrival)
        h["vllm:request_prefill_time_seconds"].observe(done.first_token - done.scheduled)
        h["vllm:request_decode_time_seconds"].observe(done.last_token - done.first_token)
        h["vllm:request_inference_time_seconds"].observe(done.last_token - done.scheduled)
        h["vllm:request_prompt_tokens"].observe(done.prompt_tokens)
        h["vllm:request_generation_tokens"].observe(done.output_tokens)
        h["vllm:request_params_max_tokens"].observe(track.max_tokens if track else done.output_tokens)
        if done.output_tokens > 1:
            tpot = (done.last_token - done.first_token) / (done.output_tokens - 1)
            h["vllm:request_time_per_output_token_seconds"].observe(tpot)
        self.success["length"] += 1  # the simulator generates exactly max_tokens (ignore_eos)
        self.completed += 1

    def prefix_hit_rate(self) -> float:
        queries = sum(q for q, _ in self.recent_prefix)
        return sum(h for _, h in self.recent_prefix) / queries if queries else 0.0

    def exposition(self, out: Exposition) -> None:
        if self.cfg.dialect != "vllm":
            dialects.exposition(self, out)
        else:
            self._vllm(out)
        build = _labels(
            {
                "model_name": self.cfg.served_model_name,
                "version": self.version,
                "vllm_version": self.cfg.vllm_version,
            }
        )
        out.value(
            "build_info", "gauge", "The running build; its version label changes at a deploy.", build, 1
        )

    def _vllm(self, out: Exposition) -> None:
        labels = _labels({"model_name": self.cfg.served_model_name, "engine": "0"})
        for name, help_, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", self.running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self.kv_usage),
        ):
            out.value(name, "gauge", help_, labels, value)
        for name, help_ in _COUNTERS.items():  # prometheus_client names a counter's family with _total
            out.value(f"{name}_total", "counter", help_, labels, self.counters[name])
        for name, value in self.spec.items():
            out.value(f"{name}_total", "counter", _SPEC_COUNTERS[name], labels, value)
        success = [
            f'vllm:request_success_total{{{labels},finished_reason="{why}"}} {float(n)!r}'
            for why, n in self.success.items()
        ]
        out.family(
            "vllm:request_success_total", "counter", "Count of successfully processed requests.", success
        )
        for name, (help_, _) in _HISTOGRAMS.items():
            out.family(name, "histogram", help_, self.hist[name].lines(name, labels))
        out.value(
            "vllm:cache_config_info",
            "gauge",
            "Information of the LLMEngine CacheConfig",
            cache_labels(self.cfg),
            1,
        )


def cache_labels(cfg: SimConfig) -> str:
    """``vllm:cache_config_info``'s labels: ``str()`` of vLLM 0.10's CacheConfig fields, and ``engine``."""
    fields: dict[str, object] = {
        "block_size": cfg.block_size,
        "cache_dtype": "auto",
        "calculate_kv_scales": False,
        "cpu_offload_gb": 0,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "is_attention_free": False,
        "num_cpu_blocks": 0,  # V1 keeps no CPU swap space
        "num_gpu_blocks": cfg.num_gpu_blocks(),
        "num_gpu_blocks_override": None,
        "prefix_caching_hash_algo": "builtin",
        "sliding_window": None,
        "swap_space": 4,
        "engine": 0,
    }
    return _labels(fields)


# -- the GPUs ------------------------------------------------------------------------------------


@dataclass
class GpuState:
    """What faults do to the boards: the SM clock's drop (thermal) and another tenant's memory."""

    clock_drop: float = 0.0  # share of the SM clock lost to throttling
    hot: bool = False  # at the slowdown temperature
    tenant_bytes: float = 0.0  # per GPU, held by another process


class GpuSeries:
    """dcgm-exporter's series for the ``tensor_parallel_size`` GPUs of the simulated engine.

    With ``busy`` and ``p`` (prefill share) over the last :data:`GPU_WINDOW_S` (tensor parallelism
    shards every step evenly, so all ranks read alike):

    * ``DCGM_FI_DEV_GPU_UTIL`` = 100 busy (the share of time a kernel ran; steps are back to back);
    * ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` = busy;
    * ``DCGM_FI_PROF_SM_ACTIVE`` = busy (0.95 p + 0.75 (1-p)): big prefill GEMMs fill every SM, decode
      GEMVs at small batch leave some idle;
    * ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` = busy (0.7 p + 0.1 (1-p)): prefill is compute-bound;
    * ``DCGM_FI_PROF_DRAM_ACTIVE`` = busy (0.35 p + 0.85 (1-p)): decode streams the weights and the KV
      cache at near-peak bandwidth;
    * ``DCGM_FI_DEV_SM_CLOCK`` = the board's clock under load (:data:`GPU_CLOCKS`) x (1 - clock_drop)
      when busy, :data:`IDLE_CLOCK_MHZ` when idle;
    * ``DCGM_FI_DEV_POWER_USAGE`` = limit x (idle share + (1 - idle share) busy (0.6 + 0.4 p)) x (1 -
      clock_drop / 2) (dynamic power falls with the clock);
    * ``DCGM_FI_DEV_GPU_TEMP`` = :data:`IDLE_TEMP_C` + :data:`DEGREES_PER_UTIL` x util, or
      :data:`HOT_TEMP_C` under the thermal fault;
    * ``DCGM_FI_DEV_FB_USED``/``FB_FREE`` (MiB): vLLM takes ``gpu_memory_utilization`` of the memory at
      start (weights, activations and the KV pool, preallocated: flat while it serves), plus another
      tenant's bytes (the ``kv_pressure`` fault), at most the whole board;
    * ``DCGM_FI_DEV_XID_ERRORS`` = 0.
    """

    def __init__(self, cfg: SimConfig, seed: int) -> None:
        self.cfg = cfg
        self.steps: deque[tuple[float, float, float]] = deque()  # (start, end, prefill share)
        rng = random.Random(seed)
        self.uuids = [
            f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4c1e-9a7b-{i:012x}" for i in range(64)
        ]
        self.state = GpuState()

    def step(self, res: StepResult) -> None:
        if res.duration_s <= 0:
            return
        self.steps.append((res.start, res.start + res.duration_s, self._prefill_share(res)))
        while len(self.steps) > 4096:  # far more than a window holds (steps last milliseconds)
            self.steps.popleft()

    def _prefill_share(self, res: StepResult) -> float:
        if not res.prefill_tokens:
            return 0.0
        cfg = self.cfg
        prefill = 2.0 * cfg.model.params * res.prefill_tokens / cfg.gpu.peak_flops(cfg.compute_dtype)
        decode = cfg.weight_bytes() / cfg.gpu.hbm_bytes_per_s if res.decode_seqs else 0.0
        return prefill / (prefill + decode)

    def window(self, now: float) -> tuple[float, float]:
        """``(busy, prefill share)`` over ``[now - GPU_WINDOW_S, now]``."""
        start = now - GPU_WINDOW_S
        while self.steps and self.steps[0][1] < start:
            self.steps.popleft()
        busy = prefill = 0.0
        for a, b, p in self.steps:
            overlap = max(0.0, min(b, now) - max(a, start))
            busy += overlap
            prefill += overlap * p
        return min(1.0, busy / GPU_WINDOW_S), (prefill / busy if busy else 0.0)

    def exposition(self, out: Exposition, now: float, host: str) -> None:
        cfg, state = self.cfg, self.state
        busy, p = self.window(now)
        clock, limit = next((v for k, v in GPU_CLOCKS.items() if k in cfg.gpu.key.lower()), (1980.0, 700.0))
        total = cfg.gpu.memory_gib * 1024
        used = min(total, total * cfg.gpu_memory_utilization + state.tenant_bytes / MIB)
        util = 100.0 * busy
        values = {
            "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", round(util)),
            "DCGM_FI_DEV_SM_CLOCK": (
                "SM clock frequency (in MHz).",
                round(clock * (1 - state.clock_drop)) if busy > 0.05 else IDLE_CLOCK_MHZ,
            ),
            "DCGM_FI_DEV_GPU_TEMP": (
                "GPU temperature (in C).",
                HOT_TEMP_C if state.hot else round(IDLE_TEMP_C + DEGREES_PER_UTIL * util),
            ),
            "DCGM_FI_DEV_POWER_USAGE": (
                "Power draw (in W).",
                round(
                    limit
                    * (IDLE_POWER_FRAC + (1 - IDLE_POWER_FRAC) * busy * (0.6 + 0.4 * p))
                    * (1 - state.clock_drop / 2),
                    1,
                ),
            ),
            "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", round(used)),
            "DCGM_FI_DEV_FB_FREE": ("Framebuffer memory free (in MiB).", round(total - used)),
            "DCGM_FI_DEV_XID_ERRORS": ("Value of the last XID error encountered.", 0),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("Ratio of time the graphics engine is active.", round(busy, 4)),
            "DCGM_FI_PROF_SM_ACTIVE": (
                "The ratio of cycles an SM has at least 1 warp assigned.",
                round(busy * (0.95 * p + 0.75 * (1 - p)), 4),
            ),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (
                "Ratio of cycles the tensor (HMMA) pipe is active.",
                round(busy * (0.7 * p + 0.1 * (1 - p)), 4),
            ),
            "DCGM_FI_PROF_DRAM_ACTIVE": (
                "Ratio of cycles the device memory interface is active sending or receiving data.",
                round(busy * (0.35 * p + 0.85 * (1 - p)), 4),
            ),
        }
        ranks = [self._gpu_labels(i, host) for i in range(min(cfg.tensor_parallel_size, len(self.uuids)))]
        for name, (help_, value) in values.items():
            out.family(name, "gauge", help_, (f"{name}{{{labels}}} {float(value)!r}" for labels in ranks))

    def _gpu_labels(self, i: int, host: str) -> str:
        pairs = {"gpu": i, "UUID": self.uuids[i], "device": f"nvidia{i}", "modelName": self.cfg.gpu.name}
        return _labels(pairs | {"Hostname": host, "DCGM_FI_DRIVER_VERSION": "570.124.06"})


# -- log lines -------------------------------------------------------------------------------------


class StatsLog:
    """The engine's log records to ``sink``, stamped at ``epoch`` (UNIX seconds) + virtual seconds:
    vLLM's format, or SGLang's (``dialect``; set from the engine's config at :meth:`startup`)."""

    def __init__(self, sink: TextIO, epoch: float, pid: int, dialect: str = "vllm") -> None:
        self.sink, self.epoch, self.pid, self.dialect = sink, epoch, pid, dialect
        self.last_busy = False
        self.next_at = STATS_INTERVAL_S
        self.batches = Batches(0.0)  # SGLang's decode-line count (perfkit.lab.sim.dialects)

    def write(
        self, v: float, where: str, message: str, process: str = "APIServer", level: str = "INFO"
    ) -> None:
        if self.dialect == "sglang":  # SGLang's records carry no level, file or process
            self._line(dialects.sglang_record(self.epoch + v, message))
            return
        stamp = datetime.fromtimestamp(self.epoch + v, UTC).strftime("%m-%d %H:%M:%S")
        self._line(f"({process} pid={self.pid}) {level} {stamp} [{where}] {message}")

    def _line(self, line: str) -> None:
        self.sink.write(line + "\n")
        self.sink.flush()

    def due(self, v: float) -> Iterator[float]:
        """The stats instants (every :data:`STATS_INTERVAL_S`) that have passed by ``v``."""
        while self.next_at <= v:
            yield self.next_at
            self.next_at += STATS_INTERVAL_S

    def stats(self, v: float, m: EngineMetrics, interval: float = STATS_INTERVAL_S) -> None:
        """vLLM's stats line for the last interval (SGLang logs per batch, :meth:`step`; trtllm-serve's
        iteration log is off by default)."""
        prompt, generation = m.interval_prompt / interval, m.interval_generation / interval
        m.interval_prompt = m.interval_generation = 0
        busy = bool(prompt or generation)
        if m.cfg.dialect == "vllm" and (busy or self.last_busy):  # vLLM: idle after idle goes to DEBUG
            self.write(
                v,
                "loggers.py:123",
                f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, "
                f"Avg generation throughput: {generation:.1f} tokens/s, Running: {m.running} reqs, "
                f"Waiting: {m.waiting} reqs, GPU KV cache usage: {100 * m.kv_usage:.1f}%, "
                f"Prefix cache hit rate: {100 * m.prefix_hit_rate():.1f}%",
            )
        self.last_busy = busy

    def step(self, res: StepResult, m: EngineMetrics) -> None:
        """SGLang's scheduler lines for one engine step (nothing in the other dialects): a prefill line
        for a step that prefilled, a decode line every ``--decode-log-interval`` (40) decode steps with
        the tokens generated since the last one over the time since (``perfkit.lab.sim.dialects``)."""
        if m.cfg.dialect != "sglang":
            return
        end = res.start + res.duration_s
        if res.prefill_tokens:
            seqs = max(1, sum(1 for o in res.outputs if o.first))
            line = prefill_batch(
                seqs, res.prefill_tokens, res.prefix_hits, res.kv_usage, res.num_running, res.num_waiting
            )
            self._line(dialects.sglang_record(self.epoch + end, line))
        if res.decode_seqs and (tps := self.batches.decoded(end, res.decode_seqs)) is not None:
            used = int(res.kv_usage * m.cfg.kv_capacity_tokens())
            line = decode_batch(res.num_running, used, res.kv_usage, tps, res.num_waiting)
            self._line(dialects.sglang_record(self.epoch + end, line))

    def startup(self, v: float, cfg: SimConfig, version: str) -> None:
        """vLLM 0.10.1's start-up records that carry the engine's settings (see module docstring), or
        the dialect's (:func:`.dialect_metrics.startup_lines`)."""
        self.dialect = cfg.dialect
        if cfg.dialect != "vllm":
            for line in dialects.startup_lines(cfg, self.epoch + v):
                self._line(line)
            return
        name = cfg.served_model_name
        self.write(v, "api_server.py:1805", f"vLLM API server version {version}")
        args = {
            "model": name,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "enable_chunked_prefill": cfg.enable_chunked_prefill,
            "enable_prefix_caching": cfg.enable_prefix_caching,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "max_model_len": cfg.max_model_len,
            "tensor_parallel_size": cfg.tensor_parallel_size,
        }
        self.write(v, "utils.py:326", f"non-default args: {args}")
        if cfg.enable_chunked_prefill:
            notice = f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}."
            self.write(v, "scheduler.py:222", notice)
        config = (  # VllmConfig.__str__ of vLLM 0.10.1, abridged as in perfkit.lab.sim.exporters
            f"Initializing a V1 LLM engine (v{cfg.vllm_version}) with config: model='{name}', "
            f"speculative_config=None, tokenizer='{name}', dtype=torch.bfloat16, "
            f"max_seq_len={cfg.max_model_len}, tensor_parallel_size={cfg.tensor_parallel_size}, "
            f"pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
            f"device_config=cuda, seed=0, served_model_name={name}, "
            f"enable_prefix_caching={cfg.enable_prefix_caching}, "
            f"chunked_prefill_enabled={cfg.enable_chunked_prefill}, use_async_output_proc=True"
        )
        self.write(v, "core.py:74", config, process="EngineCore_0")
        tokens = cfg.kv_capacity_tokens()
        self.write(
            v, "kv_cache_utils.py:716", f"GPU KV cache size: {tokens:,} tokens", process="EngineCore_0"
        )
