"""A streamed pass over the ``traceEvents`` array of a Kineto (Chrome trace format) JSON document.

A Kineto trace is one JSON object whose ``traceEvents`` member holds every event; a real one can be
gigabytes. Parsing it whole (``json.loads``) costs several times the text in Python objects, so this
module never holds more than one chunk of text (``CHUNK`` bytes, plus one unfinished event):

1. the text is read in chunks; numpy finds the quote characters and the braces and brackets that
   are outside strings (a quote preceded by an odd run of backslashes is escaped), and from their
   running depth the byte ranges of the array's elements;
2. of those elements only the ones an analysis can use are parsed (with orjson, the fastest
   well-kept JSON parser for CPython): events that carry an ``args.stream`` or ``args.correlation``
   key, or a name with ``ProfilerStep`` or ``enumerate(DataLoader)`` in it. Selection looks for
   these keys' bytes, so it keeps a superset: an element whose text merely mentions them is parsed
   and judged on its fields like any other. A key spelled with JSON ``\\u`` escapes would be missed;
   no profiler writes one.

The members before and after ``traceEvents`` (``distributedInfo``, ``deviceProperties``,
``baseTimeNanoseconds``...) are parsed as a small JSON object each, bounded by ``MAX_META``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

#: bytes of decompressed text per step: large enough that numpy's per-call overhead vanishes
#: (8 MiB is ~30k Kineto events), small enough that a chunk and its parsed events stay near 50 MB.
CHUNK = 8 << 20
#: events parsed into Python objects at once: a parsed event costs 1-2 kB (dicts of its fields and
#: args), so a chunk of small events (150k in 8 MiB) parsed whole would cost ~300 MB; 16k cost ~30 MB
BATCH = 16_384
#: the members around ``traceEvents`` are metadata (a few kB in real traces); 64 MiB is far above
#: any real one and still bounded.
MAX_META = 64 << 20
#: one event (its args included) larger than this is not a profiler event; Kineto's largest,
#: ``Input Dims`` of a fused op, are kilobytes.
MAX_EVENT = 64 << 20

_QUOTE, _BACKSLASH = 34, 92
_OPEN_OBJ, _CLOSE_OBJ, _OPEN_ARR, _CLOSE_ARR = 123, 125, 91, 93
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
#: exact key strings (between quotes) that mark an event an analysis can use
_KEYS = (b"correlation", b"stream")
#: substrings of names an analysis uses (ProfilerStep anywhere: HTA's rule, ``"ProfilerStep" in name``)
_NAME_MARKS = (b"ProfilerStep", b"enumerate(DataLoader)")


class ScanError(ValueError):
    """The text is not a Kineto trace document; the message says what was found and where."""


@dataclass
class ScanResult:
    """What a pass found besides the selected events."""

    meta: dict[str, Any] = field(default_factory=dict)
    elements: int = 0
    bytes_read: int = 0


def _quotes(a: np.ndarray, buf: bytes, start: int) -> np.ndarray:
    """Positions (relative to ``start``) of the unescaped quote characters of ``a``."""
    q = np.flatnonzero(a == _QUOTE)
    if len(q) == 0 or buf.find(b"\\", start) == -1:
        return q
    prev = np.zeros(len(q), dtype=bool)
    prev[q > 0] = a[q[q > 0] - 1] == _BACKSLASH
    if not prev.any():
        return q
    bs = np.flatnonzero(a == _BACKSLASH)
    brk = np.ones(len(bs), dtype=bool)
    brk[1:] = np.diff(bs) != 1
    run_start = bs[np.maximum.accumulate(np.where(brk, np.arange(len(bs)), 0))]
    cand = np.flatnonzero(prev)
    j = np.searchsorted(bs, q[cand] - 1)
    escaped = (q[cand] - run_start[j]) % 2 == 1
    keep = np.ones(len(q), dtype=bool)
    keep[cand[escaped]] = False
    return q[keep]


def _structure(buf: bytes, start: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For ``buf[start:]``, which begins outside any string: the unescaped quotes, and the
    positions, bytes and running depth of the brackets outside strings (all relative to start)."""
    a = np.frombuffer(buf, dtype=np.uint8)[start:]
    q = _quotes(a, buf, start)
    s = np.flatnonzero((a == _OPEN_OBJ) | (a == _CLOSE_OBJ) | (a == _OPEN_ARR) | (a == _CLOSE_ARR))
    s = s[(np.searchsorted(q, s) & 1) == 0]
    ch = a[s]
    depth = np.cumsum(np.where((ch == _OPEN_OBJ) | (ch == _OPEN_ARR), 1, -1))
    return q, s, ch, depth


def _header_object(buf: bytes, at: int, what: str) -> dict[str, Any]:
    """Parse ``{ ... ,`` (the members before ``traceEvents``) as an object."""
    head = buf[:at].rstrip()
    if head.endswith(b","):
        head = head[:-1]
    try:
        meta = orjson.loads(head + b"}")
    except orjson.JSONDecodeError as exc:
        raise ScanError(f"{what} before traceEvents is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ScanError(f"{what} is not a JSON object")
    return meta


def _find_events(buf: bytes) -> tuple[int, int] | None:
    """Where the key ``"traceEvents"`` starts and its array's text begins, when that key is a
    member of the top-level object (not text inside a string, not a nested key)."""
    matches = list(_EVENTS_KEY.finditer(buf))
    if not matches:
        return None
    head = buf[: matches[-1].end()]  # the header is small; the chunk after it need not be scanned
    q, s, _, depth = _structure(head, 0)
    for m in matches:
        before = int(np.searchsorted(s, m.start()))
        level = int(depth[before - 1]) if before else 0
        if level == 1 and int(np.searchsorted(q, m.start())) % 2 == 0:
            return m.start(), m.end()
    return None


def _selected(buf: bytes, start: int, q: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Indexes of the elements (``buf[start+starts[i]] .. buf[start+ends[i]]``) worth parsing."""
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64)
    a = np.frombuffer(buf, dtype=np.uint8)[start:]
    limit = ends[-1]
    q = q[q <= limit]
    opens, closes = q[0::2], q[1::2]
    opens = opens[: len(closes)]
    lengths = closes - opens - 1
    hits = []
    for key in _KEYS:
        o = opens[lengths == len(key)]
        if len(o):
            want = np.frombuffer(key, dtype=np.uint8)
            got = a[o[:, None] + np.arange(1, len(key) + 1)]
            hits.append(o[(got == want).all(axis=1)])
    for mark in _NAME_MARKS:
        i = buf.find(mark, start, start + limit)
        found = []
        while i != -1:
            found.append(i - start)
            i = buf.find(mark, i + len(mark), start + limit)
        if found:
            hits.append(np.asarray(found, dtype=np.int64))
    if not hits:
        return np.zeros(0, dtype=np.int64)
    pos = np.concatenate(hits)
    idx = np.searchsorted(starts, pos, side="right") - 1
    ok = idx >= 0
    idx, pos = idx[ok], pos[ok]
    idx = idx[pos <= ends[idx]]
    return np.unique(idx)


def scan_events(
    read: Callable[[int], bytes], result: ScanResult, *, chunk: int = CHUNK
) -> Iterator[list[Any]]:
    """Yield lists of the selected elements of ``traceEvents``, parsed, from the text ``read(n)``
    returns; fill ``result`` with the other members and counts. Raises :class:`ScanError`."""
    buf = b""
    eof = False

    def more(n: int) -> bool:
        nonlocal buf, eof
        piece = read(n)
        if not piece:
            eof = True
            return False
        result.bytes_read += len(piece)
        buf += piece
        return True

    # the members before the array
    while True:
        found = _find_events(buf) if b"traceEvents" in buf else None
        if found is not None:
            break
        if len(buf) > MAX_META:
            raise ScanError(f"no traceEvents array in the first {MAX_META >> 20} MiB")
        if not more(chunk):
            stripped = buf.lstrip()
            if not stripped:
                raise ScanError("empty file")
            if stripped[:1] != b"{":
                raise ScanError("not a Kineto trace: the document is not a JSON object with traceEvents")
            raise ScanError("not a Kineto trace: no traceEvents array")
    if buf.lstrip()[:1] != b"{":
        raise ScanError("not a Kineto trace: the document is not a JSON object")
    result.meta.update(_header_object(buf, found[0], "the header"))
    buf = buf[found[1] :]

    # the array, chunk by chunk: [0, done) is consumed; elements end at their closing brace
    closed_at = -1
    while closed_at < 0:
        if not eof and len(buf) < chunk:
            more(chunk)
        q, s, ch, depth = _structure(buf, 0)
        close = np.flatnonzero(depth < 0)
        stop = int(s[close[0]]) if len(close) else len(buf)
        if len(close) and ch[close[0]] != _CLOSE_ARR:
            raise ScanError(f"malformed traceEvents near byte {result.bytes_read - len(buf) + stop}")
        inside = s < stop
        s_in, ch_in, d_in = s[inside], ch[inside], depth[inside]
        starts = s_in[(d_in == 1) & ((ch_in == _OPEN_OBJ) | (ch_in == _OPEN_ARR))]
        ends = s_in[(d_in == 0) & ((ch_in == _CLOSE_OBJ) | (ch_in == _CLOSE_ARR))]
        starts = starts[: len(ends)]
        if len(close):
            closed_at = stop
        elif eof:
            raise ScanError(
                f"the trace ends inside traceEvents after {result.bytes_read} bytes (truncated file?)"
            )
        result.elements += len(ends)
        if len(ends):
            pick = _selected(buf, 0, q, starts, ends)
            for at in range(0, len(pick), BATCH):
                part = pick[at : at + BATCH].tolist()
                body = b",".join([buf[int(starts[i]) : int(ends[i]) + 1] for i in part])
                try:
                    yield orjson.loads(b"[" + body + b"]")
                except orjson.JSONDecodeError as exc:
                    raise ScanError(f"an event near byte {result.bytes_read} is not JSON ({exc})") from None
        if closed_at >= 0:
            buf = buf[closed_at + 1 :]
            break
        done = int(ends[-1]) + 1 if len(ends) else 0
        buf = buf[done:]
        if not len(ends) and len(buf) > MAX_EVENT:
            raise ScanError(f"an event near byte {result.bytes_read} is over {MAX_EVENT >> 20} MiB")
        if not len(ends) and not eof:
            more(max(chunk, len(buf)))  # one event longer than a chunk: read on until it ends

    # the members after the array
    while more(chunk):
        if len(buf) > MAX_META:
            raise ScanError(f"over {MAX_META >> 20} MiB of metadata after traceEvents")
    tail = buf.strip()
    if not tail.endswith(b"}"):
        raise ScanError(
            f"the trace ends after traceEvents without closing the object ({result.bytes_read} bytes)"
        )
    tail = tail[1:] if tail.startswith(b",") else tail
    try:
        trailer = orjson.loads(b"{" + tail)
    except orjson.JSONDecodeError as exc:
        raise ScanError(f"the members after traceEvents are not JSON ({exc})") from None
    result.meta.update(trailer)
