"""A training job's logged step numbers and its world size, from the logs frame
(:func:`perfkit.sources.logs.read_logs`), for :mod:`perfkit.analyses.training_progress`.

Step numbers come from every framework line that numbers the optimizer step
(:func:`perfkit.sources.trainer_lines.trainer_fields`: Megatron-LM's ``iteration``, torchtitan's
``step:``, DeepSpeed's ``step=``, NeMo's ``global_step``, a script's ``step N | loss``), of one rank
only (the one with the most step lines, the lowest of equals; a ``[rankN]:`` prefix names it, lines
without one are one more "rank"): ranks run in lock-step, and one rank's lines keep a relaunch's
fall-back from reading as ranks out of order. Only lines with a time count.

The world size comes from NCCL's init lines, which name each communicator's size
(``comm 0x55d1c8a00100 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x... - Init START``,
NCCL ``src/init.cc``, 2.19 and later; ``Init COMPLETE`` before): the largest of the last launch
before a time is the job's world (the world group's communicator, which the first collective on
the default process group creates). Ranks that do not export metrics are invisible to the metrics;
NCCL counts them.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

import polars as pl

from perfkit.sources.trainer_lines import CHECKPOINT_KIND, PROGRESS_KIND, checkpoint_step, trainer_fields

STEP_KINDS = ("megatron", "nemo", "torchtitan", "deepspeed", "deepspeed_throughput", PROGRESS_KIND)
"""Log kinds whose lines number the optimizer step."""
MAX_POINTS = 200_000
"""At most this many step lines are read (the latest, nearest the incident)."""
INIT_BURST_S = 300.0
"""NCCL's init lines of one launch come within seconds of each other; 5 minutes keeps a slow
launch's lines together and an earlier launch's (another world size) apart."""

_RANK = re.compile(r"^\[rank(\d{1,6})\]")
_NRANKS = re.compile(r"\brank \d{1,6} nranks (\d{1,6}) cudaDev\b")
_COLUMNS = {"kind", "ts", "message"}


def step_points(logs: pl.DataFrame | None) -> list[tuple[datetime, int]]:
    """(time, step) of every timed step line of one rank (module docstring), in time order."""
    if logs is None or not logs.height or not set(logs.columns) >= _COLUMNS:
        return []
    lines = logs.filter(pl.col("kind").is_in(STEP_KINDS) & pl.col("ts").is_not_null()).tail(MAX_POINTS)
    by_rank: dict[int, list[tuple[datetime, int]]] = {}
    for kind, ts, text in zip(lines["kind"], lines["ts"], lines["message"], strict=True):
        step = trainer_fields(kind, text).get("step")
        if step is None or not math.isfinite(step) or step < 0 or step >= 2**53:
            continue
        m = _RANK.match(text)
        by_rank.setdefault(int(m.group(1)) if m else -1, []).append((ts, int(step)))
    if not by_rank:
        return []
    points = by_rank[min(by_rank, key=lambda r: (-len(by_rank[r]), r))]
    points.sort(key=lambda p: p[0])
    return points


def checkpoint_points(logs: pl.DataFrame | None) -> list[tuple[datetime, int]]:
    """(time, step) of every timed checkpoint save a framework logged with its step (the first line
    of each step), in time order."""
    if logs is None or not logs.height or not set(logs.columns) >= _COLUMNS:
        return []
    lines = logs.filter((pl.col("kind") == CHECKPOINT_KIND) & pl.col("ts").is_not_null()).tail(MAX_POINTS)
    first: dict[int, datetime] = {}
    for ts, text in zip(lines["ts"], lines["message"], strict=True):
        if (step := checkpoint_step(text)) is not None:
            first[step] = min(first.get(step, ts), ts)
    return sorted(((ts, step) for step, ts in first.items()), key=lambda p: p[0])


def nccl_world_size(logs: pl.DataFrame | None, until: datetime) -> int | None:
    """The job's world size at ``until``: the largest ``nranks`` of NCCL's init lines of the last
    launch before it (module docstring); None when the logs hold none."""
    if logs is None or not logs.height or not set(logs.columns) >= _COLUMNS:
        return None
    lines = logs.filter(
        (pl.col("kind") == "nccl_info")
        & pl.col("ts").is_not_null()
        & (pl.col("ts") <= until)
        & pl.col("message").str.contains(" nranks ", literal=True)
    )
    if not lines.height:
        return None
    last = lines["ts"].max()
    assert isinstance(last, datetime)
    sizes = [
        int(m.group(1))
        for ts, text in zip(lines["ts"], lines["message"], strict=True)
        if (last - ts).total_seconds() <= INIT_BURST_S and (m := _NRANKS.search(text))
    ]
    return max(sizes) if sizes else None


__all__ = ["STEP_KINDS", "checkpoint_points", "nccl_world_size", "step_points"]
