"""JSON from outside, read within bounds: one place for every reader of foreign JSON.

A result file, a baseline store's document, a server's ``/version`` answer: any of them may be
hostile or broken. :func:`load_json_bounded` parses one JSON document and refuses, with
:class:`UnsafeJson` (a :class:`~perfkit.errors.PerfkitError`: one line, exit 2) naming the source
and the key path or line:

* nesting deeper than ``max_depth`` (default 64; a perfkit result is 4 deep): Python's parser
  would raise ``RecursionError`` near 1,000;
* more than ``max_values`` JSON values (default 1,000,000): memory follows the values, not the
  bytes (``{}`` is 2 bytes of text and 72 of Python object: a 120 MB file of them took 3.2 GB);
  the count is taken before anything is built;
* an integer of more than 19 digits (beyond the 64-bit range; ``float()`` of a 401-digit one
  raises ``OverflowError``), a number beyond the float range (``1e400``), ``NaN`` or
  ``Infinity`` (not JSON: RFC 8259 §6);
* text that is not UTF-8 (a UTF-8 byte-order mark at the start is accepted and dropped).

:func:`check_json_bounds` applies the same depth, size and integer bounds without parsing, for a
reader that parses by itself (JSON lines, another tool's ``NaN``).

Both count in one pass over the bytes, a megabyte at a time with numpy (no Python object per value,
so the count itself is cheap in memory): quotes not escaped delimit strings; outside them values
are about ``commas + containers + 1`` and the nesting depth is a running sum over the brackets. The
parse (orjson) runs only on a document within bounds.

>>> load_json_bounded(b'\\xef\\xbb\\xbf{"completed": 3}', source="r.json")
{'completed': 3}
>>> load_json_bounded('{"a": {"b": [1, NaN]}}', source="r.json")
Traceback (most recent call last):
...
perfkit.sources.safejson.UnsafeJson: r.json: a.b[1]: NaN is not a JSON number
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from perfkit.errors import PerfkitError

MAX_DEPTH = 64
"""Nesting a document may have (perfkit's result: 4; vLLM's, guidellm's, inference-perf's: under 12)."""
MAX_VALUES = 1_000_000
"""JSON values a document may hold by default: at most ~100 MB of Python objects."""
MAX_INT_DIGITS = 19
"""Digits an integer may have: 10**19 is past the 64-bit range (9.2 x 10**18)."""

_LONG_INT = re.compile(rb"(?<![0-9.eE+-])-?[0-9]{%d,}(?![0-9.eE])" % (MAX_INT_DIGITS + 1))
_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20


class UnsafeJson(PerfkitError):
    """JSON refused: ``source: key.path: reason`` (or ``source:line: reason`` where no path is known)."""

    def __init__(self, source: str, reason: str, *, path: str | None = None, line: int | None = None) -> None:
        self.source, self.reason, self.path, self.line = source, reason, path, line
        where = f"{source}:{line}" if line is not None and not path else source
        super().__init__(f"{where}: {path}: {reason}" if path else f"{where}: {reason}")


def load_json_bounded(
    data: bytes | bytearray | memoryview | str,
    *,
    source: str,
    max_depth: int = MAX_DEPTH,
    max_values: int = MAX_VALUES,
) -> Any:
    """The one JSON document in ``data`` (bytes or text), read within bounds; else :class:`UnsafeJson`.

    ``source`` names where it came from (a file, a URL) in every message. The caller bounds the
    bytes (:func:`perfkit.sources.safeio.read_capped`, or a capped HTTP read)."""
    raw = _bytes(data, source)
    check_json_bounds(raw, source=source, max_depth=max_depth, max_values=max_values)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        found = _bad_number_path(raw)  # NaN, 1e400: said with the key that holds it
        if found is not None:
            raise UnsafeJson(source, found[1], path=found[0]) from None
        reason = str(exc.msg).split(": line ")[0]
        if "UTF-8" in reason:
            raise UnsafeJson(source, "not UTF-8 text", line=exc.lineno) from None
        raise UnsafeJson(source, f"invalid JSON ({reason})", line=exc.lineno) from None


def check_json_bounds(
    data: bytes | bytearray | memoryview | str,
    *,
    source: str,
    max_depth: int = MAX_DEPTH,
    max_values: int = MAX_VALUES,
) -> None:
    """Refuse (:class:`UnsafeJson`) ``data`` nested deeper than ``max_depth``, holding more than
    ``max_values`` values or an integer beyond 64 bits, without parsing it (concatenated documents,
    JSON lines, are counted together). ``NaN`` is left to the caller's parser."""
    raw = _bytes(data, source)
    longs = _LONG_INT.finditer(raw) if _LONG_INT.search(raw) is not None else None
    found = _scan(raw, max_depth, max_values, longs)
    if found is None:
        return
    kind, at, digits = found
    line = raw.count(b"\n", 0, at) + 1  # JSON strings hold no raw newline: the line is the text's
    if kind == "values":
        raise UnsafeJson(source, f"more than {max_values:,} JSON values: refused", line=None)
    if kind == "depth":
        raise UnsafeJson(source, f"nested deeper than {max_depth} levels", line=line)
    path = _bad_number_path(raw)
    if path is not None:
        raise UnsafeJson(source, path[1], path=path[0])
    raise UnsafeJson(source, f"an integer of {digits} digits, beyond the 64-bit range", line=line)


def _scan(
    raw: bytes, max_depth: int, max_values: int, longs: Iterator[re.Match[bytes]] | None
) -> tuple[str, int, int] | None:
    """The first bound ``raw`` breaks, ``(kind, offset, digits)``: ``values`` (past ``max_values``),
    ``depth`` (past ``max_depth``) or ``int`` (one of ``longs`` outside a string); None if none.

    A chunk at a time with numpy (no object per value or string, memory flat in the input's size): a
    quote after an even run of backslashes opens or closes a string; outside strings, values are
    about ``commas + containers + 1`` and the depth is a running sum over the brackets."""
    data = np.frombuffer(raw, dtype=np.uint8)
    values, depth, parity, last_plain = 1, 0, 0, -1
    pending = next(longs, None) if longs is not None else None
    for start in range(0, data.size, _CHUNK):
        a = data[start : start + _CHUNK]
        index = np.arange(start, start + a.size, dtype=np.int64)
        plain = np.maximum.accumulate(np.where(a == 0x5C, -1, index))  # last non-backslash at or before i
        np.maximum(plain, last_plain, out=plain)
        before = np.concatenate(([last_plain], plain[:-1]))
        quotes = np.flatnonzero(a == 0x22)
        real = quotes[((start + quotes - 1 - before[quotes]) & 1) == 0]
        flips = np.zeros(a.size, dtype=np.int64)
        flips[real] = 1
        outside = ((np.cumsum(flips) - flips + parity) & 1) == 0
        opens = outside & ((a == 0x5B) | (a == 0x7B))
        closes = outside & ((a == 0x5D) | (a == 0x7D))
        values += int(np.count_nonzero(outside & (a == 0x2C))) + int(np.count_nonzero(opens))
        if values > max_values:
            return "values", start, 0
        running = np.cumsum(opens.astype(np.int64) - closes.astype(np.int64)) + depth
        over = np.flatnonzero(running > max_depth)
        if over.size:
            return "depth", start + int(over[0]), 0
        while pending is not None and pending.start() < start + a.size:
            if outside[pending.start() - start]:
                return "int", pending.start(), len(pending.group().lstrip(b"-"))
            pending = next(longs, None) if longs is not None else None
        depth = int(running[-1]) if running.size else depth
        parity = (parity + int(real.size)) & 1
        last_plain = int(plain[-1]) if plain.size else last_plain
    return None


def _bytes(data: bytes | bytearray | memoryview | str, source: str) -> bytes:
    if isinstance(data, str):
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError:
            raise UnsafeJson(source, "text with a lone surrogate: not UTF-8") from None
    else:
        raw = bytes(data)
    return raw[len(_BOM) :] if raw.startswith(_BOM) else raw


class _Bad:
    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _int(text: str) -> Any:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return _Bad(f"an integer of {digits} digits, beyond the 64-bit range")
    return int(text)


def _float(text: str) -> Any:
    value = float(text)
    if math.isfinite(value):
        return value
    shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} characters)"
    return _Bad(f"{shown} is beyond the range of a number")


def _bad_number_path(raw: bytes) -> tuple[str, str] | None:
    """``(key path, reason)`` of the first refused number of a document within the other bounds
    (parsed again by the standard library, whose hooks see each number's text); None if none."""
    try:
        doc = json.loads(
            raw.decode("utf-8", "replace"),
            parse_int=_int,
            parse_float=_float,
            parse_constant=lambda name: _Bad(f"{name} is not a JSON number"),
        )
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Bad):
            return path or "(top level)", value.why
        if isinstance(value, dict):
            stack.extend((_join(path, str(k)), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return None


def _join(path: str, key: str) -> str:
    shown = key if re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", key) else json.dumps(key[:60])
    return f"{path}.{shown}" if path else shown
