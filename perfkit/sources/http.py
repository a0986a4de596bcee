"""The HTTP layer every live source shares: credentials from references, TLS settings, retries with
backoff, and error messages that name the URL and status but never a credential.

* 429 and 5xx answers, timeouts and refused connections are retried with exponential backoff
  (``backoff_s``, doubled each time), then raise :class:`~perfkit.errors.SourceError`;
* 401/403 raise at once ("not authorised"), other answers go back to the API client to decode;
* URLs are shown without ``user:password``; answer text is shown only after the session's own
  token and password, and anything credential-like, are replaced by ``[redacted]``.

The :class:`requests.Session` and the ``sleep`` function are injected, so tests need no network
and no waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests

from perfkit.errors import SourceError
from perfkit.secrets import REDACTED, redact_text, resolve_secret

RETRY_STATUSES = (429, 500, 502, 503, 504)


@dataclass
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


def safe_url(url: str) -> str:
    """``url`` without user:password (shown in errors instead of the real one)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


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
    """Base of the API clients: holds the session and does the retrying GET."""

    auth_hint = "check the token reference"

    def __init__(
        self,
        url: str,
        *,
        session: requests.Session | None = None,
        auth: Auth | None = None,
        verify: bool = True,
        ca_file: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.session = session or requests.Session()
        self._secrets = (auth or Auth()).apply(self.session)
        self.session.verify = ca_file or verify
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
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
        """GET ``path`` with retries; returns (URL as shown, response) for any non-auth answer < 429 or 4xx."""
        url = f"{self.url}{path}"
        shown = safe_url(url)
        attempts = self.retries + 1
        last, status = "", None
        for attempt in range(attempts):
            try:
                resp = self.session.get(
                    url, params=params, headers=dict(headers or {}), timeout=self.timeout_s
                )
            except requests.Timeout:
                last, status = f"timed out after {self.timeout_s:g} s", None
            except requests.ConnectionError as exc:
                last, status = f"cannot connect ({type(exc).__name__})", None
            except requests.RequestException as exc:
                raise SourceError(f"{shown}: request failed ({type(exc).__name__})", url=shown) from None
            else:
                status = resp.status_code
                if status in RETRY_STATUSES:
                    last = f"HTTP {status}"
                elif status in (401, 403):
                    raise SourceError(
                        f"{shown}: HTTP {status}: not authorised ({self.auth_hint})", url=shown, status=status
                    )
                else:
                    return shown, resp
            if attempt < self.retries:
                self.sleep(self.backoff_s * (2**attempt))
        raise SourceError(f"{shown}: {last} after {attempts} attempts", url=shown, status=status)
