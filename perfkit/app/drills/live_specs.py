"""What each live drill runs on the serving-engine simulator (``perfkit drill start DRILL --live``):
the engine, the traffic, the fault and its time, and the fix that resolves it.

A drill has a live form when the simulator can produce its cause (:mod:`perfkit.lab.servesim.faults`
maps each fault to a triage row) and a run of that fault was seen to make perfkit's triage name the
drill's own direction (its ``answer.yaml``). Calibration runs of :class:`~perfkit.lab.servesim.core.
EngineCore` with these settings (seeded, 20 virtual minutes each; the numbers beside each spec) chose
the loads; ``tests/integration/test_live_drill.py`` and ``test_seed_case_live.py`` run two of them live.

* Engines follow the incident's ``incident.yaml`` where the simulator's tables allow: its models are
  dense Llama/Qwen/Mistral shapes (``data/hardware/models.yaml``), and every load below was
  calibrated on Llama-3.1-70B on 4x H100 (the recorded hardware), as the 70B of the §5.3 case runs; so
  the qwen3-32b and Mixtral of the recorded incidents run as that 70B. ``served_model_name`` (vLLM's
  ``model_name`` label) names the model the engine runs, as vLLM's default does: the runbook reads
  the model from that label (the decode roofline, the memory estimate), and a label naming another
  model would put the 70B's step times under a 32B's weights.
* Traffic is a request log written at start (:func:`request_log`): Poisson arrivals, log-normal prompt
  lengths, uniform output lengths, replayed by ``perfkit bench --replay FILE --time-scale SPEED`` so
  that the virtual load is the same at every ``--speed``. 1.5 requests/s of ~250-token prompts and
  ~100-token answers keep a 70B on 4x H100 at ~150 output tokens/s: lightly loaded, so each fault's
  effect is its own and not queueing (and so the simulator and the load generator stay under a core at
  ``--speed 30`` on a laptop: ~4,500 streamed tokens per wall second).
* Every drill runs in any engine dialect (``perfkit drill start DRILL --live --engine sglang``): the
  same simulated engine and fault, its ``/metrics`` and log lines in SGLang's or trtllm-serve's words
  (:data:`ENGINES`; the engine config's ``dialect``, :mod:`perfkit.lab.servesim.dialect_metrics`).
  The default, vLLM, leaves the engine config as it was.
* Faults that add traffic (``long_prompt_tenant``, ``surge``) are the simulator's own synthetic
  tenants, as production's other tenants would be: not in the trainee's load generator.

Drills with no live form say so without saying why (:data:`NO_LIVE` keeps the reason: it names the
cause); training drills have none (the simulator serves inference).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from perfkit.errors import ConfigError

ENGINES = ("vllm", "sglang", "trtllm")
"""The engine dialects a live drill runs in (``drill start --live --engine``): the simulator's
``dialect`` setting (:data:`perfkit.lab.servesim.config.DIALECTS`)."""

#: remedies ``drill fix --remedy`` offers every live drill (the same menu for all: the menu names no
#: answer); each switches off the simulator faults that stand for what it removes
REMEDIES: dict[str, tuple[str, ...]] = {
    "rollback": ("deploy",),  # roll the release back (each off rolls back one deploy)
    "drain": ("thermal",),  # move the traffic to a healthy node: this GPU's clock problem is gone
    "isolate-tenant": ("kv_pressure", "long_prompt_tenant"),  # the co-located tenant moves away
    "shed-load": ("surge",),  # admission control of the client that surged
}


@dataclass(frozen=True)
class Traffic:
    """The load generator's requests: Poisson at ``rate`` per virtual second, prompts log-normal
    (median ``prompt_median``, shape ``prompt_sigma``, clipped to ``prompt_max``), outputs uniform
    in ``[output_min, output_max]``."""

    rate: float = 1.5
    prompt_median: int = 245  # exp(5.5): a chat turn with a short system prompt
    prompt_sigma: float = 0.5
    prompt_max: int = 4000
    output_min: int = 48
    output_max: int = 144


@dataclass(frozen=True)
class Timing:
    """Virtual seconds, from the first request the engine saw: ``warmup`` (queues fill), the baseline
    (the runbook's ordinary period), the incident window (the page's), the fault at a random whole
    minute in ``[fault_lo, fault_hi]`` after the window opens, and the traffic's whole duration.

    The window is 25 minutes: the triage's interference row lines long-prompt arrivals up with ITL
    stalls in 2-minute bins and needs 10 of them (``INTERFERENCE_BIN_S``, ``MIN_CORRELATION_BINS``), and
    the onset finder keeps at least 20 minutes after an onset (``analyses/onset.py MIN_SPAN_S``). A fault
    at most 4 minutes in sits in the window's first quarter (``MIN_LEAD_FRAC``): the whole window is
    judged, diluted by at most 4 healthy minutes of 25. ``settle`` and ``after`` are the before/after
    comparison's: a minute for the queue a fault left to drain, then eight minutes (3+ one-minute blocks
    for the noise band, ``analyses/compare.py MIN_BLOCKS``)."""

    warmup: float = 30.0
    baseline: float = 480.0
    window: float = 1500.0
    fault_lo: int = 1  # minutes after the window opens
    fault_hi: int = 4
    duration: float = 5400.0  # 90 minutes: time to run the runbook, fix, and see the after window
    settle: float = 60.0
    after: float = 480.0
    scrape: float = 15.0  # the bundles' scrape interval: four points per minute, what rate() wants


MIN_LIFE_WALL_S = 900.0
"""A live drill runs (and its load goes on) for at least 15 wall minutes whatever ``--speed``: at 30x the
90 virtual minutes of :attr:`Timing.duration` would pass in 3, before a trainee has run the runbook
and fixed anything; 15 minutes leave time to triage, fix, and see the after window."""


def life_for(speed: float, timing: Timing) -> float:
    """Virtual seconds a drill runs at ``speed`` (its traffic's length): ``timing.duration``, or more
    so that it lasts :data:`MIN_LIFE_WALL_S` of wall time."""
    return max(timing.duration, speed * MIN_LIFE_WALL_S)


def offset_for(speed: float, timing: Timing) -> float:
    """How far in the past the drill clock starts: what it gains on the wall clock over the drill's
    life (:func:`life_for`) and ten minutes more, in whole minutes (0 at speed 1)."""
    gain = (speed - 1.0) / speed * (life_for(speed, timing) + 600.0)
    return float(-(-gain // 60) * 60)


def capped_speed(asked: float, sustained: float, hold_min: float) -> float | None:
    """The speed to run at when the machine ran the drill clock at only ``sustained`` virtual seconds
    per wall second under ``asked``: None when it held (``sustained >= hold_min x asked``), else
    four fifths of what it sustained (the fault adds load: headroom), in whole numbers, at least 1."""
    if sustained >= hold_min * asked:
        return None
    return float(max(1, int(sustained * 0.8)))


@dataclass(frozen=True)
class LiveSpec:
    """One drill's live form. ``fault`` is the ``POST /admin/faults`` body; ``fix`` the ``drill fix
    --set`` settings and ``remedy`` the ``drill fix --remedy`` that resolve it (either works)."""

    scenario: str
    engine: dict[str, Any]
    fault: dict[str, Any]
    fix: dict[str, str] = field(default_factory=dict)
    remedy: str = ""
    traffic: Traffic = Traffic()
    timing: Timing = Timing()
    why: str = ""


_LLAMA70_TP4 = {
    "model": "llama-3.1-70b",
    "gpu": "h100-sxm",
    "tensor_parallel_size": 4,
    "served_model_name": "llama-3.1-70b-instruct",
}

SPECS: dict[str, LiveSpec] = {
    # Seed §5.3. Calibration (offline, 20 min, seeds 1-5): chunked prefill off, 1.5 req/s of the
    # default traffic + 0.06/s of 15,000-token prompts: TTFT p50 36-37 ms (baseline 35 ms), p95
    # 1,346-1,611 ms; chunked prefill on with long_prefill_token_threshold=512: p95 208-236 ms.
    # Chunked prefill alone leaves p95 where it was (docs/simulator.md: a running long prompt takes
    # the whole step budget). Live at --speed 30: seed 11 p95 1.55 s -> 218 ms, output 164 -> 157
    # tok/s, triage confirms prefill_decode_interference (r = 0.67); seed 3 (the clock that stands
    # at a late step's end) p95 1.31 s -> 178 ms ("the fix worked", band +-450 ms), r = 0.87.
    "p95-prefill-interference": LiveSpec(
        "p95-prefill-interference",
        {
            **_LLAMA70_TP4,
            "enable_chunked_prefill": False,  # V0's scheduler, as the recorded engine ran
            # 16,384 >= max_model_len: vLLM refuses chunked prefill off with a smaller budget
            "max_num_batched_tokens": 16384,
            "max_model_len": 16384,
        },
        # 3.8 % of requests are 15,000-token prompts: a share under 5 % keeps P95 a short request's
        # TTFT, so the fix can show (the long ones' own TTFT does not shrink with chunking). Each
        # prefill (~1.2 s) stalls the short requests arriving during it: with the long ones, ~10 % of
        # requests sit in the stall mode, so P95 lies inside it. At 0.04/s (~7 %) P95 fell in the
        # sparse gap between the modes and swung 240-1,392 ms between seeds (offline, 20 min, seeds
        # 1-5); at 0.06/s it is 1,346-1,611 ms, and 208-236 ms with the fix.
        {"fault": "long_prompt_tenant", "rate": 0.06, "prompt_tokens": 15000, "max_tokens": 16},
        fix={"enable_chunked_prefill": "true", "long_prefill_token_threshold": "512"},
        remedy="isolate-tenant",
        why="a long-prompt tenant's prefills stall every decode while chunked prefill is off",
    ),
    # Calibration (10 min): TPOT p50 17.7 -> 25.9 ms (1.46x) at the same load; TTFT p95 65 -> 68 ms.
    # Live at --speed 30 (seed 7): triage confirms decode_efficiency; after "drain" TPOT p50 38 -> 18 ms.
    "decode-thermal-throttle": LiveSpec(
        "decode-thermal-throttle",
        {**_LLAMA70_TP4},
        {"fault": "thermal", "decode_slowdown": 1.6, "clock_drop": 0.35},  # 1980 -> ~1290 MHz, as recorded
        remedy="drain",
        why="a throttled GPU decodes slower at the same load",
    ),
    # Calibration (10 min): every step x1.6: TPOT p50 17.7 -> 28.7 ms, TTFT p50 34 -> 57 ms, at the
    # deploy's minute; build_info's version changes then (release_metric build_info:version). Live at
    # --speed 30 (seed 5): triage confirms release_regression, suspect v2.4.0 (decode_efficiency, also
    # confirmed, ranks below it: the release explains it).
    "release-regression": LiveSpec(
        "release-regression",
        {**_LLAMA70_TP4},
        {"fault": "deploy", "step_slowdown": 1.6, "version": "v2.4.0"},  # answer.yaml's suspect
        remedy="rollback",
        why="a release made every engine step slower",
    ),
    # Calibration (10 min): max_num_seqs 16 caps the engine at ~750 output tok/s, the default traffic
    # uses ~150-170 of it; a surge of 5 req/s more of 512/128 tokens passes it by ~50-70 tok/s, so the
    # queue grows ~0.5 requests a second (queue time p50 8 ms -> minutes, running pinned at 16): a
    # backlog in the hundreds, as recorded. TTFT is observed when a request's first token comes, so
    # the backlog shows in whatever window it drains in: at the ~580 spare tok/s (~4.5 req/s) a
    # backlog of ~1,000 takes ~4 minutes, hence a 10-minute settle before the after window.
    "queueing-traffic-surge": LiveSpec(
        "queueing-traffic-surge",
        {**_LLAMA70_TP4, "max_num_seqs": 16},
        {"fault": "surge", "rate": 5.0, "prompt_tokens": 512, "max_tokens": 128},
        remedy="shed-load",
        timing=Timing(settle=600.0),
        why="arrivals beyond what the engine can run at once wait in its queue",
    ),
}

#: inference drills without a live form, and why (for maintainers: never shown, it names the cause)
NO_LIVE: dict[str, str] = {
    "kv-pressure-shared-gpu": (
        "its cause shows as a falling prefix-cache hit rate, and the load generator's prompts share no "
        "prefixes; the simulator's kv_pressure fault alone shows as queueing (calibration: queue p95 "
        "112 ms -> 4.4 s, prefill p95 only 1.3x), which the triage rightly calls scheduler_queueing"
    ),
}


def spec_for(scenario: str, *, training: bool = False, engine: str = "vllm") -> LiveSpec:
    """The live form of ``scenario`` (a scenario name: callers resolve the drill id first) on the
    ``engine`` dialect (:func:`in_dialect`), or ConfigError saying plainly why there is none."""
    if scenario in SPECS:
        return in_dialect(SPECS[scenario], engine)
    if training:
        why = "it is a training incident, and the simulator serves inference only"
    else:  # the reason (NO_LIVE) would name the cause: the trainee is told only that there is none
        why = "the simulator cannot yet produce its cause faithfully"
    return _refuse(why)


def in_dialect(spec: LiveSpec, engine: str) -> LiveSpec:
    """``spec`` with its engine speaking ``engine``'s dialect (one of :data:`ENGINES`): the engine
    config's ``dialect``; vLLM, the simulator's default, leaves the spec as it is."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == spec.engine.get("dialect", "vllm"):
        return spec
    return replace(spec, engine={**spec.engine, "dialect": engine})


def _refuse(why: str) -> LiveSpec:
    raise ConfigError(
        f"this drill has no live form: {why}; start it without --live (the recorded evidence), or with "
        "--recorded to serve that evidence from a local Prometheus (perfkit drill list --live lists the live ones)"
    )


def request_log(traffic: Traffic, duration_s: float, seed: int) -> list[dict[str, Any]]:
    """The load generator's requests for ``duration_s`` virtual seconds (``perfkit bench --replay``'s
    JSONL rows: ``arrival_s``, ``prompt_tokens``, ``output_tokens``), seeded."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(traffic.rate * duration_s * 1.2) + 16  # Poisson count's mean + ~6 sigma at these sizes
    at = np.cumsum(rng.exponential(1.0 / traffic.rate, n))
    at = at[at <= duration_s]
    k = len(at)
    prompts = np.clip(
        np.rint(traffic.prompt_median * np.exp(traffic.prompt_sigma * rng.standard_normal(k))),
        1,
        traffic.prompt_max,
    )
    outputs = rng.integers(traffic.output_min, traffic.output_max + 1, k)
    return [
        {"arrival_s": round(float(a), 4), "prompt_tokens": int(p), "output_tokens": int(o)}
        for a, p, o in zip(at, prompts, outputs, strict=True)
    ]


# -- a live drill's state file -----------------------------------------------------------------


def is_number(v: Any) -> bool:
    """A finite JSON number (not a bool), of a size a drill's clock can hold."""
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) < 1e15


def state_problem(state: dict[str, Any], max_speed: float) -> str | None:
    """What is wrong with a live drill's state (``.live/state.json``, JSON anyone may edit): each
    field the commands use, checked for its type (None: nothing)."""
    if not is_number(state.get("anchor")):
        return "'anchor' is not a number"
    if not is_number(state.get("speed")) or not 1.0 <= state["speed"] <= max_speed:
        return f"'speed' is not a number in [1, {max_speed:g}]"
    procs = state.get("processes")
    if not isinstance(procs, dict) or not all(isinstance(k, str) for k in procs):
        return "'processes' is not a mapping of process names"
    urls = state.get("urls", {})
    if not isinstance(urls, dict) or not all(isinstance(v, str) for v in urls.values()):
        return "'urls' is not a mapping of URLs"
    if not isinstance(state.get("fixes", []), list) or not all(
        isinstance(f, dict) for f in state.get("fixes", [])
    ):
        return "'fixes' is not a list of fixes"
    for key in ("plan", "timing", "params", "engine", "fault"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            return f"{key!r} is not a mapping"
    plan = state.get("plan")
    if plan:
        spans = [plan.get(k) for k in ("baseline", "window")]
        if not all(is_number(plan.get(k)) for k in ("v0", "fault_at", "end")) or not all(
            isinstance(x, list) and len(x) == 2 and all(map(is_number, x)) for x in spans
        ):
            return "'plan' lacks its virtual seconds (v0, baseline, window, fault_at, end)"
    timing = state.get("timing")
    if timing and not all(is_number(timing.get(k)) for k in ("settle", "after", "scrape")):
        return "'timing' lacks settle, after or scrape"
    return None
