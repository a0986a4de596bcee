"""The engine core run offline: a list of arrivals through :class:`~.core.EngineCore` as fast as the
CPU goes, in simulated time (no sleeping, no event loop, no I/O). What-if sweeps
(``perfkit lab whatif``) and tests use it; the live server maps the same core to the wall clock.

The run is a discrete-event loop over two kinds of events, the next arrival and the end of the
step in flight; the engine steps back to back while it has work, as vLLM's busy loop does
(``EngineCore.run_busy_loop`` in ``vllm/v1/engine/core.py``)::

    now = 0
    while now < until_s:
        add every request with at_s <= now (each with its own arrival time)
        if the engine has work: step(now); now += step duration       # the step's end
        else: now = next arrival                                      # idle until then

A request arriving during a step waits for the step's end to be scheduled, as in vLLM, where the
scheduler runs between steps. The run stops at ``until_s`` (simulated seconds): requests arriving
at or after it are never sent, and those still queued or running are reported unfinished.

:func:`run_offline` returns per-request timings (vLLM's stage definitions, ``vllm/v1/metrics/stats.py``:
arrival, first scheduled, first token, last token) and per-step statistics as numpy arrays.
"""

from __future__ import annotations

import math
import time
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfkit.errors import ConfigError
from perfkit.lab.servesim.config import SimConfig
from perfkit.lab.servesim.core import EngineCore, RequestRejected

MAX_REQUESTS = 10_000_000
"""Most requests one run takes (the size of a load-test plan, ``perfkit.loadgen.shapes``): eight
float and int arrays of this length are ~0.5 GB, the most a run should hold."""
MAX_SIMULATED_S = 7 * 86400.0
"""Longest simulated span: a week of traffic. A longer ``until_s`` is a unit mistake (ms as s)."""
MAX_STEPS = 100_000_000
"""Most engine steps one run takes: at ~100 µs of CPU a step (docs/simulator.md, "Speed") that is
about three hours of CPU, a week of simulated traffic at ~6 ms a step. Past it the run stops, like
at ``until_s``, and says so (:attr:`OfflineRun.stopped`)."""

# request status codes (OfflineRun.status)
FINISHED, UNFINISHED, REJECTED, NOT_SENT = 0, 1, 2, 3
STATUS_NAMES = ("finished", "unfinished", "rejected", "not_sent")


@dataclass(frozen=True, eq=False)
class StepStats:
    """One row per engine step that did work: when it started and how long it took (simulated
    seconds), what it scheduled, and the engine's state after it."""

    start_s: np.ndarray  # float64
    duration_s: np.ndarray  # float64
    prefill_tokens: np.ndarray  # int64: prompt tokens computed (chunks and whole prompts)
    decode_seqs: np.ndarray  # int64: sequences that decoded one token
    num_running: np.ndarray  # int64, after the step
    num_waiting: np.ndarray  # int64, after the step
    kv_usage: np.ndarray  # float64 in [0, 1], after the step
    preemptions: np.ndarray  # int64, this step
    generation_tokens: np.ndarray  # int64: tokens that came out at the step's end

    def __len__(self) -> int:
        return len(self.start_s)

    def busy_s(self) -> float:
        """Simulated seconds the engine spent in steps."""
        return float(self.duration_s.sum())


@dataclass(frozen=True, eq=False)
class OfflineRun:
    """Per-request timings (simulated seconds from the plan's t=0; NaN where a request never got
    there) and per-step statistics of one :func:`run_offline`."""

    arrival_s: np.ndarray  # float64, as given
    scheduled_s: np.ndarray  # float64: first scheduled (queue time = scheduled - arrival)
    first_token_s: np.ndarray  # float64
    last_token_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64, as given
    output_tokens: np.ndarray  # int64: tokens generated (the requested count once finished)
    cached_tokens: np.ndarray  # int64: prefix-cache hits at first admission
    preemptions: np.ndarray  # int64: times the request was preempted
    status: np.ndarray  # int8: FINISHED, UNFINISHED, REJECTED, NOT_SENT
    steps: StepStats
    end_s: float  # simulated time when the run stopped (the last step's end: may pass until_s)
    until_s: float
    wall_s: float  # wall-clock seconds the run took
    stopped: str  # "drained" (every sent request finished), "until_s", "max_steps" or "stalled"
    rejections: tuple[str, ...]  # the first few rejection messages (the engine's own words)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def count(self, status: int) -> int:
        return int((self.status == status).sum())

    def finished(self) -> np.ndarray:
        """Mask of the requests that finished."""
        return self.status == FINISHED

    def ttft_s(self) -> np.ndarray:
        """Time to first token of the finished requests (first token - arrival)."""
        m = self.finished()
        return self.first_token_s[m] - self.arrival_s[m]

    def e2e_s(self) -> np.ndarray:
        """End-to-end latency of the finished requests (last token - arrival)."""
        m = self.finished()
        return self.last_token_s[m] - self.arrival_s[m]

    def tpot_s(self) -> tuple[np.ndarray, np.ndarray]:
        """(TPOT of the finished requests of over one token, ``(last - first) / (tokens - 1)`` as
        vLLM's ``benchmark_serving``; the mask of those requests among the finished ones)."""
        m = self.finished()
        out = self.output_tokens[m]
        multi = out > 1
        decode = (self.last_token_s[m] - self.first_token_s[m])[multi]
        return decode / (out[multi] - 1), multi

    def speedup(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.end_s / self.wall_s if self.wall_s > 0 else math.inf

    def describe(self) -> dict[str, Any]:
        """Counts and times, plain data."""
        return {
            "requests": len(self),
            **{name: self.count(code) for code, name in enumerate(STATUS_NAMES)},
            "steps": len(self.steps),
            "simulated_s": self.end_s,
            "busy_s": self.steps.busy_s(),
            "wall_s": self.wall_s,
            "speedup": self.speedup(),
            "stopped": self.stopped,
            "preemptions": int(self.steps.preemptions.sum()),
        }


def _arrays(at_s: Any, prompt_tokens: Any, output_tokens: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    at = np.asarray(at_s, dtype=np.float64)
    n = len(at) if at.ndim == 1 else -1
    if n < 0 or n > MAX_REQUESTS:
        raise ConfigError(
            f"arrivals: expected one list of at most {MAX_REQUESTS:,} times, got shape {at.shape}"
        )
    if n and (not np.isfinite(at).all() or at.min() < 0):
        raise ConfigError("arrivals: times must be finite seconds >= 0")
    lengths = []
    for name, values in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens)):
        raw = np.asarray(values, dtype=np.float64)
        if raw.shape != at.shape:
            raise ConfigError(f"{name}: {raw.shape[0] if raw.ndim else 0} values for {n} arrivals")
        if n and (not np.isfinite(raw).all() or raw.min() < 1 or (raw != np.floor(raw)).any()):
            raise ConfigError(f"{name}: expected whole numbers of tokens >= 1")
        lengths.append(raw.astype(np.int64))
    return at, lengths[0], lengths[1]


def run_offline(
    cfg: SimConfig,
    at_s: Any,
    prompt_tokens: Any,
    output_tokens: Any,
    *,
    until_s: float,
    seed: int = 0,
    max_steps: int = MAX_STEPS,
) -> OfflineRun:
    """Run the requests (arrival seconds, prompt and output lengths; any order) through a fresh
    :class:`EngineCore` ``(cfg, seed)`` until every sent one finished or ``until_s`` simulated
    seconds passed (module docstring). A request the engine refuses (over ``max_model_len``) is
    counted ``REJECTED``, as vLLM answers it 400. ConfigError for malformed input."""
    at, prompts, outputs = _arrays(at_s, prompt_tokens, output_tokens)
    limit = float(until_s) if isinstance(until_s, int | float) and not isinstance(until_s, bool) else math.nan
    if not 0 < limit <= MAX_SIMULATED_S:
        raise ConfigError(f"until_s: expected simulated seconds in (0, {MAX_SIMULATED_S:g}], got {until_s!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 0 < max_steps <= MAX_STEPS:
        raise ConfigError(f"max_steps: expected an integer in [1, {MAX_STEPS:,}], got {max_steps!r}")
    n = len(at)
    order = np.argsort(at, kind="stable")
    sent = int(np.searchsorted(at[order], limit, side="left"))  # arrivals before until_s
    nan = np.full(n, np.nan)
    scheduled, first, last = nan.copy(), nan.copy(), nan.copy()
    produced = np.zeros(n, dtype=np.int64)
    cached = np.zeros(n, dtype=np.int64)
    preempted = np.zeros(n, dtype=np.int64)
    status = np.full(n, NOT_SENT, dtype=np.int8)
    rejections: list[str] = []
    cols_f = {k: array("d") for k in ("start", "duration", "kv")}
    cols_i = {k: array("q") for k in ("prefill", "decode", "running", "waiting", "preempt", "gen")}

    core = EngineCore(cfg, seed=seed)
    add, step = core.add, core.step
    times = at[order[:sent]].tolist()
    idx = order[:sent].tolist()
    plist, olist = prompts.tolist(), outputs.tolist()
    k, now, steps, stopped = 0, 0.0, 0, "until_s"
    t0 = time.perf_counter()
    while now < limit:
        while k < sent and times[k] <= now:
            i = idx[k]
            k += 1
            try:
                add(str(i), plist[i], olist[i], times[k - 1])
                status[i] = UNFINISHED
            except RequestRejected as exc:
                status[i] = REJECTED
                if len(rejections) < 3:
                    rejections.append(str(exc))
        if not core.busy:
            if k >= sent:
                stopped = "drained"
                break
            now = times[k]
            continue
        if steps >= max_steps:
            stopped = "max_steps"
            break
        res = step(now)
        steps += 1
        if res.duration_s <= 0:  # nothing could be scheduled (cannot happen for a valid config)
            if k >= sent:
                stopped = "stalled"
                break
            now = max(now, times[k])
            continue
        now = res.start + res.duration_s
        cols_f["start"].append(res.start)
        cols_f["duration"].append(res.duration_s)
        cols_f["kv"].append(res.kv_usage)
        cols_i["prefill"].append(res.prefill_tokens)
        cols_i["decode"].append(res.decode_seqs)
        cols_i["running"].append(res.num_running)
        cols_i["waiting"].append(res.num_waiting)
        cols_i["preempt"].append(res.preemptions)
        cols_i["gen"].append(res.generation_tokens)
        for f in res.finished:
            i = int(f.rid)
            status[i] = FINISHED
            scheduled[i], first[i], last[i] = f.scheduled, f.first_token, f.last_token
            produced[i], cached[i], preempted[i] = f.output_tokens, f.cached_tokens, f.preemptions
    wall = time.perf_counter() - t0
    for rid, req in core.requests.items():  # unfinished: what they had got so far
        i = int(rid)
        scheduled[i] = req.scheduled if req.scheduled >= 0 else np.nan
        first[i] = req.first if req.first >= 0 else np.nan
        last[i] = req.last if req.last >= 0 else np.nan
        produced[i], cached[i], preempted[i] = req.outputs, max(0, req.cached), req.preemptions
    stats = StepStats(
        start_s=np.frombuffer(cols_f["start"], dtype=np.float64).copy(),
        duration_s=np.frombuffer(cols_f["duration"], dtype=np.float64).copy(),
        prefill_tokens=np.frombuffer(cols_i["prefill"], dtype=np.int64).copy(),
        decode_seqs=np.frombuffer(cols_i["decode"], dtype=np.int64).copy(),
        num_running=np.frombuffer(cols_i["running"], dtype=np.int64).copy(),
        num_waiting=np.frombuffer(cols_i["waiting"], dtype=np.int64).copy(),
        kv_usage=np.frombuffer(cols_f["kv"], dtype=np.float64).copy(),
        preemptions=np.frombuffer(cols_i["preempt"], dtype=np.int64).copy(),
        generation_tokens=np.frombuffer(cols_i["gen"], dtype=np.int64).copy(),
    )
    return OfflineRun(
        arrival_s=at,
        scheduled_s=scheduled,
        first_token_s=first,
        last_token_s=last,
        prompt_tokens=prompts,
        output_tokens=produced,
        cached_tokens=cached,
        preemptions=preempted,
        status=status,
        steps=stats,
        end_s=now,
        until_s=limit,
        wall_s=wall,
        stopped=stopped,
        rejections=tuple(rejections),
    )
