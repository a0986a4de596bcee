"""The HTTP layer every live source shares: credentials from references, TLS settings, retries with
backoff, and error messages that name the URL and status but never a credential. Every client
takes its settings as one :class:`HttpConfig` (URL, :class:`Auth` references, TLS, timeouts,
retries).

* 429 and 5xx answers, timeouts and refused connections are retried with exponential backoff
  (``backoff_s``, doubled each time), then raise :class:`~perfkit.errors.SourceError`;
* every request waits at most ``timeout_s`` for the connection and between bytes, and all
  attempts of one call, backoff included, at most ``total_timeout_s`` (default 4 × ``timeout_s``):
  past it, ``SourceError("<url>: no answer within 30 s (total 120.0 s over 4 attempts)")``;
* answers are read in pieces, at most ``max_answer_bytes`` (256 MiB, after decompression):
  a larger one is a SourceError, never a MemoryError;
* :meth:`HttpSource.read_json` (:func:`parse_json`) decodes an answer refusing one nested deeper
  than :data:`MAX_JSON_DEPTH` levels (a ``[[[[...]]]]`` answer is a SourceError, not a
  RecursionError traceback, and no deep structure reaches the code that walks it);
* 401/403 raise at once ("not authorised"), other answers go back to the API client to decode;
* the API clients check the *shape* of every answer they decode, in one pass, before anything
  walks it (:class:`BadShape`, :func:`check_text_map`, :meth:`HttpSource.shape_error`): a valid
  JSON answer of the wrong shape (a list where a mapping belongs, a label value that is a number
  or over :data:`MAX_LABEL_VALUE_BYTES`) is a SourceError naming the URL, the status and the part
  of the answer (``"<url>: HTTP 200: answer's data.result[3].metric is not a mapping of label
  names to strings (...)"``), never a TypeError traceback;
* URLs are shown without ``user:password``; answer text is shown only after the session's own
  token and password, and anything credential-like, are replaced by ``[redacted]``.

The :class:`requests.Session` and the ``sleep`` function are injected, so tests need no network
and no waiting.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests
import urllib3

from perfkit.core.secrets import REDACTED, redact_text, resolve_secret, strip_userinfo
from perfkit.errors import ConfigError, SourceError
from perfkit.sources.safeio import size_text

RETRY_STATUSES = (429, 500, 502, 503, 504)
MAX_ANSWER_BYTES = 256 * 2**20
"""Largest answer read: a range query at the 11,000-point cap for ~1,000 series is ~200 MiB of JSON."""
MAX_JSON_DEPTH = 64
"""Deepest JSON accepted: Prometheus, Loki and Alertmanager answers nest 3 to 7 levels."""
TOTAL_TIMEOUT_FACTOR = 4
"""``total_timeout_s`` defaults to this many times ``timeout_s``."""
MAX_LABEL_VALUE_BYTES = 16 * 2**10
"""Longest label value (and label name) accepted in an answer, as in OpenMetrics files (16 KiB)."""
_PIECE = 2**16

_QUOTED = re.compile(rb'"[^"]*"')
_KEEP_BRACKETS_AND_QUOTES = bytes(b for b in range(256) if b not in b'[]{}"')
_LEAF_MARKS = b"()<>"


def json_deeper_than(body: bytes, max_depth: int) -> bool:
    """Whether the *valid* JSON ``body`` (UTF-8) nests deeper than ``max_depth`` levels.

    Only brackets outside strings count. Escapes go first (in valid JSON a backslash is only in
    a string: ``\\\\`` pairs, then ``\\"``), then everything but brackets and quotes; empty
    quote pairs go (an empty string, or the seam between two strings with nothing structural
    between them: either way no bracket changes side), then the strings left, which hold
    brackets. The brackets left are balanced: each pass removes the innermost pairs of the
    text as it was at the start of the pass (marked, then deleted), so after ``max_depth``
    passes nothing is left unless it nests deeper. All in C (bytes methods): a 60 MiB range
    answer takes well under a second.
    """
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    text = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _KEEP_BRACKETS_AND_QUOTES)
    while b'""' in text:
        text = text.replace(b'""', b"")
    if b'"' in text:
        text = _QUOTED.sub(b"", text)
    for _ in range(max_depth):
        if not text:
            return False
        text = text.replace(b"[]", b"()").replace(b"{}", b"<>").translate(None, _LEAF_MARKS)
    return bool(text)


def parse_json(
    body: bytes | str, *, url: str, status: int | None = None, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Decode a JSON answer from ``url``, refusing one nested deeper than ``max_depth`` levels.

    Raises :class:`~perfkit.errors.SourceError` ``"<url>: HTTP <status>: answer nested deeper than
    64 levels"`` for a too-deep answer, and :class:`ValueError` when ``body`` is not JSON (the
    caller says so in its own words, with a snippet).
    """
    try:
        data = json.loads(body)
    except RecursionError:  # json's C decoder stops near 1,000 levels
        data, deep = None, True
    else:
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        if json.detect_encoding(raw) not in ("utf-8", "utf-8-sig"):
            raw = raw.decode(json.detect_encoding(raw)).encode("utf-8")
        deep = json_deeper_than(raw, max_depth)
    if deep:
        where = f"{url}: HTTP {status}" if status is not None else url
        raise SourceError(f"{where}: answer nested deeper than {max_depth} levels", url=url, status=status)
    return data


class BadShape(Exception):
    """A part of a decoded answer is not what the API documents: ``where`` (``data.result[3].metric``)
    and ``what`` (``is not a mapping of label names to strings (it is a list)``). The API client
    turns it into a SourceError with the URL and status (:meth:`HttpSource.shape_error`)."""

    def __init__(self, where: str, what: str) -> None:
        self.where = where
        self.what = what
        super().__init__(f"{where} {what}")


MISSING: Any = object()
"""What ``mapping.get(key, MISSING)`` gives for a key that is absent (:func:`kind_of` says so)."""


def kind_of(value: Any) -> str:
    """What a decoded JSON value is, in words: ``a list``, ``null``, ``the string 'x'`` ..."""
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"[:60]
    if isinstance(value, str):
        return f"the string {short(value)}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def short(text: str, limit: int = 40) -> str:
    """``repr(text)``, cut to about ``limit`` characters (names and values from answers)."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def check_text_map(
    value: Any,
    where: str,
    what: str = "a mapping of label names to strings",
    *,
    max_bytes: int = MAX_LABEL_VALUE_BYTES,
) -> dict[str, str]:
    """``value`` itself if it is a mapping of strings to strings, none over ``max_bytes`` in
    UTF-8; :class:`BadShape` at ``where`` otherwise."""
    if type(value) is not dict:
        raise BadShape(where, f"is not {what} (it is {kind_of(value)})")
    cheap = max_bytes // 4  # at most 4 UTF-8 bytes a character: shorter strings need no encoding
    for key, text in value.items():
        if type(text) is not str:
            raise BadShape(where, f"is not {what} ({short(key)} is {kind_of(text)})")
        for part, kind in ((key, "name"), (text, "value")):
            if len(part) > cheap and (size := len(part.encode("utf-8", "surrogatepass"))) > max_bytes:
                raise BadShape(
                    where,
                    f"has a {kind} of {size_text(size)} (label {short(key)}), over the {size_text(max_bytes)} limit",
                )
    return value


class _Deadline(Exception):
    """The total deadline of one call passed while an answer was being read."""


@dataclass(frozen=True)
class Auth:
    """References to credentials (names of env vars and files), resolved only when a client is made."""

    token_env: str | None = None
    token_file: str | None = None
    username: str | None = None
    password_env: str | None = None

    def apply(self, session: requests.Session) -> list[str]:
        """Set the session's credentials; return the secret values (to keep them out of messages)."""
        secrets: list[str] = []
        token = resolve_secret(self.token_env, self.token_file)
        if token:
            session.headers["Authorization"] = f"Bearer {token}"
            secrets.append(token)
        if self.username:
            password = resolve_secret(self.password_env) or ""
            session.auth = (self.username, password)
            if password:
                secrets.append(password)
        return secrets


@dataclass(frozen=True, repr=False)
class HttpConfig:
    """How to reach one server: the one set of HTTP settings every client takes
    (:class:`HttpSource` and its API clients; :class:`~perfkit.sources.live.LiveConfig` builds one
    per server).

    ``auth`` holds references only (env var and file names, resolved when a client is made);
    ``ca_file``, when given, is used instead of ``verify``; ``timeout_s`` bounds each request and
    ``total_timeout_s`` (None: :data:`TOTAL_TIMEOUT_FACTOR` × ``timeout_s``) all attempts of one
    call, backoff included; ``retries`` more attempts after the first, ``backoff_s`` doubled each
    time. Its repr shows the URL without ``user:password``.
    """

    url: str
    auth: Auth = Auth()
    verify: bool = True
    ca_file: str | None = None
    timeout_s: float = 30.0
    total_timeout_s: float | None = None
    retries: int = 3
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.total_timeout_s is not None and self.total_timeout_s <= 0:
            raise ConfigError(f"total_timeout_s must be positive, got {self.total_timeout_s}")

    def __repr__(self) -> str:
        return (
            f"HttpConfig({safe_url(self.url)!r}, auth={self.auth!r}, verify={self.verify!r}, "
            f"ca_file={self.ca_file!r}, timeout_s={self.timeout_s!r}, "
            f"total_timeout_s={self.total_timeout_s!r}, retries={self.retries!r}, "
            f"backoff_s={self.backoff_s!r})"
        )


def safe_url(url: str) -> str:
    """``url`` without user:password (shown in errors instead of the real one): one rule for every
    place perfkit shows or records a URL, :func:`perfkit.core.secrets.strip_userinfo`."""
    return strip_userinfo(url)


def session_secrets(session: requests.Session) -> list[str]:
    """The credentials a session carries (bearer token, basic-auth password)."""
    found: list[str] = []
    header = str(session.headers.get("Authorization", "") or "")
    if header:
        found.append(header.split(" ", 1)[-1])
    auth = getattr(session, "auth", None)
    if isinstance(auth, tuple) and len(auth) == 2 and auth[1]:
        found.append(str(auth[1]))
    return found


class HttpSource:
    """Base of the API clients: holds the session and does the retrying GET, as ``config`` says."""

    auth_hint = "check the token reference"

    def __init__(
        self,
        config: HttpConfig,
        *,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.config = config
        self.url = config.url.rstrip("/")
        self.session = session or requests.Session()
        self._secrets = config.auth.apply(self.session)
        self.session.verify = config.ca_file or config.verify
        self.timeout_s = config.timeout_s
        self.total_timeout_s = (
            config.total_timeout_s
            if config.total_timeout_s is not None
            else TOTAL_TIMEOUT_FACTOR * config.timeout_s
        )
        self.max_answer_bytes = max_answer_bytes
        self.retries = config.retries
        self.backoff_s = config.backoff_s
        self.sleep = sleep

    def __repr__(self) -> str:
        return f"{type(self).__name__}({safe_url(self.url)!r})"

    def clean(self, text: str) -> str:
        """Answer text safe to put in a message: our credentials and anything credential-like removed."""
        text = redact_text(text.replace("\n", " "))
        for secret in sorted({*self._secrets, *session_secrets(self.session)}, key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, REDACTED)
        return text

    def fetch(
        self, path: str, params: Any = None, headers: Mapping[str, str] | None = None
    ) -> tuple[str, requests.Response]:
        """GET ``path`` with retries; returns (URL as shown, response) for any non-auth answer < 429 or 4xx.

        The answer's body is read (at most ``max_answer_bytes``) before it is returned, within
        the call's deadline (``total_timeout_s`` from the first attempt, backoff included).
        """
        url = f"{self.url}{path}"
        shown = safe_url(url)
        attempts = self.retries + 1
        started = time.monotonic()
        deadline = started + self.total_timeout_s
        last, status, silent = "", None, False
        made = 0
        for attempt in range(attempts):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            made += 1
            try:
                resp = self.session.get(
                    url,
                    params=params,
                    headers=dict(headers or {}),
                    timeout=min(self.timeout_s, left),
                    stream=True,
                )
                status = resp.status_code
                if status in RETRY_STATUSES:
                    _close(resp)
                    last, silent = f"HTTP {status}", False
                elif status in (401, 403):
                    _close(resp)
                    raise SourceError(
                        f"{shown}: HTTP {status}: not authorised ({self.auth_hint})", url=shown, status=status
                    )
                else:
                    self._read_body(resp, shown, deadline)
                    return shown, resp
            except (requests.Timeout, urllib3.exceptions.TimeoutError):
                last, status, silent = f"timed out after {self.timeout_s:g} s", None, True
            except _Deadline:
                last, status, silent = "answer still arriving at the deadline", None, True
                break
            except (requests.ConnectionError, urllib3.exceptions.HTTPError) as exc:
                last, status, silent = f"cannot connect ({type(exc).__name__})", None, True
            except requests.RequestException as exc:
                raise SourceError(f"{shown}: request failed ({type(exc).__name__})", url=shown) from None
            if attempt < self.retries:
                pause = self.backoff_s * (2**attempt)
                if time.monotonic() + pause >= deadline:
                    break
                self.sleep(pause)
        else:
            raise SourceError(f"{shown}: {last} after {attempts} attempts", url=shown, status=status)
        waited = time.monotonic() - started
        if silent or not last:
            raise SourceError(
                f"{shown}: no answer within {self.timeout_s:g} s "
                f"(total {waited:.1f} s over {made} attempt{'s' if made != 1 else ''})",
                url=shown,
            )
        raise SourceError(
            f"{shown}: {last} after {made} attempt{'s' if made != 1 else ''} "
            f"(stopped at the {self.total_timeout_s:g} s total deadline)",
            url=shown,
            status=status,
        )

    def _read_body(self, resp: requests.Response, shown: str, deadline: float) -> None:
        """Read the body of a streamed ``resp`` into it (``resp.content`` / ``.text`` then work),
        at most ``max_answer_bytes`` and no later than ``deadline``; SourceError past the size."""
        cap = self.max_answer_bytes
        too_big = f"{shown}: HTTP {resp.status_code}: answer larger than the {size_text(cap)} limit"
        if not isinstance(resp, requests.Response):  # a stand-in holding its text already
            return
        content: bytes | bool | None = resp._content  # False until read (requests' own marker)
        if content is not False:  # already read (a prepared response)
            if len(resp._content or b"") > cap:
                raise SourceError(too_big, url=shown, status=resp.status_code)
            return
        length = resp.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > cap:
            _close(resp)
            raise SourceError(too_big, url=shown, status=resp.status_code)
        raw = resp.raw
        pieces: list[bytes] = []
        total = 0
        try:
            while True:
                if time.monotonic() > deadline:
                    raise _Deadline
                # read1: return what has arrived (one read of the socket), so a server that
                # trickles its answer byte by byte meets the deadline, not one read per 64 KiB
                piece = raw.read1(_PIECE, decode_content=True) if hasattr(raw, "read1") else raw.read(_PIECE)
                if not piece:
                    break
                total += len(piece)
                if total > cap:
                    raise SourceError(too_big, url=shown, status=resp.status_code)
                pieces.append(piece)
        except BaseException:
            _close(resp)
            raise
        resp._content = b"".join(pieces)
        resp._content_consumed = True  # type: ignore[attr-defined]  # requests sets it too; not in its stubs

    def shape_error(self, shown: str, resp: Any, bad: BadShape, what: str = "answer's") -> SourceError:
        """The SourceError for an answer from ``shown`` whose part ``bad.where`` is misshapen:
        ``"<url>: HTTP 200: answer's data.result[3].metric is not ..."``."""
        status = getattr(resp, "status_code", None)
        where = f"{shown}: HTTP {status}" if status is not None else shown
        return SourceError(f"{where}: {what} {bad}" if what else f"{where}: {bad}", url=shown, status=status)

    def read_json(self, shown: str, resp: Any) -> Any:
        """The JSON of an answer :meth:`fetch` returned, refusing one nested deeper than
        :data:`MAX_JSON_DEPTH` (SourceError); ValueError when it is not JSON."""
        body = getattr(resp, "content", None)
        if not isinstance(body, bytes | str):
            body = resp.text
        return parse_json(body, url=shown, status=getattr(resp, "status_code", None))


def _close(resp: Any) -> None:
    """Give back the connection of an answer whose body will not be read."""
    if getattr(resp, "raw", None) is not None:  # a prepared response (tests) has no connection
        resp.close()
