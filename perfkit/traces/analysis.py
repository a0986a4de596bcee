"""The whole analysis of one trace file or a folder of ranks: trimming, then per rank the
temporal breakdown, overlap, kernel types, top kernels, idle breakdown, launch delays and steps,
and stragglers across ranks. ``analyze("traces/")`` is the entry point; ``as_dict()`` is what
``perfkit trace --format json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.traces.breakdown import (
    IDLE_KERNEL_CATS,
    SWEPT_TYPES,
    GpuIdle,
    KernelStat,
    StreamIdle,
    Temporal,
    gpu_idle,
    idle_breakdown,
    temporal,
    top_kernels,
    type_times,
    types_of,
)
from perfkit.traces.files import trace_phases
from perfkit.traces.read import STEP_MARK, Columns, RankTrace, read_traces
from perfkit.traces.steps import (
    STEP_RE,
    CommKernels,
    LaunchStats,
    Step,
    Stragglers,
    launch_stats,
    profiler_steps,
    stragglers,
)


@dataclass
class RankReport:
    """Everything computed for one rank."""

    rank: int
    file: str
    device: str | None
    events: int
    gpu_events: int
    temporal: Temporal | None
    kernel_types: dict[str, float]
    top_kernels: list[KernelStat]
    idle: list[StreamIdle]
    launch: LaunchStats
    steps: list[Step]
    notes: list[str] = field(default_factory=list)
    gpu_idle: GpuIdle | None = None

    def as_dict(self) -> dict[str, object]:
        empty = dict.fromkeys(
            (
                "kernel_time_us",
                "idle_us",
                "compute_us",
                "non_compute_us",
                "idle_pct",
                "compute_pct",
                "non_compute_pct",
                "comm_comp_overlap_pct",
            )
        )
        total = {
            k: sum(getattr(s, k) for s in self.idle) for k in ("host_wait_us", "kernel_wait_us", "other_us")
        }
        loader = sum(s.dataloader_us for s in self.steps)
        step_time = sum(s.dur_us for s in self.steps)
        return {
            "rank": self.rank,
            **(self.temporal.as_dict() if self.temporal else empty),
            "file": self.file,
            "device": self.device,
            "events": self.events,
            "gpu_events": self.gpu_events,
            "idle_breakdown": {**total, "streams": [s.as_dict() for s in self.idle]},
            "gpu_idle_by_cause": self.gpu_idle.as_dict() if self.gpu_idle else None,
            "kernel_types_us": self.kernel_types,
            "top_kernels": [k.as_dict() for k in self.top_kernels],
            "launch": self.launch.as_dict(),
            "steps": [s.as_dict() for s in self.steps],
            "dataloader_us": loader,
            "dataloader_pct": round(100.0 * loader / step_time, 2) if step_time > 0 else None,
            "notes": self.notes,
        }


@dataclass
class TraceReport:
    """The analysis of every rank under one path."""

    path: str
    whole_trace: bool
    ranks: list[RankReport]
    stragglers: Stragglers
    notes: list[str] = field(default_factory=list)
    hta_compat: bool = False

    def kernel_types(self) -> dict[str, dict[str, float]]:
        """Kernel-type times summed over ranks with their share of the total (HTA's pie)."""
        summed: dict[str, float] = {}
        for r in self.ranks:
            for k, v in r.kernel_types.items():
                summed[k] = summed.get(k, 0.0) + v
        total = sum(summed.values())
        return {
            k: {"us": v, "pct": round(100.0 * v / total, 2)}
            for k, v in sorted(summed.items(), key=lambda kv: -kv[1])
            if total
        }

    def as_dict(self) -> dict[str, object]:
        return {
            "ranks": [r.as_dict() for r in self.ranks],
            "kernel_types": self.kernel_types(),
            "stragglers": self.stragglers.as_dict(),
            "path": self.path,
            "whole_trace": self.whole_trace,
            "kernel_classes": "HTA 0.5.0 (--hta-compat)"
            if self.hta_compat
            else "HTA 0.5.0 plus the communication kernels it does not know (docs/traces.md)",
            "trimming": "none (whole trace)"
            if self.whole_trace
            else "GPU work launched before the last ProfilerStep (HTA's default)",
            "notes": self.notes,
        }


def _step_names(traces: list[RankTrace]) -> set[str]:
    found = set()
    for t in traces:
        for col in (t.marks, t.device):
            for nid in np.unique(col["name"]):
                if STEP_MARK in t.names[nid]:
                    found.add(t.names[nid])
    return found


def trim(t: RankTrace) -> tuple[RankTrace, str]:
    """HTA's default (``Trace._filter_irrelevant_gpu_kernels``): keep CPU events that start
    before the last ProfilerStep starts, and the GPU events whose launch (same correlation id) is
    among them; an event with a stream but no usable correlation is kept by its own start."""
    is_step = np.array([STEP_MARK in t.names[n] for n in t.marks["name"]], dtype=bool)
    if not is_step.any():
        return t, "no ProfilerStep in this rank: nothing trimmed"
    last = float(t.marks["ts"][is_step].max())
    host = t.host.take(t.host["ts"] < last)
    d = t.device
    keep = np.where(d["passes"], np.isin(d["corr"], host["corr"]), d["ts"] < last)
    trimmed = RankTrace(
        t.path,
        t.rank,
        t.meta,
        t.names,
        t.cats,
        d.take(keep),
        host,
        t.marks.take(t.marks["ts"] < last),
        t.events,
        t.notes,
    )
    return trimmed, f"trimmed to GPU work launched before the last ProfilerStep (starts at {last:.0f} µs)"


def _runtime_ts(host: Columns, corr: np.ndarray) -> np.ndarray:
    """The start of the CPU event launching each GPU event (the last one with its correlation),
    NaN where none is known."""
    out = np.full(len(corr), np.nan)
    if len(host) == 0 or len(corr) == 0:
        return out
    rev_corr = host["corr"][::-1]
    uniq, first = np.unique(rev_corr, return_index=True)
    ts = host["ts"][::-1][first]
    pos = np.clip(np.searchsorted(uniq, corr), 0, len(uniq) - 1)
    hit = uniq[pos] == corr
    out[hit] = ts[pos[hit]]
    return out


def _step_of(ts: np.ndarray, steps: list[Step]) -> np.ndarray:
    """The step number whose [start, end) holds each time, -1 for none. Steps are in time order
    and, as the profiler writes them, do not overlap: a time belongs to the latest step starting
    at or before it if that step holds it. One binary search a time."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if not steps or len(ts) == 0:
        return out
    start = np.array([s.ts_us for s in steps])
    end = start + np.array([s.dur_us for s in steps])
    num = np.array([s.step for s in steps], dtype=np.int64)
    with np.errstate(invalid="ignore"):
        i = np.searchsorted(start, ts, side="right") - 1  # NaN sorts last: i = last, then end test fails
        ok = (i >= 0) & (ts < end[np.maximum(i, 0)])
    out[ok] = num[i[ok]]
    return out


def analyze_rank(
    t: RankTrace, notes: list[str], *, hta_compat: bool = False
) -> tuple[RankReport, CommKernels]:
    d = t.device
    ts, dur = d["ts"], d["dur"]
    end = ts + dur
    ktype = types_of(t.names, d["name"], hta_compat=hta_compat)
    tmp = temporal(ts, end, ktype)
    if tmp is None:
        notes.append("no GPU events (kernels, memcpy, memset): nothing to break down")
    elif tmp.kernel_time_us == 0:
        notes.append(f"the {len(d)} GPU events span no time (all zero-length): no shares to give")
    runtime = _runtime_ts(t.host, d["corr"])
    idle_sel = np.array([c in IDLE_KERNEL_CATS for c in t.cats] or [False], dtype=bool)[d["cat"]]
    if idle_sel.all():  # the usual case: no copies
        idle = idle_breakdown(ts, dur, d["stream"], runtime)
    else:
        idle = (
            idle_breakdown(ts[idle_sel], dur[idle_sel], d["stream"][idle_sel], runtime[idle_sel])
            if idle_sel.any()
            else []
        )
    swept = np.isin(ktype, SWEPT_TYPES)
    kernels = top_kernels(t.names, d["name"][swept], dur[swept], ktype[swept])
    launch = launch_stats(t.names, t.host.data, d.data)
    steps = profiler_steps(t.names, t.cats, t.marks.data)
    step_of = np.where(d["stream"] > 0, _step_of(runtime, steps), -1)
    in_steps = step_of > 0
    host_step = _step_of(t.host["ts"], steps)
    ends = [s.ts_us + s.dur_us for s in steps]
    if in_steps.any():
        ends.append(float(end[in_steps].max()))
    if (host_step > 0).any():
        ends.append(float((t.host["ts"] + t.host["dur"])[host_step > 0].max()))
    comm = CommKernels(
        t.rank,
        t.names,
        d["name"],
        d["stream"],
        step_of,
        ts,
        dur,
        d["order"],
        min((s.ts_us for s in steps), default=None),
        max(ends, default=None),
    )
    report = RankReport(
        rank=t.rank,
        file=t.path,
        device=t.device_name,
        events=t.events,
        gpu_events=len(d),
        temporal=tmp,
        kernel_types=type_times(ts, end, ktype),
        top_kernels=kernels,
        idle=idle,
        launch=launch,
        steps=steps,
        notes=notes,
        gpu_idle=gpu_idle(ts, end, runtime),
    )
    return report, comm


def analyze_traces(
    traces: list[RankTrace],
    *,
    path: str = "",
    whole_trace: bool = False,
    num_candidates: int = 2,
    hta_compat: bool = False,
) -> TraceReport:
    """Analyse ranks already read (see :func:`perfkit.traces.read.read_traces`). ``hta_compat``
    types kernels exactly as HTA 0.5.0 (only ``^nccl.*Kernel`` is communication)."""
    notes: list[str] = []
    step_names = _step_names(traces)
    trimming = not whole_trace and len(step_names) >= 2
    if not whole_trace and not step_names:
        notes.append("no ProfilerStep in the trace: the whole trace is analysed (HTA warns the same)")
    elif not whole_trace and len(step_names) == 1:
        notes.append("one ProfilerStep only: nothing trimmed (HTA's rule)")
    reports, comms = [], []
    for t in traces:
        rank_notes = list(t.notes)
        if trimming:
            t, why = trim(t)
            rank_notes.append(why)
        report, comm = analyze_rank(t, rank_notes, hta_compat=hta_compat)
        reports.append(report)
        comms.append(comm)
    steps = sorted({s.step for r in reports for s in r.steps})
    return TraceReport(
        path, whole_trace, reports, stragglers(comms, steps, num_candidates), notes, hta_compat
    )


def analyze(
    path: str | Path, *, whole_trace: bool = False, num_candidates: int = 2, hta_compat: bool = False
) -> TraceReport:
    """Read and analyse a trace file or a folder with one trace per rank.

    ``whole_trace=False`` applies HTA's trimming (only GPU work launched before the last
    ``ProfilerStep`` starts, which is usually cut off by the profiler's stop); ``True`` keeps every
    event. ``hta_compat=True`` classifies kernels exactly as HTA 0.5.0 (docs/traces.md)."""
    return analyze_traces(
        read_traces(path),
        path=str(path),
        whole_trace=whole_trace,
        num_candidates=num_candidates,
        hta_compat=hta_compat,
    )


def analyze_phases(path: str | Path, **options: Any) -> dict[str, TraceReport]:
    """Every phase of a folder of phases (a bundle's ``traces/`` with ``baseline/``,
    ``incident/`` ...: one profiled run each), analysed separately, by name; for a folder of
    ranks or a file, ``{"": analyze(path)}``. ``options`` are :func:`analyze`'s."""
    phases = trace_phases(path)
    if not phases:
        return {"": analyze(path, **options)}
    return {name: analyze(folder, **options) for name, folder in phases.items()}


__all__ = [
    "STEP_RE",
    "RankReport",
    "TraceReport",
    "analyze",
    "analyze_phases",
    "analyze_rank",
    "analyze_traces",
    "trim",
]
