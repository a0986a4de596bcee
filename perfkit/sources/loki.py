"""Loki source: log lines by LogQL over Loki's HTTP API, parsed like log files.

:meth:`LokiClient.query_range` calls ``GET /loki/api/v1/query_range`` (``query``, ``start`` and
``end`` in ns since the epoch, ``limit``, ``direction``) and reads the ``streams`` answer::

    {"status": "success",
     "data": {"resultType": "streams",
              "result": [{"stream": {"job": "vllm"}, "values": [["<ns>", "<line>"], ...]}]}}

Loki returns entries with ``start <= ts < end`` and at most ``limit`` of them, so a closed
:class:`~perfkit.core.frames.Window` is sent as ``end = window end + 1 ns``, and a page that comes back
full is followed by another one. As logcli does, the next page starts *at* the last timestamp
(not one ns after: several entries may share a timestamp and the page may have cut between
them) and the entries seen already are dropped.

:meth:`LokiClient.read` feeds each stream's lines through
:func:`perfkit.sources.logs.parse_lines` (source name: a short label summary such as
``{job="vllm"}``), so vLLM stats, NCCL, OOM and Xid lines become the same records as from files.
A line with a timestamp of its own keeps it; a line without one gets Loki's timestamp (not the
previous line's, which is what a file gives it).

Every page's shape is checked before it is used (:func:`_page_entries`): each stream a mapping
whose ``stream`` maps label names to strings (16 KiB at most) and whose ``values`` are
``["<ns>", "<line>"]`` (or ``[..., {metadata}]``), the time a string of digits within years 1 to
9999. Anything else is ``SourceError("<url>: HTTP 200: malformed streams answer:
data.result[0].values[3][0] is not ...")``, never a TypeError.

HTTP behaves as in :mod:`perfkit.sources.prometheus`: injected session, 429/5xx answers,
timeouts and refused connections retried with exponential backoff, every failure a
:class:`~perfkit.errors.SourceError` naming the URL and status, never a credential. ``tenant``
is sent as ``X-Scope-OrgID`` (multi-tenant Loki, Grafana Cloud).

>>> loki = LokiClient(HttpConfig("http://127.0.0.1:3100"), tenant="prod")  # doctest: +SKIP
>>> loki.read('{job="vllm"}', Window("2026-11-30T00:00:00Z", "2026-11-30T03:00:00Z")).records  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import requests

from perfkit.core.frames import LOG_SCHEMA, STATS_SCHEMA, TS_DTYPE, Window
from perfkit.errors import ConfigError, SourceError
from perfkit.sources.http import (
    MISSING,
    BadShape,
    HttpConfig,
    HttpSource,
    check_text_map,
    kind_of,
    safe_url,
    short,
)
from perfkit.sources.logs import LogResult, parse_lines

DIRECTIONS = ("forward", "backward")

#: label names tried, in order, to name a stream briefly (``{job="vllm"}``)
SUMMARY_LABELS = (
    "job",
    "service_name",
    "app",
    "namespace",
    "pod",
    "container",
    "instance",
    "host",
    "node",
    "filename",
    "stream",
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_NS = 253_402_300_799_999_999_999
"""Latest entry time accepted in an answer (ns since 1970: the end of year 9999)."""
# parse_lines gives a line without a timestamp of its own the previous line's. Feeding this line
# before every real line makes that "previous timestamp" a value no real line has (year 1), so
# those lines can be found and given Loki's timestamp instead.
_MARK_LINE = "0001-01-01T00:00:00Z"
_MARK_TS = datetime(1, 1, 1, tzinfo=UTC)

Entry = tuple[int, tuple[tuple[str, str], ...], str]  # (ns, sorted labels, line)


class LokiClient(HttpSource):
    """Reads log lines from Loki (``/loki/api/v1/query_range``), paging and retrying."""

    def __init__(
        self,
        config: HttpConfig,
        *,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        limit: int = 5000,
        tenant: str | None = None,
    ) -> None:
        if limit < 1:
            raise ConfigError(f"limit must be positive, got {limit}")
        super().__init__(config, session=session, sleep=sleep)
        self.limit = limit
        self.tenant = tenant

    def __repr__(self) -> str:
        tenant = f", tenant={self.tenant!r}" if self.tenant else ""
        return f"LokiClient({safe_url(self.url)!r}{tenant})"

    # -- HTTP ------------------------------------------------------------------------------------

    auth_hint = "check the token reference and tenant"

    def get(self, path: str, params: dict[str, str], check: Callable[[Any], Any] | None = None) -> Any:
        """GET ``path`` and return the answer's ``data``; retries 429/5xx/timeouts; raises SourceError.

        With ``check``, return ``check(data)`` instead; a :class:`~perfkit.sources.http.BadShape`
        it raises is a SourceError naming the URL, the status and the part of the answer.
        """
        headers = {"X-Scope-OrgID": self.tenant} if self.tenant else {}
        shown, resp = self.fetch(path, params, headers)
        data = self._data(shown, resp)
        if check is None:
            return data
        try:
            return check(data)
        except BadShape as bad:
            what = "answer's" if bad.where == "data.resultType" else "malformed streams answer:"
            raise self.shape_error(shown, resp, bad, what) from None

    def _data(self, shown: str, resp: requests.Response) -> Any:
        status = resp.status_code
        try:
            body = self.read_json(shown, resp)
        except ValueError:
            # Loki answers a bad query with HTTP 400 and the error as plain text
            what = "error" if status >= 400 else "answer is not JSON"
            raise SourceError(
                f"{shown}: HTTP {status}: {what} ({self.clean(resp.text[:160])!r})", url=shown, status=status
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success" or status >= 400:
            err, kind = "unexpected answer", ""
            if isinstance(body, dict):
                err = str(body.get("error") or body.get("message") or f"status {body.get('status')!r}")
                kind = str(body.get("errorType") or "")
            raise SourceError(
                f"{shown}: HTTP {status}: {kind} {self.clean(err)}".replace("  ", " "),
                url=shown,
                status=status,
            )
        if not isinstance(body.get("data"), dict):
            raise SourceError(f"{shown}: HTTP {status}: answer has no data", url=shown, status=status)
        return body["data"]

    # -- API -------------------------------------------------------------------------------------

    def query_range(
        self, logql: str, window: Window, direction: str = "forward"
    ) -> list[tuple[datetime, dict[str, str], str]]:
        """Every entry of ``logql`` in the closed ``window``: (UTC time, stream labels, line).

        In time order (``forward``) or newest first (``backward``); pages of ``limit`` entries
        are fetched until one comes back short. Times keep microseconds (Loki has ns).
        """
        return [
            (_ns_datetime(ns), dict(labels), line)
            for ns, labels, line in self._entries(logql, window, direction)
        ]

    def read(self, logql: str, window: Window) -> LogResult:
        """The entries of ``logql`` in ``window`` parsed as log records, one source per stream.

        ``records``/``stats`` as from :func:`perfkit.sources.logs.read_logs`; ``line`` is the
        1-based position of the entry in its stream; ``files`` lists the stream summaries.
        """
        by_stream: dict[tuple[tuple[str, str], ...], list[tuple[int, str]]] = {}
        for ns, labels, line in self._entries(logql, window, "forward"):
            by_stream.setdefault(labels, []).append((ns, line))
        names = stream_names(list(by_stream))
        parts = [
            _parse_stream(names[labels], entries, window)
            for labels, entries in sorted(by_stream.items(), key=lambda item: names[item[0]])
        ]
        if not parts:
            return LogResult(pl.DataFrame(schema=LOG_SCHEMA), pl.DataFrame(schema=STATS_SCHEMA))
        records = pl.concat([p.records for p in parts])
        stats = pl.concat([p.stats for p in parts]).sort("ts", nulls_last=True, maintain_order=True)
        unknown_by_file = {name: n for p in parts for name, n in p.unknown_by_file.items()}
        return LogResult(
            records,
            stats,
            sum(unknown_by_file.values()),
            unknown_by_file,
            [name for p in parts for name in p.files],
            [],
        )

    # -- paging ----------------------------------------------------------------------------------

    def _entries(self, logql: str, window: Window, direction: str) -> list[Entry]:
        if direction not in DIRECTIONS:
            raise ConfigError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        forward = direction == "forward"
        start, end = _ns(window.start), _ns(window.end) + 1  # Loki's end is exclusive
        seen: set[Entry] = set()
        out: list[Entry] = []
        while True:
            page: list[Entry] = self.get(
                "/loki/api/v1/query_range",
                {
                    "query": logql,
                    "start": str(start),
                    "end": str(end),
                    "limit": str(self.limit),
                    "direction": direction,
                },
                _page_entries,
            )
            page.sort(key=lambda e: e[0], reverse=not forward)
            fresh = [e for e in page if e not in seen]
            seen.update(fresh)
            out.extend(fresh)
            if len(page) < self.limit:
                break
            edge = page[-1][0]
            # Start the next page at the edge timestamp (entries there may have been cut). If a
            # whole page was already seen, more than `limit` entries share that ns: step past it.
            if forward:
                start = edge if fresh else edge + 1
            else:
                end = edge + 1 if fresh else edge
            if start >= end:
                break
        out.sort(key=lambda e: e[0], reverse=not forward)  # stable: Loki's order within a timestamp
        return out


def _page_entries(data: dict[str, Any]) -> list[Entry]:
    """The (ns, labels, line) entries of one ``streams`` answer's ``data``, its shape checked in
    the same pass; :class:`~perfkit.sources.http.BadShape` naming the part that is wrong."""
    kind = data.get("resultType", MISSING)
    if kind != "streams":
        said = short(kind) if type(kind) is str else kind_of(kind)
        raise BadShape("data.resultType", f"is {said}, not 'streams' (is this a metric query?)")
    result = data.get("result", MISSING)
    if type(result) is not list:
        raise BadShape("data.result", f"is not a list of streams (it is {kind_of(result)})")
    entries: list[Entry] = []
    for i, stream in enumerate(result):
        where = f"data.result[{i}]"
        if type(stream) is not dict:
            raise BadShape(
                where, f"is not a stream (a mapping with stream and values; it is {kind_of(stream)})"
            )
        labels_map = stream.get("stream", MISSING)
        labels_map = {} if labels_map is MISSING else check_text_map(labels_map, f"{where}.stream")
        labels = tuple(sorted(labels_map.items()))
        values = stream.get("values", MISSING)
        if values is MISSING:
            continue
        if type(values) is not list:
            raise BadShape(
                f"{where}.values", f"is not a list of [time, line] pairs (it is {kind_of(values)})"
            )
        for j, value in enumerate(values):
            # [ns, line] or, with structured metadata, [ns, line, {...}]
            if type(value) is not list or not 2 <= len(value) <= 3:
                raise BadShape(f"{where}.values[{j}]", f"is not a [time, line] pair (it is {kind_of(value)})")
            ns, line = value[0], value[1]
            if not (
                type(ns) is str and 0 < len(ns) <= 21 and ns.isascii() and ns.isdigit() and int(ns) <= MAX_NS
            ):
                raise BadShape(
                    f"{where}.values[{j}][0]",
                    f"is not a time (ns since 1970 as a string of digits, years 1970 to 9999; it is {kind_of(ns)})",
                )
            if type(line) is not str:
                raise BadShape(
                    f"{where}.values[{j}][1]", f"is not a log line (a string; it is {kind_of(line)})"
                )
            if len(value) == 3 and type(value[2]) is not dict:
                raise BadShape(
                    f"{where}.values[{j}][2]", f"is not a mapping of metadata (it is {kind_of(value[2])})"
                )
            entries.append((int(ns), labels, line))
    return entries


def stream_names(streams: list[tuple[tuple[str, str], ...]]) -> dict[tuple[tuple[str, str], ...], str]:
    """A short, unique name per stream: the fewest :data:`SUMMARY_LABELS` that tell it apart.

    >>> a, b = (("job", "vllm"), ("pod", "p0")), (("job", "train"), ("pod", "t0"))
    >>> stream_names([a, b])[a]
    '{job="vllm"}'
    """
    names = {}
    for labels in streams:
        mine = dict(labels)
        keys = [k for k in SUMMARY_LABELS if k in mine] + sorted(k for k in mine if k not in SUMMARY_LABELS)
        chosen = keys
        for n in range(1, len(keys) + 1):
            head = keys[:n]
            clash = any(
                other != labels and all(dict(other).get(k) == mine[k] for k in head) for other in streams
            )
            if not clash:
                chosen = head
                break
        names[labels] = _selector({k: mine[k] for k in chosen})
    return names


def _selector(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in labels.items()) + "}"


def _parse_stream(name: str, entries: list[tuple[int, str]], window: Window) -> LogResult:
    """parse_lines over one stream's lines; lines without a timestamp of their own get Loki's."""
    fed: list[str] = []
    for _, line in entries:
        fed.extend((_MARK_LINE, line))
    result = parse_lines(fed, window=window, source=name)
    loki_ms = pl.Series("loki", [ns // 1_000_000 for ns, _ in entries], dtype=pl.Int64).cast(TS_DTYPE)

    records = result.records.filter(pl.col("line") % 2 == 0).with_columns(pl.col("line") // 2)
    no_own_ts = records["ts"].is_null() | (records["ts"] == _MARK_TS)
    position = (records["line"] - 1).to_list()
    records = records.with_columns(
        pl.when(no_own_ts).then(loki_ms.gather(position)).otherwise(pl.col("ts")).alias("ts")
    )

    # stats rows are made in the order of the vllm_stats records, and parse_lines sorts them
    # stably, so the rows without a time of their own are still in that order among themselves
    stats = result.stats
    stats_no_own_ts = stats["ts"].is_null() | (stats["ts"] == _MARK_TS)
    from_loki = records.filter(no_own_ts & (records["kind"] == "vllm_stats"))["ts"]
    if stats_no_own_ts.any() and int(stats_no_own_ts.sum()) == from_loki.len():
        fixed = stats["ts"].scatter(stats_no_own_ts.arg_true(), from_loki)
        stats = stats.with_columns(fixed).sort("ts", nulls_last=True, maintain_order=True)

    unknown = max(0, result.unknown - len(entries))  # every mark line counts as unknown
    return LogResult(records, stats, unknown, {name: unknown}, [name], [])


def _ns(ts: datetime) -> int:
    """Nanoseconds since the epoch of an aware datetime (exact, no float rounding)."""
    delta = ts - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _ns_datetime(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)
