"""Secrets are references, never values: detect secret-looking parameters, resolve references,
and scrub known secret values out of everything perfkit writes.

A runbook parameter names where a secret lives (``prometheus_token_env = "PROM_TOKEN"``,
``..._file = "/run/secrets/prom"``); :func:`check_parameters` refuses a value that looks like the
secret itself, and :func:`scrub` replaces every known secret value in an executed notebook.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, SecretLeak

REDACTED = "[redacted]"

#: Parameter-name fragments that mark a secret (unless the name ends in _env or _file: a reference).
SECRET_NAME_PARTS = ("token", "password", "passwd", "secret", "apikey", "api_key", "auth", "credential")
REFERENCE_SUFFIXES = ("_env", "_file")
SECRET_VALUE_PREFIXES = (
    "Bearer ",
    "bearer ",
    "Basic ",
    "sk-",
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "xox",
    "eyJ",
)
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_\-+=]{24,}$")
_EMBEDDED_SECRET = re.compile(r"\b(?:Bearer|Basic)\s+\S{8,}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")


def is_secret_name(name: str) -> bool:
    """True when a parameter name says it holds a secret (``prom_token``), not a reference (``prom_token_env``).

    >>> is_secret_name("prometheus_token"), is_secret_name("prometheus_token_env"), is_secret_name("author")
    (True, False, False)
    """
    lowered = name.lower()
    if lowered.endswith(REFERENCE_SUFFIXES):
        return False
    lowered = lowered.replace("author", "")  # "auth" inside "author" is not a credential
    return any(part in lowered for part in SECRET_NAME_PARTS)


def looks_like_secret(value: str) -> bool:
    """True when a string value looks like a credential: a known token prefix, a bearer header,
    a JWT, or 24+ characters of mixed letters and digits with no spaces, slashes or dots.

    Slugs and UUIDs (every ``-``/``_`` separated part shorter than 16 characters) are not secrets.

    >>> looks_like_secret("sk-abc"), looks_like_secret("p95-prefill-interference")
    (True, False)
    """
    text = value.strip()
    if not text:
        return False
    if text.startswith(SECRET_VALUE_PREFIXES) or _EMBEDDED_SECRET.search(text):
        return True
    if _TOKEN_CHARS.match(text) and re.search(r"[A-Za-z]", text) and re.search(r"\d", text):
        parts = re.split(r"[-_]", text)
        return any(len(p) >= 16 for p in parts)
    return False


def redact_parameters(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` safe to show: secret names and secret-looking values become ``[redacted]``.

    A name containing token/password/secret/apikey/api_key/auth/credential is a secret unless it
    ends in ``_env`` or ``_file`` (then it names where the secret lives, and is shown). Strings
    nested in lists and dicts are checked too.

    >>> redact_parameters({"prometheus_token": "x", "prometheus_token_env": "PROM_TOKEN"})
    {'prometheus_token': '[redacted]', 'prometheus_token_env': 'PROM_TOKEN'}
    """
    out: dict[str, Any] = {}
    for name, value in params.items():
        if is_secret_name(str(name)) and value not in (None, ""):
            out[str(name)] = REDACTED
        else:
            out[str(name)] = _redact_value(value)
    return out


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return REDACTED if looks_like_secret(value) else value
    if isinstance(value, Mapping):
        return redact_parameters(value)
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


_SECRET_IN_TEXT = re.compile(
    r"\b(?:Bearer|Basic)\s+[A-Za-z0-9_\-.+/=~]{8,}"
    r"|\b[Tt]oken\s*[:=]\s*[A-Za-z0-9_\-.+/=~]{8,}"
    r"|\b[Tt]oken\s+(?=[A-Za-z_\-]*\d)[A-Za-z0-9_\-+/=~]{16,}"
    r"|\b(?:sk-|ghp_|gho_|ghs_|github_pat_|xox[abprs]-)[A-Za-z0-9_\-]{4,}"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}(?:\.[A-Za-z0-9_\-]+)?"
)


def redact_text(text: str) -> str:
    """Free text (an error message, a log line) with credential-looking substrings replaced by ``[redacted]``.

    >>> redact_text("401 for Authorization: Bearer abcdefgh12345678")
    '401 for Authorization: [redacted]'
    """
    return _SECRET_IN_TEXT.sub(REDACTED, text)


def secret_values(params: Mapping[str, Any]) -> list[str]:
    """Every raw string value (4+ characters) that :func:`redact_parameters` would hide, longest first."""
    found: set[str] = set()

    def walk(name: str, value: Any, secret_name: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(str(k), v, secret_name or is_secret_name(str(k)))
        elif isinstance(value, list | tuple):
            for v in value:
                walk(name, v, secret_name)
        elif value is not None and not isinstance(value, bool):
            text = str(value)
            if len(text) >= 4 and (secret_name or (isinstance(value, str) and looks_like_secret(text))):
                found.add(text)

    for name, value in params.items():
        walk(str(name), value, is_secret_name(str(name)))
    return sorted(found, key=len, reverse=True)


def check_parameters(params: Mapping[str, Any]) -> None:
    """Raise :class:`SecretLeak` naming the first parameter that holds a secret instead of a reference.

    The message names the parameter, never its value.
    """
    for name, value in params.items():
        if value in (None, "") or isinstance(value, bool | int | float):
            continue
        if is_secret_name(str(name)):
            raise SecretLeak(
                f"parameter {name!r} looks like it holds a secret: pass a reference instead "
                f"({name}_env=NAME_OF_ENV_VAR or {name}_file=PATH)"
            )
        if isinstance(value, str) and looks_like_secret(value):
            raise SecretLeak(
                f"parameter {name!r} has a value that looks like a credential: pass a reference "
                "(an environment variable name) instead"
            )


def resolve_secret(env: str | None = None, file: str | None = None) -> str | None:
    """The secret a reference points at: the env var ``env`` or the first line of ``file``; None if unset."""
    if env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env):
            raise ConfigError(
                f"{env[:3]}...: not an environment variable name (pass the NAME, not the value)"
            )
        value = os.environ.get(env)
        if value:
            return value
    if file:
        try:
            return Path(file).read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read secret file ({exc.strerror})") from None
    return None


SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|AUTH)", re.IGNORECASE)


def known_secrets(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Secret values to scrub: what ``*_env``/``*_file`` parameters point at, secret-named environment
    variables, and secret-looking parameter values. Longest first, 6+ characters."""
    env = os.environ if environ is None else environ
    found = set(secret_values(params))
    for name, value in params.items():
        if not isinstance(value, str) or not value:
            continue
        if str(name).endswith("_env") and env.get(value):
            found.add(env[value])
        elif str(name).endswith("_file") and is_secret_name(str(name)[:-5]):
            with contextlib.suppress(OSError):
                found.add(Path(value).read_text(encoding="utf-8").strip())
    for name, value in env.items():
        if SECRET_ENV.search(name) and value and len(value) >= 6:
            found.add(value)
    return sorted((v for v in found if len(v) >= 6), key=len, reverse=True)


def scrub(value: Any, secrets: list[str]) -> tuple[Any, int]:
    """Replace every occurrence of each secret in all strings of ``value`` (nested JSON). Returns (clean, hits)."""
    hits = 0

    def walk(v: Any) -> Any:
        nonlocal hits
        if isinstance(v, str):
            for s in secrets:
                if s in v:
                    hits += v.count(s)
                    v = v.replace(s, REDACTED)
            return v
        if isinstance(v, Mapping):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value), hits
