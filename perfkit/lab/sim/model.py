"""The scenario model: what a simulated LLM-serving incident is made of.

A :class:`ScenarioSpec` fixes the traffic (arrival rate over time, prompt and output length
distributions), the serving engine (continuous batching with or without chunked prefill, KV
cache capacity, the cost of one engine step) and the incident's story (deploys and what each
changed, traffic surges, config changes). :mod:`perfkit.lab.sim.engine` plays it forward request by
request and step by step; :mod:`perfkit.lab.sim.exporters` turns what happened into the series
real exporters emit. Everything is seeded: the same spec gives the same bundle.

The step-time model (one engine iteration, seconds)::

    t_step = overhead_s
           + prefill_tokens  * prefill_s_per_token        # compute-bound prefill
           + decode_seqs     * decode_s_per_seq           # per-sequence decode work
           + context_tokens  * kv_read_s_per_token        # memory-bound KV reads
           [+ decode_seqs * spec_tokens * prefill_s_per_token   # verifying the draft tokens
            + spec_tokens * (draft_overhead_s + decode_seqs * draft_s_per_seq)]  # drafting them

Without chunked prefill (vLLM V0's default, ``--no-enable-chunked-prefill``) a step is either a
prefill of newly admitted prompts (running decodes wait: the interference of the seed's §5.3
case) or a decode of every running sequence. With chunked prefill, every step decodes all
running sequences and spends what is left of ``max_num_batched_tokens`` on prompt chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True)
class LengthMix:
    """A lognormal length distribution: median tokens, sigma of log, hard cap."""

    median: float
    sigma: float
    cap: int
    floor: int = 1


@dataclass(frozen=True)
class Phase:
    """A time span (seconds from scenario start) in which traffic differs from the base."""

    start_s: float
    end_s: float
    rate_mult: float = 1.0  # arrival-rate multiplier (traffic surge)
    prompt_mult: float = 1.0  # prompt lengths scaled (e.g. longer multi-turn contexts)
    output_mult: float = 1.0  # output lengths scaled
    long_prompt_frac: float | None = None  # share of requests drawn from the long-prompt mix


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048  # per-step token budget with chunked prefill
    max_prefill_tokens: int = 32768  # per prefill step without chunked prefill (>= max_model_len)
    chunked_prefill: bool = True
    long_prefill_token_threshold: int = (
        0  # with chunked prefill: most prompt tokens one request gets per step (0: no cap)
    )
    kv_capacity_tokens: int = 400_000  # num_gpu_blocks * block_size
    block_size: int = 16
    overhead_s: float = 0.012
    prefill_s_per_token: float = 0.00011
    decode_s_per_seq: float = 0.00018
    kv_read_s_per_token: float = 2.0e-8
    prefix_cache_hit_frac: float = 0.0  # share of each prompt found in the prefix cache (no compute needed)
    sm_clock_mhz: float = 1980.0  # what DCGM reports while busy (a throttled GPU runs slower clocks)
    # speculative decoding (vLLM --speculative-config): each decode step drafts ``spec_tokens`` per
    # sequence, each accepted with probability ``spec_acceptance`` up to the first rejection, and the
    # target verifies them in the same step (their k positions cost like k prompt tokens); the draft
    # model runs k forwards of ``draft_overhead_s`` + ``draft_s_per_seq`` per sequence. 0: off.
    spec_tokens: int = 0
    spec_acceptance: float = 0.0
    draft_overhead_s: float = 0.0
    draft_s_per_seq: float = 0.0


@dataclass(frozen=True)
class Release:
    """A deploy: at ``at_s`` the server restarts as ``version`` with engine changes (maybe none)."""

    at_s: float
    version: str
    detail: str
    engine_changes: dict[str, float] = field(default_factory=dict)  # EngineConfig field -> new value
    restart_pause_s: float = 4.0
    kind: str = "deploy"  # the events.csv kind; "" writes no event (a change nobody announced)
    restart: bool = True  # the server restarts (counters reset, a short gap in its metrics)
    oom: bool = False  # the restart is a crash: CUDA out-of-memory traceback in the log first


@dataclass(frozen=True)
class ScenarioSpec:
    id: str
    title: str
    brief: str
    service: str
    model: str
    start: datetime
    duration_s: float
    baseline: tuple[float, float]  # seconds from start
    window: tuple[float, float]
    seed: int
    base_rps: float
    prompt: LengthMix
    long_prompt: LengthMix
    base_long_prompt_frac: float
    output: LengthMix
    engine: EngineConfig
    initial_version: str
    releases: tuple[Release, ...] = ()
    phases: tuple[Phase, ...] = ()
    notes: tuple[tuple[float, str, str], ...] = ()  # (at_s, kind, detail) extra events
    gpu: str = "NVIDIA H100 80GB HBM3"
    gpu_count: int = 4
    usd_per_gpu_hour: float = 2.5
    slo: dict[str, float] = field(default_factory=dict)
    vllm_version: str = "0.10.1"
    legacy_metric_names: bool = False  # emit the older vLLM names (gpu_cache_usage_perc ...)
    dialect: str = "vllm"  # the engine whose names and log lines tell it (perfkit.lab.sim.dialects)
    scrape_interval_s: float = 15.0
    stats_interval_s: float = 10.0
    answer: dict[str, object] = field(default_factory=dict)
    difficulty: str = "medium"

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)
