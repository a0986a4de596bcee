"""Run the whole triage table on an incident's evidence and rank the directions (DESIGN.md §5 JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from perfkit.core.findings import jsonable
from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence
from perfkit.triage.rows import EXPLAINS, ROWS, Detection, Row, Verification


@dataclass
class RowResult:
    row: Row
    detection: Detection
    verification: Verification
    score: float
    explained_by: str | None = None


@dataclass
class TriageResult:
    incident: str
    window: dict[str, str]
    results: list[RowResult]  # ranked
    missing: list[str]
    suspect_version: str | None

    @property
    def top(self) -> RowResult | None:
        return self.results[0] if self.results else None

    def confirmed(self) -> list[RowResult]:
        return [r for r in self.results if r.verification.verdict == "confirmed"]

    def to_json(self) -> dict[str, Any]:
        symptoms = [
            {
                "id": r.row.symptom,
                "detected": r.detection.detected,
                "strength": round(r.detection.strength, 3),
                "evidence": r.detection.evidence,
            }
            for r in sorted(self.results, key=lambda r: _order(r.row))
        ]
        directions = []
        for rank, r in enumerate(self.results, start=1):
            directions.append(
                {
                    "id": r.row.direction,
                    "rank": rank,
                    "score": round(r.score, 3),
                    "verdict": r.verification.verdict,
                    "symptom": r.row.symptom,
                    "verification": {
                        "check": r.row.check,
                        "why": r.verification.why,
                        **r.verification.numbers,
                    },
                    "next_step": r.row.next_step,
                    "explained_by": r.explained_by,
                    "suspect_version": self.suspect_version
                    if r.row.direction == "release_regression"
                    else None,
                }
            )
        out: dict[str, Any] = jsonable(  # jsonable keeps a mapping a dict
            {
                "incident": self.incident,
                "window": self.window,
                "symptoms": symptoms,
                "directions": directions,
                "missing": self.missing,
            }
        )
        return out

    def table(self) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {
                    "rank": i,
                    "direction": r.row.direction,
                    "symptom": r.row.symptom,
                    "seen as": r.row.seen_as,
                    "fired": r.detection.detected,
                    "verdict": r.verification.verdict,
                    "score": round(r.score, 3),
                    "why": r.verification.why,
                    "next step": r.row.next_step,
                }
                for i, r in enumerate(self.results, start=1)
            ]
        )


def _order(row: Row) -> int:
    return [r.symptom for r in ROWS].index(row.symptom)


def run(ev: Evidence) -> TriageResult:
    """Detect every row; verify the rows that fired; rank by strength x verdict, causes over effects."""
    results: list[RowResult] = []
    missing = list(ev.missing)
    for row in ROWS:
        det = row.detect(ev)
        for m in det.missing:
            note = f"{row.symptom}: missing {m}"
            if note not in missing:
                missing.append(note)
        if det.detected:
            ver = row.verify(ev)
        elif det.missing:
            ver = Verification("inconclusive", f"cannot check: missing {', '.join(det.missing)}", {})
        else:
            ver = Verification("ruled_out", f"symptom not present: {row.seen_as}", {})
        score = det.strength * T.VERDICT_WEIGHT[ver.verdict] if det.detected else 0.0
        results.append(RowResult(row, det, ver, score))
    by_dir = {r.row.direction: r for r in results}
    confirmed_causes = sorted(
        (r for r in results if r.verification.verdict == "confirmed" and r.row.direction in EXPLAINS),
        key=lambda r: -r.score,
    )
    for cause in confirmed_causes:
        if cause.explained_by:
            continue  # an explained cause does not explain others
        for effect in EXPLAINS[cause.row.direction]:
            eff = by_dir.get(effect)
            if eff is not None and eff is not cause and eff.score > 0 and eff.explained_by is None:
                eff.score *= T.EFFECT_DISCOUNT
                eff.explained_by = cause.row.direction
    results.sort(key=lambda r: (-r.score, _order(r.row)))
    return TriageResult(
        ev.incident.id, ev.incident.window.as_dict(), results, missing, ev.release.suspect_version
    )


def triage_evidence(
    engine: Any, incident: Any, *, events: pl.DataFrame, logs: Any, missing: list[str]
) -> TriageResult:
    """The triage table on opened evidence (a bundle's or live sources'), with the evidence the
    sources could not get added to the result's ``missing``."""
    from perfkit.triage.evidence import gather

    result = run(gather(engine, incident, events=events, logs=logs))
    for m in missing:
        if m not in result.missing:
            result.missing.append(m)
    return result


def triage_bundle(path: Any) -> TriageResult:
    """The triage table on an incident bundle folder: what ``perfkit triage --bundle``, drills and
    grading all run (one seam, so they cannot disagree)."""
    from perfkit.engine.local import LocalEngine
    from perfkit.sources.bundle import load_bundle

    b = load_bundle(path)
    return triage_evidence(LocalEngine(b.store), b.incident, events=b.events, logs=b.logs, missing=b.missing)
