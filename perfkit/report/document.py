"""The postmortem's document model: what the Markdown and HTML templates render, built from an
executed notebook's findings (:func:`build_document`), and the content of ``findings.json``
(:func:`findings_document`). Nothing here renders or writes a file; :mod:`perfkit.report.render` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from perfkit.core.findings import SECTION_KEYS, Finding, jsonable
from perfkit.core.frames import utc
from perfkit.report.markdown import format_cell, html_json
from perfkit.report.notebook import REDACTED, ExecutedNotebook, redact_text
from perfkit.triage.workload_notes import about_rows

#: Findings shown in their own section; every other finding goes to the appendix.
SECTION_FINDINGS = ("impact", "changes", "stages", "gpu", "cost", "postmortem")
#: A training job's postmortem shows its step breakdown (the ``train_*`` gauges, the profiler
#: traces per rank, the scaling between phases) where an inference one shows latency stages, its
#: efficiency and memory beside the GPU state, and its training cost as the cost
#: (:mod:`perfkit.app.runbooks.training`).
BREAKDOWN_FINDINGS = ("scaling", "trace", "trace_ranks", "training")
GPU_FINDINGS = ("efficiency", "memory")
TRAINING_COST = "training_cost"
VERDICTS = ("confirmed", "ruled_out", "inconclusive")


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
    slo_impact: FindingView | None  # the impact finding: per SLO, attainment, minutes and requests over
    pre_existing: list[str]  # breaches already there in the baseline (perfkit's own sentences)
    impact_span: str  # "start → end" of the breaches the incident caused
    trigger: str
    changes: FindingView | None
    stages_text: str
    stages: FindingView | None
    triage_rows: list[dict[str, str]]  # the rows that apply to the workload
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
    workload: str = "unknown"  # training | serving | mixed | unknown: which layout and wording
    breakdown: list[FindingView] = field(default_factory=list)  # training: per rank, per phase
    gpu_more: list[FindingView] = field(default_factory=list)  # training: efficiency, memory
    triage_na: list[dict[str, str]] = field(default_factory=list)  # rows about the other workload
    resolution: list[str] = field(default_factory=list)  # how it was resolved, with times
    lessons: dict[str, list[str]] = field(default_factory=dict)  # went_well, went_wrong, lucky

    @property
    def training(self) -> bool:
        return self.workload == "training"

    @property
    def stages_title(self) -> str:
        return "Step breakdown: per rank and per phase" if self.training else "Per-stage analysis"

    @property
    def na_title(self) -> str:
        """The line above the rows that do not apply (perfkit's own words)."""
        job = {"training": "a training job", "serving": "a serving workload"}.get(
            self.workload, "this workload"
        )
        n = len(self.triage_na)
        return f"{n} row{'' if n == 1 else 's'} not applicable to {job} (nothing of theirs fired; not part of the trail)"

    @property
    def shown(self) -> list[FindingView]:
        """The findings whose table and figure appear in the document."""
        return [
            v
            for v in (
                self.changes,
                self.stages,
                *self.breakdown,
                self.gpu,
                *self.gpu_more,
                self.cost,
                *self.appendix,
            )
            if v is not None
        ]

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
    workload = _text(model.get("workload")) or workload_of(triage_data)
    rows = triage_rows(model.get("triage_checked"), triage_data)
    training = workload == "training"
    breakdown = [views[k] for k in BREAKDOWN_FINDINGS if training and k in views]
    gpu_more = [views[k] for k in GPU_FINDINGS if training and k in views]
    cost = views.get(TRAINING_COST) if training and TRAINING_COST in views else views.get("cost")
    placed = {*SECTION_FINDINGS, *(v.key for v in (*breakdown, *gpu_more)), *([cost.key] if cost else [])}
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
        "scope": scope_text(findings["scope"].data if "scope" in findings else {}),
        "judged": judged_text(triage_data.get("judged")),
        "engine": engine_of(triage_data.get("engine")),
    }
    return Document(
        header=header,
        complete=complete,
        notices=notices,
        summary=_text(model.get("summary")),
        summary_items=[] if complete else _ordered([v for k, v in views.items() if k != "postmortem"]),
        impact=_table(model.get("impact")),
        detection=_text(model.get("detection")),
        slo_impact=None if training else views.get("impact"),
        pre_existing=[_text(t) for t in model.get("pre_existing") or [] if isinstance(t, str)],
        impact_span=span_text(model.get("impact_span")),
        trigger=_text(model.get("trigger")),
        changes=views.get("changes"),
        stages_text=_text(model.get("stages")),
        stages=views.get("stages"),
        triage_rows=[r for r in rows if r["applies"] != "no"],
        root_cause=_text(model.get("root_cause")),
        top_direction=top_direction(triage_data),
        gpu=views.get("gpu"),
        cost=cost,
        timeline=timeline_rows(model.get("timeline")),
        action_items=action_rows(model.get("action_items")),
        missing=missing_evidence(model.get("missing"), findings),
        appendix=_ordered([v for k, v in views.items() if k not in placed]),
        provenance=provenance(nb),
        views=views,
        workload=workload,
        breakdown=breakdown,
        gpu_more=gpu_more,
        triage_na=[r for r in rows if r["applies"] == "no"],
        resolution=_texts(model.get("resolution")),
        lessons={k: _texts(v) for k, v in (model.get("lessons") or {}).items() if k in LESSONS}
        if isinstance(model.get("lessons"), Mapping)
        else {},
    )


def span_text(span: Any) -> str:
    """The impact's onset and recovery in words ("" when no breach of the incident's was timed)."""
    if not isinstance(span, Mapping) or not span.get("start"):
        return ""
    end = _text(span.get("end")) or "still on at the window's end"
    return f"{_text(span.get('start'))} → {end}"


def scope_text(scope: Mapping[str, Any]) -> str:
    """The workload the incident was scoped to (and its hosts), or how many were judged together."""
    chosen = scope.get("scope")
    if isinstance(chosen, Mapping) and isinstance(chosen.get("scope"), Mapping):
        matchers = _text(chosen["scope"].get("matchers"))
        hosts = chosen.get("hosts") or []
        where = f" on {', '.join(_text(h) for h in hosts)}" if isinstance(hosts, list) and hosts else ""
        return f"{matchers or 'hosts only'}{where}"
    workloads = scope.get("workloads") or []
    if isinstance(workloads, list) and len(workloads) > 1:
        return f"none given: {len(workloads)} workloads in the evidence, judged together"
    return ""


def engine_of(engine: Any) -> str:
    """The serving engine in the triage JSON (``{name, title, version}``) in words: ``vLLM 0.10.1``."""
    if not isinstance(engine, dict) or not engine.get("title"):
        return ""
    return " ".join(_text(v) for v in (engine.get("title"), engine.get("version")) if v)


def judged_text(judged: Any) -> str:
    """The span the triage rows judged, when narrowed to the onset."""
    if not isinstance(judged, Mapping) or not judged.get("narrowed"):
        return ""
    return f"{_text(judged.get('start'))} → {_text(judged.get('end'))} ({_text(judged.get('why'))})"


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
    """A ``{"columns", "rows"}`` table with every row padded to the header's width, or None (also for
    a header without rows: the summary says there was nothing to list, an empty grid adds nothing)."""
    if not isinstance(value, Mapping):
        return None
    columns = [str(c) for c in value.get("columns") or []]
    rows = [list(r) if isinstance(r, list | tuple) else [r] for r in value.get("rows") or []]
    if not rows:
        return None
    width = max([len(columns), *(len(r) for r in rows)])
    columns += [""] * (width - len(columns))
    return {"columns": columns, "rows": [r + [None] * (width - len(r)) for r in rows]}


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _texts(values: Any) -> list[str]:
    return [_text(v) for v in values if isinstance(v, str) and v.strip()] if isinstance(values, list) else []


LESSONS = {"went_well": "What went well", "went_wrong": "What went wrong", "lucky": "Where we got lucky"}
"""The lessons' headings (the Google SRE book's postmortem template)."""


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


def _applies(value: Any) -> str:
    """``"no"`` only for a row recorded as not applying to the workload (``applies: false``)."""
    return "no" if value is False else "yes"


def triage_rows(checked: Any, triage_data: Mapping[str, Any]) -> list[dict[str, str]]:
    """The triage trail: the model's ``triage_checked`` rows, or (when absent) rows built from the
    ``triage`` finding's directions and symptoms. Each row: direction, symptom, detected, verdict,
    why, and applies (``"no"`` for a row about the other workload that did not fire)."""
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
                        "applies": _applies(row.get("applies")),
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
                "applies": _applies(direction.get("applies")),
            }
        )
    return rows


def workload_of(triage_data: Mapping[str, Any]) -> str:
    """The incident's workload as the triage rows recorded it: the rows set apart are all about
    serving (a training job) or all about training (a server); else ``unknown``."""
    apart = {
        _text(d.get("about"))
        for d in triage_data.get("directions") or []
        if isinstance(d, Mapping) and d.get("applies") is False
    }
    other = apart.pop() if len(apart) == 1 else ""
    return {"serving": "training", "training": "serving"}.get(other, "unknown")


def not_applicable_symptoms(triage_data: Mapping[str, Any]) -> set[str]:
    """The symptoms of the triage rows recorded as not applying to the workload."""
    return {
        _text(d.get("symptom"))
        for d in triage_data.get("directions") or []
        if isinstance(d, Mapping) and d.get("applies") is False
    }


def _rank(direction: Mapping[str, Any]) -> float:
    rank = direction.get("rank")
    return rank if isinstance(rank, int | float) else 1e9


def top_direction(triage_data: Mapping[str, Any]) -> str:
    """One line on triage's rank-1 direction (verdict, score, suspect version), or ``""``."""
    directions = [d for d in triage_data.get("directions") or [] if isinstance(d, Mapping)]
    if not directions:
        return ""
    best = min(directions, key=_rank)
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
    """Action items (action, type, priority, owner role, due-by placeholder), highest priority first."""
    rows = [
        {k: _text(item.get(k)) for k in ("action", "type", "priority", "owner", "due")}
        for item in items or []
        if isinstance(item, Mapping)
    ]
    return sorted(rows, key=lambda r: r["priority"] or "P9")


def missing_evidence(model_missing: Any, findings: Mapping[str, Finding]) -> list[dict[str, Any]]:
    """The model's missing evidence plus every finding's, de-duplicated (whitespace and case
    insensitive, first spelling kept). Each entry: ``{"text", "sections"}`` (who reported it)."""
    entries: dict[str, dict[str, Any]] = {}
    triage = findings.get("triage")
    na = not_applicable_symptoms(triage.data if triage else {})
    workload = _text(postmortem_model(findings).get("workload")) or workload_of(triage.data if triage else {})

    def add(text: Any, section: str | None) -> None:
        shown = " ".join(_text(text).split())
        if not shown or about_rows(shown, na, workload):  # the other workload's rows lack nothing
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
        ]
        + [  # a section that caught its own failure ran its cell cleanly: it is a problem all the same
            {
                "label": f"section {f.title}",
                "ename": "could not complete",
                "evalue": redact_text(_first_line(f.summary.removeprefix("could not complete: "), 300)),
            }
            for f in _ordered_findings(nb.findings)
            if f.status == "error"
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


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("._") or "finding"
