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

import gzip
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.errors import BundleError, ConfigError
from perfkit.traces.scan import ScanError, ScanResult, scan_events

#: decompressed text read from one file at most. Memory does not grow with it (the pass is
#: streamed); this bounds the time a hostile file (a gzip bomb) can take: 64 GiB is ~60x the
#: largest real traces we have seen (about 1 GB).
MAX_BYTES = 64 << 30
#: timestamps above this cannot be µs since the epoch (1e17 µs is the year 5138); such a trace
#: writes nanoseconds and is converted (Chrome's trace format defines ``ts`` in µs).
NS_THRESHOLD = 1e17
#: HTA's GPU-event filter also admits these CUDA sync names (``_filter_gpu_kernels_with_cuda_sync``)
SYNC_NAMES = frozenset({"Event Sync", "Context Sync"})
STEP_MARK = "ProfilerStep"
LOADER_PREFIX = "enumerate(DataLoader)"
TRACE_SUFFIXES = (".json", ".gz")
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


class _Builder:
    """Accumulates one rank's events into lists per batch, then numpy arrays."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.dev: list[tuple[Any, ...]] = []
        self.host: list[tuple[Any, ...]] = []
        self.marks: list[tuple[Any, ...]] = []
        # numpy pieces, one per batch: Python lists of floats cost ~32 bytes a value, arrays 8
        self.pieces: dict[str, list[list[np.ndarray]]] = {"dev": [], "host": [], "marks": []}
        self.order = 0
        self.float_ts = False
        self.ns = False
        self.no_ts = 0

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
            nid = names.get(name)
            if nid is None:
                nid = names[name] = len(names)
            cid = cats.get(cat)
            if cid is None:
                cid = cats[cat] = len(cats)
            if stream != -1:
                dev.append((nid, cid, ts, dur, stream, corr, passes, order))
            if not passes and corr != -1:
                host.append((nid, ts, dur, corr, stream))
            if is_mark:
                marks.append((nid, cid, ts, dur))
        self.order += len(batch)
        self._flush()

    def _flush(self) -> None:
        for key, rows, fields in (
            ("dev", self.dev, DEVICE_FIELDS),
            ("host", self.host, HOST_FIELDS),
            ("marks", self.marks, MARK_FIELDS),
        ):
            if rows:
                columns = zip(*rows, strict=True)
                self.pieces[key].append(
                    [np.asarray(v, dtype=t) for (_, t), v in zip(fields, columns, strict=True)]
                )
                rows.clear()

    def build(self, path: str, rank: int, meta: dict[str, Any], events: int) -> RankTrace:
        def cols(key: str, fields: Sequence[tuple[str, Any]]) -> Columns:
            parts = self.pieces[key]
            return Columns(
                {
                    f: np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype=t)
                    for i, (f, t) in enumerate(fields)
                }
            )

        device, host, marks = (
            cols("dev", DEVICE_FIELDS),
            cols("host", HOST_FIELDS),
            cols("marks", MARK_FIELDS),
        )
        self.pieces.clear()
        notes = []
        if self.no_ts:
            notes.append(f"{self.no_ts} events without a numeric ts were skipped")
        if self.ns:
            notes.append(
                "timestamps are in ns (values above 1e17, past the year 5000 in µs); converted to µs"
            )
        elif self.float_ts:  # HTA's round_down_time_stamps
            for c in (device, host, marks):
                end = np.floor(c["ts"] + c["dur"])
                c.data["ts"] = np.ceil(c["ts"])
                c.data["dur"] = end - c["ts"]
        names = [""] * len(self.names)
        for text, i in self.names.items():
            names[i] = text
        cats = [""] * len(self.cats)
        for text, i in self.cats.items():
            cats[i] = text
        return RankTrace(path, rank, meta, names, cats, device, host, marks, events, notes)


def _reader(path: Path) -> tuple[Callable[[int], bytes], Callable[[], None]]:
    """A ``read(n)`` of the file's text (gunzipped when it starts with gzip's magic) and a closer."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise BundleError(f"cannot read the trace: {exc.strerror or exc}", path=str(path)) from None
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        stream: Any = gzip.GzipFile(fileobj=raw, mode="rb")
    else:
        raw.seek(0)
        stream = raw
    total = 0

    def read(n: int) -> bytes:
        nonlocal total
        try:
            piece: bytes = stream.read(n)
        except EOFError:
            raise BundleError(
                f"truncated gzip stream: the compressed data ends early ({total} bytes of text read; an interrupted copy?)",
                path=str(path),
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise BundleError(
                f"corrupt gzip stream ({total} bytes of text read): {exc}", path=str(path)
            ) from None
        total += len(piece)
        if total > MAX_BYTES:
            raise BundleError(f"over {MAX_BYTES >> 30} GiB of text: not read further", path=str(path))
        return piece

    def close() -> None:
        stream.close()
        raw.close()

    return read, close


def read_trace(path: str | Path) -> RankTrace:
    """Read one trace file (``.json`` or ``.json.gz``) in one streamed pass."""
    p = Path(path)
    read, close = _reader(p)
    result = ScanResult()
    builder = _Builder()
    try:
        for batch in scan_events(read, result):
            builder.add(batch)
    except ScanError as exc:
        raise BundleError(str(exc), path=str(p)) from None
    finally:
        close()
    info = result.meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    trace = builder.build(str(p), rank if isinstance(rank, int) else 0, result.meta, result.elements)
    if not isinstance(rank, int):
        trace.notes.append("no distributedInfo.rank in the file: taken as rank 0 (as HTA does)")
    return trace


def trace_files(path: str | Path) -> list[Path]:
    """The trace files ``path`` names: itself, or the ``.json``/``.gz`` files in the folder."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise ConfigError(f"{p}: no such trace file or folder")
    found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
    if not found:
        raise ConfigError(f"{p}: no trace files (*.json, *.json.gz) in the folder")
    return found


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
