"""Render a postmortem (Markdown, self-contained HTML, findings.json, PNG figures) from an executed notebook.

::

    paths = render_postmortem("out/inc-42/inference_latency.ipynb", "out/inc-42")
    paths["markdown"], paths["html"], paths["findings"]   # postmortem.md, postmortem.html, findings.json
    paths["figure:changes"]                                # figures/changes.png

The document model is the ``postmortem`` finding's data (:class:`perfkit.findings.PostmortemModel`);
the other findings fill the analysis sections and the appendix. Nothing is queried again.
The HTML embeds plotly.js once, from the installed package, and loads nothing from the network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from perfkit.errors import ConfigError
from perfkit.findings import SECTION_KEYS, Finding, jsonable
from perfkit.frames import utc
from perfkit.report.notebook import REDACTED, ExecutedNotebook, read_executed_notebook, redact_text
from perfkit.secrets import known_secrets
from perfkit.secrets import scrub as scrub_known

#: Findings shown in their own section; every other finding goes to the appendix.
SECTION_FINDINGS = ("changes", "stages", "gpu", "cost", "postmortem")
VERDICTS = ("confirmed", "ruled_out", "inconclusive")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
_PLOTLYJS_MARK = "/*@@perfkit-plotlyjs@@*/"


def templates_dir() -> Path:
    """The repository's ``templates/`` folder (next to the ``perfkit`` package)."""
    import perfkit

    return Path(perfkit.__file__).resolve().parents[1] / "templates"


def render_postmortem(
    notebook_path: str | Path, out_dir: str | Path, *, now: datetime | None = None
) -> dict[str, Path]:
    """Write ``postmortem.md``, ``postmortem.html``, ``findings.json`` and ``figures/<key>.png``
    into ``out_dir`` and return their paths by name: ``"markdown"``, ``"html"``, ``"findings"``
    and ``"figure:<key>"`` for each figure.

    ``now`` is the generation time shown in the header (default: the current UTC time).
    Raises :class:`~perfkit.errors.ConfigError` when the notebook cannot be read.
    """
    nb = read_executed_notebook(notebook_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = build_document(nb, now=now)
    paths: dict[str, Path] = {}
    paths.update(_write_figures(doc, out / "figures"))
    secrets = known_secrets(nb.parameters)  # the parameters' secrets and the environment's

    md = _env("md").get_template("postmortem.md.j2").render(doc=doc)
    paths["markdown"] = _write(out / "postmortem.md", scrub(md, secrets, markdown=True))

    html = _env("html").get_template("postmortem.html.j2").render(doc=doc, plotlyjs_mark=_PLOTLYJS_MARK)
    html = scrub(html, secrets)  # before plotly.js goes in: never rewrite the library's code
    if doc.has_figures:
        html = html.replace(_PLOTLYJS_MARK, plotlyjs(), 1)
    paths["html"] = _write(out / "postmortem.html", html)

    text = json.dumps(findings_document(nb, doc), indent=2, ensure_ascii=False, allow_nan=False)
    paths["findings"] = _write(out / "findings.json", scrub(text, secrets, json_escaped=True) + "\n")
    return paths


# -- the document model --------------------------------------------------------------------------


@dataclass
class FindingView:
    """One finding as the templates show it."""

    key: str
    title: str
    summary: str
    status: str
    table: dict[str, Any] | None
    figure: dict[str, Any] | None = field(repr=False)
    caption: str
    figure_png: str | None = None  # "figures/<key>.png" once drawn
    figure_error: str | None = None

    @property
    def anchor(self) -> str:
        return "finding-" + _slug(self.key)

    @property
    def plot_id(self) -> str:
        return "fig-" + _slug(self.key)

    @property
    def plot_height(self) -> int:
        """Pixel height of the interactive plot: the layout's own, else 440 (250 per stacked row)."""
        layout = (self.figure or {}).get("layout") or {}
        height = layout.get("height")
        if isinstance(height, int | float) and 200 <= height <= 1200:
            return int(height)
        rows = sum(
            1
            for k, v in layout.items()
            if re.fullmatch(r"yaxis\d*", k) and isinstance(v, Mapping) and not v.get("overlaying")
        )
        return 440 if rows <= 1 else min(250 * rows, 1000)

    @property
    def figure_json(self) -> Any:
        """The figure as JSON that is safe inside ``<script type="application/json">``."""
        figure = dict(self.figure or {})
        layout = dict(figure.get("layout") or {})
        layout.pop("width", None)  # let the page width decide
        layout["autosize"] = True
        return html_json({"data": figure.get("data") or [], "layout": layout})


@dataclass
class Document:
    """Everything the Markdown and HTML templates render, in section order."""

    header: dict[str, Any]
    complete: bool
    notices: list[str]  # perfkit's own sentences, shown as Markdown: never evidence text
    summary: str
    summary_items: list[FindingView]
    impact: dict[str, Any] | None
    detection: str
    trigger: str
    changes: FindingView | None
    stages_text: str
    stages: FindingView | None
    triage_rows: list[dict[str, str]]
    root_cause: str
    top_direction: str
    gpu: FindingView | None
    cost: FindingView | None
    timeline: list[dict[str, str]]
    action_items: list[dict[str, str]]
    missing: list[dict[str, Any]]
    appendix: list[FindingView]
    provenance: dict[str, Any]
    views: dict[str, FindingView]

    @property
    def shown(self) -> list[FindingView]:
        """The findings whose table and figure appear in the document."""
        return [v for v in (self.changes, self.stages, self.gpu, self.cost, *self.appendix) if v is not None]

    @property
    def has_figures(self) -> bool:
        """Whether the HTML needs plotly.js."""
        return any(v.figure for v in self.shown)


def build_document(nb: ExecutedNotebook, *, now: datetime | None = None) -> Document:
    """The postmortem's content from an executed notebook (no rendering, no files written)."""
    findings = nb.findings
    views = {key: _view(f) for key, f in findings.items()}
    model = postmortem_model(findings, runbook=nb.runbook)
    complete = "postmortem" in findings
    notices: list[str] = []
    if not complete:
        notices.append(
            "The runbook did not complete its findings section: no `postmortem` finding was recorded, "
            f"so this document was assembled from the {len(findings)} finding(s) that were."
        )
    if nb.problems:
        notices.append(
            f"{len(nb.problems)} cell(s) of the notebook raised an error; see Provenance → Problems. "
            "Sections after a failed cell may be missing."
        )
    triage = findings.get("triage")
    triage_data = triage.data if triage else {}
    generated = utc(now) if now else datetime.now(UTC)
    header = {
        "title": str(model.get("title") or f"Postmortem: {nb.runbook}"),
        "incident": _text(model.get("incident")),
        "status": _text(model.get("status")) or "draft",
        "severity": _text(model.get("severity")),
        "service": _text(model.get("service")),
        "model": _text(model.get("model")),
        "window": format_window(model.get("window")),
        "baseline": format_window(model.get("baseline")),
        "generated": generated.strftime("%Y-%m-%d %H:%M UTC"),
        "runbook": nb.runbook,
    }
    return Document(
        header=header,
        complete=complete,
        notices=notices,
        summary=_text(model.get("summary")),
        summary_items=[] if complete else _ordered([v for k, v in views.items() if k != "postmortem"]),
        impact=_table(model.get("impact")),
        detection=_text(model.get("detection")),
        trigger=_text(model.get("trigger")),
        changes=views.get("changes"),
        stages_text=_text(model.get("stages")),
        stages=views.get("stages"),
        triage_rows=triage_rows(model.get("triage_checked"), triage_data),
        root_cause=_text(model.get("root_cause")),
        top_direction=top_direction(triage_data),
        gpu=views.get("gpu"),
        cost=views.get("cost"),
        timeline=timeline_rows(model.get("timeline")),
        action_items=action_rows(model.get("action_items")),
        missing=missing_evidence(model.get("missing"), findings),
        appendix=_ordered([v for k, v in views.items() if k not in SECTION_FINDINGS]),
        provenance=provenance(nb),
        views=views,
    )


def postmortem_model(findings: Mapping[str, Finding], *, runbook: str = "") -> dict[str, Any]:
    """The postmortem finding's data, with gaps filled from the ``scope`` finding.

    Without a ``postmortem`` finding the model is built from ``scope`` alone (title, incident,
    service, model, window, baseline, severity); the summary is then left empty.
    """
    scope = findings["scope"].data if "scope" in findings else {}
    model: dict[str, Any] = {
        "title": scope.get("title") or (f"Postmortem: {runbook}" if runbook else "Postmortem"),
        "incident": scope.get("incident") or scope.get("id"),
        "service": scope.get("service"),
        "model": scope.get("model"),
        "status": "draft",
        "severity": scope.get("severity"),
        "window": scope.get("window"),
        "baseline": scope.get("baseline"),
    }
    if "postmortem" in findings:
        model.update({k: v for k, v in findings["postmortem"].data.items() if v not in (None, "", [], {})})
    return model


def _view(finding: Finding) -> FindingView:
    return FindingView(
        key=finding.key,
        title=finding.title or finding.key,
        summary=finding.summary or "",
        status=(finding.status or "ok").lower(),
        table=_table(finding.table),
        figure=finding.figure if isinstance(finding.figure, Mapping) and finding.figure.get("data") else None,
        caption=finding.figure_caption or "",
    )


def _ordered(views: Iterable[FindingView]) -> list[FindingView]:
    rank = {key: i for i, key in enumerate(SECTION_KEYS)}
    return sorted(views, key=lambda v: (rank.get(v.key, len(rank)), v.key))


def _table(value: Any) -> dict[str, Any] | None:
    """A ``{"columns", "rows"}`` table with every row padded to the header's width, or None."""
    if not isinstance(value, Mapping):
        return None
    columns = [str(c) for c in value.get("columns") or []]
    rows = [list(r) if isinstance(r, list | tuple) else [r] for r in value.get("rows") or []]
    if not columns and not rows:
        return None
    width = max([len(columns), *(len(r) for r in rows)])
    columns += [""] * (width - len(columns))
    return {"columns": columns, "rows": [r + [None] * (width - len(r)) for r in rows]}


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def format_window(window: Any) -> str:
    """``{"start", "end"}`` as ``2026-11-30 02:00:00 → 04:00:00 UTC (2 h)``; ``""`` when absent."""
    if not isinstance(window, Mapping) or not window.get("start") or not window.get("end"):
        return ""
    try:
        start, end = utc(window["start"]), utc(window["end"])
    except (TypeError, ValueError):
        return f"{window['start']} → {window['end']}"
    end_fmt = "%H:%M:%S" if start.date() == end.date() else "%Y-%m-%d %H:%M:%S"
    return f"{start:%Y-%m-%d %H:%M:%S} → {end.strftime(end_fmt)} UTC ({format_duration((end - start).total_seconds())})"


def format_duration(seconds: float) -> str:
    """Seconds as ``2 h 5 min``, ``45 min``, ``12.3 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min"


def _verdict(value: Any) -> str:
    text = _text(value).lower().replace(" ", "_").replace("-", "_")
    return text if text in VERDICTS else (text or "inconclusive")


def triage_rows(checked: Any, triage_data: Mapping[str, Any]) -> list[dict[str, str]]:
    """The triage trail: the model's ``triage_checked`` rows, or (when absent) rows built from the
    ``triage`` finding's directions and symptoms. Each row: direction, symptom, detected, verdict, why."""
    rows: list[dict[str, str]] = []
    if isinstance(checked, list) and checked:
        for row in checked:
            if isinstance(row, Mapping):
                rows.append(
                    {
                        "direction": _text(row.get("direction")),
                        "symptom": _text(row.get("symptom")),
                        "detected": format_cell(row.get("detected")),
                        "verdict": _verdict(row.get("verdict")),
                        "why": _text(row.get("why")),
                    }
                )
        return rows
    detected = {
        str(s.get("id")): s.get("detected")
        for s in triage_data.get("symptoms") or []
        if isinstance(s, Mapping)
    }
    for direction in triage_data.get("directions") or []:
        if not isinstance(direction, Mapping):
            continue
        verification = direction.get("verification")
        why = ""
        if isinstance(verification, Mapping):
            why = _text(verification.get("why") or verification.get("summary"))
            if not why:
                why = json.dumps(jsonable(verification), ensure_ascii=False, sort_keys=True)[:300]
        symptom = _text(direction.get("symptom"))
        rows.append(
            {
                "direction": _text(direction.get("id")),
                "symptom": symptom,
                "detected": format_cell(detected.get(symptom)),
                "verdict": _verdict(direction.get("verdict")),
                "why": why,
            }
        )
    return rows


def top_direction(triage_data: Mapping[str, Any]) -> str:
    """One line on triage's rank-1 direction (verdict, score, suspect version), or ``""``."""
    directions = [d for d in triage_data.get("directions") or [] if isinstance(d, Mapping)]
    if not directions:
        return ""
    best = min(directions, key=lambda d: d.get("rank") if isinstance(d.get("rank"), int | float) else 1e9)
    parts = [_verdict(best.get("verdict"))]
    if isinstance(best.get("score"), int | float):
        parts.append(f"score {best['score']:.2f}")
    if best.get("suspect_version"):
        parts.append(f"suspect version {best['suspect_version']}")
    return f"Top-ranked direction: {best.get('id')} ({', '.join(parts)})"


def timeline_rows(timeline: Any) -> list[dict[str, str]]:
    """Timeline rows sorted by time, with the time shown as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    rows: list[tuple[str, dict[str, str]]] = []
    for row in timeline or []:
        if not isinstance(row, Mapping):
            continue
        raw = _text(row.get("ts"))
        try:
            ts = utc(raw)
            shown, order = f"{ts:%Y-%m-%d %H:%M:%S}", ts.isoformat()
        except (TypeError, ValueError):
            shown, order = raw, raw
        rows.append(
            (order, {"time": shown, "event": _text(row.get("event")), "source": _text(row.get("source"))})
        )
    return [r for _, r in sorted(rows, key=lambda pair: pair[0])]


def action_rows(items: Any) -> list[dict[str, str]]:
    """Action items (action, type, priority, owner), highest priority first."""
    rows = [
        {k: _text(item.get(k)) for k in ("action", "type", "priority", "owner")}
        for item in items or []
        if isinstance(item, Mapping)
    ]
    return sorted(rows, key=lambda r: r["priority"] or "P9")


def missing_evidence(model_missing: Any, findings: Mapping[str, Finding]) -> list[dict[str, Any]]:
    """The model's missing evidence plus every finding's, de-duplicated (whitespace and case
    insensitive, first spelling kept). Each entry: ``{"text", "sections"}`` (who reported it)."""
    entries: dict[str, dict[str, Any]] = {}

    def add(text: Any, section: str | None) -> None:
        shown = " ".join(_text(text).split())
        if not shown:
            return
        entry = entries.setdefault(shown.lower(), {"text": shown, "sections": []})
        if section and section not in entry["sections"]:
            entry["sections"].append(section)

    for text in model_missing or []:
        add(text, None)
    for finding in _ordered_findings(findings):
        extra = finding.data.get("missing") if finding.key == "triage" else None  # DESIGN §5's list
        for text in [*finding.missing, *(extra if isinstance(extra, list) else [])]:
            add(text, finding.key)
    return list(entries.values())


def _ordered_findings(findings: Mapping[str, Finding]) -> list[Finding]:
    rank = {key: i for i, key in enumerate(SECTION_KEYS)}
    return sorted(findings.values(), key=lambda f: (rank.get(f.key, len(rank)), f.key))


def provenance(nb: ExecutedNotebook) -> dict[str, Any]:
    """What the document was built from: versions, hash, redacted parameters, queries, timings, errors."""
    params = nb.redacted_parameters()
    slowest = sorted(nb.cell_durations, key=lambda c: c.duration_s, reverse=True)[:5]
    return {
        "perfkit_version": nb.perfkit_version,
        "runbook": nb.runbook,
        "runbook_version": nb.runbook_version,
        "notebook": nb.path.name,
        "sha256": nb.sha256,
        "executed": format_window({"start": nb.executed_start, "end": nb.executed_end})
        or (nb.executed_start or ""),
        "parameters": [{"name": k, "value": _param_text(v)} for k, v in params.items()],
        "queries": [
            {"key": f.key, "title": f.title, "queries": [str(q) for q in f.queries]}
            for f in _ordered_findings(nb.findings)
            if f.queries
        ],
        "total_duration": format_duration(nb.total_duration_s) if nb.cell_durations else "",
        "cells_timed": len(nb.cell_durations),
        "slowest": [{"label": c.label, "duration": f"{c.duration_s:.2f} s"} for c in slowest],
        "problems": [
            {"label": p.label, "ename": p.ename, "evalue": redact_text(_first_line(p.evalue, 300))}
            for p in nb.problems
        ],
    }


def _param_text(value: Any) -> str:
    if value == REDACTED or isinstance(value, str):
        return str(value)
    return json.dumps(jsonable(value), ensure_ascii=False)


def _first_line(text: str, limit: int) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def findings_document(nb: ExecutedNotebook, doc: Document) -> dict[str, Any]:
    """The content of ``findings.json``: strict JSON, figures replaced by ``true``/``false``."""
    findings = {}
    for finding in _ordered_findings(nb.findings):
        payload = finding.to_json()
        payload["figure"] = finding.figure is not None
        findings[finding.key] = payload
    triage = nb.findings.get("triage")
    return jsonable(
        {
            "perfkit_version": nb.perfkit_version,
            "runbook": nb.runbook,
            "runbook_version": nb.runbook_version,
            "notebook_sha256": nb.sha256,
            "incident": doc.header["incident"] or None,
            "title": doc.header["title"],
            "parameters": nb.redacted_parameters(),
            "findings": findings,
            "triage": triage.data if triage else None,
            "missing": [m["text"] for m in doc.missing],
        }
    )


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

    - ``< > &`` become ``&lt; &gt; &amp;`` (``&`` only before an entity), so no raw HTML and no
      ``<http://…>`` autolink; `` \\ ` * [ ] # | ~ $ `` and ``_`` outside a word are backslash-escaped;
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
            out.append("&gt;")
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
    :func:`perfkit.secrets.scrub` adds: truncated prefixes of long secrets, and the contextual
    ``(name, value)`` pairs of a :class:`~perfkit.secrets.SecretSet` (``secrets.contextual``)."""
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


_MD_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


# -- output --------------------------------------------------------------------------------------


def _write_figures(doc: Document, folder: Path) -> dict[str, Path]:
    """Draw each finding's figure once as ``folder/<key>.png``; a figure that fails is noted, not raised."""
    from perfkit.report.static import figure_to_png

    written: dict[str, Path] = {}
    for view in doc.views.values():
        if not view.figure:
            continue
        name = f"{_slug(view.key)}.png"
        try:
            written[f"figure:{view.key}"] = figure_to_png(view.figure, folder / name)
            view.figure_png = f"figures/{name}"
        except Exception as err:  # a broken figure must not cost the whole postmortem
            view.figure_error = (
                f"static image could not be drawn ({type(err).__name__}: {_first_line(str(err), 200)})"
            )
    return written


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("._") or "finding"


@lru_cache(maxsize=1)
def plotlyjs() -> str:
    """plotly.js from the installed ``plotly`` package (read once per process), safe inside ``<script>``."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script")


@lru_cache(maxsize=2)
def _env(kind: str) -> Any:
    """The Jinja environment for ``"html"`` (autoescape on) or ``"md"`` (every value Markdown-escaped)."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    folder = templates_dir()
    if not (folder / "postmortem.md.j2").is_file():
        raise ConfigError(f"postmortem templates not found in {folder}")
    if kind == "html":
        env = Environment(
            loader=FileSystemLoader(folder),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters["prose"] = text_to_html
    else:
        env = Environment(
            loader=FileSystemLoader(folder),
            autoescape=False,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            finalize=md_escape,  # everything printed is escaped unless it is already Markup
        )
        env.filters["table"] = md_table
        env.filters["code"] = md_code_block
        env.filters["code_span"] = md_code_span
        env.filters["oneline"] = md_oneline
        env.filters["alt"] = md_alt
    env.filters["cell"] = format_cell
    env.globals["plotly_config"] = html_json(PLOTLY_CONFIG)
    return env
