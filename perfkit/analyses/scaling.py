"""Scaling efficiency between two runs or two windows of a training job: did adding GPUs pay, and
where did the time go when it did not (the seed's §4.1: 32 -> 64 GPUs gave ~1.5x, not 2x).

Each side (:class:`RunSide`) is a GPU count, a throughput and a split of the step into compute,
communication, data wait and idle (:class:`Shares`). :func:`scaling` compares two sides::

    speed-up          S = X_after / X_before              X: tokens/s of the whole job
    GPU ratio         r = N_after / N_before
    efficiency        E = S / r = (X_a / N_a) / (X_b / N_b)   per-GPU throughput kept
    weak scaling      (the per-GPU batch unchanged: the usual "add GPUs, same recipe")
                      E_weak = step_before / step_after   (each GPU does the same work per step)
    strong scaling    (the global batch unchanged: the work is split over more GPUs)
                      E_strong = (step_before / step_after) / r

(Hoefler & Belli, "Scientific Benchmarking of Parallel Computing Systems", SC'15, §3; the
regime is read from tokens per step per GPU: unchanged within 10 % is weak, the job's total
unchanged within 10 % is strong, else neither is claimed.)

**Where the time went.** Per token on one GPU a side spends ``t = 1 / (X / N)`` seconds; each
component of the step takes its share of it. The time lost to scaling is
``t_after - t_before``, and each component's part of it is ``share_a * t_a - share_b * t_b``
(seconds per token per GPU; reported per step of the after side). The largest positive part is
named. Equal per-token times mean perfect scaling, whatever the regime.

**The split of the step** is the critical path of a synchronous data-parallel step: the slowest
rank sets the pace (``step = max_r(data_r + compute_r) + exposed communication``), and the other
ranks' time in the collective is them waiting for it, which belongs to whatever made it slow. So:

* from ``train_*`` metrics: at each scrape, ``data`` is the largest rank's data wait and
  ``communication`` the smallest rank's collective time (the slowest rank waits for nobody: its
  collective time is the exposed transfer), each over the mean step time; ``compute`` is the rest
  (it includes GPU idle the exporter does not see: said in a note);
* from profiler traces (HTA's breakdown per rank, :mod:`perfkit.traces`): ``compute`` is the
  ranks' mean compute time (balanced across data-parallel ranks), ``data`` the mean over steps of
  the largest rank's ``enumerate(DataLoader)`` time, ``idle`` GPU idle beyond that data wait,
  ``memory`` copies alone on the GPU, ``communication`` the rest of the step (exposed collectives).

**Throughput** is tokens/s of the whole job while it runs: each exporting rank's mean 1-minute
``train_tokens_total`` rate (a relaunch's downtime left out), their mean times the GPU count when
only some ranks export (launchers often run the exporter on local rank 0 of each node; summing
only those undercounts a larger job more, which is how a 1.5x speed-up reads as ~1x). The GPU count
is given; else the traces' ``distributedInfo.world_size`` (:func:`with_traces`); else inferred
from the ranks that export (``rank`` labels 0..k-1 plus multiples of k: k GPUs a node, every
node's local rank 0 reporting; :func:`infer_world_size`); the app layer falls back on the
incident's ``hardware.count`` when the labels follow no node pattern. ``gpus_from`` says which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from perfkit.analyses.training_stalls import described, running, running_mean, stalls
from perfkit.core.frames import Window
from perfkit.engine import signals as S

COMPONENTS = ("compute", "communication", "data", "idle", "memory")
REGIME_TOLERANCE = 0.10
"""Tokens per step per GPU within 10 % of each other count as the same per-GPU batch (weak
scaling); the job's tokens per step within 10 % as the same global batch (strong). Unpacked
batches vary by a few % with their lengths; a changed recipe moves them by 2x."""
MIN_STEPS_PER_WINDOW = 4
"""Fewer than four steps in a window (scrape-grid points of the step series) give no split."""
GRID_S = 15.0  # the step series are read on the usual scrape interval
RATE_STEP_S = 60.0
"""Throughput is averaged over 1-minute rates (four 15 s scrapes, what rate() needs): a 6-9 s step
of a large model lands 6-10 times in each."""
Stalls = Sequence[tuple[datetime, datetime]]


@dataclass
class Shares:
    """Shares of the step (0-1) on the critical path; None where the source cannot tell."""

    compute: float | None = None
    communication: float | None = None
    data: float | None = None
    idle: float | None = None
    memory: float | None = None
    source: str = ""  # "traces", "train_* metrics" or "a framework's log lines"

    def get(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value

    def as_dict(self) -> dict[str, Any]:
        return {**{k: _round(self.get(k), 4) for k in COMPONENTS}, "source": self.source}


@dataclass
class TraceRank:
    """The numbers of one traced rank a scaling side needs (built by the caller from
    :class:`perfkit.traces.analysis.RankReport`; analyses do not read traces): µs over the analysed
    steps, and each step's duration and data-loader time."""

    rank: int
    step_us: float
    compute_us: float
    idle_us: float
    memory_us: float
    steps: dict[int, tuple[float, float]] = field(default_factory=dict)  # step -> (dur_us, dataloader_us)


@dataclass
class RunSide:
    """One side of a scaling comparison: a run or a window of one."""

    label: str
    window: Window | None = None
    gpus: int | None = None
    gpus_from: str = ""
    ranks_reporting: int | None = None  # series of train_tokens_total (one per exporting rank)
    reported_tokens_per_s: float | None = None  # their sum
    per_rank: bool = True  # the series are per rank (else one series for the whole job)
    step_s: float | None = None
    shares: Shares = field(default_factory=Shares)
    notes: list[str] = field(default_factory=list)

    @property
    def scaled(self) -> bool:
        """Whether the job's throughput is extrapolated from fewer reporting ranks than GPUs."""
        return bool(self.per_rank and self.gpus and self.ranks_reporting and self.ranks_reporting < self.gpus)

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens/s of the whole job: the reporting ranks' mean x the GPU count (module docstring)."""
        x, n = self.reported_tokens_per_s, self.ranks_reporting
        if x is None:
            return None
        if not self.per_rank:
            return x
        if not self.gpus or not n:
            return None
        return x / n * self.gpus if n < self.gpus else x

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        x = self.tokens_per_s
        return x / self.gpus if x is not None and self.gpus else None

    @property
    def tokens_per_step_per_gpu(self) -> float | None:
        tpg = self.tokens_per_s_per_gpu
        return tpg * self.step_s if tpg is not None and self.step_s else None

    def throughput_note(self) -> str | None:
        if not self.scaled or self.reported_tokens_per_s is None:
            return None
        n, gpus, x = self.ranks_reporting, self.gpus, self.reported_tokens_per_s
        assert n is not None and gpus is not None
        return (
            f"{n} of {gpus} ranks export train_tokens_total: the job's tokens/s is their mean "
            f"({x / n:,.0f}/s) x {gpus} = {x / n * gpus:,.0f}/s; their sum alone ({x:,.0f}/s) would undercount"
        )

    def as_dict(self) -> dict[str, Any]:
        note = self.throughput_note()
        return {
            "label": self.label,
            "window": self.window.as_dict() if self.window else None,
            "gpus": self.gpus,
            "gpus_from": self.gpus_from,
            "ranks_reporting": self.ranks_reporting,
            "reported_tokens_per_s": _round(self.reported_tokens_per_s, 1),
            "throughput_scaled": self.scaled,
            "tokens_per_s": _round(self.tokens_per_s, 1),
            "tokens_per_s_per_gpu": _round(self.tokens_per_s_per_gpu, 2),
            "step_s": _round(self.step_s, 4),
            "tokens_per_step_per_gpu": _round(self.tokens_per_step_per_gpu, 1),
            "shares": self.shares.as_dict(),
            "notes": [*self.notes, *([note] if note else [])],
        }


@dataclass
class Scaling:
    """The comparison of two sides (see the module docstring for every definition)."""

    before: RunSide
    after: RunSide
    gpu_ratio: float | None
    speedup: float | None
    efficiency: float | None
    regime: str  # weak | strong | same-gpus | unknown
    weak_efficiency: float | None
    strong_efficiency: float | None
    lost_s_per_step: dict[str, float | None]  # component -> seconds of an after step lost to scaling
    lost_share: dict[str, float | None]  # component -> its part of all time lost
    lost_to: str | None
    notes: list[str] = field(default_factory=list)

    def headline(self) -> str:
        b, a = self.before, self.after
        if self.speedup is None or self.efficiency is None:
            return "scaling efficiency unknown: " + (
                self.notes[0] if self.notes else "a side lacks throughput"
            )
        text = f"{b.gpus} -> {a.gpus} GPUs: {self.speedup:.2f}x the throughput"
        if self.gpu_ratio and self.gpu_ratio != 1:
            text += f" for {self.gpu_ratio:.2g}x the GPUs (scaling efficiency {self.efficiency:.2f})"
        else:
            text += f" on the same GPUs (per-GPU throughput {self.efficiency:.2f}x)"
        if self.lost_to:
            share = self.lost_share.get(self.lost_to)
            part = f"{share:.0%} of it " if share is not None else ""
            sb, sa = b.shares.get(self.lost_to), a.shares.get(self.lost_to)
            moved = f" ({sb:.0%} -> {sa:.0%} of the step)" if sb is not None and sa is not None else ""
            text += f"; the time lost went {part}to {self.lost_to}{moved}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "headline": self.headline(),
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "gpu_ratio": _round(self.gpu_ratio, 4),
            "speedup": _round(self.speedup, 4),
            "efficiency": _round(self.efficiency, 4),
            "regime": self.regime,
            "weak_efficiency": _round(self.weak_efficiency, 4),
            "strong_efficiency": _round(self.strong_efficiency, 4),
            "lost_s_per_step": {k: _round(v, 4) for k, v in self.lost_s_per_step.items()},
            "lost_share": {k: _round(v, 4) for k, v in self.lost_share.items()},
            "lost_to": self.lost_to,
            "notes": self.notes,
        }


def _round(value: float | None, digits: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


# -- the sides ---------------------------------------------------------------------------------------


def infer_world_size(ranks: list[int]) -> tuple[int | None, str]:
    """The GPU count from the ranks that export: ``0..k-1`` plus multiples of ``k`` (one node's
    ranks and the other nodes' local rank 0) is ``max + k`` GPUs; anything else is at least
    ``max + 1``. Returns (count, how it was read)."""
    if not ranks:
        return None, ""
    rs = sorted(set(ranks))
    k = 0
    while k < len(rs) and rs[k] == k:
        k += 1
    if k == len(rs):
        return rs[-1] + 1, "inferred from the exporting ranks (0..max, all reporting)"
    # node size g: ranks 0..g-1 then multiples of g (rank g itself extends the run 0..k-1 by one)
    for g in (k, k - 1):
        if g >= 2 and all(r % g == 0 for r in rs[g:]):
            return rs[
                -1
            ] + g, f"inferred from the exporting ranks (0..{g - 1} and every {g}th: {g} GPUs a node)"
    return rs[-1] + 1, "at least the highest exporting rank + 1 (the rank labels follow no node pattern)"


def _rank_rates(engine: Any, window: Window, frozen: Stalls = ()) -> dict[str, float]:
    """Tokens/s of each exporting rank while it ran: the mean of its 1-minute rates over the
    window (minutes with no samples, a relaunch's downtime, and minutes it stood still do not
    count: scaling is about the running job; a restart's or a hang's cost is another question)."""
    # a rate reads the minute before it: one that straddles a stall's end is left out too
    reach = timedelta(seconds=RATE_STEP_S)
    frame = S.rate_series(engine, "train_tokens", window, RATE_STEP_S, by=("rank",))
    frame = running(frame, [(a, b + reach) for a, b in frozen])
    if not frame.height:
        return {}
    frame = frame.filter(pl.col("value").is_finite())
    if "rank" not in frame.columns:
        return {"": float(frame["value"].mean())} if frame.height else {}  # type: ignore[arg-type]
    means = frame.group_by("rank").agg(pl.col("value").mean()).sort("rank")
    return {str(r): float(v) for r, v in zip(means["rank"], means["value"], strict=True) if v is not None}


def _series_mean(
    engine: Any, signal: str, window: Window, combine: str, frozen: Stalls = ()
) -> tuple[float | None, int]:
    return running_mean(S.gauge_series(engine, signal, window, GRID_S, combine=combine), list(frozen))


def metrics_side(
    engine: Any, window: Window, *, label: str, gpus: int | None = None, gpus_from: str = ""
) -> RunSide:
    """A side from the ``train_*`` series in ``window``: throughput of all ranks (scaled from the
    reporting ones), mean step time and the critical-path split (module docstring)."""
    side = RunSide(label, window)
    step = S.gauge_stat(engine, "train_step", window, "avg", combine="avg")
    frozen = stalls(engine, window, step)  # a hung job's gauges repeat its last step: left out
    if frozen:
        step = _series_mean(engine, "train_step", window, "avg", frozen)[0]
        side.notes.append(described(frozen))
    rates = _rank_rates(engine, window, frozen)
    if not rates:
        side.notes.append("no train_tokens_total in the window: throughput unknown")
    named = [int(r) for r in rates if r.lstrip("-").isdigit()]
    side.per_rank = bool(named) or not rates
    side.ranks_reporting = len(rates) or None
    side.reported_tokens_per_s = sum(rates.values()) if rates else None
    if gpus:
        side.gpus, side.gpus_from = gpus, gpus_from or "given"
    elif named:
        side.gpus, side.gpus_from = infer_world_size(named)
    elif rates:
        side.notes.append("train_tokens_total carries no rank label: it is taken as the whole job's")
    side.step_s = step
    wait, n_wait = _series_mean(engine, "train_data_wait", window, "max", frozen)
    comm, n_comm = _series_mean(engine, "train_comm", window, "min", frozen)
    if (
        step
        and step > 0
        and min(n_wait, n_comm) >= MIN_STEPS_PER_WINDOW
        and wait is not None
        and comm is not None
    ):
        data, communication = wait / step, comm / step
        metric = S.resolve(engine, "train_step").metric or ""
        source = "a framework's log lines" if metric.startswith("trainer_") else "train_* metrics"
        side.shares = Shares(
            compute=max(0.0, 1.0 - data - communication),
            communication=communication,
            data=data,
            source=source,
        )
        side.notes.append(
            f"split from {source}: data = the slowest rank's wait, communication = the least "
            "collective time of any rank, compute = the rest (GPU idle included)"
        )
        if side.gpus and side.ranks_reporting and side.ranks_reporting < side.gpus:
            side.notes.append(
                "a rank that does not export may be slower still: data wait and the exposed "
                "communication are those of the reporting ranks"
            )
    elif step is None:
        side.notes.append("no train_step_duration_seconds in the window: step split unknown")
    else:
        side.notes.append("train_data_wait_seconds or train_comm_seconds missing: step split unknown")
    return side


def trace_shares(ranks: list[TraceRank]) -> Shares:
    """The critical-path split from traced ranks (module docstring); empty without steps."""
    usable = [r for r in ranks if r.step_us > 0]
    if not usable:
        return Shares(source="traces")
    compute = float(np.mean([r.compute_us / r.step_us for r in usable]))
    memory = float(np.mean([r.memory_us / r.step_us for r in usable]))
    # per step, the rank that waited longest for its batch sets the pace
    by_step: dict[int, list[tuple[float, float]]] = {}
    for r in usable:
        for step, pair in r.steps.items():
            by_step.setdefault(step, []).append(pair)
    if by_step:
        data = float(
            np.mean([max(lo for _, lo in v) / float(np.mean([d for d, _ in v])) for v in by_step.values()])
        )
    else:
        data = 0.0
    # GPU idle beyond each rank's own data wait (launch gaps, synchronisation)
    loader = {r.rank: sum(lo for _, lo in r.steps.values()) for r in usable}
    idle = float(np.mean([max(0.0, r.idle_us - loader[r.rank]) / r.step_us for r in usable]))
    communication = max(0.0, 1.0 - compute - data - idle - memory)
    return Shares(compute, communication, data, idle, memory, source="traces")


def with_traces(
    side: RunSide, ranks: list[TraceRank], world_size: int | None, *, prefer_gpus: bool
) -> RunSide:
    """``side`` with its split from the traces and, unless a count was given, the traces' world
    size as its GPU count (the throughput rescaled to it)."""
    shares = trace_shares(ranks)
    if shares.compute is None:
        side.notes.append("the traces hold no complete ProfilerStep: the split stays the metrics'")
        return side
    side.shares = shares
    side.notes = [n for n in side.notes if not n.startswith(("split from train_*", "a rank that does not"))]
    side.notes.append(
        f"split from {len(ranks)} traced ranks (HTA's breakdown, critical path: the slowest rank's data "
        "wait per step, mean compute, the rest exposed communication)"
    )
    if world_size and prefer_gpus:
        if side.gpus and world_size != side.gpus:
            side.notes.append(f"GPU count {world_size} from the traces (the metrics suggested {side.gpus})")
        side.gpus, side.gpus_from = world_size, "traces (distributedInfo.world_size)"
    return side


# -- the comparison ----------------------------------------------------------------------------------


def _regime(b: RunSide, a: RunSide, ratio: float | None) -> str:
    tb, ta = b.tokens_per_step_per_gpu, a.tokens_per_step_per_gpu
    if ratio is None or tb is None or ta is None or tb <= 0:
        return "unknown"
    if ratio == 1:
        return "same-gpus"
    per_gpu = ta / tb
    if abs(per_gpu - 1) <= REGIME_TOLERANCE:
        return "weak"
    if abs(per_gpu * ratio - 1) <= REGIME_TOLERANCE:
        return "strong"
    return "unknown"


def scaling(before: RunSide, after: RunSide) -> Scaling:
    """Compare two sides: speed-up, efficiency and where the lost time went (module docstring)."""
    notes: list[str] = []
    nb, na = before.gpus, after.gpus
    ratio = na / nb if nb and na else None
    xb, xa = before.tokens_per_s, after.tokens_per_s
    speedup = xa / xb if xa is not None and xb else None
    efficiency = speedup / ratio if speedup is not None and ratio else None
    regime = _regime(before, after, ratio)
    step_ratio = before.step_s / after.step_s if before.step_s and after.step_s else None
    weak = step_ratio if regime == "weak" else None
    strong = step_ratio / ratio if regime == "strong" and step_ratio is not None and ratio else None
    if ratio is None:
        notes.append("a side's GPU count is unknown: give it (--gpus-before/--gpus-after)")
    if speedup is None:
        notes.append("a side has no throughput (train_tokens_total)")
    if regime == "unknown" and ratio not in (None, 1) and speedup is not None:
        notes.append(
            "the batch per GPU and the global batch both changed: weak and strong efficiency not claimed"
        )
    lost: dict[str, float | None] = dict.fromkeys(COMPONENTS)
    share: dict[str, float | None] = dict.fromkeys(COMPONENTS)
    lost_to = None
    tb, ta = before.tokens_per_s_per_gpu, after.tokens_per_s_per_gpu
    if tb and ta and after.tokens_per_step_per_gpu:
        per_step = after.tokens_per_step_per_gpu
        tau_b, tau_a = 1.0 / tb, 1.0 / ta
        total = tau_a - tau_b
        for k in COMPONENTS:
            sb, sa = before.shares.get(k), after.shares.get(k)
            if sa is None and sb is None:
                continue
            delta = (sa or 0.0) * tau_a - (sb or 0.0) * tau_b
            lost[k] = delta * per_step
            share[k] = delta / total if total > 0 else None
        if total > 0:
            known = {k: v for k, v in lost.items() if v is not None}
            if known:
                best = max(known, key=lambda k: known[k] or 0.0)
                lost_to = best if (known[best] or 0.0) > 0 else None
        else:
            notes.append("no time lost: the per-GPU throughput held or rose")
    if before.shares.source and after.shares.source and before.shares.source != after.shares.source:
        notes.append(
            f"the split comes from {before.shares.source} before and {after.shares.source} after: "
            "compute includes GPU idle on the metrics side"
        )
    return Scaling(
        before, after, ratio, speedup, efficiency, regime, weak, strong, lost, share, lost_to, notes
    )


__all__ = [
    "COMPONENTS",
    "RunSide",
    "Scaling",
    "Shares",
    "TraceRank",
    "infer_world_size",
    "metrics_side",
    "scaling",
    "trace_shares",
    "with_traces",
]
