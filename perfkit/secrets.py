"""Secrets are references, never values: detect secret-looking parameters, resolve references,
and scrub known secret values out of everything perfkit writes.

A runbook parameter names where a secret lives (``prometheus_token_env = "PROM_TOKEN"``,
``..._file = "/run/secrets/prom"``); :func:`check_parameters` refuses a value that looks like the
secret itself, a ``*_env`` value that is not a variable name, and a URL that carries
``user:password@``; :func:`parameter_warnings` names references that point at nothing; and
:func:`scrub` replaces, in an executed notebook, every value :func:`known_secrets` finds: what the
references point at, and every secret-looking value of the environment.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

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

#: ``scheme://USERINFO@``: everything between ``://`` and the last ``@`` before any ``?``, ``#`` or
#: whitespace. Looser than RFC 3986 on purpose: a password with an unescaped ``/`` (which makes
#: ``urlsplit`` see ``pa`` as the port and ``ss@host`` as the path) is userinfo here too, so it is
#: never shown. The price: an ``@`` in a URL's path counts as credentials.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s?#]*)@")
#: RFC 3986 userinfo (no ``/`` before the ``@``), for values that are not named ``*_url``.
_URL_USERINFO_STRICT = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#]*)@")

#: A URL (scheme optional) whose authority holds an ``@``: what a ``*_url`` parameter may not be.
_LEADING_USERINFO = re.compile(
    r"(?P<prefix>\s*(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//)?(?P<userinfo>[^\s?#]*)@(?P<rest>.*)", re.DOTALL
)

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
    return _URL_USERINFO.sub(r"\g<scheme>", url)


def url_userinfo_error(name: str, url: str, *, strict: bool = False) -> str | None:
    """The message refusing parameter ``name`` when ``url`` carries credentials (``user:password@``
    or just ``user@``, a slot tokens are often put in); None when it carries none.

    The message names the parameter, shows the URL without its credentials and points at the
    basic-auth options; it never contains the user or the password. ``strict`` reads userinfo as
    RFC 3986 does (for values not named ``*_url``, which may be free text).

    >>> url_userinfo_error("prometheus_url", "http://prom:9090") is None
    True
    """
    if not isinstance(url, str) or "@" not in url:
        return None
    if strict:
        if not _URL_USERINFO_STRICT.search(url):
            return None
        shown = strip_userinfo(url)
    else:
        lead = _LEADING_USERINFO.match(url)  # also without a scheme: admin:pw@prom:9090, //u:p@h
        if lead:
            shown = strip_userinfo((lead.group("prefix") or "") + lead.group("rest"))
        elif _URL_USERINFO.search(url):
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


def _url_credentials(text: str) -> set[str]:
    """Secrets in the credential-carrying URLs of ``text``: each URL's ``userinfo@`` and its password
    (6+ characters, raw and percent-decoded), a bare user 8+ characters long (a token put there),
    and the URL up to the next whitespace."""
    found: set[str] = set()
    if "@" not in text:
        return found
    for m in _URL_USERINFO.finditer(text):
        userinfo = m.group("userinfo")
        found.add(userinfo + "@")
        user, colon, password = userinfo.partition(":")
        if colon:
            for p in (password, unquote(password)):
                if len(p) >= 6:
                    found.add(p)
        elif len(user) >= 8 and _plausible_secret(user):
            found.add(user)
        end = re.search(r"\s", text[m.end() :])
        found.add(text[m.start() : m.end() + end.start()] if end else text[m.start() :])
    return found


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
        return _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", value) if "@" in value else value
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
    if "@" in text:
        text = _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)
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


def secret_values(params: Mapping[str, Any]) -> list[str]:
    """Every raw string value (4+ characters) that :func:`redact_parameters` would hide, and the
    credentials of any URL with ``user:password@``, longest first."""
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
            if isinstance(value, str):
                found.update(_url_credentials(text))

    for name, value in params.items():
        walk(str(name), value, is_secret_name(str(name)))
    return sorted(found, key=len, reverse=True)


# -- checking parameters --------------------------------------------------------------------------

#: What an environment variable name looks like (POSIX: letters, digits, underscore; no digit first).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_CONVENTIONAL_ENV = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")


def env_reference_error(name: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable as parameter ``name``, a reference to an environment variable
    (None when it is: empty, or a variable name). Never quotes the value.

    Refused: anything but a string; a string that is not a variable name (``sk-...``, a URL,
    ``$PROM_TOKEN``); and a valid name that looks like the secret itself: what
    :func:`looks_like_secret` says, or 24+ characters without an underscore mixing letters and
    digits or upper and lower case (a hex or base62 token; nobody names a variable so).
    ``PROM_TOKEN``, ``GRAFANA_API_KEY_2`` and ``AWS_SECRET_ACCESS_KEY`` pass.

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


def _token_shaped(text: str) -> bool:
    if len(text) < 24 or "_" in text:
        return False
    digits = any(c.isdigit() for c in text)
    mixed_case = any(c.islower() for c in text) and any(c.isupper() for c in text)
    return digits or mixed_case


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
    a ``*_file`` that does not exist, and a basic-auth user without a password reference (or the
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
            out.append(f"{name}: {strip_userinfo(value)} does not exist")
        elif name.endswith("basic_auth_user") and not params.get(
            name[: -len("basic_auth_user")] + "password_env"
        ):
            out.append(
                f"{name}: no {name[: -len('basic_auth_user')]}password_env; basic auth goes without a password"
            )
        if name.endswith("password_env") and not params.get(name[: -len("password_env")] + "basic_auth_user"):
            out.append(f"{name}: no {name[: -len('password_env')]}basic_auth_user; the password is not used")
    return out


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


# -- known secrets and scrubbing ------------------------------------------------------------------

#: Environment variable names that hold a secret (``OPENAI_KEY``, ``DB_PASS``, ``GITHUB_TOKEN`` ...).
#: ``AUTHOR`` is taken out of a name first (``GIT_AUTHOR_EMAIL`` is not a credential).
SECRET_ENV = re.compile(r"TOKEN|KEY|SECRET|PASS|CREDENTIAL|AUTH|PRIVATE|COOKIE|SIGNATURE|DSN", re.IGNORECASE)
#: A guessed secret shorter than this is not scrubbed (too likely to be an ordinary word).
MIN_GUESSED = 8
#: A known secret (what a reference points at, a URL's password) shorter than this is not scrubbed.
MIN_KNOWN = 6
_WORDS = re.compile(r"[A-Za-z]+(?:[-_. ][A-Za-z]+)*")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def _plausible_secret(value: str) -> bool:
    """Whether a value found under a secret-looking variable name is worth scrubbing everywhere.

    Not: shorter than 8 characters; letters only (words with ``-``/``_``/``.``/space between)
    under 16 characters, i.e. settings like ``disabled``, ``kerberos``, ``us-east-one``;
    numbers under 16 digits; an existing absolute path (``SSH_AUTH_SOCK``). Replacing those in
    every notebook string would corrupt it and protect nothing.
    """
    text = value.strip()
    if len(text) < MIN_GUESSED:
        return False
    if len(text) < 16 and (_WORDS.fullmatch(text) or _NUMBER.fullmatch(text)):
        return False
    return not (text.startswith("/") and "\n" not in text and _exists(text))


def _secret_env_name(name: str) -> bool:
    return bool(SECRET_ENV.search(name.upper().replace("AUTHOR", "")))


def _spellings(secret: str) -> set[str]:
    """``secret`` as it appears in text: raw, in a Python repr (``print(os.environ)``), JSON-escaped,
    HTML-escaped, percent-encoded (in a URL); and each line of a multi-line secret (a PEM key)."""
    out = {
        secret,
        repr(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        html.escape(secret, quote=True),
        quote(secret, safe=""),
    }
    if "\n" in secret:
        out.update(line.strip() for line in secret.splitlines() if len(line.strip()) >= MIN_GUESSED)
    return out


def known_secrets(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every string :func:`scrub` must replace, longest first, 6+ characters:

    * what ``*_env`` parameters and secret-named ``*_file`` parameters point at;
    * secret-named and secret-looking parameter values, and the credentials of a parameter URL;
    * the value of every environment variable whose name contains TOKEN, KEY, SECRET, PASS(WORD),
      CREDENTIAL, AUTH, PRIVATE, COOKIE, SIGNATURE or DSN, unless it is a plain setting
      (:func:`_plausible_secret`: ``AUTH_MODE=disabled``, a number, an existing path);
    * the value of any environment variable that :func:`looks_like_secret`, and the password (and
      whole URL) of any variable holding a URL with credentials (``DATABASE_URL=postgres://u:p@h/db``);

    each also as printed by Python, JSON, HTML and percent-encoding (:func:`_spellings`).
    ``PATH``, ``HOME`` and other plain variables are never touched.
    """
    env = os.environ if environ is None else environ
    found: set[str] = set(secret_values(params))
    for name, value in params.items():
        if not isinstance(value, str) or not value:
            continue
        if str(name).endswith("_env") and ENV_NAME.fullmatch(value) and env.get(value):
            found.add(env[value])
        elif str(name).endswith("_file") and is_secret_name(str(name)[:-5]):
            with contextlib.suppress(OSError, ValueError):
                found.add(Path(value).read_text(encoding="utf-8").strip())
    for name, value in env.items():
        if not value or not isinstance(value, str):
            continue
        if (_secret_env_name(str(name)) and _plausible_secret(value)) or looks_like_secret(value):
            found.add(value)
        found.update(_url_credentials(value))
    spelled: set[str] = set()
    for secret in found:
        if len(secret) >= MIN_KNOWN:
            spelled.update(s for s in _spellings(secret) if len(s) >= MIN_KNOWN)
    return sorted(spelled, key=lambda s: (-len(s), s))


def scrub(value: Any, secrets: list[str]) -> tuple[Any, int]:
    """Replace every occurrence of each secret in all strings of ``value`` (nested JSON). Returns (clean, hits).

    Fast on large notebooks with many secrets: ``value`` is serialized once and only the secrets
    that occur in that text are looked for string by string (nothing is walked when none does).
    """
    candidates = sorted({s for s in secrets if s}, key=len, reverse=True)
    if not candidates:
        return value, 0
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = None
    if text is not None:  # JSON escapes character by character: a substring stays a substring
        candidates = [s for s in candidates if json.dumps(s, ensure_ascii=False)[1:-1] in text]
        if not candidates:
            return value, 0
    hits = 0

    def walk(v: Any) -> Any:
        nonlocal hits
        if isinstance(v, str):
            for s in candidates:
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
