"""Read OpenMetrics / Prometheus text exposition into a :class:`~perfkit.frames.MetricStore`.

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
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import polars as pl

from perfkit.errors import BundleError
from perfkit.frames import TS_DTYPE, MetricStore, sort_series, to_ms

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
    """Parse exposition ``text``; ``path`` is only used in error messages."""
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
        except ValueError as exc:
            lineno = int(parts.filter(pl.col("labels") == block)["lineno"][0])
            raise BundleError(str(exc), path=path, line=lineno) from None

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


def read_file(path: str | Path, *, default_ts: datetime | None = None) -> MetricStore:
    """Read one exposition file (``.om`` needs ``# EOF``; ``.prom``/``.txt`` do not)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BundleError("file not found", path=str(p)) from None
    except UnicodeDecodeError as exc:
        raise BundleError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(p)) from None
    return parse_text(text, path=str(p), default_ts=default_ts, require_eof=p.suffix == ".om")


def read_files(paths: Iterable[str | Path]) -> MetricStore:
    store = MetricStore()
    for path in sorted(Path(p) for p in paths):
        store = store.merge(read_file(path))
    return store
