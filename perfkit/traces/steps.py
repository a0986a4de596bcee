"""CPU-side views of a rank: kernel-launch delays, the data-loader wait of each profiler step, and
stragglers across ranks (Holistic Trace Analysis 0.5.0 definitions:
``hta/analyzers/cuda_kernel_analysis.py::cuda_kernel_launch_stats`` and
``hta/analyzers/straggler.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

#: the CUDA runtime calls HTA joins to GPU events for launch statistics (cudaLaunchKernel,
#: cudaLaunchKernelExC, cudaMemcpyAsync, cudaMemsetAsync, MTIA's runFunction)
LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "runFunction - job_prep_and_submit_for_execution",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
    }
)
#: HTA's outlier cut-offs (get_cuda_kernel_launch_stats defaults, µs): a CUDA runtime call longer
#: than 50 µs is an outlier (a launch is ~5-10 µs); a kernel starting more than 100 µs after its
#: launch returned was queued behind other work
RUNTIME_CUTOFF_US = 50.0
LAUNCH_DELAY_CUTOFF_US = 100.0
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d{1,18})(?!\d)")  # a step number fits in int64
#: a communication kernel shorter than this share of the mean step is not a straggler signal
#: (HTA's min_normalized_duration)
MIN_NORMALIZED_DURATION = 0.01


@dataclass
class LaunchStats:
    """CPU launch call joined to its GPU event on the correlation id (µs)."""

    count: int
    launch_delay_mean_us: float | None
    launch_delay_p50_us: float | None
    launch_delay_p95_us: float | None
    launch_delay_max_us: float | None
    launch_delay_sum_us: float
    launch_delay_over_cutoff: int  # kernels that started > 100 µs after their launch returned
    runtime_over_cutoff: int  # launch calls that took > 50 µs on the CPU
    short_gpu_kernels: int  # kernels shorter than their (normal-length) launch call

    def as_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


def launch_stats(
    host_name: list[str],
    host: dict[str, np.ndarray],
    dev: dict[str, np.ndarray],
) -> LaunchStats:
    """HTA's ``cuda_kernel_launch_stats``: launch delay = GPU start - (CPU launch start + its
    duration), clipped at 0. ``host``/``dev`` are columns (name, ts, dur, corr, stream)."""
    is_launch = np.array([n in LAUNCH_NAMES for n in host_name], dtype=bool)
    launch_corr = np.unique(
        host["corr"][is_launch[host["name"]]] if len(host["name"]) else np.zeros(0, np.int64)
    )
    cpu = (host["stream"] == -1) & np.isin(host["corr"], launch_corr)
    gpu = np.isin(dev["corr"], launch_corr)
    c_corr, c_ts, c_dur = host["corr"][cpu], host["ts"][cpu], host["dur"][cpu]
    g_corr, g_ts, g_dur = dev["corr"][gpu], dev["ts"][gpu], dev["dur"][gpu]
    order = np.argsort(c_corr, kind="stable")
    c_corr, c_ts, c_dur = c_corr[order], c_ts[order], c_dur[order]
    lo = np.searchsorted(c_corr, g_corr, side="left")
    hi = np.searchsorted(c_corr, g_corr, side="right")
    n = hi - lo
    g_idx = np.repeat(np.arange(len(g_corr)), n)
    c_idx = np.repeat(lo, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    cpu_dur, gpu_dur = c_dur[c_idx], g_dur[g_idx]
    delay = np.clip(g_ts[g_idx] - c_ts[c_idx] - cpu_dur, 0, None)
    if len(delay) == 0:
        return LaunchStats(0, None, None, None, None, 0.0, 0, 0, 0)
    return LaunchStats(
        count=len(delay),
        launch_delay_mean_us=float(delay.mean()),
        launch_delay_p50_us=float(np.percentile(delay, 50)),
        launch_delay_p95_us=float(np.percentile(delay, 95)),
        launch_delay_max_us=float(delay.max()),
        launch_delay_sum_us=float(delay.sum()),
        launch_delay_over_cutoff=int((delay > LAUNCH_DELAY_CUTOFF_US).sum()),
        runtime_over_cutoff=int((cpu_dur > RUNTIME_CUTOFF_US).sum()),
        short_gpu_kernels=int(((cpu_dur <= RUNTIME_CUTOFF_US) & (gpu_dur < cpu_dur)).sum()),
    )


@dataclass
class Step:
    """One ``ProfilerStep#N`` on the CPU and the ``enumerate(DataLoader)`` time inside it."""

    step: int
    ts_us: float
    dur_us: float
    dataloader_us: float
    dataloader_calls: int

    @property
    def dataloader_pct(self) -> float | None:
        return round(100.0 * self.dataloader_us / self.dur_us, 2) if self.dur_us > 0 else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {**self.__dict__, "dataloader_pct": self.dataloader_pct}


def profiler_steps(names: list[str], cats: list[str], marks: dict[str, np.ndarray]) -> list[Step]:
    """The CPU ``ProfilerStep#N`` ranges (not their ``gpu_user_annotation`` copies) in time order,
    each with the summed duration of the data-loader calls (``enumerate(DataLoader)#...__next__``,
    PyTorch's record_function around fetching a batch) that start inside it."""
    steps, loader = [], []
    for i, (nid, cid) in enumerate(zip(marks["name"], marks["cat"], strict=True)):
        name = names[nid]
        if name.startswith("enumerate(DataLoader)"):
            loader.append(i)
        elif cats[cid] != "gpu_user_annotation" and (m := STEP_RE.match(name)):
            steps.append((float(marks["ts"][i]), float(marks["dur"][i]), int(m.group(1))))
    lt = marks["ts"][loader]
    ld = marks["dur"][loader]
    by = np.argsort(lt, kind="stable")  # the loader calls by start: a step's are one run of them
    lt, ld = lt[by], ld[by]
    steps.sort()
    starts = np.array([t for t, _, _ in steps])
    ends = starts + np.array([d for _, d, _ in steps])
    lo, hi = np.searchsorted(lt, starts, side="left"), np.searchsorted(lt, ends, side="left")
    return [
        Step(num, ts, dur, float(ld[a:b].sum()), int(b - a))
        for (ts, dur, num), a, b in zip(steps, lo.tolist(), hi.tolist(), strict=True)
    ]


@dataclass
class Stragglers:
    """HTA's late-start straggler detection across ranks."""

    ranks: list[int]  # the flagged ranks, most often flagged first
    kernel: str | None = None  # the communication kernel whose start is compared
    stream: int | None = None
    counts: dict[int, int] = field(default_factory=dict)  # rank -> steps it was flagged in
    start_by_step: dict[int, dict[int, float]] = field(
        default_factory=dict
    )  # step -> rank -> start/mean step
    note: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "ranks": self.ranks,
            "kernel": self.kernel,
            "stream": self.stream,
            "counts": {str(k): v for k, v in self.counts.items()},
            "normalized_start_by_step": {
                str(s): {str(r): round(v, 6) for r, v in by.items()} for s, by in self.start_by_step.items()
            },
            "note": self.note,
        }


@dataclass
class CommKernels:
    """One rank's GPU events with the step each was launched in (the inputs of the straggler
    detection), plus the extent of its stepped events for the mean step time. ``name`` holds ids
    into ``names``."""

    rank: int
    names: list[str]
    name: np.ndarray
    stream: np.ndarray
    step: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    order: np.ndarray
    first_ts: float | None
    last_end: float | None


NCCL_KERNELS = ("ncclKernel", "ncclDevKernel")


def stragglers(ranks: list[CommKernels], steps: list[int], num_candidates: int = 2) -> Stragglers:
    """HTA's ``find_stragglers_with_late_start_comm_kernels``: over the given steps, keep NCCL
    kernels (names starting ``ncclKernel``, or ``ncclDevKernel`` as NCCL 2.19 and later name them:
    HTA 0.5.0 knows only the first) longer than 1 % of the mean step; take the last such
    kernel per (rank, stream, step, name); pick the (stream, name) whose duration varies most
    across ranks; in each step flag the ``num_candidates`` ranks that start it latest."""
    if len(ranks) < 2:
        return Stragglers([], note="one rank: stragglers need two or more")
    if not steps:
        return Stragglers([], note="no complete ProfilerStep: stragglers are found per step")
    firsts = [r.first_ts for r in ranks if r.first_ts is not None]
    lasts = [r.last_end for r in ranks if r.last_end is not None]
    if not firsts or not lasts:
        return Stragglers([], note="no events inside the profiler steps")
    t_min = min(firsts)
    mean_step = (max(lasts) - t_min) / len(steps)
    rows: dict[tuple[int, str], dict[int, dict[int, tuple[float, float]]]] = {}
    for r in ranks:
        ok = (
            (r.stream > 0)
            & (r.step > 0)
            & np.isin(r.step, steps)
            & (r.dur >= mean_step * MIN_NORMALIZED_DURATION)
        )
        if len(r.name):
            nccl = np.array([n.startswith(NCCL_KERNELS) for n in r.names] or [False], dtype=bool)
            ok &= nccl[r.name]
        last: dict[tuple[int, str, int], tuple[int, float, float]] = {}
        for i in np.flatnonzero(ok):
            at = (int(r.stream[i]), r.names[r.name[i]], int(r.step[i]))
            if at not in last or r.order[i] > last[at][0]:
                last[at] = (int(r.order[i]), float(r.ts[i]), float(r.dur[i]))
        for (stream, name, step), (_, ts, dur) in last.items():
            rows.setdefault((stream, name), {}).setdefault(step, {})[r.rank] = (
                (ts - t_min) / mean_step,
                dur / mean_step,
            )
    best: tuple[int, str] | None = None
    best_std = -1.0
    for key, by_step in rows.items():
        stds = [float(np.std([d for _, d in v.values()], ddof=1)) for v in by_step.values() if len(v) > 1]
        if stds and float(np.mean(stds)) > best_std:
            best, best_std = key, float(np.mean(stds))
    if best is None:
        return Stragglers([], note="no communication kernel longer than 1 % of a step on two or more ranks")
    k = max(1, num_candidates)
    counts = {r.rank: 0 for r in ranks if any(r.rank in v for v in rows[best].values())}
    starts = {}
    for step, by_rank in sorted(rows[best].items()):
        values = sorted((s for s, _ in by_rank.values()), reverse=True)
        threshold = values[min(k, len(values)) - 1]
        for rank, (s, _) in by_rank.items():
            counts[rank] += int(s >= threshold)
        starts[step] = {rank: s for rank, (s, _) in sorted(by_rank.items())}
    flagged = sorted((r for r in counts if counts[r] > 0), key=lambda r: (-counts[r], r))[:k]
    note = None
    if len(counts) <= k:
        note = f"only {len(counts)} ranks for {k} candidates: every rank is flagged (a straggler needs more ranks)"
    return Stragglers(flagged, best[1], best[0], counts, starts, note)
