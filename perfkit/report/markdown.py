"""Text formatting for the postmortem: Markdown escaping and the Markdown template's filters
(:func:`md_escape`, :func:`md_cell`, :func:`md_table`, :func:`md_code_span`, ...), the few HTML
helpers (:func:`text_to_html`, :func:`html_json`), and :func:`scrub`, which removes secrets in every
spelling these functions may have given them.

Split out of :mod:`perfkit.report.render`, which builds its Jinja environments from these.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from markupsafe import Markup, escape

from perfkit.core.findings import jsonable
from perfkit.core.scrub import scrub as scrub_known
from perfkit.report.notebook import REDACTED

# -- text formatting (Markdown and HTML) ---------------------------------------------------------


def format_cell(value: Any) -> str:
    """A table value as text: ``None`` as ``—``, booleans yes/no, floats to a readable precision."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return "—"
        magnitude = abs(value)
        if value == int(value) and magnitude < 1e15:
            return f"{int(value):,}" if magnitude >= 1e4 else str(int(value))
        if magnitude >= 1e4:
            return f"{value:,.0f}"
        if magnitude >= 1:
            return f"{value:.6g}" if magnitude >= 1000 else f"{round(value, 3):g}"
        if magnitude >= 1e-3:
            return f"{value:.4f}".rstrip("0")
        return f"{value:.3e}"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(jsonable(value), ensure_ascii=False, sort_keys=True)
    return str(value)


_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
#: Always backslash-escaped: they open code spans, emphasis, links/images (``[``), headings,
#: table cells, strikethrough/fences and (GitHub) math. ``_`` is escaped unless it sits between
#: two letters or digits, where CommonMark never reads it as emphasis (``ttft_p95_s`` stays readable).
_MD_ALWAYS = frozenset("\\`*[]#|~$")
#: Block markers that only count at the start of a line: bullets, setext underlines, ``1.``/``1)``.
_MD_LINE_MARK = re.compile(r"^([ \t]*)([-+=])", re.M)
_MD_LINE_ORDINAL = re.compile(r"^([ \t]*\d{1,9})([.)])(?=[ \t]|$)", re.M)
_MD_WWW = re.compile(r"(www)\.", re.IGNORECASE)
#: perfkit's redaction marker as md_escape spells it, unless a ``(``, ``[``, ``:`` or escape follows.
_MD_REDACTED = re.compile(re.escape("\\[" + REDACTED[1:-1] + "\\]") + r"(?![(\[:\\])")


def md_escape(value: Any, *, bare_urls: bool = False) -> Any:
    """Evidence text as inert Markdown: it reads the same once rendered, but cannot create links,
    images, HTML, headings, lists, tables or emphasis. This is the one escaping function for
    ``postmortem.md``; it is the Markdown environment's ``finalize``, so every ``{{ value }}`` goes
    through it, and :class:`~markupsafe.Markup` (perfkit's own Markdown) passes through untouched.

    - ``<`` and ``&`` become ``&lt;`` and ``&amp;`` (``&`` only before an entity), so no raw HTML and
      no ``<http://…>`` autolink; ``>`` is backslash-escaped (``\\>``: no blockquote, and the raw
      file reads ``a \\> b``, not ``a &gt; b``); `` \\ ` * [ ] # | ~ $ `` and ``_`` outside a word are backslash-escaped;
    - at the start of a line, ``- + =`` and the ``.``/``)`` of ``1.`` are escaped (no lists,
      setext headings or thematic breaks);
    - GFM's bare-URL autolinks are broken: the ``:`` of ``://`` and the ``.`` of ``www.`` are
      escaped (``http\\://evil.example`` renders as the text ``http://evil.example``, unlinked).
      ``bare_urls=True`` keeps them (the provenance table's parameter values: the operator's own
      inputs, such as ``prometheus_url``). E-mail addresses are not changed: cmark-gfm links
      ``user@host`` as ``mailto:`` whatever the escaping; such a link shows its own target and
      loads nothing.
    - perfkit's redaction marker ``[redacted]`` is left as it is (it cannot form a link: no
      evidence line can start a ``[label]:`` definition, and it is kept escaped before ``(``, ``[``, ``:``).
    """
    if isinstance(value, Markup):
        return value
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    out: list[str] = []
    last = len(text) - 1
    for i, ch in enumerate(text):
        if ch in _MD_ALWAYS:
            out.append("\\" + ch)
        elif ch == "_":
            inside_word = 0 < i < last and text[i - 1].isalnum() and text[i + 1].isalnum()
            out.append("_" if inside_word else "\\_")
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("\\>")  # reads as ">" in the raw file too; no blockquote at a line's start
        elif ch == "&" and _ENTITY.match(text, i):
            out.append("&amp;")
        elif ch == ":" and not bare_urls and text.startswith("//", i + 1):
            out.append("\\:")
        else:
            out.append(ch)
    text = "".join(out)
    if not bare_urls:
        text = _MD_WWW.sub(r"\1\\.", text)
    text = _MD_LINE_MARK.sub(r"\1\\\2", text)
    text = _MD_LINE_ORDINAL.sub(r"\1\\\2", text)
    return _MD_REDACTED.sub(REDACTED, text)


def md_oneline(value: Any) -> Markup:
    """Escaped Markdown text on one line (for headings, list items and image alt text)."""
    if isinstance(value, Markup):
        return Markup(" ".join(value.split()))
    return Markup(md_escape(" ".join(("" if value is None else str(value)).split())))


def md_alt(value: Any) -> Markup:
    """Escaped text for an image's alt text (brackets shown as parentheses)."""
    return md_oneline(("" if value is None else str(value)).replace("[", "(").replace("]", ")"))


def md_code_span(value: Any) -> Markup:
    """A GFM code span (its content is literal, so it is not escaped; one line)."""
    body = " ".join(("" if value is None else str(value)).split())
    if not body:
        return Markup("")
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return Markup(f"{fence}{pad}{body}{pad}{fence}")


def md_cell(value: Any, *, bare_urls: bool = False) -> str:
    """One GFM table cell: escaped (``|`` too, so it cannot split the row), newlines as ``<br>``."""
    text = value if isinstance(value, Markup) else md_escape(format_cell(value), bare_urls=bare_urls)
    return "<br>".join(line.strip() for line in str(text).strip().splitlines()) or " "


def md_table(
    table: Any,
    columns: Iterable[str] | None = None,
    headers: Iterable[str] | None = None,
    *,
    bare_urls: bool = False,
) -> Markup:
    """A GFM table from ``{"columns", "rows"}``, or from a list of dict rows (``columns`` are the
    keys to show, ``headers`` their titles). Every cell goes through :func:`md_escape`
    (``bare_urls`` as there: only for the operator's own parameter values)."""
    if not table:
        return Markup("")
    if columns is not None:
        keys = list(columns)
        header = list(headers) if headers is not None else keys
        rows = [[row.get(k) for k in keys] for row in table]
    else:
        header, rows = list(table["columns"]), list(table["rows"])
    lines = [
        "| " + " | ".join(md_cell(h) for h in header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(md_cell(v, bare_urls=bare_urls) for v in row) + " |" for row in rows]
    return Markup("\n".join(lines))


def md_code_block(text: Any, lang: str = "") -> Markup:
    """A fenced code block (its content is literal in GFM, so it is not escaped)."""
    body = str(text)
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return Markup(f"{fence}{lang}\n{body}\n{fence}")


def text_to_html(value: Any) -> Markup:
    """Plain runbook prose as HTML: escaped, then `code`, **bold**, paragraphs and line breaks."""
    text = str(escape("" if value is None else str(value).strip()))
    text = re.sub(r"`([^`\n]+)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*\n]+)\*\*", r"<strong>\1</strong>", text)
    paragraphs = [p.strip().replace("\n", "<br>\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
    return Markup("".join(f"<p>{p}</p>" for p in paragraphs))


def html_json(value: Any) -> Markup:
    """JSON safe inside an HTML ``<script>`` element: ``<``, ``>``, ``&`` as ``\\u`` escapes."""
    text = json.dumps(jsonable(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def scrub(text: str, secrets: Iterable[str], *, json_escaped: bool = False, markdown: bool = False) -> str:
    """``text`` with every known secret value (8+ characters) replaced by ``[redacted]``,
    also in its HTML-escaped (and, with ``json_escaped``, JSON-escaped) spelling; with
    ``markdown``, also as :func:`md_escape` may have spelled it (backslashes before punctuation,
    entities for ``< > &``, whitespace collapsed or broken into ``<br>``). Then what
    :func:`perfkit.core.scrub.scrub` adds: truncated prefixes of long secrets, and the contextual
    ``(name, value)`` pairs of a :class:`~perfkit.core.scrub.SecretSet` (``secrets.contextual``)."""
    contextual = list(getattr(secrets, "contextual", None) or [])
    secrets = list(secrets)
    for secret in secrets:
        if len(secret) < 8:
            continue
        spellings = {secret, str(escape(secret))}
        if json_escaped:
            spellings.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        for spelling in spellings:
            text = text.replace(spelling, REDACTED)
        if markdown:
            text = _md_spellings(secret).sub(lambda _: REDACTED, text)
    long = [s for s in secrets if len(s) >= 8]
    return scrub_known(text, long, contextual=contextual)[0] if long or contextual else text


def _md_spellings(secret: str) -> re.Pattern[str]:
    """A pattern for ``secret`` as it may appear in escaped Markdown (see :func:`md_escape`)."""
    parts: list[str] = []
    for ch in secret:
        if ch in _MD_ENTITIES:
            parts.append(f"(?:{re.escape(ch)}|{_MD_ENTITIES[ch]})")
        elif ch.isspace():
            parts.append(r"(?:\s|<br>)+")
        elif ch.isascii() and not ch.isalnum():
            parts.append(r"\\?" + re.escape(ch))
        else:
            parts.append(re.escape(ch))
    return re.compile("".join(parts))


_MD_ENTITIES = {"<": "&lt;", ">": r"&gt;|\\>", "&": "&amp;"}
"""How :func:`md_escape` may spell these, as regular expressions (``>`` as ``\\>``, or ``&gt;`` as before)."""
