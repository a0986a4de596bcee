"""Secrets are references, never values: detect secret-looking parameters, resolve references,
and scrub known secret values out of everything perfkit writes.

A runbook parameter names where a secret lives (``prometheus_token_env = "PROM_TOKEN"``,
``..._file = "/run/secrets/prom"``); :func:`check_parameters` refuses a value that looks like the
secret itself, a ``*_env`` value that is not a variable name, and a URL that carries
``user:password@`` (or, in a ``*_url``, a ``?token=``-style credential);
:func:`parameter_warnings` names references that point at nothing; and
:func:`~perfkit.core.scrub.scrub` replaces, in an executed notebook, every value
:func:`~perfkit.core.scrub.known_secrets` finds: what the references point at,
and every secret-looking value of the environment (slug-like values found only by their
variable's name, only where that variable is printed).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, SecretLeak

REDACTED = "[redacted]"

#: Parameter-name fragments that mark a secret (unless the name ends in _env or _file: a reference).
SECRET_NAME_PARTS = ("token", "password", "passwd", "secret", "apikey", "api_key", "auth", "credential")
REFERENCE_SUFFIXES = ("_env", "_file")
#: A name ending like this holds a user name (``prometheus_basic_auth_user``): shown, not a secret.
USER_SUFFIXES = ("_user", "_username")
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
    if lowered.endswith(REFERENCE_SUFFIXES) or lowered.endswith(USER_SUFFIXES):
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


# -- URLs with credentials -------------------------------------------------------------------------

#: Where a URL starts: ``scheme://``.
_SCHEME = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://")
_WHITESPACE = re.compile(r"\s")
_QUERY_START = re.compile(r"[?#]")
#: ``[userinfo@]host[:port]/path`` and nothing more: the text before a ``?`` or ``#`` that makes it
#: the start of a query or fragment (see :func:`_userinfo_end`).
_HEAD_WITH_PATH = re.compile(r"(?:[^\s/]*@)?(?:\[[^\s/\]@]*\]|[^\s/:@\[\]]*)(?::\d*)?/\S*")
#: RFC 3986 userinfo (no ``/``, ``?``, ``#`` before the ``@``), for values not named ``*_url``.
_URL_USERINFO_STRICT = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#]*)@")
#: What may come before a ``*_url`` parameter's userinfo: a scheme and ``//``, or just ``//``.
_LEADING_SCHEME = re.compile(r"\s*(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//")
#: A credential in a URL's query string (``?token=...``, ``&api_key=...``), case-insensitive.
QUERY_SECRET_NAMES = (
    "password",
    "passwd",
    "pwd",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "private_token",
    "api_key",
    "apikey",
    "api-key",
    "key",
    "secret",
    "client_secret",
    "auth",
    "sig",
    "signature",
)
_QUERY_SECRET = re.compile(
    r"(?P<lead>[?&;])(?P<name>"
    + "|".join(re.escape(n) for n in QUERY_SECRET_NAMES)
    + r")=(?P<value>[^&;#\s]+)",
    re.IGNORECASE,
)


def _userinfo_end(rest: str) -> int:
    """Where the userinfo of a URL ends: the index in ``rest`` (the URL after ``scheme://``, up to
    the first whitespace) of the ``@`` that ends it, or -1 when the URL has none.

    The rule (hosts never contain ``@``; passwords may hold any of ``/ ? # @``): the userinfo is
    everything up to the LAST ``@`` of ``rest``. One exception keeps a query's or fragment's ``@``
    out of it: the first ``?`` or ``#`` before which stands a complete
    ``[userinfo@]host[:port]/path`` (a path came first) starts the query or fragment, and only an
    ``@`` before it counts. So ``admin:S3cr3t#Pw@host`` and ``admin:pa/ss@host`` are credentials,
    ``admin:123#Pw@prom/api?q=a@b`` has the userinfo ``admin:123#Pw``, and
    ``prom/api?match=user@example.com`` has none; an ``@`` in a path (``prom/a@b``) is counted as
    credentials (a URL is shown as less, never as more).
    """
    for i, q in enumerate(_QUERY_START.finditer(rest)):
        if i >= 16:  # bounded work on long text; past that, the last '@' (shows less, not more)
            break
        if _HEAD_WITH_PATH.fullmatch(rest, 0, q.start()):
            return rest.rfind("@", 0, q.start())
    return rest.rfind("@")


def _userinfo_spans(text: str) -> Iterator[tuple[int, int, int]]:
    """``(scheme_start, userinfo_start, at)`` for each URL of ``text`` that carries userinfo."""
    pos = 0
    while True:
        m = _SCHEME.search(text, pos)
        if not m:
            return
        ws = _WHITESPACE.search(text, m.end())
        stop = ws.start() if ws else len(text)
        at = _userinfo_end(text[m.end() : stop])
        if at < 0:
            pos = m.end()
            continue
        yield m.start(), m.end(), m.end() + at
        pos = m.end() + at + 1


def _replace_userinfo(text: str, replacement: str) -> str:
    """``text`` with the userinfo (and its ``@``) of every URL replaced by ``replacement``."""
    if "@" not in text:
        return text
    out: list[str] = []
    last = 0
    for _, start, at in _userinfo_spans(text):
        out.append(text[last:start])
        out.append(replacement)
        last = at + 1
    out.append(text[last:])
    return "".join(out)


def _query_secrets(text: str) -> list[tuple[str, str]]:
    """``(name, value)`` of each credential in the query strings of the URLs in ``text``."""
    if "=" not in text or ("?" not in text and not _SCHEME.search(text)):
        return []
    return [(m.group("name"), m.group("value")) for m in _QUERY_SECRET.finditer(text)]


BASIC_AUTH_HINT = (
    "--basic-auth-user USER --password-env VAR "
    "(runbook parameters prometheus_basic_auth_user=USER, prometheus_password_env=VAR)"
)


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (to show or record it); text with no such URL is unchanged.

    Every URL in ``url`` is stripped, so this also cleans a message that quotes one.

    >>> strip_userinfo("http://admin:hunter2@prom:9090/api"), strip_userinfo("http://prom:9090")
    ('http://prom:9090/api', 'http://prom:9090')
    """
    return _replace_userinfo(url, "")


def url_userinfo_error(name: str, url: str, *, strict: bool = False) -> str | None:
    """The message refusing parameter ``name`` when ``url`` carries credentials (``user:password@``
    or just ``user@``, a slot tokens are often put in); None when it carries none.

    The message names the parameter, shows the URL without its credentials and points at the
    basic-auth options; it never contains the user or the password. ``strict`` reads userinfo as
    RFC 3986 does (for values not named ``*_url``, which may be free text).

    >>> url_userinfo_error("prometheus_url", "http://prom:9090") is None
    True
    """
    if not isinstance(url, str):
        return None
    if not strict:
        query = _query_secrets(url)
        if query:
            shown = strip_userinfo(
                _QUERY_SECRET.sub(lambda m: f"{m.group('lead')}{m.group('name')}={REDACTED}", url)
            )
            names = ", ".join(sorted({n.lower() for n, _ in query}))
            return (
                f"parameter {name!r}: the URL carries a credential in its query string ({names}=...), "
                f"which would be written into every output: give {shown!r} without it and pass a "
                f"reference to the secret instead (an environment variable name, e.g. "
                f"prometheus_token_env=VAR, or {BASIC_AUTH_HINT})"
            )
    if "@" not in url:
        return None
    if strict:
        if not _URL_USERINFO_STRICT.search(url):
            return None
        shown = strip_userinfo(url)
    else:
        lead = _LEADING_SCHEME.match(url)  # also without a scheme: admin:pw@prom:9090, //u:p@h
        prefix = lead.group(0) if lead else url[: len(url) - len(url.lstrip())]
        ws = _WHITESPACE.search(url, len(prefix))
        at = _userinfo_end(url[len(prefix) : ws.start() if ws else len(url)])
        if at >= 0:
            shown = strip_userinfo(prefix + url[len(prefix) + at + 1 :])
        elif any(_userinfo_spans(url)):
            shown = strip_userinfo(url)
        else:
            return None
    return (
        f"parameter {name!r}: the URL carries credentials (user:password@), which would be written "
        f"into every output: give {shown!r} and pass the user and a reference to the password "
        f"instead: {BASIC_AUTH_HINT}"
    )


def check_url(name: str, url: str) -> None:
    """Raise :class:`SecretLeak` (see :func:`url_userinfo_error`) when ``url`` carries credentials."""
    message = url_userinfo_error(name, url)
    if message:
        raise SecretLeak(message)


# -- showing parameters ---------------------------------------------------------------------------


def redact_parameters(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` safe to show: secret names and secret-looking values become ``[redacted]``.

    A name containing token/password/secret/apikey/api_key/auth/credential is a secret unless it
    ends in ``_env`` or ``_file`` (then it names where the secret lives, and is shown) or in
    ``_user``/``_username``. Strings nested in lists and dicts are checked too; a URL's
    ``user:password@`` is shown as ``[redacted]@``.

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
        if looks_like_secret(value):
            return REDACTED
        return _replace_userinfo(value, f"{REDACTED}@")
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
    """Free text (an error message, a log line) with credential-looking substrings replaced by
    ``[redacted]``, and any URL's ``user:password@`` by ``[redacted]@``.

    >>> redact_text("401 for Authorization: Bearer abcdefgh12345678")
    '401 for Authorization: [redacted]'
    >>> redact_text("cannot reach http://admin:hunter2@prom:9090")
    'cannot reach http://[redacted]@prom:9090'
    """
    text = _replace_userinfo(text, f"{REDACTED}@")
    return _SECRET_IN_TEXT.sub(REDACTED, text)


def _strings(value: Any) -> Iterator[str]:
    """Every string in ``value``, nested lists and dicts included (not the keys)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


# -- checking parameters --------------------------------------------------------------------------

#: What an environment variable name looks like (POSIX: letters, digits, underscore; no digit first).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_CONVENTIONAL_ENV = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")


def env_reference_error(name: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable as parameter ``name``, a reference to an environment variable
    (None when it is: empty, or a variable name). Never quotes the value.

    Refused: anything but a string; a string that is not a variable name (``sk-...``, a URL,
    ``$PROM_TOKEN``); a valid name that :func:`looks_like_secret`; and a name shaped like a token
    (:func:`_token_shaped`): without ``_``, anything but 1 to 16 upper-case letters and digits
    (``PROMTOKEN`` and ``TOKEN2`` pass; ``AKIAIOSFODNN7EXAMPLE``, ``Summer2024x`` and lower-case
    tokens do not); with ``_``, a part that looks random (16+ characters mixing letters and digits,
    or upper- and lower-case letters). ``PROM_TOKEN``, ``GRAFANA_API_KEY_2``,
    ``AWS_SECRET_ACCESS_KEY`` and ``prom_token`` pass.

    >>> env_reference_error("prometheus_token_env", "PROM_TOKEN") is None
    True
    """
    if value is None or value == "":
        return None
    hint = (
        f"pass the NAME of the environment variable that holds the secret ({name}=PROM_TOKEN), not its value"
    )
    if not isinstance(value, str):
        return f"parameter {name!r}: not an environment variable name: {hint}"
    bare = value.strip().lstrip("$").lstrip("{").rstrip("}")
    if value.strip().startswith("$") and ENV_NAME.fullmatch(bare):
        return f"parameter {name!r}: give the variable's name without '$' ({name}=PROM_TOKEN)"
    if not ENV_NAME.fullmatch(value) or looks_like_secret(value) or _token_shaped(value):
        return (
            f"parameter {name!r}: the value is not an environment variable name "
            f"(it may be the secret itself): {hint}"
        )
    return None


#: A variable name without ``_``: at most 16 upper-case letters and digits (``PROMTOKEN``).
_PLAIN_ENV = re.compile(r"[A-Z0-9]{1,16}")


def _token_shaped(text: str) -> bool:
    """Whether a valid variable name is more likely a pasted token (see :func:`env_reference_error`)."""
    if "_" not in text:
        return not _PLAIN_ENV.fullmatch(text)
    return any(_random_part(part) for part in text.split("_"))


def _random_part(part: str) -> bool:
    if len(part) < 16:
        return False
    letters_and_digits = any(c.isalpha() for c in part) and any(c.isdigit() for c in part)
    mixed_case = any(c.islower() for c in part) and any(c.isupper() for c in part)
    return letters_and_digits or mixed_case


def check_parameters(params: Mapping[str, Any]) -> None:
    """Raise :class:`SecretLeak` naming the first parameter that holds a secret instead of a reference.

    Refused: a value under a secret name (``prometheus_token``); a ``*_env`` value that is not an
    environment variable name (:func:`env_reference_error`); a URL with credentials
    (``http://user:pass@host``, :func:`url_userinfo_error`) in a ``*_url`` parameter or in any
    string value; and a value that looks like a credential. The message names the parameter,
    never its value.
    """
    for name, value in params.items():
        name = str(name)
        if name.endswith("_env"):
            message = env_reference_error(name, value)
            if message:
                raise SecretLeak(message)
            continue
        if value in (None, "") or isinstance(value, bool | int | float):
            continue
        if is_secret_name(name):
            raise SecretLeak(
                f"parameter {name!r} looks like it holds a secret: pass a reference instead "
                f"({name}_env=NAME_OF_ENV_VAR or {name}_file=PATH)"
            )
        for text in _strings(value):
            message = url_userinfo_error(name, text, strict=not name.endswith("_url"))
            if message:
                raise SecretLeak(message)
            if looks_like_secret(text):
                raise SecretLeak(
                    f"parameter {name!r} has a value that looks like a credential: pass a reference "
                    "(an environment variable name) instead"
                )


def parameter_warnings(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """What a person should hear before a run whose parameters pass :func:`check_parameters`:
    a ``*_env`` reference to a variable that is not set (the request goes without credentials),
    a ``*_file`` that does not exist (named only when it looks like a path: see :func:`_path_like`), and a basic-auth user without a password reference (or the
    other way round). One line each; the caller prints them."""
    env = os.environ if environ is None else environ
    out: list[str] = []
    for name, value in params.items():
        name = str(name)
        if not isinstance(value, str) or not value:
            continue
        if name.endswith("_env") and env_reference_error(name, value) is None and not env.get(value):
            # a conventional name is shown; anything else might be a token after all: not echoed
            shown = (
                f"environment variable {value}"
                if _CONVENTIONAL_ENV.fullmatch(value)
                else "the variable it names"
            )
            out.append(f"{name}: {shown} is not set; the request goes without credentials")
        elif name.endswith("_file") and not _exists(value):
            if _path_like(value):
                out.append(f"{name}: {strip_userinfo(value)} does not exist")
            else:
                out.append(
                    f"{name}: the file reference does not exist (not shown: it may be the secret itself)"
                )
        elif name.endswith("basic_auth_user") and not params.get(
            name[: -len("basic_auth_user")] + "password_env"
        ):
            out.append(
                f"{name}: no {name[: -len('basic_auth_user')]}password_env; basic auth goes without a password"
            )
        if name.endswith("password_env") and not params.get(name[: -len("password_env")] + "basic_auth_user"):
            out.append(f"{name}: no {name[: -len('password_env')]}basic_auth_user; the password is not used")
    return out


def _path_like(value: str) -> bool:
    """Whether a ``*_file`` value may be echoed: it contains ``/``, ``.`` or ``~`` (a path, not a
    pasted token) and does not itself :func:`looks_like_secret`."""
    return any(c in value for c in "/.~") and not looks_like_secret(value)


def _exists(path: str) -> bool:
    try:
        return Path(path).expanduser().exists()
    except (OSError, ValueError):
        return False


def resolve_secret(env: str | None = None, file: str | None = None) -> str | None:
    """The secret a reference points at: the env var ``env`` or the first line of ``file``; None if unset.

    Raises :class:`SecretLeak` when ``env`` is not a variable name (nor quotes it).
    """
    if env:
        message = env_reference_error("env", env)
        if message:
            raise SecretLeak(message.replace("parameter 'env': ", ""))
        value = os.environ.get(env)
        if value:
            return value
    if file:
        try:
            return Path(file).read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read secret file ({exc.strerror})") from None
    return None
