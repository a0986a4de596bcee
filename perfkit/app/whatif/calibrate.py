"""Calibrate a replay's engine to what a window recorded (issue 26 item 1).

The serving simulator's step times come from a roofline with efficiency factors
(:mod:`perfkit.lab.servesim.roofline`): right in shape, not in level, for an engine nobody measured
(another build, kernels, CPU, driver). A bundle pins down the traffic (arrivals, length histograms)
and the engine's settings, not how long its steps take. A step's time has three physical parts
(the same three every serving model has: a fixed CPU cost, compute per prompt token, memory reads
per decode), so the replay fits three numbers of the roofline to the window's own latencies, each to
the one it moves most:

* ``step_overhead_s`` (the per-step CPU work) to the **TTFT p50**: a median prompt is short, so its
  first token is mostly a step or two of fixed cost and the wait for the step in flight;
* ``prefill_cost_scale`` (the compute-bound terms: GEMM FLOPs, prefill attention) to the **TTFT
  p95**: the long prompts' prefill and the requests that wait behind it;
* ``decode_cost_scale`` (the memory-bound terms: weight and KV reads) to the **TPOT p50**: one
  decode step plus the prefill steps that interrupt it.

Each round replays the window, reads the numbers as the observed ones are read (through the
observed histogram's buckets), and moves each field by the log-ratio still missing divided by that
number's measured elasticity (a secant on log scales; :data:`FIRST_ELASTICITY` before two rounds
measured it, bounded to [:data:`MIN_ELASTICITY`, 2], each step at most :data:`MAX_STEP`, so a number that barely moves with its field cannot throw the field to
a bound). It stops when all are within :data:`CLOSE` or after :data:`MAX_ROUNDS` rounds, keeping
the round of least root-mean-square log miss (a field held at its bound is listed in the round). What the comparison shows besides (TTFT p99, TPOT tails, queue, running, KV,
throughput, and the other window replayed on this window's engine) is **not fitted**: it is the
check of the calibrated engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

TARGETS: tuple[tuple[str, str, float, float], ...] = (
    ("prefill_cost_scale", "ttft_p50_ms", 0.25, 8.0),
    ("attention_cost_scale", "ttft_p95_ms", 0.25, 4.0),
    ("decode_cost_scale", "tpot_p50_ms", 0.25, 8.0),
)
"""(the SimConfig field, the observed number it is fitted to, its bounds). The scales may move 4x
either way: an engine 4x slower or faster than the roofline on its own terms is not one the roofline
describes, and a fit that needs more stops at the bound and shows the miss. The per-step CPU
overhead runs from 0.5 ms (a compiled, asynchronous scheduler) to 40 ms (a Python scheduler
preparing hundreds of sequences: vLLM's v0.6.0 post measured CPU at 62 % of a step before its fixes)."""
CALIBRATED = tuple(name for name, _, _, _ in TARGETS)
"""The SimConfig fields a calibration sets."""
CLOSE = 0.03
"""A fit within 3 % of both numbers stops: the histograms' own resolution is coarser (a bucket
interpolation of a p50 moves ~5 % with a few percent of the requests)."""
FITTED = 0.05
"""A calibration whose kept round is within 5 % of every fitted number counts as fitted."""
MAX_ROUNDS = 8
"""Replays one calibration may cost (each replays the whole window)."""
FIRST_ELASTICITY = 2.0
"""Before two rounds measured it: a half step. The three numbers are coupled (a slower engine
queues, and the queue adds to every latency), so moving all three fields by their whole miss at
once overshoots (a 1.5x slower engine can show a 9x TTFT p95)."""
MAX_STEP = math.log(1.6)
"""The most one round moves a field (x1.6 or /1.6), for the same reason."""
MIN_ELASTICITY = 0.2
"""The least a fitted number is assumed to move per unit of its scale (log-log): a TTFT that is
mostly queue moves little with the prefill cost; below 0.2 the scale would swing to its bound."""


@dataclass
class Calibration:
    """The fitted scales, every round's numbers, and whether the fit closed."""

    scales: dict[str, float]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    fitted: bool = False
    skipped: list[str] = field(default_factory=list)  # scales left at 1: their number was not observed
    cfg: Any = None  # the SimConfig with the scales applied
    simulated: dict[str, float | None] = field(default_factory=dict)  # the best round's numbers
    first: dict[str, float | None] = field(default_factory=dict)  # the roofline's, before any scale

    def as_dict(self) -> dict[str, Any]:
        return {
            "scales": self.scales,
            "fitted": self.fitted,
            "skipped": self.skipped,
            "rounds": self.rounds,
        }


def _log_miss(observed: float | None, simulated: float | None) -> float | None:
    if not observed or not simulated or observed <= 0 or simulated <= 0:
        return None
    if not (math.isfinite(observed) and math.isfinite(simulated)):
        return None
    return math.log(observed / simulated)


def _pushes_past(log_value: float, miss: float, limits: tuple[float, float]) -> bool:
    low, high = limits
    return (log_value >= high - 1e-9 and miss > 0) or (log_value <= low + 1e-9 and miss < 0)


def calibrate(
    cfg: Any,
    measure: Callable[[Any], dict[str, float | None]],
    observed: dict[str, float | None],
) -> Calibration:
    """Fit :data:`TARGETS`' scales of ``cfg`` so that ``measure(cfg)`` (a window's replay, read as
    ``observed`` is) meets ``observed`` (module docstring)."""
    active = [(s, m) for s, m, _, _ in TARGETS if _log_miss(observed.get(m), 1.0) is not None]
    skipped = [s for s, m, _, _ in TARGETS if (s, m) not in active]
    limits = {s: (math.log(lo), math.log(hi)) for s, _, lo, hi in TARGETS}
    logs = {s: math.log(getattr(cfg, s)) for s, _, _, _ in TARGETS}
    history: dict[str, list[tuple[float, float]]] = {s: [] for s, _ in active}  # (log scale, log sim)
    rounds: list[dict[str, Any]] = []
    best: Calibration | None = None
    best_score = best_worst = math.inf
    for number in range(1, MAX_ROUNDS + 1):
        scales = {s: float(f"{math.exp(v):.4g}") for s, v in logs.items()}
        trial = replace(cfg, **scales)
        sim = measure(trial)
        misses = {m: _log_miss(observed.get(m), sim.get(m)) for _, m in active}
        errors = {m: (math.exp(-v) - 1 if v is not None else None) for m, v in misses.items()}
        # the kept round: the least root-mean-square log miss over the fitted numbers (one pinned at
        # its bound still counts: the others are not given up for it, nor it for them)
        pinned = {
            m for s, m in active if (v := misses[m]) is not None and _pushes_past(logs[s], v, limits[s])
        }
        known = [v for v in misses.values() if v is not None]
        score = math.sqrt(sum(v * v for v in known) / len(known)) if known else math.inf
        worst = max((abs(v) for v in known), default=math.inf)
        rounds.append({"round": number, "scales": scales, "errors": errors, "at_bound": sorted(pinned)})
        if number == 1:
            first = dict(sim)
        if best is None or score < best_score:
            best_score, best_worst = score, worst
            best = Calibration(scales, cfg=trial, simulated=dict(sim), skipped=skipped)
        if not active or worst <= math.log1p(CLOSE):
            break
        for s, m in active:
            miss = misses[m]
            if miss is None:
                continue
            history[s].append((logs[s], math.log(sim[m])))  # type: ignore[arg-type]
            elasticity = FIRST_ELASTICITY
            if len(history[s]) >= 2:
                (x0, y0), (x1, y1) = history[s][-2], history[s][-1]
                if abs(x1 - x0) > 1e-6:
                    elasticity = min(2.0, max(MIN_ELASTICITY, (y1 - y0) / (x1 - x0)))
            low, high = limits[s]
            step = max(-MAX_STEP, min(MAX_STEP, miss / elasticity))
            logs[s] = min(high, max(low, logs[s] + step))
    assert best is not None
    best.rounds = rounds
    best.first = first
    best.fitted = bool(active) and best_worst <= math.log1p(FITTED)
    return best
