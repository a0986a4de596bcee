"""Read OpenMetrics / Prometheus text exposition into a :class:`~perfkit.core.frames.MetricStore`.

This is the hot path of the embedded default, so the line work runs inside polars (Rust):
one regex pass splits every sample line into name, label block, value and timestamp, and only
the *distinct* label blocks (a few hundred, not millions) are decoded in Python.

Strict where it matters:

* a line that is neither a comment nor a well-formed sample is an error naming file and line;
* an OpenMetrics file (``.om``) must end with ``# EOF`` (promtool refuses it otherwise);
* samples without a timestamp are an error unless ``default_ts`` is given (a single scrape);
* ``NaN`` and ``±Inf`` values are kept; unsorted samples are sorted; a duplicated timestamp in
  one series keeps the last value (as a scrape would overwrite it);
* ``*_created`` series of counters and histograms are dropped: they are start times, not samples.

Bounded, because a bundle is untrusted input:

* a file over :data:`MAX_FILE_BYTES` (2 GiB) is refused, and so is anything that is not a regular
  file (a FIFO, ``/dev/zero`` behind a symlink): it is never read;
* a line over :data:`MAX_LINE_BYTES` (64 KiB) is an error naming file and line, found by a
  vectorised scan before any line is split or matched (a 50 MB label value costs 50 MB, not 9 GB);
* a label value over :data:`MAX_LABEL_VALUE_BYTES` (16 KiB) is an error naming file and line.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from perfkit.core.frames import TS_DTYPE, MetricStore, sort_series, to_ms
from perfkit.errors import BundleError
from perfkit.sources.safeio import RefusedFile, open_regular, size_text

MAX_FILE_BYTES = 2 * 2**30
"""Largest exposition file read: hours of every exporter of a node at 15 s scrapes is ~100s of MiB."""
MAX_LINE_BYTES = 64 * 2**10
"""Longest line: a real sample line (name, a dozen labels, value, timestamp) is well under 1 KiB."""
MAX_LABEL_VALUE_BYTES = 16 * 2**10
"""Longest label value: real ones (a path, a model name, a pod) are tens to hundreds of bytes."""
_SCAN_CHUNK = 16 * 2**20

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABELS = r"\{(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*\}"
_NUM = r"[^\s#]+"
# name, {labels}?, value, timestamp?, then an optional exemplar (" # {...} v [ts]").
SAMPLE_RE = rf"^({_NAME})({_LABELS})?[ \t]+({_NUM})(?:[ \t]+({_NUM}))?[ \t]*(?:#.*)?$"
_LABEL_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_META = re.compile(r"^#\s+(TYPE|HELP|UNIT)\s+(" + _NAME + r")(?:\s+(.*))?$")


def _lines(text: str) -> pl.DataFrame:
    """Lines with 1-based numbers. polars' CSV reader (one column, multi-threaded) when it keeps every
    line; it drops blank lines, so fall back to a plain split when there are any."""
    n_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if text and "\n\n" not in text and not text.startswith("\n") and "\x01" not in text:
        frame = pl.read_csv(
            io.BytesIO(text.encode("utf-8")),
            has_header=False,
            separator="\x01",
            quote_char=None,
            new_columns=["line"],
            schema={"line": pl.Utf8},
        )
        if frame.height == n_lines:
            return frame.with_row_index("lineno", offset=1)
    lines = pl.Series("line", [text]).str.split("\n").explode()
    return pl.DataFrame({"line": lines}).with_row_index("lineno", offset=1)


def long_line(data: bytes | str, limit: int = MAX_LINE_BYTES) -> tuple[int, int] | None:
    """(1-based line number, length in bytes) of the first line of ``data`` longer than ``limit``
    bytes (newline excluded), or None. Vectorised (numpy) and chunked: memory stays at ~16 MiB
    beyond ``data`` itself, whatever the line lengths."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) <= limit:
        return None
    arr = np.frombuffer(raw, dtype=np.uint8)
    prev = -1  # offset of the last newline seen
    lines = 0  # newlines seen
    for off in range(0, arr.size, _SCAN_CHUNK):
        newlines = np.flatnonzero(arr[off : off + _SCAN_CHUNK] == 10) + off
        if not newlines.size:
            continue
        lengths = np.diff(newlines, prepend=prev) - 1
        over = np.flatnonzero(lengths > limit)
        if over.size:
            i = int(over[0])
            return lines + i + 1, int(lengths[i])
        lines += newlines.size
        prev = int(newlines[-1])
    tail = arr.size - prev - 1
    return (lines + 1, tail) if tail > limit else None


def _check_lines(data: bytes | str, path: str) -> None:
    found = long_line(data)
    if found is not None:
        lineno, length = found
        raise BundleError(
            f"line of {size_text(length)}, longer than the {size_text(MAX_LINE_BYTES)} limit "
            "(a corrupt or hostile file?)",
            path=path,
            line=lineno,
        )


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


def parse_text(
    text: str,
    *,
    path: str = "<text>",
    default_ts: datetime | None = None,
    require_eof: bool = False,
) -> MetricStore:
    """Parse exposition ``text``; ``path`` is only used in error messages.

    Raises :class:`~perfkit.errors.BundleError` (path and line) for a malformed line, a line over
    :data:`MAX_LINE_BYTES` or a label value over :data:`MAX_LABEL_VALUE_BYTES`.
    """
    _check_lines(text, path)
    return _parse_text(text, path=path, default_ts=default_ts, require_eof=require_eof)


def _parse_text(text: str, *, path: str, default_ts: datetime | None, require_eof: bool) -> MetricStore:
    """:func:`parse_text` after the line-length check."""
    frame = _lines(text)
    frame = frame.with_columns(pl.col("line").str.strip_chars_end("\r"))
    if require_eof:
        tail = frame.filter(pl.col("line").str.strip_chars() != "")
        if not tail.height or tail["line"][-1].strip() != "# EOF":
            raise BundleError("OpenMetrics text must end with '# EOF'", path=path, line=frame.height)
    is_comment = pl.col("line").str.starts_with("#")
    is_blank = pl.col("line").str.strip_chars() == ""
    comments = frame.filter(is_comment)
    types: dict[str, str] = {}
    for lineno, line in comments.filter(pl.col("line").str.contains(r"^#\s+TYPE\s")).iter_rows():
        m = _META.match(line)
        if not m or not m.group(3):
            raise BundleError(f"malformed TYPE line: {line[:80]!r}", path=path, line=lineno)
        types[m.group(2)] = m.group(3).strip()

    samples = frame.filter(~is_comment & ~is_blank)
    # The regex pass is the hot spot: run it on chunks in parallel (polars' collect_all).
    chunks = max(1, min(2 * (os.cpu_count() or 1), samples.height // 50_000))
    size = -(-samples.height // chunks) if samples.height else 0
    lazy = [
        samples.slice(i * size, size)
        .lazy()
        .select("lineno", pl.col("line").str.extract_groups(SAMPLE_RE).alias("g"))
        for i in range(chunks)
    ]
    parts = pl.concat(pl.collect_all(lazy)).unnest("g") if lazy else samples.select("lineno")
    parts.columns = ["lineno", "name", "labels", "value_s", "ts_s"]
    bad = parts.filter(pl.col("name").is_null())
    if bad.height:
        lineno = int(bad["lineno"][0])
        line = samples.filter(pl.col("lineno") == lineno)["line"][0]
        raise BundleError(f"malformed sample line: {line[:120]!r}", path=path, line=lineno)

    parts = parts.with_columns(
        pl.col("value_s").cast(pl.Float64, strict=False).alias("value"),
        pl.col("ts_s").cast(pl.Float64, strict=False).alias("ts_f"),
        pl.col("labels").fill_null("{}"),
    )
    bad = parts.filter(pl.col("value").is_null() | (pl.col("ts_f").is_null() & pl.col("ts_s").is_not_null()))
    if bad.height:
        row = bad.row(0, named=True)
        what = "value" if row["value"] is None else "timestamp"
        raise BundleError(
            f"invalid {what} {row['value_s'] if what == 'value' else row['ts_s']!r} in sample {row['name']}",
            path=path,
            line=int(row["lineno"]),
        )
    if parts["ts_s"].null_count():
        if default_ts is None:
            lineno = int(parts.filter(pl.col("ts_s").is_null())["lineno"][0])
            raise BundleError("sample has no timestamp (bundle metrics need one)", path=path, line=lineno)
        parts = parts.with_columns(pl.col("ts_f").fill_null(to_ms(default_ts) / 1000.0))
    parts = parts.with_columns((pl.col("ts_f") * 1000.0).round().cast(pl.Int64).alias("ts_ms"))

    # Drop *_created series of counters/histograms/summaries (OpenMetrics) and their
    # Prometheus-text twins (a gauge family named <counter>_created).
    names = set(parts["name"].unique().to_list())
    drop = {
        n
        for n in names
        if n.endswith("_created")
        and (
            _family_type(n, types) in ("counter", "histogram", "summary", "gaugehistogram")
            or f"{n[:-8]}_total" in names
            or f"{n[:-8]}_bucket" in names
            or f"{n[:-8]}_count" in names
        )
    }
    if drop:
        parts = parts.filter(~pl.col("name").is_in(list(drop)))

    label_blocks = parts["labels"].unique().to_list()
    decoded: dict[str, dict[str, str]] = {}
    for block in label_blocks:
        try:
            decoded[block] = parse_labels(block)
            longest = max(decoded[block].items(), key=lambda kv: len(kv[1]), default=("", ""))
            if len(longest[1]) > MAX_LABEL_VALUE_BYTES:  # characters <= bytes: a cheap pre-check
                size = len(longest[1].encode("utf-8"))
                if size > MAX_LABEL_VALUE_BYTES:
                    raise ValueError(
                        f"label {longest[0]} has a value of {size_text(size)}, longer than the "
                        f"{size_text(MAX_LABEL_VALUE_BYTES)} limit"
                    )
        except ValueError as exc:
            lineno = int(parts.filter(pl.col("labels") == block)["lineno"][0])
            raise BundleError(str(exc)[:300], path=path, line=lineno) from None

    store = MetricStore()
    for (name,), group in (
        parts.select("name", "labels", "ts_ms", "value")
        .partition_by("name", as_dict=True, maintain_order=True)
        .items()
    ):
        store.frames[name] = _series_frame(group, decoded)
        store.types[name] = _family_type(name, types)
    return store


def _series_frame(group: pl.DataFrame, decoded: dict[str, dict[str, str]]) -> pl.DataFrame:
    blocks = group["labels"].unique(maintain_order=True).to_list()
    keys: list[str] = []
    for block in blocks:
        for k in decoded[block]:
            if k not in keys:
                keys.append(k)
    lookup = pl.DataFrame(
        {"labels": blocks, **{k: [decoded[b].get(k) for b in blocks] for k in keys}},
        schema={"labels": pl.Utf8, **dict.fromkeys(keys, pl.Utf8)},
    )
    out = group.join(lookup, on="labels", how="left").select(
        *keys, pl.col("ts_ms").cast(TS_DTYPE).alias("ts"), "value"
    )
    out = sort_series(out)
    # One value per (series, ts): the last written wins.
    return out.unique(subset=[*keys, "ts"], keep="last", maintain_order=True)


def read_file(
    path: str | Path, *, default_ts: datetime | None = None, max_bytes: int = MAX_FILE_BYTES
) -> MetricStore:
    """Read one exposition file (``.om`` needs ``# EOF``; ``.prom``/``.txt`` do not).

    Raises :class:`~perfkit.errors.BundleError` naming the file for a missing file, one that is
    not a regular file (FIFO, device: never read), one over ``max_bytes`` (read no further than
    ``max_bytes + 1``), text that is not UTF-8, and (with the line) any line :func:`parse_text`
    refuses. A line over :data:`MAX_LINE_BYTES` is found before the text is decoded or split.
    """
    p = Path(path)
    try:
        with open_regular(p, max_bytes=max_bytes) as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise BundleError("file not found", path=str(p)) from None
    except RefusedFile as exc:
        raise BundleError(f"refused: {exc.reason}", path=str(p)) from None
    except OSError as exc:
        raise BundleError(f"cannot read ({exc.strerror or type(exc).__name__})", path=str(p)) from None
    if len(data) > max_bytes:  # grew while being read
        raise BundleError(f"refused: file is over the {size_text(max_bytes)} limit", path=str(p))
    _check_lines(data, str(p))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})",
            path=str(p),
            line=data.count(b"\n", 0, exc.start) + 1,
        ) from None
    del data
    return _parse_text(text, path=str(p), default_ts=default_ts, require_eof=p.suffix == ".om")


def read_files(paths: Iterable[str | Path]) -> MetricStore:
    """Read and merge exposition files (each as :func:`read_file`, bounded the same way)."""
    store = MetricStore()
    for path in sorted(Path(p) for p in paths):
        store = store.merge(read_file(path))
    return store
