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

The same machinery reads other line formats (:class:`Syntax`: ``promtool tsdb dump``'s, in
:mod:`perfkit.sources.promdump`) and takes series given as arrays (:meth:`Reader.add_series`: query
API JSON), all into one :class:`Reader` whose samples become the store
(:mod:`perfkit.sources.series_store`).

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
from typing import IO, TypeAlias

import numpy as np
import polars as pl

from perfkit.core.frames import MetricStore, to_ms
from perfkit.errors import BundleError
from perfkit.sources.safeio import RefusedFile, last_line, long_line, open_regular, rest_of_line, size_text
from perfkit.sources.series_store import PART, Select, SeriesStore

MAX_FILE_BYTES = 2 * 2**30
"""Largest exposition file read: hours of every exporter of a node at 15 s scrapes is ~100s of MiB."""
MAX_LINE_BYTES = 64 * 2**10
"""Longest line: a real sample line (name, a dozen labels, value, timestamp) is well under 1 KiB."""
MAX_LABEL_VALUE_BYTES = 16 * 2**10
"""Longest label value: real ones (a path, a model name, a pod) are tens to hundreds of bytes."""
CHUNK_BYTES = 32 * 2**20
"""Bytes read and split at a time: large enough that polars' per-call cost vanishes (~300k
lines), small enough that a piece's text and its split columns stay ~150 MB."""

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
_CSV: dict = {"has_header": False, "separator": "\x01", "quote_char": None, "schema": {"line": pl.Utf8}}

Families: TypeAlias = Callable[[str], bool] | Collection[str] | None
"""Which sample names to read: a set (``{"vllm:num_requests_running", ...}``), a predicate, or None (all)."""
Skip: TypeAlias = Callable[[str, dict[str, str]], bool]
"""``skip(sample name, labels)``: True drops the series' samples as they are read (asked once per series)."""


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


def _too_long(path: str, lineno: int, length: int) -> BundleError:
    what = f"line of {size_text(length)}, longer than the {size_text(MAX_LINE_BYTES)} limit"
    return BundleError(f"{what} (a corrupt or hostile file?)", path=path, line=lineno)


@dataclass(frozen=True)
class Syntax:
    """How a text format writes its sample lines ``<head> <value> <timestamp>``: OpenMetrics
    (:data:`OPENMETRICS`) or ``promtool tsdb dump``'s (:data:`perfkit.sources.promdump.DUMP`)."""

    series: Callable[[str], tuple[str, dict[str, str]] | None]
    """A line's head to (sample name, labels); None: not a head (the fast split cut the line
    wrongly); ValueError: malformed labels."""
    sample_re: str
    """The whole line, for lines the fast split cannot take: groups name, labels, value, timestamp."""
    ts_ms: float = 1000.0
    """Milliseconds in a unit of the timestamp."""
    names_first: bool = True
    """Lines start with the sample name (``families`` then drops other lines before they are split)."""
    skipped: tuple[str, str] | None = None
    """Lines dropped and counted (:attr:`FileRead.skipped`), not read (samples of a kind not kept):
    a text they hold, and the regex they match."""


def _om_series(head: str) -> tuple[str, dict[str, str]] | None:
    m = _HEAD.fullmatch(head)
    return None if m is None else (m.group(1), parse_labels(m.group(2) or "{}"))


OPENMETRICS = Syntax(_om_series, SAMPLE_RE)
Infer: TypeAlias = Callable[[str, Collection[str]], str]
"""``infer(sample name, the file's sample names)``: the type of a family no TYPE line names."""


@dataclass
class FileRead:
    """One file being read: its TYPE lines, series, compact samples and first problems."""

    path: str
    default_ts: datetime | None
    require_eof: bool
    syntax: Syntax = OPENMETRICS
    infer: Infer | None = None  # the type of a family without TYPE line (None: unknown)
    skipped: int = 0  # lines of ``syntax.skipped_re``
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


class Reader(SeriesStore):
    """Series registry and compact samples of the files of one read, of any syntax
    (:meth:`read_path`, :meth:`read`) or given as arrays (:meth:`add_series`); :meth:`finish` makes
    the store."""

    def __init__(self, families: Families = None, skip: Skip | None = None) -> None:
        self.want = _predicate(families)
        self.skip = skip
        super().__init__()
        self.by_head: dict[str, int] = {}
        self.by_key: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self.out: list[bool] = []  # skipped: samples not kept

    def read_path(
        self,
        path: Path,
        default_ts: datetime | None,
        max_bytes: int,
        *,
        syntax: Syntax = OPENMETRICS,
        infer: Infer | None = None,
    ) -> FileRead:
        eof = syntax is OPENMETRICS and path.suffix == ".om"
        try:
            with open_regular(path, max_bytes=max_bytes) as fh:
                f = FileRead(str(path), default_ts, eof, syntax, infer)
                self.read(fh, f, max_bytes)
                return f
        except FileNotFoundError:
            raise BundleError("file not found", path=str(path)) from None
        except RefusedFile as exc:
            raise BundleError(f"refused: {exc.reason}", path=str(path)) from None
        except OSError as exc:
            raise BundleError(f"cannot read ({exc.strerror or type(exc).__name__})", path=str(path)) from None

    def read(self, fh: IO[bytes], f: FileRead, max_bytes: int | None) -> None:
        self.read_pieces(fh, f, max_bytes)
        self.end(f)

    def read_pieces(self, fh: IO[bytes], f: FileRead, max_bytes: int | None) -> None:
        """Read ``fh`` to its end into ``f``; its samples count once :meth:`end` took them."""
        while data := fh.read(CHUNK_BYTES):
            if not data.endswith(b"\n"):  # finish the line (bounded: a longer one is refused below)
                data += fh.readline(MAX_LINE_BYTES + 1)
            if max_bytes is not None and f.offset + len(data) > max_bytes:  # grew while being read
                raise BundleError(f"refused: file is over the {size_text(max_bytes)} limit", path=f.path)
            newlines = data.count(b"\n")
            tail = len(data) - data.rfind(b"\n") - 1  # an unfinished last line: the file's, or a long one
            if tail > MAX_LINE_BYTES:
                cut = long_line(data[: len(data) - tail], MAX_LINE_BYTES)
                found = cut or (newlines + 1, tail + rest_of_line(fh, CHUNK_BYTES))
                raise _too_long(f.path, f.lines + found[0], found[1])
            self._piece(f, data, newlines + (tail > 0))

    def _piece(self, f: FileRead, data: bytes, n: int) -> None:
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
            found = long_line(data, MAX_LINE_BYTES)
            if found is not None:
                raise _too_long(f.path, first - 1 + found[0], found[1])
            if f.utf8 is not None:
                return
        f.last = last_line(data, 2 * MAX_LINE_BYTES) or f.last
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

    def add_series(
        self, f: FileRead, name: str, labels: dict[str, str], ts: np.ndarray, values: np.ndarray
    ) -> None:
        """One series' samples (``ts`` in ms) read from another format into ``f``."""
        if self.want is not None and not self.want(name):
            f.filtered.add(name)
            return
        pending: list[BundleError] = []
        sid = self._register(f, name, labels, None, pending)
        if pending:
            raise pending[0]
        f.sids.add(sid)
        if not self.out[sid]:
            sids = pl.Series(np.full(ts.size, sid), dtype=pl.UInt32)
            f.parts.append(pl.DataFrame({"sid": sids, "ts": ts.astype(np.int64), "value": values}))

    def end(self, f: FileRead) -> None:
        """Check ``f``'s end and take its samples (the first problem is raised)."""
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
                kind = _family_type(name, f.types)
                if kind == "unknown" and f.infer is not None:
                    kind = f.infer(name, names)
                self.types[name] = kind if kind != "unknown" else self.types.get(name, kind)
        self.present.update(s for s in f.sids if self.family[s] not in drop)

    def _parse(self, f: FileRead, frame: pl.DataFrame, *, is_ascii: bool, cr: bool) -> None:
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
        if f.syntax.skipped is not None:
            text, regex = f.syntax.skipped
            maybe = pl.col("line").str.contains(text, literal=True)  # fast; the regex only if any
            if samples.select(maybe.any()).item():
                skipped = maybe & pl.col("line").str.contains(regex)
                f.skipped += int(samples.select(skipped.sum()).item())
                samples = samples.filter(~skipped)
        if self.want is not None and f.syntax.names_first:
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
        if self.want is not None and not f.syntax.names_first:
            rows = rows.filter(pl.col("sid") != -3)  # other families: not checked
        self._values(f, rows.drop("line", "head"), pending)

    def _ids(self, f: FileRead, rows: pl.DataFrame, pending: list[BundleError]) -> pl.DataFrame:
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

    def _wanted(self, f: FileRead, samples: pl.DataFrame) -> pl.DataFrame:
        line = pl.col("line")
        end = line.str.find(_NAME_END).fill_null(line.str.len_bytes())
        names = samples.select(line.cast(pl.Binary).bin.head(end).cast(pl.Utf8).alias("n"))["n"]
        distinct = names.unique(maintain_order=True).to_list()
        keep = [n for n in distinct if self.want is not None and self.want(n)]
        f.filtered.update(n for n in distinct if n not in keep)
        return samples if len(keep) == len(distinct) else samples.filter(names.is_in(keep))

    def _slow(self, f: FileRead, rows: pl.DataFrame) -> pl.DataFrame:
        """Lines the fast split could not take, through the full sample regex (blank ones dropped)."""
        rows = rows.filter(pl.col("line").str.strip_chars() != "")
        parts = rows.select(
            "lineno", "line", pl.col("line").str.extract_groups(f.syntax.sample_re).alias("g")
        ).unnest("g")
        parts.columns = ["lineno", "line", "name", "labels", "value_s", "ts_s"]
        if (bad := parts.filter(pl.col("name").is_null())).height:
            lineno, line = bad.row(0)[:2]
            raise BundleError(f"malformed sample line: {line[:120]!r}", path=f.path, line=lineno)
        head = pl.col("name") + pl.col("labels").fill_null("")
        return parts.select("lineno", "line", head.alias("head"), "value_s", "ts_s")

    def _values(self, f: FileRead, rows: pl.DataFrame, pending: list[BundleError]) -> None:
        rows = rows.with_columns(
            pl.col("value_s").cast(pl.Float64, strict=False).alias("value"),
            pl.col("ts_s").cast(pl.Float64, strict=False).alias("ts_f"),
        ).with_columns((pl.col("ts_f") * f.syntax.ts_ms).round().cast(pl.Int64, strict=False).alias("ts"))
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
        f.parts.append(rows.select(pl.col(c).cast(t) for c, t in PART.items()))

    def _head(self, f: FileRead, head: str, lineno: int, pending: list[BundleError]) -> int:
        """The series id of a head (``name{labels}`` in OpenMetrics), -1 when the fast split cut the
        line wrongly, -2 for malformed labels, -3 for a family ``families`` leaves out."""
        if (sid := self.by_head.get(head)) is not None:
            f.names.setdefault(self.family[sid])
            return sid
        try:
            parsed = f.syntax.series(head)
        except ValueError as exc:
            pending.append(BundleError(str(exc)[:300], path=f.path, line=lineno))
            return -2
        if parsed is None:
            return -1
        if self.want is not None and not self.want(parsed[0]):
            f.filtered.add(parsed[0])
            return -3
        if (sid := self._register(f, *parsed, lineno, pending)) >= 0:
            self.by_head[head] = sid
        return sid

    def _register(
        self, f: FileRead, name: str, labels: dict[str, str], lineno: int | None, pending: list[BundleError]
    ) -> int:
        for k, size in ((k, len(v.encode("utf-8"))) for k, v in labels.items()):
            if size > MAX_LABEL_VALUE_BYTES:
                limit = size_text(MAX_LABEL_VALUE_BYTES)
                why = f"label {k[:80]} has a value of {size_text(size)}, longer than the {limit} limit"
                pending.append(BundleError(why, path=f.path, line=lineno))
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
    reader = Reader(families)
    reader.read(io.BytesIO(text.encode("utf-8")), FileRead(path, default_ts, require_eof), None)
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
    reader = Reader(families)
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
    reader = Reader(families, skip)
    for path in sorted(Path(p) for p in paths):
        reader.read_path(path, None, MAX_FILE_BYTES)
    return reader.finish(select)
