"""Read PyTorch profiler (Kineto) traces, one file per rank, into compact numpy columns.

Only what the analyses use is kept, with Holistic Trace Analysis' (HTA 0.5.0,
``hta/common/trace_parser.py``) reading rules so that the numbers match it:

* an event without ``dur`` or ``cat``, or of cat ``Trace``, is dropped (``_compress_df``);
* ``stream`` and ``correlation`` come from ``args`` (default -1); a stream that is not an integer
  reads as -1 (``normalize_gpu_stream_numbers``);
* when timestamps are fractional (PyTorch >= 2.3 writes nanosecond precision as float µs), each
  event becomes ``[ceil(ts), floor(ts + dur)]`` (``round_down_time_stamps``, pytorch/pytorch#122425);
* the rank is ``distributedInfo.rank``; a file without one is rank 0 (HTA's default).

Kept per rank: *device* events (``stream != -1``: kernels, memcpy, memset, and whatever else
carries a stream), *host* events with a correlation id (CUDA runtime/driver launches, which tie a
kernel to the CPU), and *marks* (``ProfilerStep#N`` and ``enumerate(DataLoader)`` ranges). Memory
is that (a few dozen bytes an event) plus one chunk of text (:mod:`perfkit.traces.scan`).

Errors are :class:`perfkit.errors.BundleError` naming the file: a truncated or corrupt gzip
stream, a document that is not a Kineto trace, two files claiming the same rank, or ranks that
cannot be from the same run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.errors import BundleError
from perfkit.traces.breakdown import kernel_type
from perfkit.traces.files import open_text, trace_files
from perfkit.traces.scan import ScanError, ScanResult, scan_events
from perfkit.traces.steps import LAUNCH_NAMES, NCCL_KERNELS

#: distinct event names kept per rank. Real traces have hundreds to a few tens of thousands
#: (templated kernels, Triton); a hostile file could give every event its own. Past the cap a new
#: name is counted under the first name seen with the same meaning for the analyses (kernel type
#: in both classifications, launch call, sync, NCCL straggler kernel) and the report says how
#: many names were folded: memory stays bounded, the breakdown's times are unchanged.
MAX_NAMES = 100_000
#: distinct ``cat`` values kept per rank (real traces: about 20), folded the same way
MAX_CATS = 1_000
#: ``ProfilerStep`` and ``enumerate(DataLoader)`` ranges kept per rank (they keep their names:
#: the step number is in it). A profiled run records a handful of steps; past this bound the rest
#: are dropped, with a note.
MAX_MARKS = 100_000
#: timestamps above this cannot be µs since the epoch (1e17 µs is the year 5138); such a trace
#: writes nanoseconds and is converted (Chrome's trace format defines ``ts`` in µs).
NS_THRESHOLD = 1e17
#: HTA's GPU-event filter also admits these CUDA sync names (``_filter_gpu_kernels_with_cuda_sync``)
SYNC_NAMES = frozenset({"Event Sync", "Context Sync"})
STEP_MARK = "ProfilerStep"
LOADER_PREFIX = "enumerate(DataLoader)"
DEVICE_FIELDS = (
    ("name", np.int32),
    ("cat", np.int32),
    ("ts", np.float64),
    ("dur", np.float64),
    ("stream", np.int64),
    ("corr", np.int64),
    ("passes", np.bool_),
    ("order", np.int64),
)
HOST_FIELDS = (
    ("name", np.int32),
    ("ts", np.float64),
    ("dur", np.float64),
    ("corr", np.int64),
    ("stream", np.int64),
)
MARK_FIELDS = (("name", np.int32), ("cat", np.int32), ("ts", np.float64), ("dur", np.float64))


@dataclass
class Columns:
    """Parallel numpy arrays, one per field; ``name``/``cat`` are ids into the rank's tables."""

    data: dict[str, np.ndarray]

    def __getitem__(self, key: str) -> np.ndarray:
        return self.data[key]

    def __len__(self) -> int:
        first = next(iter(self.data.values()), None)
        return 0 if first is None else len(first)

    def take(self, mask: np.ndarray) -> Columns:
        return Columns({k: v[mask] for k, v in self.data.items()})


@dataclass
class RankTrace:
    """One rank's trace, reduced to what the analyses use (see the module docstring)."""

    path: str
    rank: int
    meta: dict[str, Any]
    names: list[str]
    cats: list[str]
    device: Columns  # name cat ts dur stream corr passes order
    host: Columns  # name ts dur corr stream
    marks: Columns  # name cat ts dur
    events: int = 0  # elements of traceEvents
    notes: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int | None:
        info = self.meta.get("distributedInfo")
        size = info.get("world_size") if isinstance(info, dict) else None
        return size if isinstance(size, int) else None

    @property
    def device_name(self) -> str | None:
        props = self.meta.get("deviceProperties")
        if isinstance(props, list) and props and isinstance(props[0], dict):
            name = props[0].get("name")
            return str(name) if name is not None else None
        return None

    def span(self) -> tuple[float, float] | None:
        """First start and last end over the kept events, in µs."""
        starts = [c["ts"] for c in (self.device, self.host, self.marks) if len(c)]
        if not starts:
            return None
        ends = [c["ts"] + c["dur"] for c in (self.device, self.host, self.marks) if len(c)]
        return float(min(s.min() for s in starts)), float(max(e.max() for e in ends))


_INT64 = 1 << 63


def _as_int(value: Any) -> int:
    """HTA's ``int(stream)`` with -1 for what is not an integer (or does not fit in 64 bits)."""
    if type(value) is not int:
        try:
            value = int(value)
        except (TypeError, ValueError, OverflowError):
            return -1
    return value if -_INT64 <= value < _INT64 else -1


class _Growing:
    """Columns of one kind of event, each a numpy array that doubles when full."""

    def __init__(self, fields: Sequence[tuple[str, Any]]) -> None:
        self.fields = fields
        self.n = 0
        self.data = [np.empty(0, dtype=t) for _, t in fields]

    def extend(self, rows: list[tuple[Any, ...]]) -> None:
        m = len(rows)
        if self.n + m > len(self.data[0]):
            cap = max(2 * len(self.data[0]), self.n + m, 1 << 14)
            for i, (_, t) in enumerate(self.fields):
                grown = np.empty(cap, dtype=t)
                grown[: self.n] = self.data[i][: self.n]
                self.data[i] = grown
        for i, v in enumerate(zip(*rows, strict=True)):
            self.data[i][self.n : self.n + m] = v
        self.n += m

    def columns(self) -> Columns:
        """The filled part of each column (a copy the exact size when over a quarter is unused)."""
        out = {}
        for i, (f, _) in enumerate(self.fields):
            a = self.data[i]
            out[f] = a[: self.n].copy() if self.n < 0.75 * len(a) else a[: self.n]
            self.data[i] = np.empty(0, dtype=a.dtype)  # let the big one go before the next copy
        return Columns(out)


class _Builder:
    """Accumulates one rank's events into lists per batch, then numpy arrays."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.dev: list[tuple[Any, ...]] = []
        self.host: list[tuple[Any, ...]] = []
        self.marks: list[tuple[Any, ...]] = []
        # growable numpy columns (Python lists of floats cost ~32 bytes a value, arrays 8): one
        # array per field that doubles when full, so the kept events are never held twice (many
        # small per-batch pieces would stay in the heap after being joined)
        self.cols: dict[str, _Growing] = {
            "dev": _Growing(DEVICE_FIELDS),
            "host": _Growing(HOST_FIELDS),
            "marks": _Growing(MARK_FIELDS),
        }
        self.order = 0
        self.float_ts = False
        self.ns = False
        self.no_ts = 0
        self.folded = 0  # events whose name or cat was past the caps
        self.folded_names: set[int] = set()  # name ids that stand for folded names
        self.sig_name: dict[tuple[Any, ...], int] = {}
        self.sig_cat: dict[tuple[bool, ...], int] = {}
        self.marks_dropped = 0
        self.n_marks = 0

    def name_id(self, name: str) -> int:
        """The id of ``name``, or past :data:`MAX_NAMES` of the first name with its meaning."""
        names = self.names
        sig = (
            kernel_type(name),
            kernel_type(name, hta_compat=True),
            name in LAUNCH_NAMES,
            name in SYNC_NAMES,
            name.startswith(NCCL_KERNELS),
            STEP_MARK in name,
            name.startswith(LOADER_PREFIX),
        )
        nid = self.sig_name.get(sig)
        if nid is None:  # a new meaning: its first name stands for the rest
            nid = self.sig_name[sig] = names[name] = len(names)
        self.folded += 1
        self.folded_names.add(nid)
        return nid

    def cat_id(self, cat: str) -> int:
        cats = self.cats
        if len(cats) < MAX_CATS:
            cid = cats[cat] = len(cats)
            return cid
        from perfkit.traces.breakdown import IDLE_KERNEL_CATS

        sig = (cat in IDLE_KERNEL_CATS, cat == "gpu_user_annotation")
        found = self.sig_cat.get(sig)
        if found is None:
            found = self.sig_cat[sig] = cats[cat] = len(cats)
        self.folded += 1
        return found

    def add(self, batch: list[Any]) -> None:
        """Keep what the analyses use of one batch of parsed events (the hot loop: ~1 µs an event)."""
        dev, host, marks = self.dev, self.host, self.marks
        names, cats = self.names, self.cats
        for order, e in enumerate(batch, start=self.order + 1):
            if type(e) is not dict:
                continue
            cat, dur, ts = e.get("cat"), e.get("dur"), e.get("ts")
            if cat is None or dur is None or cat == "Trace":
                continue
            if type(cat) is not str:
                cat = str(cat)
            if type(ts) is not int:
                if type(ts) is float and math.isfinite(ts):
                    self.float_ts = True
                else:
                    self.no_ts += 1
                    continue
            if type(dur) is not int and not (type(dur) is float and math.isfinite(dur)):
                continue
            if ts > NS_THRESHOLD:  # nanoseconds: to µs, exactly enough (float64 keeps 0.25 µs at 2e15)
                self.ns = True
                ts, dur = ts / 1000, dur / 1000
            name = e.get("name")
            if type(name) is not str:
                name = str(name)
            args = e.get("args")
            if type(args) is dict:
                stream, corr = args.get("stream", -1), args.get("correlation", -1)
                if type(stream) is not int or not -_INT64 <= stream < _INT64:
                    stream = _as_int(stream)
                if type(corr) is not int or not -_INT64 <= corr < _INT64:
                    corr = _as_int(corr)
            else:
                stream = corr = -1
            passes = (stream >= 0 and corr >= 0) or name in SYNC_NAMES
            is_mark = not passes and (STEP_MARK in name or name.startswith(LOADER_PREFIX))
            if stream == -1 and (passes or (corr == -1 and not is_mark)):
                continue
            if is_mark:  # marks keep their own names (the step number is in it), up to MAX_MARKS
                if self.n_marks >= MAX_MARKS:
                    self.marks_dropped += 1
                    is_mark = False
                    if stream == -1 and corr == -1:
                        continue
                else:
                    self.n_marks += 1
            nid = names.get(name)
            if nid is None:
                if is_mark or len(names) < MAX_NAMES:
                    nid = names[name] = len(names)
                else:
                    nid = self.name_id(name)
            cid = cats.get(cat)
            if cid is None:
                cid = self.cat_id(cat)
            if stream != -1:
                dev.append((nid, cid, ts, dur, stream, corr, passes, order))
            if not passes and corr != -1:
                host.append((nid, ts, dur, corr, stream))
            if is_mark:
                marks.append((nid, cid, ts, dur))
        self.order += len(batch)
        self._flush()

    def _flush(self) -> None:
        for key, rows in (("dev", self.dev), ("host", self.host), ("marks", self.marks)):
            if rows:
                self.cols[key].extend(rows)
                rows.clear()

    def build(self, path: str, rank: int, meta: dict[str, Any], events: int) -> RankTrace:
        device, host, marks = (self.cols[k].columns() for k in ("dev", "host", "marks"))
        self.cols.clear()
        notes = []
        if self.no_ts:
            notes.append(f"{self.no_ts} events without a numeric ts were skipped")
        if self.ns:
            notes.append(
                "timestamps are in ns (values above 1e17, past the year 5000 in µs); converted to µs"
            )
        negative = int((device["dur"] < 0).sum())  # as written in the file
        short = (
            int(((device["dur"] >= 0) & (device["dur"] < 1)).sum()) if self.float_ts and not self.ns else 0
        )
        if self.float_ts and not self.ns:  # HTA's round_down_time_stamps
            for c in (device, host, marks):
                end = np.floor(c["ts"] + c["dur"])
                c.data["ts"] = np.ceil(c["ts"])
                c.data["dur"] = end - c["ts"]
        notes += _clean_durations(device, host, marks, negative, short)
        if self.folded:
            notes.append(
                f"{self.folded} events had a name or category past the first {MAX_NAMES:,} names / "
                f"{MAX_CATS:,} categories of the file: each was counted under the first name of its "
                "kind (the kernel type, launch and step rules give the same answer; top_kernels shows "
                "that name)"
            )
        if self.marks_dropped:
            notes.append(
                f"{self.marks_dropped} ProfilerStep / DataLoader ranges past the first {MAX_MARKS:,} were dropped"
            )
        names = [""] * len(self.names)
        for text, i in self.names.items():
            names[i] = text
        cats = [""] * len(self.cats)
        for text, i in self.cats.items():
            cats[i] = text
        return RankTrace(path, rank, meta, names, cats, device, host, marks, events, notes)


def _clean_durations(device: Columns, host: Columns, marks: Columns, negative: int, short: int) -> list[str]:
    """Clamp negative durations to zero (in place) and say what was found: an interval that ends
    before it starts has no meaning, and left negative it subtracts from every union (HTA 0.5.0
    keeps them and reports compute above 100 %, idle and kernel time below 0)."""
    notes = []
    if short:
        notes.append(
            f"{short} GPU events shorter than 1 µs: HTA's rounding to whole µs ([ceil(ts), floor(ts + dur)]) "
            "leaves them zero-length (clamped where it made their end precede their start)"
        )
    if negative:
        notes.append(f"{negative} GPU events with a negative duration in the file: taken as zero-length")
    bad_host = 0
    for c, is_device in ((device, True), (host, False), (marks, False)):
        neg = c["dur"] < 0
        if neg.any():
            if not is_device:
                bad_host += int(neg.sum())
            c.data["dur"] = np.where(neg, 0.0, c["dur"])
    if bad_host:
        notes.append(f"{bad_host} CPU events with an end before their start: taken as zero-length")
    zero = int((device["dur"] == 0).sum()) - short - negative
    if zero > 0:
        notes.append(f"{zero} GPU events of zero length in the file: counted as events, they add no time")
    if len(device) > 1:  # within a stream, the file lists GPU events in time order; say when not
        order = np.lexsort((device["order"], device["stream"]))
        s, t = device["stream"][order], device["ts"][order]
        back = int(((s[1:] == s[:-1]) & (t[1:] < t[:-1])).sum())
        if back:
            notes.append(
                f"{back} GPU events are listed before an earlier-starting event of their stream "
                "(out of time order in the file): sorted by start before the breakdown"
            )
    return notes


def read_trace(path: str | Path) -> RankTrace:
    """Read one trace file (``.json`` or ``.json.gz``) in one streamed pass."""
    p = Path(path)
    read, close = open_text(p)
    result = ScanResult()
    builder = _Builder()
    try:
        for batch in scan_events(read, result):
            builder.add(batch)
    except ScanError as exc:
        raise BundleError(str(exc), path=str(p)) from None
    finally:
        close()
    rank, note = _rank(result.meta, p)
    trace = builder.build(str(p), rank, result.meta, result.elements)
    if note:
        trace.notes.append(note)
    return trace


#: a rank above this is no process of a real job (the largest jobs run ~10^5 GPUs)
MAX_RANK = 1 << 24


def _rank(meta: dict[str, Any], path: Path) -> tuple[int, str | None]:
    """``distributedInfo.rank``, and a note when it is absent (rank 0, HTA's default). A rank that
    is there but is no rank (not a whole number, negative, past world_size) is a
    :class:`BundleError` saying so, with the value."""
    info = meta.get("distributedInfo")
    if not isinstance(info, dict) or "rank" not in info or info["rank"] is None:
        return 0, "no distributedInfo.rank in the file: taken as rank 0 (as HTA does)"
    rank = info["rank"]
    size = info.get("world_size")
    size = size if type(size) is int and size > 0 else None
    numeric = type(rank) in (int, float) and math.isfinite(rank)
    if not numeric or rank != int(rank):
        raise BundleError(f"distributedInfo.rank is {str(rank)[:40]!r}, not a whole number", path=str(path))
    limit = size if size is not None else MAX_RANK
    if not 0 <= rank < limit:
        bound = f"world_size {size}" if size is not None else f"{MAX_RANK:,}"
        raise BundleError(
            f"distributedInfo.rank {rank:.15g} is out of range (0 <= rank < {bound})", path=str(path)
        )
    rank = int(rank)
    return rank, None


def read_traces(path: str | Path) -> list[RankTrace]:
    """Every rank under ``path`` (a file or a folder of one file per rank), sorted by rank.

    Raises :class:`BundleError` when two files claim one rank, when their ``world_size`` differ,
    or when a rank's time span overlaps no other rank's (traces of different runs)."""
    traces = [read_trace(f) for f in trace_files(path)]
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.rank in by_rank:
            raise BundleError(
                f"rank {t.rank} is also in {by_rank[t.rank].path}: one file per rank, from one run",
                path=t.path,
            )
        by_rank[t.rank] = t
    sizes = {t.world_size for t in traces if t.world_size is not None}
    if len(sizes) > 1:
        detail = ", ".join(f"{Path(t.path).name}: {t.world_size}" for t in traces)
        raise BundleError(f"ranks from different jobs: world_size differs ({detail})", path=str(path))
    _check_same_run(traces, str(path))
    return [by_rank[r] for r in sorted(by_rank)]


def _check_same_run(traces: list[RankTrace], where: str) -> None:
    """Ranks of one profiled run record the same steps, so their time spans overlap (clock skew
    between hosts is milliseconds, a profiled window seconds). A span that meets no other is
    another run's."""
    spans = [(t, s) for t in traces if (s := t.span()) is not None]
    if len(spans) < 2:
        return
    for t, (a0, a1) in spans:
        if not any(b0 <= a1 and a0 <= b1 for u, (b0, b1) in spans if u is not t):
            raise BundleError(
                f"rank {t.rank} ({Path(t.path).name}) does not overlap any other rank in time: "
                "traces of different runs in one folder (analyse them separately)",
                path=where,
            )
