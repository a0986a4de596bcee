"""Read OpenMetrics / Prometheus text exposition into a :class:`~perfkit.core.frames.MetricStore`.

The hot path of the embedded default and of fleet captures (a 1 GB bundle), so it is *streamed*
(a file is read in :data:`CHUNK_BYTES` pieces cut at line ends; between pieces only compact
samples are kept: series id, ms timestamp, value), *vectorised* (polars finds, with an
end-anchored regex the engine runs backwards from the line's end, where " value timestamp"
starts; only the *distinct* heads before it, thousands not millions, are checked and decoded in
Python; a line this fast split cannot take goes through the full :data:`SAMPLE_RE`) and
*selective* (``families`` drops other families' lines before they are split, unchecked; ``skip``
drops a series' samples as they are read and ``select`` picks series from one row per series:
:func:`perfkit.sources.bundle.read_scoped` pushes a workload scope down with them).

Strict where it matters:

* a line that is neither a comment nor a well-formed sample is an error naming file and line;
* an OpenMetrics file (``.om``) must end with ``# EOF`` (promtool refuses it otherwise);
* samples without a timestamp are an error unless ``default_ts`` is given (a single scrape);
* ``NaN`` and ``±Inf`` values are kept; unsorted samples are sorted; a duplicated timestamp in
  one series keeps the last value (as a scrape would overwrite it), across files too;
* ``*_created`` series of counters and histograms are dropped: they are start times, not samples.

Bounded, because a bundle is untrusted input:

* a file over :data:`MAX_FILE_BYTES` (2 GiB) is refused, and so is anything that is not a regular
  file (a FIFO, ``/dev/zero`` behind a symlink): it is never read;
* a line over :data:`MAX_LINE_BYTES` (64 KiB) is an error naming file and line, found before its
  piece is split (a 50 MB label value costs one piece of memory, not 9 GB);
* a label value over :data:`MAX_LABEL_VALUE_BYTES` (16 KiB) is an error naming file and line.

Errors come in a whole-file reader's order: an over-long line, text that is not UTF-8, a missing
``# EOF`` (a cut capture), then the first malformed piece (a malformed line, a bad value or
timestamp, a missing timestamp, malformed labels).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, TypeAlias

import numpy as np
import polars as pl

from perfkit.core.frames import TS_DTYPE, MetricStore, to_ms
from perfkit.errors import BundleError
from perfkit.sources.safeio import RefusedFile, open_regular, size_text

MAX_FILE_BYTES = 2 * 2**30
"""Largest exposition file read: hours of every exporter of a node at 15 s scrapes is ~100s of MiB."""
MAX_LINE_BYTES = 64 * 2**10
"""Longest line: a real sample line (name, a dozen labels, value, timestamp) is well under 1 KiB."""
MAX_LABEL_VALUE_BYTES = 16 * 2**10
"""Longest label value: real ones (a path, a model name, a pod) are tens to hundreds of bytes."""
CHUNK_BYTES = 32 * 2**20
"""Bytes read and split at a time: large enough that polars' per-call cost vanishes (~300k
lines), small enough that a piece's text and its split columns stay ~150 MB."""
_SCAN_CHUNK = 16 * 2**20

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABELS = r"\{(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*\}"
_NUM = r"[^\s#]+"
# name, {labels}?, value, timestamp?, then an optional exemplar (" # {...} v [ts]").
SAMPLE_RE = rf"^({_NAME})({_LABELS})?[ \t]+({_NUM})(?:[ \t]+({_NUM}))?[ \t]*(?:#.*)?$"
# The fast split: where " value timestamp" starts, as exporters write it (one space each, nothing
# after); end-anchored, so the regex engine reads the line's tail backwards. Other spacing, an
# exemplar or a missing timestamp take the full SAMPLE_RE.
_TAIL_AT = rf" {_NUM} {_NUM}$"
_HEAD = re.compile(rf"({_NAME})({_LABELS})?")
_NAME_END = r"[{\s]"
_LABEL_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_META = re.compile(r"^#\s+(TYPE|HELP|UNIT)\s+(" + _NAME + r")(?:\s+(.*))?$")
_ID = "#sid"  # a column name no label can have
_PART = {"sid": pl.UInt32, "ts": pl.Int64, "value": pl.Float64}  # a compact sample
_CSV: dict = {"has_header": False, "separator": "\x01", "quote_char": None, "schema": {"line": pl.Utf8}}

Families: TypeAlias = Callable[[str], bool] | Collection[str] | None
"""Which sample names to read: a set (``{"vllm:num_requests_running", ...}``), a predicate, or None (all)."""
Skip: TypeAlias = Callable[[str, dict[str, str]], bool]
"""``skip(sample name, labels)``: True drops the series' samples as they are read (asked once per series)."""
Select: TypeAlias = Callable[[MetricStore], MetricStore]
"""Given one row per series (label columns, zero ``ts`` and ``value``), the rows to keep, as a store
of those frames narrowed by row; the result keeps its family order."""


def long_line(data: bytes | str, limit: int = MAX_LINE_BYTES) -> tuple[int, int] | None:
    """(1-based line number, length in bytes) of the first line of ``data`` longer than ``limit``
    bytes (newline excluded), or None. Vectorised (numpy) and chunked: memory stays at ~16 MiB
    beyond ``data`` itself, whatever the line lengths."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) <= limit:
        return None
    arr = np.frombuffer(raw, dtype=np.uint8)
    prev, lines = -1, 0  # offset of the last newline seen, newlines seen
    for off in range(0, arr.size, _SCAN_CHUNK):
        newlines = np.flatnonzero(arr[off : off + _SCAN_CHUNK] == 10) + off
        if not newlines.size:
            continue
        lengths = np.diff(newlines, prepend=prev) - 1
        over = np.flatnonzero(lengths > limit)
        if over.size:
            return lines + int(over[0]) + 1, int(lengths[over[0]])
        lines, prev = lines + newlines.size, int(newlines[-1])
    tail = arr.size - prev - 1
    return (lines + 1, tail) if tail > limit else None


def parse_labels(block: str) -> dict[str, str]:
    """Decode a label block ``{a="1",b="x\\"y"}`` into a dict; raise ValueError if malformed."""
    inner = block[1:-1].strip()
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        m = _LABEL_PAIR.match(inner, pos)
        if not m:
            raise ValueError(f"malformed labels {block!r}")
        value = re.sub(r"\\[\\\"n]", lambda e: _ESCAPES[e.group(0)], m.group(2))
        labels[m.group(1)] = value
        pos = m.end()
        if not m.group(3):
            break
    return labels


def _family_type(name: str, types: dict[str, str]) -> str:
    if name in types:
        return types[name]
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            t = types.get(name[: -len(suffix)])
            if t:
                return t
    return "unknown"


def _predicate(families: Families) -> Callable[[str], bool] | None:
    if isinstance(families, str):
        raise TypeError("families: give a set of sample names or a predicate, not one string")
    return families if families is None or callable(families) else frozenset(families).__contains__


def _lines(data: bytes, first: int, n: int) -> pl.DataFrame:
    """The ``n`` lines of ``data`` (valid UTF-8) numbered from ``first``: polars' CSV reader (one
    column, a blank line read as null) when it returns every line, else a plain split."""
    if b"\x01" not in data:
        try:
            frame = pl.read_csv(data, **_CSV)
        except pl.exceptions.PolarsError:
            frame = None
        if frame is not None and frame.height == n:
            return frame.with_columns(pl.col("line").fill_null("")).with_row_index("lineno", offset=first)
    lines = pl.Series("line", [data.decode("utf-8")]).str.split("\n").explode()
    if data.endswith(b"\n"):
        lines = lines.slice(0, lines.len() - 1)
    return pl.DataFrame({"line": lines}).with_row_index("lineno", offset=first)


def _last_line(data: bytes) -> str | None:
    """The last line of ``data`` with something besides whitespace (stripped), or None."""
    end = len(data)
    while end > 0:
        lo = max(0, end - 2 * MAX_LINE_BYTES)
        kept = data[lo:end].rstrip()
        if kept:
            stop = lo + len(kept)
            start = data.rfind(b"\n", 0, stop) + 1
            return data[start:stop].decode("utf-8", "replace").strip()
        end = lo
    return None


def _too_long(path: str, lineno: int, length: int) -> BundleError:
    what = f"line of {size_text(length)}, longer than the {size_text(MAX_LINE_BYTES)} limit"
    return BundleError(f"{what} (a corrupt or hostile file?)", path=path, line=lineno)


@dataclass
class _File:
    """One file being read: its TYPE lines, series, compact samples and first problems."""

    path: str
    default_ts: datetime | None
    require_eof: bool
    types: dict[str, str] = field(default_factory=dict)
    names: dict[str, None] = field(default_factory=dict)  # families in first-seen order
    filtered: set[str] = field(default_factory=set)  # names of lines ``families`` skipped
    sids: set[int] = field(default_factory=set)
    parts: list[pl.DataFrame] = field(default_factory=list)
    error: BundleError | None = None  # the first malformed piece
    utf8: BundleError | None = None
    last: str | None = None  # the last non-blank line (for # EOF)
    lines: int = 0
    offset: int = 0  # bytes before the current piece


class _Reader:
    """Series registry and compact samples of the files of one read."""

    def __init__(self, families: Families = None, skip: Skip | None = None) -> None:
        self.want = _predicate(families)
        self.skip = skip
        self.by_head: dict[str, int] = {}
        self.by_key: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self.family: list[str] = []  # by series id
        self.labels: list[dict[str, str]] = []
        self.out: list[bool] = []  # skipped: samples not kept
        self.keys: dict[str, dict[str, None]] = {}  # label names of each family, first seen first
        self.order: dict[str, None] = {}
        self.types: dict[str, str] = {}
        self.present: set[int] = set()
        self.parts: list[pl.DataFrame] = []

    def read_path(self, path: Path, default_ts: datetime | None, max_bytes: int) -> None:
        try:
            with open_regular(path, max_bytes=max_bytes) as fh:
                self.read(fh, _File(str(path), default_ts, path.suffix == ".om"), max_bytes)
        except FileNotFoundError:
            raise BundleError("file not found", path=str(path)) from None
        except RefusedFile as exc:
            raise BundleError(f"refused: {exc.reason}", path=str(path)) from None
        except OSError as exc:
            raise BundleError(f"cannot read ({exc.strerror or type(exc).__name__})", path=str(path)) from None

    def read(self, fh: BinaryIO, f: _File, max_bytes: int | None) -> None:
        while data := fh.read(CHUNK_BYTES):
            if not data.endswith(b"\n"):  # finish the line (bounded: a longer one is refused below)
                data += fh.readline(MAX_LINE_BYTES + 1)
            if max_bytes is not None and f.offset + len(data) > max_bytes:  # grew while being read
                raise BundleError(f"refused: file is over the {size_text(max_bytes)} limit", path=f.path)
            newlines = data.count(b"\n")
            tail = len(data) - data.rfind(b"\n") - 1  # an unfinished last line: the file's, or a long one
            if tail > MAX_LINE_BYTES:
                found = long_line(data[: len(data) - tail]) or (newlines + 1, tail + _rest_of_line(fh))
                raise _too_long(f.path, f.lines + found[0], found[1])
            self._piece(f, data, newlines + (tail > 0))
        self._end(f)

    def _piece(self, f: _File, data: bytes, n: int) -> None:
        first = f.lines + 1
        f.lines += n
        f.offset += len(data)
        is_ascii = data.isascii()
        if f.utf8 is None and not is_ascii:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                f.utf8 = BundleError(
                    f"not UTF-8 text ({exc.reason} at byte {f.offset - len(data) + exc.start})",
                    path=f.path,
                    line=first + data.count(b"\n", 0, exc.start),
                )
                f.parts.clear()
        if f.utf8 is not None or f.error is not None:  # still checked: long lines, UTF-8, # EOF
            found = long_line(data)
            if found is not None:
                raise _too_long(f.path, first - 1 + found[0], found[1])
            if f.utf8 is not None:
                return
        f.last = _last_line(data) or f.last
        if f.error is not None:
            return
        frame = _lines(data, first, n)
        if (long := frame.filter(pl.col("line").str.len_bytes() > MAX_LINE_BYTES)).height:
            raise _too_long(f.path, int(long["lineno"][0]), len(long["line"][0].encode("utf-8")))
        try:
            self._parse(f, frame, is_ascii=is_ascii, cr=b"\r" in data)
        except BundleError as exc:
            f.error = exc
            f.parts.clear()

    def _end(self, f: _File) -> None:
        if f.utf8 is not None:
            raise f.utf8
        if f.require_eof and f.last != "# EOF":
            raise BundleError("OpenMetrics text must end with '# EOF'", path=f.path, line=max(f.lines, 1))
        if f.error is not None:
            raise f.error
        # Drop *_created series of counters/histograms/summaries (OpenMetrics) and their
        # Prometheus-text twins (a gauge family named <counter>_created).
        names, counted = set(f.names) | f.filtered, ("counter", "histogram", "summary", "gaugehistogram")
        twins = {n[: -len(s)] for n in names for s in ("_total", "_bucket", "_count") if n.endswith(s)}
        created = {n for n in names if n.endswith("_created")}
        drop = {n for n in created if _family_type(n, f.types) in counted or n[:-8] in twins}
        gone = [s for s in f.sids if self.family[s] in drop]
        for part in f.parts:
            self.parts.append(part.filter(~pl.col("sid").is_in(gone)) if gone else part)
        f.parts.clear()
        for name in f.names:
            if name not in drop:
                self.order.setdefault(name)
                self.types[name] = _family_type(name, f.types)
        self.present.update(s for s in f.sids if self.family[s] not in drop)

    def _parse(self, f: _File, frame: pl.DataFrame, *, is_ascii: bool, cr: bool) -> None:
        if cr:
            frame = frame.with_columns(pl.col("line").str.strip_chars_end("\r"))
        is_comment = pl.col("line").str.starts_with("#")
        comments = frame.filter(is_comment)
        for lineno, line in comments.filter(pl.col("line").str.contains(r"^#\s+TYPE\s")).iter_rows():
            m = _META.match(line)
            if not m or not m.group(3):
                raise BundleError(f"malformed TYPE line: {line[:80]!r}", path=f.path, line=lineno)
            f.types[m.group(2)] = m.group(3).strip()
        samples = frame.filter(~is_comment)
        del frame, comments
        if self.want is not None:
            samples = self._wanted(f, samples)
        line, pos = pl.col("line"), pl.col("pos")  # pos: a byte offset, a character one in ASCII text
        if is_ascii:
            head, tail = line.str.head(pos), line.str.slice(pos + 1)
        else:
            raw = line.cast(pl.Binary)
            head, tail = raw.bin.head(pos).cast(pl.Utf8), raw.bin.slice(pos + 1).cast(pl.Utf8)
        split = samples.with_columns(pos=line.str.find(_TAIL_AT)).with_columns(
            head=head, tail=tail.str.split_exact(" ", 1)
        )
        rows = split.select(
            "lineno", "line", "head", value_s=pl.col("tail").struct[0], ts_s=pl.col("tail").struct[1]
        )
        del samples, split
        pending: list[BundleError] = []  # label errors come after value errors (see the docstring)
        rows = self._ids(f, rows, pending)
        if (slow := rows.filter(pl.col("sid") == -1)).height:  # (-2: malformed labels, reported below)
            rows = pl.concat([rows.filter(pl.col("sid") != -1), self._ids(f, self._slow(f, slow), pending)])
            rows = rows.sort("lineno")
        self._values(f, rows.drop("line", "head"), pending)

    def _ids(self, f: _File, rows: pl.DataFrame, pending: list[BundleError]) -> pl.DataFrame:
        """``rows`` with ``sid``, the series id of each row's head (-1: no head, or not a series'
        head: the fast split cut the line wrongly)."""
        firsts = rows.filter(pl.col("head").is_not_null()).unique(
            subset="head", keep="first", maintain_order=True
        )
        ids = np.array(
            [self._head(f, h, n, pending) for h, n in firsts.select("head", "lineno").iter_rows()] + [-1]
        )
        if not firsts.height:
            return rows.with_columns(sid=pl.lit(-1, dtype=pl.Int64))
        codes = rows["head"].cast(pl.Enum(firsts["head"])).to_physical().fill_null(len(ids) - 1)
        return rows.with_columns(sid=pl.Series(ids[codes.to_numpy()], dtype=pl.Int64))

    def _wanted(self, f: _File, samples: pl.DataFrame) -> pl.DataFrame:
        line = pl.col("line")
        end = line.str.find(_NAME_END).fill_null(line.str.len_bytes())
        names = samples.select(line.cast(pl.Binary).bin.head(end).cast(pl.Utf8).alias("n"))["n"]
        distinct = names.unique(maintain_order=True).to_list()
        keep = [n for n in distinct if self.want is not None and self.want(n)]
        f.filtered.update(n for n in distinct if n not in keep)
        return samples if len(keep) == len(distinct) else samples.filter(names.is_in(keep))

    def _slow(self, f: _File, rows: pl.DataFrame) -> pl.DataFrame:
        """Lines the fast split could not take, through the full sample regex (blank ones dropped)."""
        rows = rows.filter(pl.col("line").str.strip_chars() != "")
        parts = rows.select("lineno", "line", pl.col("line").str.extract_groups(SAMPLE_RE).alias("g")).unnest(
            "g"
        )
        parts.columns = ["lineno", "line", "name", "labels", "value_s", "ts_s"]
        if (bad := parts.filter(pl.col("name").is_null())).height:
            lineno, line = bad.row(0)[:2]
            raise BundleError(f"malformed sample line: {line[:120]!r}", path=f.path, line=lineno)
        head = pl.col("name") + pl.col("labels").fill_null("")
        return parts.select("lineno", "line", head.alias("head"), "value_s", "ts_s")

    def _values(self, f: _File, rows: pl.DataFrame, pending: list[BundleError]) -> None:
        rows = rows.with_columns(
            pl.col("value_s").cast(pl.Float64, strict=False).alias("value"),
            pl.col("ts_s").cast(pl.Float64, strict=False).alias("ts_f"),
        ).with_columns((pl.col("ts_f") * 1000.0).round().cast(pl.Int64, strict=False).alias("ts"))
        bad = rows.filter(pl.col("value").is_null() | (pl.col("ts").is_null() & pl.col("ts_s").is_not_null()))
        if bad.height:
            row = bad.row(0, named=True)
            what, text = ("value", row["value_s"]) if row["value"] is None else ("timestamp", row["ts_s"])
            name = self.family[row["sid"]] if row["sid"] >= 0 else "?"
            raise BundleError(
                f"invalid {what} {text!r} in sample {name}", path=f.path, line=int(row["lineno"])
            )
        if rows["ts_s"].null_count():
            if f.default_ts is None:
                lineno = int(rows.filter(pl.col("ts_s").is_null())["lineno"][0])
                raise BundleError(
                    "sample has no timestamp (bundle metrics need one)", path=f.path, line=lineno
                )
            rows = rows.with_columns(pl.col("ts").fill_null(to_ms(f.default_ts)))
        if pending:
            raise min(pending, key=lambda e: e.line or 0)
        sid = rows["sid"].to_numpy()
        seen = np.unique(sid)
        f.sids.update(seen.tolist())
        out = np.asarray(self.out, dtype=bool)
        if out[seen].any():
            rows = rows.filter(pl.Series(~out[sid]))
        f.parts.append(rows.select(pl.col(c).cast(t) for c, t in _PART.items()))

    def _head(self, f: _File, head: str, lineno: int, pending: list[BundleError]) -> int:
        """The series id of a head (``name{labels}``), -1 when the fast split cut the line wrongly."""
        if (sid := self.by_head.get(head)) is not None:
            f.names.setdefault(self.family[sid])
            return sid
        if (m := _HEAD.fullmatch(head)) is None:
            return -1
        if (sid := self._register(f, m.group(1), m.group(2) or "{}", lineno, pending)) >= 0:
            self.by_head[head] = sid
        return sid

    def _register(self, f: _File, name: str, block: str, lineno: int, pending: list[BundleError]) -> int:
        try:
            labels = parse_labels(block)
            for k, size in ((k, len(v.encode("utf-8"))) for k, v in labels.items()):
                if size > MAX_LABEL_VALUE_BYTES:
                    limit = size_text(MAX_LABEL_VALUE_BYTES)
                    raise ValueError(
                        f"label {k} has a value of {size_text(size)}, longer than the {limit} limit"
                    )
        except ValueError as exc:
            pending.append(BundleError(str(exc)[:300], path=f.path, line=lineno))
            return -2
        key = (name, tuple(sorted(labels.items())))
        sid = self.by_key.get(key)
        if sid is None:
            sid = self.by_key[key] = len(self.family)
            self.family.append(name)
            self.labels.append(labels)
            self.keys.setdefault(name, {}).update(dict.fromkeys(labels))
            self.out.append(self.skip is not None and self.skip(name, labels))
        f.names.setdefault(name)
        return sid

    def finish(self, select: Select | None = None) -> MetricStore:
        kept = np.zeros(len(self.family), dtype=bool)
        kept[list(self.present)] = True
        families = list(self.order)
        if select is not None:
            kept, families = self._selected(kept, select)
        members = self._members(kept)
        names = [n for n in families if n in members]
        key_of = np.full(len(self.family), -1, dtype=np.int64)
        lookups: dict[str, tuple[int, pl.DataFrame]] = {}
        base = 0
        for name in names:
            frame = self._series(name, members[name]).with_row_index(_ID)
            keys = list(self.keys[name])
            if keys:
                frame = frame.sort(keys, nulls_last=True, maintain_order=True)
            key_of[np.asarray(members[name])[frame[_ID].to_numpy()]] = base + np.arange(frame.height)
            lookups[name] = (base, frame.drop(_ID))
            base += frame.height
        samples = pl.concat(self.parts) if self.parts else pl.DataFrame(schema=_PART)
        sid, ts, value = (samples[c].to_numpy() for c in _PART)
        self.parts = []
        del samples
        key = key_of[sid]
        if not (keep := key >= 0).all():
            key, ts, value = key[keep], ts[keep], value[keep]
        order = _series_order(key, ts)
        key, ts, value = key[order], ts[order], value[order]
        del order
        if key.size > 1 and (dup := (key[1:] == key[:-1]) & (ts[1:] == ts[:-1])).any():
            keep = np.append(~dup, True)  # one value per (series, ts): the last written
            key, ts, value = key[keep], ts[keep], value[keep]
        store = MetricStore(types={n: self.types[n] for n in self.order})
        for name in names:
            base, lookup = lookups[name]
            lo, hi = (int(i) for i in np.searchsorted(key, [base, base + lookup.height]))
            columns = pl.DataFrame(
                {"ts": pl.Series(ts[lo:hi]).cast(TS_DTYPE), "value": pl.Series(value[lo:hi])}
            )
            if lookup.width:
                columns = pl.concat([lookup[key[lo:hi] - base], columns], how="horizontal")
            store.frames[name] = columns
        return store

    def _members(self, mask: np.ndarray) -> dict[str, list[int]]:
        members: dict[str, list[int]] = {}
        for sid in np.flatnonzero(mask).tolist():
            members.setdefault(self.family[sid], []).append(sid)
        return members

    def _series(self, name: str, sids: list[int]) -> pl.DataFrame:
        """One row of label columns per series (a family without labels: no columns, one row)."""
        keys = list(self.keys[name])
        if not keys:
            return pl.DataFrame({"_": [None] * len(sids)}).drop("_")
        return pl.DataFrame(
            {k: [self.labels[s].get(k) for s in sids] for k in keys}, schema=dict.fromkeys(keys, pl.Utf8)
        )

    def _selected(self, present: np.ndarray, select: Select) -> tuple[np.ndarray, list[str]]:
        """The series ``select`` keeps of a store of one row per series, and its family order."""
        members = self._members(present)
        series = MetricStore(types={n: self.types[n] for n in self.order})
        for name in self.order:
            if sids := members.get(name):
                zeros = pl.Series([0] * len(sids), dtype=pl.Int64)
                series.frames[name] = self._series(name, sids).with_columns(
                    ts=zeros.cast(TS_DTYPE), value=zeros.cast(pl.Float64)
                )
        chosen = select(series)
        kept = np.zeros_like(present)
        for name, frame in chosen.frames.items():
            full, ids = series.frames[name], np.asarray(members[name])
            labels = [c for c in full.columns if c not in ("ts", "value")]
            if frame.height == full.height or not labels:
                kept[ids] = True
            else:
                hit = full.with_row_index(_ID).join(
                    frame.select(labels), on=labels, how="semi", nulls_equal=True
                )
                kept[ids[hit[_ID].to_numpy()]] = True
        return kept, list(chosen.frames)


def _series_order(key: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Indices that sort by (series key, ts), equal pairs staying in the order they were written.
    The keys are small integers, so a stable radix sort by key is linear; it is all that is needed
    when every series was written in time order (as exporters and captures write them)."""
    order = _radix(key)
    k, t = key[order], ts[order]
    if np.any((k[1:] == k[:-1]) & (t[1:] < t[:-1])):
        by_ts = np.argsort(ts, kind="stable")
        order = by_ts[_radix(key[by_ts])]
    return order


def _radix(key: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative integer keys under 2**32: numpy's radix sort on 16-bit digits."""
    order = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
    if key.size and int(key.max()) > 0xFFFF:
        order = order[np.argsort((key[order] >> 16).astype(np.uint16), kind="stable")]
    return order


def _rest_of_line(fh: BinaryIO) -> int:
    """Bytes up to the next newline (or the end), read and dropped piece by piece."""
    n = cut = 0
    while (data := fh.read(CHUNK_BYTES)) and (cut := data.find(b"\n")) < 0:
        n += len(data)
    return n + (cut if data else 0)


def parse_text(
    text: str,
    *,
    path: str = "<text>",
    default_ts: datetime | None = None,
    require_eof: bool = False,
    families: Families = None,
) -> MetricStore:
    """Parse exposition ``text``; ``path`` is only used in error messages.

    Raises :class:`~perfkit.errors.BundleError` (path and line) for a malformed line, a line over
    :data:`MAX_LINE_BYTES` or a label value over :data:`MAX_LABEL_VALUE_BYTES`.
    """
    reader = _Reader(families)
    reader.read(io.BytesIO(text.encode("utf-8")), _File(path, default_ts, require_eof), None)
    return reader.finish()


def read_file(
    path: str | Path,
    *,
    default_ts: datetime | None = None,
    max_bytes: int = MAX_FILE_BYTES,
    families: Families = None,
) -> MetricStore:
    """Read one exposition file (``.om`` needs ``# EOF``; ``.prom``/``.txt`` do not).

    Raises :class:`~perfkit.errors.BundleError` naming the file for a missing file, one that is
    not a regular file (FIFO, device: never read), one over ``max_bytes`` (never read past it by
    more than a line), text that is not UTF-8, and (with the line) any line :func:`parse_text` refuses.
    """
    reader = _Reader(families)
    reader.read_path(Path(path), default_ts, max_bytes)
    return reader.finish()


def read_files(
    paths: Iterable[str | Path],
    *,
    families: Families = None,
    skip: Skip | None = None,
    select: Select | None = None,
) -> MetricStore:
    """Read and merge exposition files (each as :func:`read_file`, bounded the same way; the same
    series in two files is one series, the later file's value winning a shared timestamp).
    ``families``, ``skip`` and ``select`` narrow what is read (the module docstring)."""
    reader = _Reader(families, skip)
    for path in sorted(Path(p) for p in paths):
        reader.read_path(path, None, MAX_FILE_BYTES)
    return reader.finish(select)
