"""Alertmanager API v2 source: the alerts it holds now, as rows on the incident timeline.

:class:`AlertmanagerClient` reads ``GET /api/v2/alerts`` and turns each alert into
:data:`~perfkit.core.frames.EVENTS_SCHEMA` rows of kind ``alert``:

* one row at ``startsAt``: ``"<alertname> firing: <summary>"`` (the ``summary`` annotation, else
  ``description``, else just ``"<alertname> firing"``); ``service`` is the ``service`` label,
  else ``job``;
* one row at ``endsAt``, ``"<alertname> resolved"``, when the alert is resolved in the answer:
  ``endsAt`` before the time of the request (or a ``status.state`` of ``resolved``).

What Alertmanager returns (checked against Alertmanager 0.25 in
``tests/sources/test_alertmanager.py``): ``/api/v2/alerts`` lists **only alerts that have not
ended**. An alert posted with ``endsAt`` in the past is accepted (HTTP 200) and then never listed,
not even with ``active=false`` (nor by ``/api/v2/alerts/groups``); an alert whose ``endsAt`` passes
drops out of the list at that moment. ``endsAt`` of a listed alert is in the future: the time
Alertmanager will consider it resolved if it is not sent again (``resolve_timeout``, or what the
sender set), not a resolution. So with a real Alertmanager the timeline gets the firing rows of
alerts active at query time; the history of resolved alerts lives in Prometheus' ``ALERTS``
series. The resolved rows are for answers that do carry ended alerts (recorded answers, proxies).

Label values and annotations are untrusted text: they are kept verbatim (the report escapes them).
The answer's shape is checked before it is used (:func:`check_alerts`): a list of mappings whose
``labels`` and ``annotations`` map names to strings (label values at most 16 KiB, annotations 64
KiB), ``startsAt``/``endsAt`` strings and ``status`` a mapping; anything else is
``SourceError("<url>: HTTP 200: answer[3].labels is not a mapping of label names to strings
(...)")``, never a TypeError.

HTTP behaves as in :mod:`perfkit.sources.prometheus`: the session is injected, 5xx answers,
timeouts and refused connections are retried with exponential backoff, and every failure is a
:class:`~perfkit.errors.SourceError` naming the URL and status, never a credential.

>>> client = AlertmanagerClient(HttpConfig("http://127.0.0.1:9093", timeout_s=10))  # doctest: +SKIP
>>> client.timeline_events(Window("2026-11-30T01:00:00Z", "2026-11-30T03:00:00Z"))  # doctest: +SKIP
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import polars as pl
import requests

from perfkit.core.frames import EVENTS_SCHEMA, Window, utc
from perfkit.errors import SourceError
from perfkit.sources.http import MISSING, BadShape, HttpConfig, HttpSource, check_text_map, kind_of

MAX_ANNOTATION_BYTES = 64 * 2**10
"""Longest annotation value accepted (a summary or description; real ones are well under 1 KiB)."""
_FRACTION = re.compile(r"(\.\d{6})\d+")  # Go writes up to 9 fractional digits; datetime takes 6


def _now() -> datetime:
    return datetime.now(UTC)


class AlertmanagerClient(HttpSource):
    """Reads alerts from an Alertmanager (API v2). ``config.url`` is the base URL, with any route prefix."""

    def __init__(
        self,
        config: HttpConfig,
        *,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        super().__init__(config, session=session, sleep=sleep)
        self.clock = clock

    # -- HTTP ------------------------------------------------------------------------------------

    def get(
        self, path: str, params: Sequence[tuple[str, str]] = (), check: Callable[[Any], Any] | None = None
    ) -> Any:
        """GET ``path`` and return the decoded JSON; retries 429/5xx/timeouts; raises SourceError.

        With ``check``, return ``check(body)`` instead; a :class:`~perfkit.sources.http.BadShape`
        it raises is a SourceError naming the URL, the status and the part of the answer.
        """
        shown, resp = self.fetch(path, list(params))
        status = resp.status_code
        if status >= 400:
            raise SourceError(
                f"{shown}: HTTP {status}: {self._snippet(resp.text)!r}", url=shown, status=status
            )
        try:
            body = self.read_json(shown, resp)
        except ValueError:
            raise SourceError(
                f"{shown}: HTTP {status}: answer is not JSON ({self._snippet(resp.text)!r})",
                url=shown,
                status=status,
            ) from None
        if check is None:
            return body
        try:
            return check(body)
        except BadShape as bad:
            raise self.shape_error(shown, resp, bad, "") from None

    def _snippet(self, text: str) -> str:
        """The start of an answer body, safe to show."""
        return self.clean(text[:120])

    # -- API -------------------------------------------------------------------------------------

    def alerts(
        self,
        *,
        active: bool = True,
        silenced: bool = True,
        inhibited: bool = True,
        unprocessed: bool = True,
        filters: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds now (``GET /api/v2/alerts``), as its JSON objects.

        ``filters`` are label matchers (``'service="vllm-chat"'``). Resolved alerts are never
        listed (see the module docstring).
        """
        params = [
            ("active", _flag(active)),
            ("silenced", _flag(silenced)),
            ("inhibited", _flag(inhibited)),
            ("unprocessed", _flag(unprocessed)),
            *(("filter", f) for f in filters),
        ]
        return self.get("/api/v2/alerts", params, check_alerts)

    def timeline_events(self, window: Window, service: str | None = None) -> pl.DataFrame:
        """Alert rows (EVENTS_SCHEMA, kind ``alert``) for the alerts that fired during ``window``.

        An alert that started before the window and was still firing in it keeps its real start.
        ``service`` keeps only alerts whose ``service`` (else ``job``) label equals it.
        """
        return alerts_to_events(self.alerts(), window, service=service, now=self.clock())


def check_alerts(body: Any) -> list[dict[str, Any]]:
    """``body`` of a ``/api/v2/alerts`` answer if it has the shape perfkit reads (see the module
    docstring; other fields are not read, so not checked); :class:`~perfkit.sources.http.BadShape`
    naming the part (``answer[3].labels``) otherwise."""
    if type(body) is not list:
        raise BadShape("answer", f"is {kind_of(body)} (want a JSON list of alerts)")
    for i, alert in enumerate(body):
        where = f"answer[{i}]"
        if type(alert) is not dict:
            raise BadShape(where, f"is {kind_of(alert)} (want an alert, a mapping)")
        labels = alert.get("labels", MISSING)
        if labels is not MISSING:
            check_text_map(labels, f"{where}.labels")
        annotations = alert.get("annotations", MISSING)
        if annotations is not MISSING:
            check_text_map(
                annotations,
                f"{where}.annotations",
                "a mapping of names to strings",
                max_bytes=MAX_ANNOTATION_BYTES,
            )
        for key in ("startsAt", "endsAt"):
            value = alert.get(key, MISSING)
            if value is not MISSING and type(value) is not str:
                raise BadShape(
                    f"{where}.{key}", f"is not a time (an RFC 3339 string; it is {kind_of(value)})"
                )
        status = alert.get("status", MISSING)
        if status is not MISSING:
            if type(status) is not dict:
                raise BadShape(f"{where}.status", f"is not a mapping (it is {kind_of(status)})")
            state = status.get("state", MISSING)
            if state is not MISSING and type(state) is not str:
                raise BadShape(f"{where}.status.state", f"is not a string (it is {kind_of(state)})")
    return body


def alerts_to_events(
    alerts: Sequence[dict[str, Any]],
    window: Window,
    *,
    service: str | None = None,
    now: datetime | None = None,
) -> pl.DataFrame:
    """Turn Alertmanager v2 alert objects into EVENTS_SCHEMA rows (see :class:`AlertmanagerClient`).

    ``now`` is when the alerts were read: an alert whose ``endsAt`` is before it has resolved.
    Alerts without a parseable ``startsAt`` are skipped.
    """
    now = utc(now) if now is not None else _now()
    rows: list[dict[str, Any]] = []
    for alert in alerts:
        labels = _text_map(alert.get("labels"))
        annotations = _text_map(alert.get("annotations"))
        name = labels.get("alertname") or "(unnamed alert)"
        svc = labels.get("service") or labels.get("job") or None
        if service is not None and svc != service:
            continue
        start = parse_time(alert.get("startsAt"))
        if start is None:
            continue
        end = parse_time(alert.get("endsAt"))
        state = (alert.get("status") or {}).get("state") if isinstance(alert.get("status"), dict) else None
        resolved = state == "resolved" or (end is not None and end < now)
        summary = annotations.get("summary") or annotations.get("description")
        if start <= window.end and not (resolved and end is not None and end < window.start):
            detail = f"{name} firing: {summary}" if summary else f"{name} firing"
            rows.append({"ts": start, "kind": "alert", "service": svc, "version": None, "detail": detail})
        if resolved and end is not None and window.contains(end):
            rows.append(
                {"ts": end, "kind": "alert", "service": svc, "version": None, "detail": f"{name} resolved"}
            )
    frame = pl.DataFrame(rows, schema=EVENTS_SCHEMA) if rows else pl.DataFrame(schema=EVENTS_SCHEMA)
    return frame.sort(["ts", "detail"], maintain_order=True)


def parse_time(value: object) -> datetime | None:
    """A UTC datetime from an Alertmanager RFC 3339 time; None for missing, unparseable or Go's zero time.

    >>> parse_time("2026-11-30T01:47:25.877954772Z").isoformat()
    '2026-11-30T01:47:25.877954+00:00'
    """
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        ts = utc(_FRACTION.sub(r"\1", value.strip()))
    except ValueError:
        return None
    return None if ts.year <= 1 else ts


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _text_map(value: object) -> dict[str, str]:
    """Labels or annotations as str → str (values kept verbatim; non-mappings give {})."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v if isinstance(v, str) else str(v) for k, v in value.items()}
