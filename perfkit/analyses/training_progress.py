"""A training job's net progress across restarts, read from the step numbers its log lines carry.

A job's throughput while it runs (tokens/s per GPU, :mod:`perfkit.analyses.scaling`) says nothing
about the time it was down or the steps it ran twice: a relaunch resumes from its last checkpoint and
redoes every step since. What the job *gained* is the rise of its **frontier**, the highest step it
has ever logged. Walking the logged steps in time order:

* a step number below the previous one starts a new **run** (the job was relaunched and resumed
  from a checkpoint at or below the step it logged first);
* between two lines of one run the job ran ``b - a`` steps; of them ``max(0, b - max(a, frontier))``
  were new and the rest **redone** (already run by an earlier launch);
* the time from a run's last line to the next run's first, less one ordinary logging interval, the
  job was **down** (crashed, hung to its watchdog, relaunching, loading its checkpoint); so was a
  gap inside one run longer than :data:`STALL_INTERVALS` intervals (a hang it came back from) and
  the head or tail of a window with no line where lines were due.

A **crash loop** is a window in which the job relaunched at least twice and gained nothing: each run
resumed from the same checkpoint and died before passing the frontier. Its net progress is zero
whatever its tokens/s while running: 100 % of the window's GPU time lost.

Steps come from the job's log lines (:mod:`perfkit.sources.trainer_steps`: every framework line
that numbers its step, of one rank), and only lines with a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from perfkit.core.frames import Window

STALL_INTERVALS = 5.0
"""A gap between two lines of one run longer than 5 ordinary logging intervals is a stall: a job's
step time varies by tens of % between lines (the simulator's and real jobs' jitter, a checkpoint
save), never by 5x unless it stopped."""
MIN_STALL_S = 120.0
"""...and at least 2 minutes: a job logging every step at 1 s would otherwise call a 6 s
checkpoint save a stall."""
MIN_POINTS = 3
"""Fewer step lines than this in the history up to a window: no progress is read for it."""


@dataclass
class Restart:
    """One relaunch: the last line before it, the first after, and what it cost."""

    at: datetime  # the first line of the new run
    last_step: int  # the frontier when it went down
    resumed_step: int  # the first step the new run logged
    down_s: float

    @property
    def to_redo(self) -> int:
        return max(0, self.last_step - self.resumed_step)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "last_step": self.last_step,
            "resumed_step": self.resumed_step,
            "to_redo": self.to_redo,
            "down_s": round(self.down_s, 1),
        }


@dataclass
class Progress:
    """What the job gained in one window, from its logged steps (module docstring)."""

    window: Window
    frontier_start: int
    frontier_end: int
    steps_run: int
    steps_new: int
    down_s: float
    interval_s: float  # the ordinary time between two step lines
    steps_per_line: float
    restarts: list[Restart] = field(default_factory=list)
    source: str = ""

    @property
    def steps_redone(self) -> int:
        return max(0, self.steps_run - self.steps_new)

    @property
    def up_share(self) -> float:
        return max(0.0, 1.0 - self.down_s / self.window.seconds) if self.window.seconds > 0 else 0.0

    @property
    def useful_share(self) -> float | None:
        """Of the steps run, the share that were new (None when none ran)."""
        return self.steps_new / self.steps_run if self.steps_run > 0 else None

    @property
    def crash_loop(self) -> bool:
        return len(self.restarts) >= 2 and self.steps_new == 0

    @property
    def net_share(self) -> float:
        """The share of the window's time that made progress: up, and on new steps."""
        useful = self.useful_share
        return self.up_share * (0.0 if useful is None else useful)

    def summary(self) -> str:
        w = self.window.seconds / 60.0
        text = f"{self.steps_new:,} new steps in {w:.0f} min (step {self.frontier_start:,} → {self.frontier_end:,})"
        if self.steps_redone:
            text += f"; {self.steps_redone:,} steps run again after a relaunch"
        if self.down_s >= 1.0:
            text += f"; down {self.down_s / 60.0:.1f} min"
        if self.restarts:
            resumed = sorted({r.resumed_step for r in self.restarts})
            text += (
                f"; {len(self.restarts)} relaunch(es), resumed at step {', '.join(f'{s:,}' for s in resumed)}"
            )
        if self.crash_loop:
            text += ": a crash loop, no net progress"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": {"start": self.window.start.isoformat(), "end": self.window.end.isoformat()},
            "frontier_start": self.frontier_start,
            "frontier_end": self.frontier_end,
            "steps_run": self.steps_run,
            "steps_new": self.steps_new,
            "steps_redone": self.steps_redone,
            "down_s": round(self.down_s, 1),
            "up_share": round(self.up_share, 4),
            "net_share": round(self.net_share, 4),
            "crash_loop": self.crash_loop,
            "restarts": [r.as_dict() for r in self.restarts],
            "source": self.source,
            "summary": self.summary(),
        }


def _runs(points: list[tuple[datetime, int]]) -> list[list[tuple[datetime, int]]]:
    runs: list[list[tuple[datetime, int]]] = []
    for p in points:
        if runs and p[1] >= runs[-1][-1][1]:
            if p[1] > runs[-1][-1][1]:
                runs[-1].append(p)
            continue
        runs.append([p])
    return runs


def _interval(runs: list[list[tuple[datetime, int]]]) -> tuple[float, float] | None:
    """The median time between two lines of one run, and the median steps between them."""
    dts, dsteps = [], []
    for run in runs:
        for a, b in zip(run, run[1:], strict=False):
            dts.append((b[0] - a[0]).total_seconds())
            dsteps.append(b[1] - a[1])
    if not dts:
        return None
    return float(np.median(dts)), float(np.median(dsteps))


def progress(
    points: list[tuple[datetime, int]], window: Window, seen_until: datetime | None = None
) -> Progress | None:
    """The job's progress in ``window`` (module docstring) from its logged ``(time, step)`` points in
    time order (:func:`perfkit.sources.trainer_steps.step_points`); ``seen_until``: the time of the
    logs' last line of any kind (a tail without step lines is down only as far as the logs reach:
    logs collected before the window's end say nothing of its last minutes). None with too few
    points, or none inside the window (logs that stop before it cannot tell a job down from logs
    not collected)."""
    points = [p for p in points if p[0] <= window.end]
    if len(points) < MIN_POINTS or not any(p[0] >= window.start for p in points):
        return None
    runs = _runs(points)
    typical = _interval(runs)
    if typical is None or typical[0] <= 0:
        return None
    interval, per_line = typical
    stall = max(STALL_INTERVALS * interval, MIN_STALL_S)
    start, end = window.start, window.end
    frontier = -1
    frontier_start: int | None = None
    steps_run = steps_new = 0
    down = 0.0
    restarts: list[Restart] = []
    previous: tuple[datetime, int] | None = None

    def gap_in_window(a: datetime, b: datetime) -> float:
        lo, hi = max(a, start), min(b, end)
        return max(0.0, (hi - lo).total_seconds())

    for run in runs:
        for j, (ts, step) in enumerate(run):
            if frontier_start is None and ts >= start:
                frontier_start = max(frontier, 0)
            if previous is not None:
                gap = (ts - previous[0]).total_seconds()
                if j == 0 or gap > stall:  # a relaunch, or a stall inside one run
                    lost = gap_in_window(previous[0], ts) - min(interval, gap_in_window(previous[0], ts))
                    down += max(0.0, lost)
                if j == 0 and start <= ts <= end:
                    restarts.append(Restart(ts, frontier, step, max(0.0, gap - interval)))
                if j > 0 and ts >= start:
                    a = previous[1]
                    steps_run += step - a
                    steps_new += max(0, step - max(a, frontier))
            frontier = max(frontier, step)
            previous = (ts, step)
    assert previous is not None and frontier_start is not None
    tail_end = min(end, seen_until) if seen_until is not None else end
    if (tail_end - previous[0]).total_seconds() > stall:  # no step line where one was due: down
        tail = gap_in_window(previous[0], tail_end)
        down += tail - min(interval, tail)
    return Progress(
        window=window,
        frontier_start=frontier_start,
        frontier_end=max(frontier, 0),
        steps_run=steps_run,
        steps_new=steps_new,
        down_s=min(down, window.seconds),
        interval_s=interval,
        steps_per_line=per_line,
        restarts=restarts,
        source=f"the step numbers of {len(points):,} log lines",
    )


@dataclass
class Rollback:
    """What reverting a change that spoiled the training (a loss that spikes or diverges) discards:
    the job resumes from the last checkpoint saved before the change, and every step since, the
    good ones between that checkpoint and the change included, is trained again."""

    change_at: datetime
    resume_step: int
    resume_at: datetime  # the checkpoint's save, or the change when no save is logged
    from_checkpoint: bool
    frontier: int  # the highest step logged up to ``until``
    until: datetime

    @property
    def steps(self) -> int:
        return max(0, self.frontier - self.resume_step)

    @property
    def seconds(self) -> float:
        """Wall time since the resume point: what the job spent on the steps discarded."""
        return max(0.0, (self.until - self.resume_at).total_seconds())

    def as_dict(self) -> dict[str, Any]:
        return {
            "change_at": self.change_at.isoformat(),
            "resume_step": self.resume_step,
            "resume_at": self.resume_at.isoformat(),
            "from_checkpoint": self.from_checkpoint,
            "frontier": self.frontier,
            "until": self.until.isoformat(),
            "steps": self.steps,
            "seconds": round(self.seconds, 1),
        }


def rollback(
    points: list[tuple[datetime, int]],
    checkpoints: list[tuple[datetime, int]],
    change_at: datetime,
    until: datetime,
) -> Rollback | None:
    """The cost of rolling back to before ``change_at`` (:class:`Rollback`), from the logged steps and
    checkpoint saves up to ``until``. Without a checkpoint line before the change the step logged at
    the change is the resume point, a lower bound on the cost; None without a step before it."""
    logged = [(t, s) for t, s in points if t <= until]
    before = [s for t, s in logged if t <= change_at]
    if not logged or not before:
        return None
    frontier = max(s for _, s in logged)
    saved = [(t, s) for t, s in checkpoints if t <= change_at]
    if saved:
        at, step = max(saved, key=lambda c: c[0])
        return Rollback(change_at, step, at, True, frontier, until)
    return Rollback(change_at, max(before), change_at, False, frontier, until)


__all__ = ["Progress", "Restart", "Rollback", "progress", "rollback"]
