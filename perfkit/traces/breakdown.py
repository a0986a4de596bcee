"""Per-rank GPU time: temporal breakdown, communication/computation overlap, kernel types and top
kernels, idle-time breakdown per stream. Definitions are Holistic Trace Analysis' (HTA 0.5.0,
``hta/analyzers/breakdown_analysis.py`` and ``communication_analysis.py``; written out in
``docs/traces.md``), computed with vectorised interval arithmetic on numpy arrays.

All times are µs. "GPU events" are the rank's events with a stream (``stream != -1``) that
survived trimming (:func:`perfkit.traces.trim.trim`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# HTA 0.5.0 hta/utils/utils.py: get_kernel_type tries these in order (re.match: anchored at the start)
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
COMPUTATION, COMMUNICATION, MEMORY, OTHER = "COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"
#: communication kernels HTA 0.5.0 does not know (it counts them as COMPUTATION): (what, pattern
#: searched anywhere in the demangled name, where the name comes from upstream). docs/traces.md
#: lists them; ``hta_compat=True`` turns them off.
COMM_PATTERNS: tuple[tuple[str, str, str], ...] = (
    (
        "RCCL MSCCL",
        r"^mscclKernel_",
        "RCCL src/include/msccl/msccl_kernel.h: mscclKernel_<op>_<type>_<proto>",
    ),
    (
        "HCCL",
        r"^hccl",
        "HTA's successor traceinsight (PyPI) counts ^hccl names as communication (HCCL: Huawei's collectives)",
    ),
    (
        "PyTorch symmetric memory (NVLS multimem)",
        r"\b(multimem_\w+_kernel|one_shot_all_reduce_kernel|two_shot_all_reduce_kernel)\b",
        "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu: multimem_all_reduce_kernel, "
        "multimem_one_shot_reduce_kernel, multimem_all_gather_kernel, one_shot_all_reduce_kernel, "
        "two_shot_all_reduce_kernel",
    ),
    (
        "DeepEP dispatch/combine",
        r"\b(deep_ep|dpsk::ep|nccl_ep)::(internode|intranode|internode_ll)::",
        "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu (namespace deep_ep::<mode>: "
        "dispatch, combine, notify_dispatch, cached_notify, clean_low_latency_buffer); DeepSeek's own "
        "profiles write dpsk::ep::internode::dispatch",
    ),
    (
        "vLLM custom all-reduce",
        r"\bcross_device_reduce_(1|2)stage\b",
        "vllm csrc/custom_all_reduce.cuh: vllm::cross_device_reduce_1stage / _2stage",
    ),
    (
        "NVSHMEM on-stream collectives",
        r"\b\w+_on_stream_kernel\w*|\bnvshmemi?x?_\w+",
        "NVIDIA nvshmem src/device/coll/*: barrier_on_stream_kernel*, sync_on_stream_kernel*, "
        "<coll>_on_stream_kernel (launched by nvshmemx_*_on_stream)",
    ),
)
_COMM_EXTRA = re.compile("|".join(f"(?:{p})" for _, p, _ in COMM_PATTERNS))
#: the order HTA sweeps kernel types in, which is also the order of "A overlapping B" labels
SWEPT_TYPES = (COMPUTATION, COMMUNICATION, MEMORY)
#: HTA's get_idle_time_breakdown default: a gap shorter than this (µs, the trace's unit) between
#: kernels on one stream that the CPU had already launched is launch overhead ("kernel wait")
CONSECUTIVE_KERNEL_DELAY_US = 30.0
#: categories of the GPU events the idle breakdown walks (HTA's ``kernel_cats``; not cuda_sync)
IDLE_KERNEL_CATS = frozenset(
    {"kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events"}
)


def kernel_type(name: str, *, hta_compat: bool = False) -> str:
    """COMMUNICATION, MEMORY, COMPUTATION or OTHER, by HTA 0.5.0's name patterns; unless
    ``hta_compat``, the kernels of :data:`COMM_PATTERNS` are COMMUNICATION too."""
    if _COMM.match(name) or (not hta_compat and _COMM_EXTRA.search(name)):
        return COMMUNICATION
    if _MEMORY.match(name):
        return MEMORY
    if not _NOT_COMPUTE.match(name):
        return COMPUTATION
    return OTHER


def merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's ``merge_kernel_intervals``: sort by start; an interval that starts after every earlier
    end opens a new group; each group becomes [its first start, its last end]."""
    if len(ts) == 0:
        return ts, end
    order = np.argsort(ts, kind="stable")
    t, e = ts[order], end[order]
    new = np.ones(len(t), dtype=bool)
    new[1:] = t[1:] > np.maximum.accumulate(e)[:-1]
    first = np.flatnonzero(new)
    return t[first], np.maximum.reduceat(e, first)


def covered(ts: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of the intervals (HTA: sum of merged ends minus merged starts)."""
    s, e = merge(ts, end)
    return float((e - s).sum())  # per group: epoch-µs sums would lose float64 precision


def overlap_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Time during which both merged interval sets are active (HTA's ±1/±2 sweep, running == 3)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0.0
    times = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate(
        [np.full(len(a[0]), 1), np.full(len(a[1]), -1), np.full(len(b[0]), 2), np.full(len(b[1]), -2)]
    )
    order = np.argsort(times, kind="stable")
    times, running = times[order], np.cumsum(delta[order])
    return float(np.diff(times)[running[:-1] == 3].sum())


@dataclass
class Temporal:
    """HTA's temporal breakdown of one rank (µs)."""

    kernel_time_us: float  # last GPU event end - first GPU event start
    idle_us: float  # kernel time with no GPU event on any stream
    compute_us: float  # union of COMPUTATION kernels (compute overlapping communication counts here)
    non_compute_us: float  # the rest: only communication, memory or other kernels running
    comm_comp_overlap_pct: float | None  # share of communication time hidden under compute

    def pct(self, value: float) -> float | None:
        return round(100.0 * value / self.kernel_time_us, 2) if self.kernel_time_us else None

    def as_dict(self) -> dict[str, float | None]:
        return {
            "kernel_time_us": self.kernel_time_us,
            "idle_us": self.idle_us,
            "compute_us": self.compute_us,
            "non_compute_us": self.non_compute_us,
            "idle_pct": self.pct(self.idle_us),
            "compute_pct": self.pct(self.compute_us),
            "non_compute_pct": self.pct(self.non_compute_us),
            "comm_comp_overlap_pct": self.comm_comp_overlap_pct,
        }


def types_of(names: list[str], ids: np.ndarray, *, hta_compat: bool = False) -> np.ndarray:
    """The kernel type of each event (by its name id), as an array of strings."""
    table = np.array([kernel_type(n, hta_compat=hta_compat) for n in names] or [OTHER], dtype=object)
    return table[ids] if len(ids) else np.zeros(0, dtype=object)


def temporal(ts: np.ndarray, end: np.ndarray, ktype: np.ndarray) -> Temporal | None:
    """The temporal breakdown and comm/comp overlap over GPU events; None without any."""
    if len(ts) == 0:
        return None
    s, e = merge(ts, end)
    kernel_time = float(e[-1] - s[0])
    idle = kernel_time - float((e - s).sum())
    comp = merge(ts[ktype == COMPUTATION], end[ktype == COMPUTATION])
    comm = merge(ts[ktype == COMMUNICATION], end[ktype == COMMUNICATION])
    compute = float((comp[1] - comp[0]).sum())
    comm_time = float((comm[1] - comm[0]).sum())
    overlap = round(100.0 * overlap_length(comm, comp) / comm_time, 2) if comm_time else None
    # with non-negative intervals (perfkit.traces.read clamps them) the union of compute lies in
    # the union of all, which lies in the span: every share is in [0, 100]; max() only absorbs
    # float rounding of µs converted from ns
    non_compute = max(0.0, kernel_time - compute - idle)
    return Temporal(kernel_time, max(0.0, idle), compute, non_compute, overlap)


def type_times(ts: np.ndarray, end: np.ndarray, ktype: np.ndarray) -> dict[str, float]:
    """Time (µs) each kernel type, and each combination of them, runs alone on the rank: HTA's
    ``kernel_type_df`` (types merged separately, a bitmask swept over the timeline)."""
    times, deltas = [], []
    for bit, kind in enumerate(SWEPT_TYPES):
        s, e = merge(ts[ktype == kind], end[ktype == kind])
        times += [s, e]
        deltas += [np.full(len(s), 1 << bit, np.int8), np.full(len(e), -(1 << bit), np.int8)]
    t = np.concatenate(times)
    if len(t) == 0:
        return {}
    order = np.argsort(t, kind="stable")
    t = t[order]
    running = np.cumsum(np.concatenate(deltas)[order], dtype=np.int8)  # a bitmask of 3 types: < 8
    del order
    seg = np.diff(t)
    out: dict[str, float] = {}
    for mask in np.unique(running[:-1]):
        if mask <= 0:
            continue
        label = " overlapping ".join(k for bit, k in enumerate(SWEPT_TYPES) if int(mask) & (1 << bit))
        total = float(seg[running[:-1] == mask].sum())
        if total:
            out[label] = out.get(label, 0.0) + total
    return out


@dataclass
class KernelStat:
    name: str
    kernel_type: str
    count: int
    sum_us: float
    mean_us: float
    min_us: float
    max_us: float
    std_us: float

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def top_kernels(
    names: list[str],
    ids: np.ndarray,
    dur: np.ndarray,
    ktype: np.ndarray,
    *,
    duration_ratio: float = 0.8,
    num_kernels: int = 10,
) -> list[KernelStat]:
    """Per type (COMPUTATION, COMMUNICATION, MEMORY): kernels by total time, HTA's selection: when
    a type has more than ``num_kernels`` names, those past the first ``num_kernels`` or whose
    running total exceeds the ``duration_ratio`` quantile of the running totals are summed into
    one ``others`` row (its count, mean, min and max are over the kernels it folds)."""
    out: list[KernelStat] = []
    for kind in SWEPT_TYPES:
        sel = ktype == kind
        if not sel.any():
            continue
        uid, inv = np.unique(ids[sel], return_inverse=True)
        d = dur[sel]
        count = np.bincount(inv)
        total = np.bincount(inv, weights=d)
        mean = total / count
        sq = np.bincount(inv, weights=(d - mean[inv]) ** 2)
        std = np.sqrt(np.where(count > 1, sq / np.maximum(count - 1, 1), 0.0))
        mn = np.full(len(uid), np.inf)
        mx = np.full(len(uid), -np.inf)
        np.minimum.at(mn, inv, d)
        np.maximum.at(mx, inv, d)
        order = np.argsort(-total, kind="stable")
        keep = np.ones(len(order), dtype=bool)
        if len(order) > num_kernels:
            cum = np.cumsum(total[order])
            keep = (cum <= np.quantile(cum, duration_ratio)) & (np.arange(len(order)) < num_kernels)
        for i in order[keep]:
            out.append(
                KernelStat(
                    names[uid[i]],
                    kind,
                    int(count[i]),
                    float(total[i]),
                    float(mean[i]),
                    float(mn[i]),
                    float(mx[i]),
                    float(std[i]),
                )
            )
        rest = order[~keep]
        if len(rest):
            n = int(count[rest].sum())
            s = float(total[rest].sum())
            rest_d = d[np.isin(inv, rest)]
            out.append(
                KernelStat(
                    "others",
                    kind,
                    n,
                    s,
                    s / n,
                    float(rest_d.min()),
                    float(rest_d.max()),
                    float(rest_d.std(ddof=1)) if n > 1 else 0.0,
                )
            )
    return out


@dataclass
class StreamIdle:
    stream: int
    host_wait_us: float
    kernel_wait_us: float
    other_us: float

    def as_dict(self) -> dict[str, float | int]:
        return dict(self.__dict__)


def idle_breakdown(
    ts: np.ndarray,
    dur: np.ndarray,
    stream: np.ndarray,
    runtime_ts: np.ndarray,
    *,
    delay: float = CONSECUTIVE_KERNEL_DELAY_US,
) -> list[StreamIdle]:
    """HTA's idle-time breakdown, per stream: each gap before a kernel is *host wait* when the
    kernel's CPU launch came after the previous kernel ended (the CPU was not enqueuing fast
    enough), else *kernel wait* when shorter than ``delay`` (launch overhead), else *other*
    (waits on other streams, synchronisation). ``runtime_ts`` is NaN where no launch is known.
    One sort by (stream, start): linear after it, whatever the number of streams."""
    if len(ts) == 0:
        return []
    # one sort by (stream, start), then only the arrays still needed are kept (a few bytes an
    # event above the input: this runs on millions of events)
    order = np.lexsort((ts, stream))  # by stream, then start; stable like HTA's sort
    s = stream[order]
    t = ts[order]
    prev_end = t[:-1] + dur[order[:-1]]
    rt = runtime_ts[order[1:]]
    del order
    gap = t[1:] - prev_end
    del t
    same = s[1:] == s[:-1]  # a gap is between two kernels of one stream
    with np.errstate(invalid="ignore"):
        host = same & (rt > prev_end)
    del rt, prev_end
    kernel = same & ~host & (gap < delay)
    other = same & ~host & ~kernel
    new_stream = ~same
    del same
    streams = s[np.concatenate([[0], np.flatnonzero(new_stream) + 1])]
    group = np.cumsum(new_stream)  # gap j lies after kernel j: the number of streams before it
    del new_stream
    sums = []
    for kind in (host, kernel, other):
        sums.append(np.bincount(group[kind], weights=gap[kind], minlength=len(streams)))
    return [
        StreamIdle(int(sid), float(sums[0][k]), float(sums[1][k]), float(sums[2][k]))
        for k, sid in enumerate(streams)
    ]


@dataclass
class GpuIdle:
    """The rank's GPU idle time (no GPU event on any stream, ``Temporal.idle_us``) by cause, µs:
    each gap between busy periods is *host wait* when the event that ends it was launched by the
    CPU after the gap began, else *kernel wait* when shorter than the launch-overhead delay, else
    *other*. The three add up to the idle time (HTA's per-stream rule on the merged timeline)."""

    host_wait_us: float
    kernel_wait_us: float
    other_us: float

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def gpu_idle(
    ts: np.ndarray, end: np.ndarray, runtime_ts: np.ndarray, *, delay: float = CONSECUTIVE_KERNEL_DELAY_US
) -> GpuIdle | None:
    """:class:`GpuIdle` over all GPU events (start, end, and the CPU launch start or NaN); None
    without any."""
    if len(ts) == 0:
        return None
    order = np.argsort(ts, kind="stable")
    t, e, rt = ts[order], end[order], runtime_ts[order]
    reach = np.maximum.accumulate(e)
    new = np.zeros(len(t), dtype=bool)
    new[1:] = t[1:] > reach[:-1]  # this event starts a busy period after a gap
    idx = np.flatnonzero(new)
    gap_start = reach[idx - 1]
    gap = t[idx] - gap_start
    # a busy period starts with its earliest event; ties: any of them launched late makes it host wait
    with np.errstate(invalid="ignore"):
        host = rt[idx] > gap_start
    kernel = ~host & (gap < delay)
    other = ~host & ~kernel
    return GpuIdle(float(gap[host].sum()), float(gap[kernel].sum()), float(gap[other].sum()))
