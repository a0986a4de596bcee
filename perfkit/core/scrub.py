"""Finding the secret values to scrub, and scrubbing them out of everything perfkit writes.

:func:`known_secrets` collects every value :func:`scrub` must replace in an executed notebook: what
the references of the parameters (:mod:`perfkit.core.secrets`) point at, secret-named and
secret-looking parameter values (:func:`secret_values`), the credentials of URLs, and every
secret-looking value of the environment (slug-like values found only by their variable's name, in
:attr:`SecretSet.contextual`, only where that variable is printed: :func:`slug_like`).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from perfkit.core.secrets import (
    _WHITESPACE,
    ENV_NAME,
    REDACTED,
    _exists,
    _query_secrets,
    _userinfo_spans,
    is_secret_name,
    looks_like_secret,
)

# -- known secrets and scrubbing ------------------------------------------------------------------

#: Environment variable names that hold a secret (``OPENAI_KEY``, ``DB_PASS``, ``GITHUB_TOKEN``,
#: ``MYAPP_PWD`` ...). ``AUTHOR`` is taken out of a name first (``GIT_AUTHOR_EMAIL`` is not a
#: credential); the shell's ``PWD`` and ``OLDPWD`` (folders) are not secret names.
SECRET_ENV = re.compile(
    r"TOKEN|KEY|SECRET|PASS|PWD|CREDENTIAL|AUTH|PRIVATE|COOKIE|SIGNATURE|DSN", re.IGNORECASE
)
#: Names that say "password" or "secret" outright: their values are scrubbed everywhere even when
#: they read like a slug (a passphrase such as ``correct-horse-battery-staple``).
STRONG_SECRET_ENV = re.compile(r"SECRET|PASS|PWD|CREDENTIAL|COOKIE", re.IGNORECASE)
_SHELL_FOLDERS = frozenset({"PWD", "OLDPWD"})
#: A guessed secret shorter than this is not scrubbed (too likely to be an ordinary word).
MIN_GUESSED = 8
#: A known secret (what a reference points at, a URL's password) shorter than this is not scrubbed.
MIN_KNOWN = 6
#: A secret this long or longer is also scrubbed where only a prefix of it shows (a truncated
#: table cell): every occurrence of its first :data:`PREFIX_HEAD` characters, extended as far as
#: the text goes on matching the secret, and a ``...``/``…`` right after.
MIN_PREFIXED = 16
PREFIX_HEAD = 12
_WORDS = re.compile(r"[A-Za-z]+(?:[-_. ][A-Za-z]+)*")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
_SLUG = re.compile(r"[A-Za-z0-9]+(?:[-_./:][A-Za-z0-9]+)+")
#: A name's segment: a word in one case style, a number, a size (``70b``, ``8B``), or a short word
#: with a version or model number (``v2``, ``llama3``, ``Qwen2``, ``H100``); never letters and digits
#: interleaved (``s3cr3t``, ``Zq7pL0``), which is how passwords and tokens read.
_SLUG_SEGMENT = re.compile(
    r"[a-z]+|[A-Z][a-z]*|[A-Z]+|[0-9]+|[0-9]+[A-Za-z]{1,2}|[A-Za-z][a-z]{0,9}[0-9]{1,4}|[A-Z]{1,4}[0-9]{1,4}"
)


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


def slug_like(value: str) -> bool:
    """Whether a value reads like a name, not a credential: a model, a runbook, a profile.

    The rule: 2+ segments of letters and digits joined by single ``-``, ``_``, ``.``, ``/`` or
    ``:``; every segment shorter than 16 characters and a word, a number, a size or a word with a
    version (see ``_SLUG_SEGMENT``), never letters and digits interleaved (``s3cr3t``, ``Zq7pL0``); at least one segment of 3+
    letters only (a word: UUIDs and hex groups have none); and not :func:`looks_like_secret`.

    >>> slug_like("llama-3.1-70b-instruct"), slug_like("meta-llama/Llama-3.1-8B"), slug_like("ab12-cd34")
    (True, True, False)
    """
    text = value.strip()
    if not _SLUG.fullmatch(text) or looks_like_secret(text):
        return False
    segments = re.split(r"[-_./:]", text)
    if any(len(seg) >= 16 or not _SLUG_SEGMENT.fullmatch(seg) for seg in segments):
        return False
    return any(len(seg) >= 3 and seg.isalpha() for seg in segments)


def _secret_env_name(name: str) -> bool:
    if name.upper() in _SHELL_FOLDERS:
        return False
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


def _url_credentials(text: str) -> set[str]:
    """Secrets in the credential-carrying URLs of ``text``: each URL's ``userinfo@`` and its password
    (6+ characters, raw and percent-decoded), a bare user 8+ characters long (a token put there),
    and the URL up to the next whitespace; and the value of each credential in a URL's query string
    (``?token=...``, see :data:`~perfkit.core.secrets.QUERY_SECRET_NAMES`), raw and percent-decoded."""
    found: set[str] = set()
    if "://" not in text:
        return found
    for start, user_start, at in _userinfo_spans(text):
        userinfo = text[user_start:at]
        found.add(userinfo + "@")
        user, colon, password = userinfo.partition(":")
        if colon:
            for p in (password, unquote(password)):
                if len(p) >= 6:
                    found.add(p)
        elif len(user) >= 8 and _plausible_secret(user):
            found.add(user)
        end = _WHITESPACE.search(text, at)
        found.add(text[start : end.start()] if end else text[start:])
    for _, value in _query_secrets(text):
        found.update(v for v in (value, unquote(value)) if len(v) >= 6)
    return found


def secret_values(params: Mapping[str, Any]) -> list[str]:
    """Every raw string value (4+ characters) that
    :func:`~perfkit.core.secrets.redact_parameters` would hide, and the credentials of any URL
    with ``user:password@``, longest first."""
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


class SecretSet(list[str]):
    """What :func:`known_secrets` finds: a list of the strings to scrub everywhere (longest first),
    and in :attr:`contextual` the ``(variable name, value)`` pairs to scrub only where the variable
    itself is printed (see :func:`scrub`). A plain list works wherever a ``SecretSet`` does."""

    def __init__(self, secrets: Iterable[str] = (), contextual: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(secrets)
        self.contextual: list[tuple[str, str]] = list(contextual)


def known_secrets(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> SecretSet:
    """Every string :func:`scrub` must replace, longest first, 6+ characters:

    * what ``*_env`` parameters and secret-named ``*_file`` parameters point at;
    * secret-named and secret-looking parameter values, and the credentials of a parameter URL;
    * the value of every environment variable whose name contains TOKEN, KEY, SECRET, PASS(WORD),
      PWD, CREDENTIAL, AUTH, PRIVATE, COOKIE, SIGNATURE or DSN, unless it is a plain setting
      (:func:`_plausible_secret`: ``AUTH_MODE=disabled``, a number, an existing path);
    * the value of any environment variable that :func:`looks_like_secret`, and the password (and
      whole URL) and query-string credentials of any variable holding a URL
      (``DATABASE_URL=postgres://u:p#w@h/db``);

    each also as printed by Python, JSON, HTML and percent-encoding (:func:`_spellings`).
    ``PATH``, ``HOME``, ``PWD`` and other plain variables are never touched.

    One exception, in :attr:`SecretSet.contextual`: a value found only because of its variable's
    name (not secret-looking itself, not what a ``*_env`` parameter names, not a URL credential)
    that reads like a name (:func:`slug_like`: ``VLLM_TOKENIZER=llama-3.1-70b-instruct``,
    ``PROFILE_KEY=inference_latency``), under a name that does not say SECRET, PASS, PWD,
    CREDENTIAL or COOKIE, is scrubbed only where it follows the variable's name (``NAME=value``,
    ``'NAME': 'value'``, a table row): the model name elsewhere in the postmortem stays.
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
    contextual: list[tuple[str, str]] = []
    for name, value in env.items():
        if not value or not isinstance(value, str):
            continue
        name = str(name)
        if looks_like_secret(value):
            found.add(value)
        elif _secret_env_name(name) and _plausible_secret(value):
            if not STRONG_SECRET_ENV.search(name) and slug_like(value):
                contextual.append((name, value))
            else:
                found.add(value)
        found.update(_url_credentials(value))
    spelled: set[str] = set()
    for secret in found:
        if len(secret) >= MIN_KNOWN:
            spelled.update(s for s in _spellings(secret) if len(s) >= MIN_KNOWN)
    everywhere = {v.strip() for v in found} | found
    contextual = sorted(
        {(n, v) for n, v in contextual if v not in everywhere and v.strip() not in everywhere},
        key=lambda nv: (-len(nv[0]), nv),
    )
    return SecretSet(sorted(spelled, key=lambda s: (-len(s), s)), contextual)


# -- scrubbing ------------------------------------------------------------------------------------

#: What may stand between a variable's name and its value when the variable is printed, on one
#: line: ``=``, ``:``, ``|``, ``,``, spaces, tabs, quotes (raw, backslash-escaped or as HTML
#: entities), and table-cell tags (``</td><td>``, with line breaks around them as pandas writes).
_CONTEXT_SEP = r"(?:[ \t=:|,'\"\\]|&(?:\#39|\#34|\#x27|\#x22|quot|apos);|\s*</?t[dhr]\b[^>\n]*>\s*)++"


def _loose(text: str) -> str:
    """A pattern for ``text`` that also matches it Markdown-escaped (a backslash before punctuation)."""
    return "".join(re.escape(c) if c.isalnum() else r"\\?" + re.escape(c) for c in text)


def _context_pattern(name: str, value: str) -> re.Pattern[str]:
    values = sorted({value, quote(value, safe="")}, key=len, reverse=True)
    return re.compile(
        rf"(?P<ctx>(?<![A-Za-z0-9_]){_loose(name)}{_CONTEXT_SEP})(?:{'|'.join(_loose(v) for v in values)})"
    )


class _Scrubber:
    """The compiled form of what :func:`scrub` replaces: whole secrets, prefixes of long ones, and
    contextual ``(name, value)`` pairs."""

    def __init__(self, secrets: list[str], contextual: list[tuple[str, str]]) -> None:
        self.whole = sorted({s for s in secrets if s}, key=len, reverse=True)
        self.prefixed: dict[str, list[str]] = {}
        for s in self.whole:
            body = s.split("://", 1)[1] if "://" in s[: PREFIX_HEAD + 3] else s
            if len(body) >= MIN_PREFIXED:
                self.prefixed.setdefault(body[:PREFIX_HEAD], []).append(body)
        self.contextual = [(n, v) for n, v in contextual if n and v]
        self._compile()

    def _compile(self) -> None:
        self.heads = (
            re.compile("|".join(re.escape(h) for h in sorted(self.prefixed))) if self.prefixed else None
        )
        self.patterns = [_context_pattern(n, v) for n, v in self.contextual]

    @property
    def empty(self) -> bool:
        return not (self.whole or self.prefixed or self.contextual)

    def narrow(self, text: str) -> None:
        """Keep only what can occur in ``text`` (a JSON serialization of the value to scrub)."""

        def present(s: str) -> bool:
            return json.dumps(s, ensure_ascii=False)[1:-1] in text

        self.whole = [s for s in self.whole if present(s)]
        self.prefixed = {h: b for h, b in self.prefixed.items() if present(h)}
        self.contextual = [
            (n, v) for n, v in self.contextual if max(re.findall(r"[A-Za-z0-9]+", n) or [n], key=len) in text
        ]
        self._compile()

    def __call__(self, v: str) -> tuple[str, int]:
        hits = 0
        for s in self.whole:
            if s in v:
                hits += v.count(s)
                v = v.replace(s, REDACTED)
        if self.heads is not None and self.heads.search(v):
            v, n = self._prefixes(v)
            hits += n
        for pattern in self.patterns:
            v, n = pattern.subn(lambda m: m.group("ctx") + REDACTED, v)
            hits += n
        return v, hits

    def _prefixes(self, v: str) -> tuple[str, int]:
        assert self.heads is not None
        out: list[str] = []
        last = hits = 0
        for m in self.heads.finditer(v):
            start = m.start()
            if start < last:
                continue
            end = start
            for body in self.prefixed[m.group()]:
                k, limit = PREFIX_HEAD, min(len(body), len(v) - start)
                while k < limit and v[start + k] == body[k]:
                    k += 1
                end = max(end, start + k)
            if v.startswith("...", end):
                end += 3
            elif v.startswith("\u2026", end):
                end += 1
            out += [v[last:start], REDACTED]
            last = end
            hits += 1
        out.append(v[last:])
        return "".join(out), hits


def scrub(
    value: Any, secrets: Iterable[str], *, contextual: Iterable[tuple[str, str]] | None = None
) -> tuple[Any, int]:
    """Replace every occurrence of each secret in all strings of ``value`` (nested JSON). Returns (clean, hits).

    * each string of ``secrets`` is replaced wherever it occurs;
    * a secret of 16+ characters is also replaced where only a prefix of it shows (a table cell
      truncated to ``abcdefghijkl...``): each occurrence of its first 12 characters is redacted as
      far as the text goes on matching the secret, with a ``...`` or ``…`` right after (a URL's
      ``scheme://`` does not count in those 12);
    * each ``(name, value)`` of ``contextual`` (default: ``secrets.contextual`` when ``secrets`` is a
      :class:`SecretSet`) is replaced only right after its variable's name on the same line:
      ``NAME=value``, ``'NAME': 'value'``, ``"NAME": "value"``, ``NAME   value``, ``NAME | value``,
      ``<td>NAME</td><td>value</td>`` (also HTML- or Markdown-escaped); the name is kept.

    Fast on large notebooks with many secrets: ``value`` is serialized once and only the secrets
    that occur in that text are looked for string by string (nothing is walked when none does);
    the prefixes are found with one compiled alternation.
    """
    if contextual is None:
        contextual = getattr(secrets, "contextual", None) or []
    plan = _Scrubber(list(secrets), list(contextual))
    if plan.empty:
        return value, 0
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = None
    if text is not None:  # JSON escapes character by character: a substring stays a substring
        plan.narrow(text)
        if plan.empty:
            return value, 0
    hits = 0

    def walk(v: Any) -> Any:
        nonlocal hits
        if isinstance(v, str):
            v, n = plan(v)
            hits += n
            return v
        if isinstance(v, Mapping):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value), hits
