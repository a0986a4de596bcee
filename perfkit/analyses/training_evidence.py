"""Training evidence, from the ``train_*`` series a training loop exports (the triage table's
training rows and the runbook's training section read it).

Per window: step time and exposed-communication share (averaged over ranks), the data-wait share
of the slowest rank (a synchronous job runs at its pace), tokens/s, how much the step time and the
GPUs' utilisation jump from one scrape to the next (the seed's §4.1 sign of an unsteady data
supply), and the loss curve's shape.

The loss is read at every scrape (the rank average): a one-minute grid keeps a quarter of the
points and turns one noisy minute into a "2x rougher" loss. Its shape is measured robustly, so one
bad batch does not read as an oscillating loss:

* **roughness**: the robust scatter (1.4826 x MAD) of the loss around its linear trend over the
  window, relative to the loss level. Batch noise, an oscillation, a walk from one data source to
  the next and a loss that jumps and stays up all raise it; one spike does not (the MAD ignores it).
* **spikes**: episodes of consecutive points more than :data:`SPIKE_MADS` robust SDs above the
  rolling median, where the SD is the larger of the window's own scatter and the baseline's (a
  job that hangs has a flat loss: without the baseline's scale its rounding would be "spikes").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import numpy as np
import polars as pl

from perfkit.analyses.mfu import training_throughput
from perfkit.analyses.training_stalls import running, running_mean, stalls
from perfkit.core.frames import Window
from perfkit.core.incident import Incident
from perfkit.core.ratios import MAD_TO_SD
from perfkit.engine import ops
from perfkit.engine import signals as S

SPIKE_MADS = 6.0
"""A loss point more than 6 robust SDs above its rolling median is a spike: batch noise is close to
normal, so 6 SDs happen by chance about once in 10^9 points, never in a window of scrapes."""
SPIKE_ROLLING_POINTS = 7
"""The rolling median a spike is measured from spans 7 scrapes (~2 minutes at 15 s): longer than a
spike (one bad batch and its clipped update decay in ~20 steps), shorter than an oscillation."""
MIN_LOSS_POINTS = 8
"""Fewer than 8 loss points in a window give no shape: a MAD of 7 residuals is noise itself."""
MIN_SCRAPE_S = 15.0
"""The finest grid the series are read on: the usual scrape interval (Prometheus' common 15 s)."""
MAX_GRID_POINTS = 2000
"""At most 2000 points per series in a window (a day at 15 s is 5760; Prometheus refuses a range
query past 11,000): longer windows are read on a coarser grid."""


@dataclass
class TrainingEvidence:
    present: bool
    step_s: dict[str, float | None] = field(default_factory=dict)
    data_wait_share: dict[str, float | None] = field(default_factory=dict)
    comm_share: dict[str, float | None] = field(default_factory=dict)
    tokens_per_s: dict[str, float | None] = field(default_factory=dict)  # per GPU
    loss_roughness: dict[str, float | None] = field(default_factory=dict)
    loss_spikes: dict[str, int | None] = field(default_factory=dict)
    #: median |Δ step time| between consecutive scrapes / median step time (median over ranks)
    step_jitter: dict[str, float | None] = field(default_factory=dict)
    #: mean |Δ DCGM_FI_DEV_GPU_UTIL| between consecutive scrapes, percentage points (mean over GPUs)
    util_swing_pct: dict[str, float | None] = field(default_factory=dict)
    scrape_s: float | None = None  # the grid the loss and jitter were read on
    tokens_note: dict[str, str] = field(default_factory=dict)  # whose tokens/s it is
    #: rank-mean loss by optimizer step from the trainer's log lines: "baseline" (logged before the
    #: incident window) and "incident"; a step run twice (a restart from a checkpoint) is on both sides
    loss_by_step: dict[str, dict[int, float]] | None = None
    #: where each signal came from: "perfkit TrainMetrics (train_step_duration_seconds)" or a
    #: framework's log lines ("Megatron-LM log lines (trainer_step_seconds)")
    sources: dict[str, str] = field(default_factory=dict)
    #: per window, the spans the job stood still while its gauges repeated the last step
    #: (:mod:`perfkit.analyses.training_stalls`): left out of the step-time averages
    stalled: dict[str, list[tuple[datetime, datetime]]] = field(default_factory=dict)
    #: the throughput the framework's lines state, per window: name -> ({side: value}, unit)
    reported: dict[str, tuple[dict[str, float | None], str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["stalled"] = {k: [[a.isoformat(), b.isoformat()] for a, b in v] for k, v in self.stalled.items()}
        return out


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _rolling_median(v: np.ndarray, k: int) -> np.ndarray:
    pad = np.pad(v, k // 2, mode="edge")
    return cast(np.ndarray, np.median(np.lib.stride_tricks.sliding_window_view(pad, k), axis=1))


def loss_roughness(values: np.ndarray) -> float | None:
    """Robust scatter of a loss series around its linear trend, relative to its level."""
    v = values[np.isfinite(values)]
    if v.size < MIN_LOSS_POINTS:
        return None
    level = float(np.median(v))
    if level <= 0:
        return None
    t = np.arange(v.size, dtype=np.float64)
    slope, icpt = np.polyfit(t, v, 1)
    resid = v - (slope * t + icpt)
    return MAD_TO_SD * float(np.median(np.abs(resid - np.median(resid)))) / level


def loss_spikes(values: np.ndarray, floor: float | None = None) -> int:
    """Spike episodes: runs of points more than :data:`SPIKE_MADS` robust SDs above the rolling
    median. ``floor``: the smallest relative SD to measure against (the baseline's roughness)."""
    v = values[np.isfinite(values)]
    if v.size < MIN_LOSS_POINTS:
        return 0
    level = float(np.median(v))
    resid = v - _rolling_median(v, SPIKE_ROLLING_POINTS)
    sd = MAD_TO_SD * float(np.median(np.abs(resid - np.median(resid))))
    if floor is not None and level > 0:
        sd = max(sd, floor * level)
    if sd <= 0:
        return 0
    hot = resid > SPIKE_MADS * sd
    return int(np.sum(hot[1:] & ~hot[:-1]) + int(hot[0]))


def loss_shape(values: np.ndarray, floor: float | None = None) -> tuple[float | None, int]:
    """(roughness, spike episodes) of a loss series sampled at a fixed step."""
    return loss_roughness(values), loss_spikes(values, floor)


def scrape_interval(engine: Any, signal: str, w: Window) -> float | None:
    """The scrape interval of ``signal`` in ``w``: the window over the most samples any series has,
    rounded down to whole 5 s (a restart's gap lengthens the quotient) and never finer than
    :data:`MIN_SCRAPE_S`."""
    res = S.resolve(engine, signal)
    if res.metric is None:
        return None
    expr = ops.aggregate("max", ops.over_time("count", ops.Selector(res.metric), w.seconds))
    frame = engine.instant(expr, w.end)
    if not frame.height:
        return None
    n = frame["value"][0]
    if n is None or not math.isfinite(float(n)) or float(n) < 2:
        return None
    return max(MIN_SCRAPE_S, 5.0 * math.floor(w.seconds / float(n) / 5.0))


def _per_series(frame: pl.DataFrame, by: tuple[str, ...]) -> list[np.ndarray]:
    if not frame.height:
        return []
    keys = [k for k in by if k in frame.columns]
    groups = frame.sort("ts").partition_by(keys) if keys else [frame.sort("ts")]
    return [g["value"].to_numpy().astype(np.float64) for g in groups]


def step_jitter(frame: pl.DataFrame) -> float | None:
    """Median over ranks of median |Δ step time| / median step time between consecutive scrapes."""
    out = []
    for v in _per_series(frame, ("rank",)):
        v = v[np.isfinite(v)]
        if v.size >= MIN_LOSS_POINTS and np.median(v) > 0:
            out.append(float(np.median(np.abs(np.diff(v))) / np.median(v)))
    return float(np.median(out)) if out else None


def util_swing(frame: pl.DataFrame) -> float | None:
    """Mean over GPUs of the mean |Δ utilisation| between consecutive scrapes (percentage points)."""
    out = []
    for v in _per_series(frame, ("Hostname", "instance", "gpu", "UUID")):
        v = v[np.isfinite(v)]
        if v.size >= MIN_LOSS_POINTS:
            out.append(float(np.mean(np.abs(np.diff(v)))))
    return float(np.mean(out)) if out else None


def _grid(scrape_s: float, w: Window) -> float:
    """The step to read ``w`` on: the scrape interval, coarser when that gives too many points."""
    return max(scrape_s, w.seconds / MAX_GRID_POINTS)


_REPORTED = (
    ("TFLOP/s per GPU", "train_tflops", "TFLOP/s", 1.0),
    ("MFU", "train_mfu", "%", 100.0),
    ("samples/s", "train_samples_rate", "samples/s", 1.0),
)
_SIGNALS = ("train_step", "train_data_wait", "train_comm", "train_loss", "train_tokens_per_gpu", "train_mfu")


def signal_sources(engine: Any) -> dict[str, str]:
    """Where each training signal comes from: perfkit's exporter, or which framework's log lines
    (the ``framework`` label :mod:`perfkit.sources.trainer_series` gives its series)."""
    out: dict[str, str] = {}
    store = getattr(engine, "store", None)
    for signal in _SIGNALS:
        metric = S.resolve(engine, signal).metric
        if metric is None:
            continue
        if not metric.startswith("trainer_"):
            out[signal] = f"perfkit TrainMetrics ({metric})"
            continue
        frame = store.get(metric) if store is not None else None
        names = (
            sorted(set(frame["framework"].to_list()))
            if frame is not None and "framework" in frame.columns
            else []
        )
        titles = ", ".join(names) or "a framework"  # the label holds the framework's title
        files = set(frame["source"].to_list()) if frame is not None and "source" in frame.columns else set()
        scalars = {f for f in files if f.startswith("tensorboard")}  # trainer_series labels them so
        kind = "TensorBoard scalars" if files and scalars == files else "log lines and TensorBoard scalars" if scalars else "log lines"  # fmt: skip
        out[signal] = f"{titles} {kind} ({metric})"
    return out


def gather_training(engine: Any, inc: Incident) -> TrainingEvidence:
    sides = [(s, w) for s, w in (("baseline", inc.baseline), ("incident", inc.window)) if w is not None]
    stepped = S.resolve(engine, "train_step").found
    present = stepped or S.resolve(engine, "train_loss").found
    ev = TrainingEvidence(present)
    if S.resolve(engine, "gpu_util").found:
        scrape = min((scrape_interval(engine, "gpu_util", w) or MIN_SCRAPE_S for _, w in sides), default=0.0)
        for side, w in sides:
            util = S.gauge_series(
                engine, "gpu_util", w, _grid(scrape, w), combine="avg", by=("Hostname", "gpu")
            )
            ev.util_swing_pct[side] = util_swing(util)
    if not present:
        return ev
    ev.sources = signal_sources(engine)
    paced_by = "train_step" if stepped else "train_loss"
    ev.scrape_s = min(
        (s for s in (scrape_interval(engine, paced_by, w) for _, w in sides) if s is not None),
        default=None,
    )
    for side, w in sides:  # the baseline first: its roughness is the incident's spike scale
        grid = _grid(ev.scrape_s or MIN_SCRAPE_S, w)
        step = S.gauge_stat(engine, "train_step", w, "avg", combine="avg")
        comm = S.gauge_stat(engine, "train_comm", w, "avg", combine="avg")
        # A hung job's gauges repeat the step before the hang: those minutes are not its step time.
        frozen = stalls(engine, w, step)
        ev.stalled[side] = frozen
        if frozen:
            step = running_mean(S.gauge_series(engine, "train_step", w, grid, combine="avg"), frozen)[0]
            comm = running_mean(S.gauge_series(engine, "train_comm", w, grid, combine="avg"), frozen)[0]
        ev.step_s[side] = step
        # The slowest rank sets a synchronous job's pace: at each step take the rank that waited most.
        waits = running(S.gauge_series(engine, "train_data_wait", w, grid, combine="max"), frozen)
        ev.data_wait_share[side] = _share(
            float(cast(float, waits["value"].mean())) if waits.height else None, step
        )
        ev.comm_share[side] = _share(comm, step)
        # tokens/s per GPU (the mean of the ranks that export), not the sum over the ranks that export:
        # 11 of 32 exporting ranks, then 15 of 64, made a 32 -> 64 GPU resize read 0.98x the baseline
        thr = training_throughput(engine, w)
        ev.tokens_per_s[side] = thr.tokens_per_s_per_gpu if thr else None
        if thr:
            ev.tokens_note[side] = f"per GPU, the mean of {thr.ranks_reporting} exporting ranks"
        elif (tps := S.gauge_stat(engine, "train_tokens_per_gpu", w, "avg", combine="avg")) is not None:
            ev.tokens_per_s[side] = tps
            ev.tokens_note[side] = "per GPU, as the framework's log line reports it (torchtitan tps)"
        for name, signal, unit, factor in _REPORTED:
            if S.resolve(engine, signal).found:
                value = S.gauge_stat(engine, signal, w, "avg", combine="avg")
                by_side, _ = ev.reported.setdefault(name, ({}, unit))
                by_side[side] = None if value is None else value * factor
        ev.step_jitter[side] = step_jitter(
            running(S.gauge_series(engine, "train_step", w, grid, combine="avg", by=("rank",)), frozen)
        )
        loss = S.gauge_series(engine, "train_loss", w, grid, combine="avg")
        if loss.height:
            values = loss["value"].to_numpy().astype(np.float64)
            floor = ev.loss_roughness.get("baseline") if side == "incident" else None
            ev.loss_roughness[side], ev.loss_spikes[side] = loss_shape(values, floor)
    return ev


# A trainer's log line with its step and loss, ANSI colours stripped first:
#   perfkit's simulated trainer / many scripts:  "step 24000 | loss 1.9256 | lr 3.00e-04 | ..."
#   torchtitan (torchtitan/train.py):            "step:  10  loss:  9.8785  memory: ..."
#   Megatron-LM (megatron/training/training.py): "iteration      100/   10000 | ... | lm loss: 2.345678E+00 |"
_STEP_LOSS = (
    re.compile(
        r"\bstep[:=]?\s*(\d{1,12})\b[^0-9\n]{0,40}?\bloss[:=]?\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
    ),
    re.compile(
        r"\biteration\s+(\d{1,12})\s*/\s*\d+\s*\|.*?\blm loss:\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
    ),
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_LOSS_LINES = 200_000
"""At most this many step/loss lines are read (a week of a step a second is 600k; a log that long
is read for its latest lines, the ones nearest the incident)."""


def loss_by_step(logs: pl.DataFrame | None, inc: Incident) -> dict[str, dict[int, float]] | None:
    """The trainer's loss at each step, before the incident window and inside it (the mean over the
    ranks that logged the step); None when the logs carry no step/loss lines."""
    if logs is None or not logs.height or "message" not in logs.columns:
        return None
    lines = logs.filter(pl.col("message").str.contains("loss")).tail(MAX_LOSS_LINES)
    sums: dict[str, dict[int, list[float]]] = {"baseline": {}, "incident": {}}
    end = inc.window.end
    for ts, message in zip(lines["ts"].to_list(), lines["message"].to_list(), strict=True):
        if ts is None or message is None or ts > end:
            continue
        text = _ANSI.sub("", message)
        for pattern in _STEP_LOSS:
            m = pattern.search(text)
            if m:
                value = float(m.group(2))
                if math.isfinite(value):
                    side = "incident" if ts >= inc.window.start else "baseline"
                    sums[side].setdefault(int(m.group(1)), []).append(value)
                break
    if not sums["baseline"] and not sums["incident"]:
        return None
    return {side: {step: sum(v) / len(v) for step, v in by.items()} for side, by in sums.items()}
