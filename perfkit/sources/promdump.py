"""Read what Prometheus itself hands out as samples: ``promtool tsdb dump`` text and the JSON answers
of its query API, into the same :class:`~perfkit.core.frames.MetricStore` as the OpenMetrics reader.

``promtool tsdb dump DIR`` prints one float sample a line, the labels as Go's ``labels.String()``
writes them (sorted by name, ``__name__`` among them; values quoted by ``strconv.Quote``; in
Prometheus 3 a label name that is not a legacy one quoted too), then the value (``%g``: ``NaN``,
``+Inf``, ``1.096327e+06``) and the timestamp in milliseconds::

    {__name__="vllm:num_requests_running", engine="0", model_name="m"} 34 1794445215213

(``cmd/promtool/tsdb.go`` ``formatSeriesSet``; the same in promtool 2.42 and 3.x). A native
histogram's sample (``{...} {count:3, sum:1.5, [0,1):2, ...} 1794445215213``) is counted and not
read. The text goes through :class:`perfkit.sources.openmetrics.Reader` with the :data:`DUMP`
syntax: streamed, vectorised and bounded the same way (line length, label values, file size),
errors naming file and line.

A JSON file is an answer of ``/api/v1/query_range`` (``resultType`` ``matrix``) or ``/api/v1/query``
(``matrix`` for a range selector, or ``vector``), whole (``{"status": "success", "data": ...}``),
its ``data`` alone, or its ``data.result`` list. Its shape is checked in one pass before anything is
read (:func:`perfkit.sources.prometheus.check_result`: a wrong part is an error naming the file and
the part, ``data.result[3].values[17][1]``); values are strings ``float()`` reads (``"NaN"``,
``"+Inf"``). A series without ``__name__`` (a query that computed something) cannot be named and is
left out, said in the notes; so are a scalar or string answer and an error answer. Bounded: at most
:data:`MAX_JSON_BYTES` a file and :data:`MAX_JSON_VALUES` JSON values (:mod:`perfkit.sources.safejson`).

Neither format says a family's type, so :func:`infer_type` guesses it from the sample names, as a
reader of the TSDB must: ``_total`` a counter, ``_bucket`` (and its ``_sum``/``_count``) a histogram,
``_sum``/``_count`` beside a bare family a summary; anything else stays ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.errors import BundleError
from perfkit.sources.http import MISSING, BadShape, kind_of
from perfkit.sources.openmetrics import FileRead, Reader, Syntax
from perfkit.sources.prometheus import check_result
from perfkit.sources.safeio import RefusedFile, read_capped
from perfkit.sources.safejson import UnsafeJson, load_json_bounded

MAX_JSON_BYTES = 256 * 2**20
"""Largest JSON answer read, as for a live Prometheus's answers (:mod:`perfkit.sources.http`)."""
MAX_JSON_VALUES = 12_000_000
"""JSON values a file may hold: about 4 million samples (three values each), ~600 MB of objects."""

_LABELS = r"\{(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*\}"
_NUM = r"[^\s#]+"
_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*|"(?:[^"\\]|\\.)*")\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPE = re.compile(
    r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([0-7]{3})|([abfnrtv\\'\"]))|\\(.?)"
)
_SIMPLE = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "'": 39, '"': 34}


def go_unquote(text: str) -> str:
    """The string Go's ``strconv.Quote`` made ``"text"`` of (``\\t``, ``\\x01``, ``\\u00e9`` ...;
    bytes that are not UTF-8 become U+FFFD); ValueError for an escape Go never writes."""
    if "\\" not in text:
        return text
    out, pos = bytearray(), 0
    for m in _ESCAPE.finditer(text):
        out += text[pos : m.start()].encode("utf-8", "surrogatepass")
        byte, u4, u8, octal, simple, bad = m.groups()
        if byte or octal:
            value = int(byte, 16) if byte else int(octal, 8)
            if value > 255:
                raise ValueError(f"escape \\{octal} is beyond a byte")
            out.append(value)
        elif u4 or u8:
            code = int(u4 or u8, 16)
            if code > 0x10FFFF:
                raise ValueError(f"escape \\U{u8} is beyond Unicode")
            out += chr(code).encode("utf-8", "surrogatepass")
        elif simple:
            out.append(_SIMPLE[simple])
        else:
            raise ValueError(f"unknown escape \\{bad}")
        pos = m.end()
    out += text[pos:].encode("utf-8", "surrogatepass")
    return out.decode("utf-8", "replace")


def dump_labels(block: str) -> dict[str, str]:
    """Decode a dump's label block ``{__name__="up", job="a\\tb"}`` (Go quoting); ValueError if
    malformed or a label is given twice."""
    inner = block[1:-1].strip()
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        m = _PAIR.match(inner, pos)
        if not m:
            raise ValueError(f"malformed labels {block[:200]!r}")
        name = go_unquote(m.group(1)[1:-1]) if m.group(1).startswith('"') else m.group(1)
        if name in labels:
            raise ValueError(f"label {name[:80]!r} given twice")
        labels[name] = go_unquote(m.group(2))
        pos = m.end()
        if not m.group(3):
            break
    return labels


def _dump_series(head: str) -> tuple[str, dict[str, str]] | None:
    if not (head.startswith("{") and head.endswith("}")):
        return None
    labels = dump_labels(head)
    name = labels.pop("__name__", "")
    if not name:
        raise ValueError("sample has no __name__ label")
    return name, labels


DUMP = Syntax(
    _dump_series,
    rf"^()({_LABELS})[ \t]+({_NUM})[ \t]+({_NUM})[ \t]*$",
    ts_ms=1.0,
    names_first=False,
    skipped=("} {count:", rf"^{_LABELS} \{{count:"),
)
"""``promtool tsdb dump``'s lines (``{labels} value ms``); native-histogram samples are skipped."""


def infer_type(name: str, names: Collection[str]) -> str:
    """A family's type from its sample name and its neighbours' (no TYPE line says it)."""
    if name.endswith("_total"):
        return "counter"
    if name.endswith("_bucket"):
        return "histogram"
    for suffix in ("_sum", "_count"):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if f"{base}_bucket" in names:
                return "histogram"
            if base in names:
                return "summary"
    if f"{name}_sum" in names and f"{name}_count" in names:
        return "summary"  # the quantile series of a summary
    return "unknown"


def read_dump(reader: Reader, path: Path, max_bytes: int) -> list[str]:
    """Read the ``promtool tsdb dump`` text ``path`` into ``reader``; the notes for ``missing``."""
    f = reader.read_path(path, None, max_bytes, syntax=DUMP, infer=infer_type)
    return skipped_note(f)


def skipped_note(f: FileRead) -> list[str]:
    n = f.skipped
    return (
        [f"{n} native-histogram sample{'s' * (n != 1)} not read (perfkit reads float samples)"] if n else []
    )


def read_api_json(reader: Reader, path: Path, shown: str) -> list[str]:
    """Read the query API answer ``path`` into ``reader``; the notes for ``missing`` (what it held
    that is not samples perfkit can name). ``shown`` names the file in the notes.

    Raises :class:`~perfkit.errors.BundleError` naming the file for one over the bounds, text that
    is not JSON, and an answer of the wrong shape (with the part).
    """
    try:
        raw = read_capped(path, MAX_JSON_BYTES)
        body = load_json_bounded(raw, source=str(path), max_values=MAX_JSON_VALUES)
    except RefusedFile as exc:
        raise BundleError(f"refused: {exc.reason}", path=str(path)) from None
    except OSError as exc:
        raise BundleError(f"cannot read ({exc.strerror or type(exc).__name__})", path=str(path)) from None
    except UnsafeJson as exc:
        where = f"{exc.path}: " if exc.path else ""
        raise BundleError(f"{where}{exc.reason}", path=str(path), line=exc.line) from None
    data, prefix = _data(body, path)
    if data is None:
        kind, said = (" ".join(str(body.get(k)).split()) for k in ("errorType", "error"))
        return [f"{shown}: an error answer ({kind[:40]}: {said[:200]}), no samples"]
    try:
        check_result(data, ("matrix", "vector", "scalar", "string"))
    except BadShape as bad:
        raise BundleError(f"{prefix}{bad.where} {bad.what}", path=str(path)) from None
    if data["resultType"] in ("scalar", "string"):
        return [f"{shown}: a {data['resultType']} answer, no series"]
    f = FileRead(str(path), None, False, infer=infer_type)
    nameless = histograms = 0
    for series in data["result"]:
        labels = dict(series.get("metric") or {})
        name = labels.pop("__name__", "")
        histograms += len(series.get("histograms") or ()) + ("histogram" in series)
        points = series.get("values") or ([series["value"]] if "value" in series else [])
        if not name:
            nameless += bool(points)
            continue
        ts = np.rint(np.array([p[0] for p in points], dtype=np.float64) * 1000.0).astype(np.int64)
        values = np.array([float(p[1]) for p in points], dtype=np.float64)
        reader.add_series(f, name, labels, ts, values)
    reader.end(f)
    notes = []
    if nameless:
        notes.append(f"{shown}: {nameless} series without __name__ (a computed query's result) not read")
    if histograms:
        notes.append(f"{shown}: {histograms} native-histogram samples not read (perfkit reads float samples)")
    return notes


def _data(body: Any, path: Path) -> tuple[Any, str]:
    """The ``data`` part of an answer (None for an error answer) and the prefix that names where
    :func:`check_result`'s parts are."""
    if type(body) is list:
        return {"resultType": "matrix", "result": body}, "(a data.result list) "
    if type(body) is not dict:
        raise BundleError(f"not a Prometheus API answer (it is {kind_of(body)})", path=str(path))
    if "status" in body:
        if body["status"] != "success":
            return None, ""
        data = body.get("data", MISSING)
        if data is MISSING:
            raise BundleError("a Prometheus API answer without data", path=str(path))
        return data, ""
    if "resultType" in body:
        return body, "(the answer's data) "
    raise BundleError("not a Prometheus API answer (no status, no resultType)", path=str(path))
