"""Findings: what a runbook section concluded, recorded into the executed notebook.

A finding is displayed as a hidden output with perfkit's own MIME type, so a postmortem can be
rebuilt from any executed notebook without re-querying a source::

    application/vnd.perfkit.finding+json  ->  Finding (below)

Schema (``schema`` = 1)::

    {
      "schema": 1,
      "key": "baseline",              # stable section key (see SECTION_KEYS); last one recorded wins
      "title": "Baseline vs now",
      "summary": "p95 TTFT 3.4 s vs 0.41 s in the baseline (8.3x)",   # one line, plain text
      "status": "ok" | "warn" | "critical" | "missing" | "error",
      "data": {...},                  # JSON; per-section content documented in perfkit/analyses
      "table": {"columns": [...], "rows": [[...], ...]} | null,
      "figure": <plotly figure as JSON (fig.to_plotly_json())> | null,
      "figure_caption": "query, step and range behind the figure" | null,
      "missing": ["no DCGM metrics in window", ...],   # evidence this section could not get
      "queries": ["histogram_quantile(0.95, ...)", ...]
    }

The ``postmortem`` finding carries the document model the report renders (see
:class:`PostmortemModel`); the ``triage`` finding's ``data`` is the triage JSON of docs/bundle.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, NotRequired, TypedDict

MIME = "application/vnd.perfkit.finding+json"
SCHEMA = 1

#: Section keys in the order an on-call engineer works.
SECTION_KEYS = (
    "scope",
    "completeness",
    "changes",
    "baseline",
    "impact",
    "stages",
    "training",
    "triage",
    "gpu",
    "cost",
    "postmortem",
)


class Table(TypedDict):
    columns: list[str]
    rows: list[list[Any]]


class TimelineRow(TypedDict):
    ts: str  # ISO 8601 UTC, "2026-11-30T02:10:00Z"
    event: str
    source: str  # events.csv, alertmanager, change point, slo, notebook


class ActionItem(TypedDict):
    action: str
    type: str  # prevent | detect | mitigate | process
    priority: str  # P0 | P1 | P2
    owner: str  # a role: the review names the person
    due: NotRequired[str]  # a placeholder the review fills (perfkit.report.review.due_by)


class PostmortemModel(TypedDict, total=False):
    """What ``perfkit postmortem`` renders (recorded by the runbook's last section)."""

    title: str
    incident: str
    service: str
    model: str | None
    status: str  # draft
    severity: str  # SEV-2 .. SEV-4, from the SLO breaches the incident caused (findings.impact)
    severity_basis: list[str]  # the SLO metrics that set it ("ttft_p95"); empty when none did
    severity_why: str
    pre_existing: list[str]  # breaches already there in the baseline, one sentence each
    impact_span: dict[str, str | None]  # {"start", "end"}: the caused breaches' onset and recovery
    alert_rule: dict[str, str] | None  # {"alert", "expr", "for"}: the SLO alert that would have fired first
    window: dict[str, str]
    baseline: dict[str, str]
    summary: str  # 2-4 sentences
    impact: Table  # metric | baseline | incident | change | SLO | breach
    detection: str
    trigger: str  # release correlation in words
    stages: str  # per-stage analysis in words (tables/figures come from the stages finding)
    triage_checked: list[dict[str, Any]]  # [{direction, symptom, detected, verdict, why}]
    root_cause: str
    timeline: list[TimelineRow]
    action_items: list[ActionItem]
    resolution: list[str]  # how it was resolved and mitigated, with times (perfkit.report.review)
    lessons: dict[str, list[str]]  # {"went_well", "went_wrong", "lucky"}
    missing: list[str]  # every section's missing evidence, de-duplicated
    gpu: str | None  # the GPU section's summary in words
    cost: str | None  # the cost section's summary in words


@dataclass
class Finding:
    key: str
    title: str
    summary: str
    status: str = "ok"
    data: dict[str, Any] = field(default_factory=dict)
    table: Table | None = None
    figure: dict[str, Any] | None = None
    figure_caption: str | None = None
    missing: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = jsonable(  # jsonable keeps a mapping a dict
            {
                "schema": SCHEMA,
                "key": self.key,
                "title": self.title,
                "summary": self.summary,
                "status": self.status,
                "data": self.data,
                "table": self.table,
                "figure": self.figure,
                "figure_caption": self.figure_caption,
                "missing": self.missing,
                "queries": self.queries,
            }
        )
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Finding:
        return cls(
            key=obj["key"],
            title=obj.get("title", obj["key"]),
            summary=obj.get("summary", ""),
            status=obj.get("status", "ok"),
            data=dict(obj.get("data") or {}),
            table=obj.get("table"),
            figure=obj.get("figure"),
            figure_caption=obj.get("figure_caption"),
            missing=list(obj.get("missing") or []),
            queries=list(obj.get("queries") or []),
        )


def jsonable(value: Any) -> Any:
    """Turn ``value`` into strict JSON: NaN/Inf become None, datetimes ISO strings, numpy scalars floats."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, str | bytes):
        return value if isinstance(value, str) else value.decode("utf-8", "replace")
    if isinstance(value, Sequence):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        from perfkit.core.frames import iso, utc

        return iso(utc(value)) if isinstance(value, datetime) else value.isoformat()
    if hasattr(value, "tolist") and not isinstance(value, bool | int | float):
        return jsonable(value.tolist())
    if hasattr(value, "item") and not isinstance(value, bool | int | float):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def table_from_frame(frame: Any, *, round_to: int = 4) -> Table:
    """A :class:`Table` from a polars or pandas frame (floats rounded for reading)."""
    import polars as pl

    if not isinstance(frame, pl.DataFrame):
        frame = pl.from_pandas(frame)
    rows = []
    for row in frame.iter_rows():
        rows.append([round(v, round_to) if isinstance(v, float) and math.isfinite(v) else v for v in row])
    return {"columns": list(frame.columns), "rows": jsonable(rows)}


def record(finding: Finding) -> None:
    """Display ``finding`` in the running notebook as a hidden perfkit output (no-op outside IPython)."""
    try:
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython is a dependency via ipykernel
        return
    payload = finding.to_json()
    # An empty text/plain keeps the output invisible in JupyterLab (no "no renderer" notice).
    display({MIME: payload, "text/plain": ""}, raw=True)


def findings_from_notebook(nb: Mapping[str, Any]) -> dict[str, Finding]:
    """Every finding recorded in an executed notebook, by key (the last recorded wins)."""
    found: dict[str, Finding] = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            data = output.get("data") or {}
            if MIME in data:
                payload = data[MIME]
                if isinstance(payload, str):
                    payload = json.loads(payload)
                finding = Finding.from_json(payload)
                found[finding.key] = finding
    return found
