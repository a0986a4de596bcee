"""Run the whole triage table on an incident's evidence and rank the directions (the JSON of docs/bundle.md).

Which rows apply: the serving rows read vLLM's histograms and counters, the training rows a training
loop's ``train_*`` series (each row's ``workload``, :mod:`perfkit.triage.rows`). The evidence says which workload the incident is
(:func:`workload_kind`); a row about the other workload that did not fire is marked ``applies:
false`` (its verdict, usually "inconclusive: missing ...", is kept for the JSON's readers), so a
postmortem can list it apart instead of in the trail. A row that fired always applies: its
evidence is there whatever the workload. Each direction of the JSON carries ``applies`` and
``about`` (the row's workload); the incident's is :attr:`TriageResult.workload`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.core.findings import jsonable
from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence
from perfkit.triage.gaps import CANNOT
from perfkit.triage.row_types import Cut, Gate
from perfkit.triage.rows import BY_DIRECTION, EXPLAINS, ROWS, Detection, Row, Verification
from perfkit.triage.workload_notes import about_rows

WORKLOADS = ("training", "serving", "mixed", "unknown")


def workload_kind(ev: Evidence) -> str:
    """``training`` when only a training loop's ``train_*`` series are there, ``serving`` when only
    vLLM's latency histograms or token counters are, ``mixed`` for both, ``unknown`` for neither
    (then every row applies)."""
    training = bool(getattr(ev.train, "present", False))
    sides = ("baseline", "incident")
    serving = any(
        ev.q(side, signal, 0.5) is not None for side in sides for signal in ("ttft", "e2e", "tpot", "itl")
    ) or any(
        ev.rate(side, name) is not None
        for side in sides
        for name in ("requests_per_s", "generated_tokens_per_s")
    )
    return {(True, False): "training", (False, True): "serving", (True, True): "mixed"}.get(
        (training, serving), "unknown"
    )


def applies(direction: str, kind: str) -> bool:
    """Whether ``direction``'s row is about an incident of workload ``kind``."""
    about = BY_DIRECTION[direction].workload
    return about == "any" or kind in ("mixed", "unknown") or about == kind


@dataclass
class RowResult:
    row: Row
    detection: Detection
    verification: Verification
    score: float
    explained_by: str | None = None
    applies: bool = True  # False: a row about the other workload that did not fire (Row.workload)
    reads: list[str] = field(default_factory=list)  # the named quantities the row read, in order
    gates: list[Gate] = field(default_factory=list)  # the preconditions it checked, as found


@dataclass
class TriageResult:
    incident: str
    window: dict[str, str]
    results: list[RowResult]  # ranked
    missing: list[str]
    suspect_version: str | None
    scope: dict[str, Any] | None = None  # the workload scope and what it kept (None: everything)
    workloads: list[dict[str, Any]] = field(default_factory=list)  # found when not scoped
    judged: dict[str, Any] | None = None  # the span the rows judged (onset to end) and why
    workload: str = "unknown"  # training | serving | mixed | unknown (workload_kind)
    #: the serving engine whose series answered: {name, title, version} (perfkit.engine.dialects)
    engine: dict[str, str | None] | None = None
    #: what the sources read but is less certain than it looks (log lines placed by their neighbours)
    notes: list[str] = field(default_factory=list)
    #: each serving replica against its peers (perfkit.analyses.replicas): label, replicas, outliers
    replicas: dict[str, Any] | None = None

    @property
    def top(self) -> RowResult | None:
        return self.results[0] if self.results else None

    def confirmed(self) -> list[RowResult]:
        return [r for r in self.results if r.verification.verdict == "confirmed"]

    @property
    def engine_name(self) -> str | None:
        """The serving engine's dialect name (``sglang``), None where no engine's series answered."""
        return (self.engine or {}).get("name")

    def next_step(self, r: RowResult) -> str:
        """A row's next step in this incident's engine's words (and a training job's)."""
        return r.row.next_step_for(self.engine_name, self.workload)

    def action(self, r: RowResult) -> str:
        """A row's alert to add, in this incident's engine's words."""
        return r.row.action_for(self.engine_name, self.workload)

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
                    "next_step": self.next_step(r),
                    "explained_by": r.explained_by,
                    "margin": _margin(r),
                    "preconditions": [g.as_dict() for g in r.gates],
                    "applies": r.applies,
                    "about": r.row.workload,
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
                "scope": self.scope,
                "workloads": self.workloads,
                "judged": self.judged,
                "engine": self.engine,
                "notes": self.notes,
                "replicas": self.replicas,
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
                    "next step": self.next_step(r),
                }
                for i, r in enumerate(self.results, start=1)
            ]
        )


def _margin(r: RowResult) -> dict[str, Any] | None:
    """The closest cut behind a row's outcome: its name, relative distance from its cut-off, and its
    role (``decides``, or ``confirms``: weighed within its noise, :func:`settled`)."""
    close = closest_cut(r.detection, r.verification)
    if close is None:
        return None
    return {
        "cut": close.name,
        "margin": None if close.margin == float("inf") else round(close.margin, 3),
        "role": "confirms" if close.name in r.row.confirms else "decides",
    }


#: verdicts in rank order: what the verification confirmed, then what it left open, then what it ruled out
VERDICT_RANK = {"confirmed": 0, "inconclusive": 1, "ruled_out": 2}


def _rank_key(r: RowResult) -> tuple[bool, int, float, int]:
    """A row about the incident's workload outranks one about the other (a serving incident never puts a
    training row first; a row that fired always applies); a confirmed direction outranks any it was not
    (the verification checked it; a strong symptom whose verification stayed inconclusive is a
    suspicion); a direction left open outranks one ruled out, whatever their symptoms' strength (a
    ruled-out cause is no lead); then by score."""
    return not r.applies, VERDICT_RANK[r.verification.verdict], -r.score, _order(r.row)


def _order(row: Row) -> int:
    return [r.symptom for r in ROWS].index(row.symptom)


def closest_cut(det: Detection, ver: Verification) -> Cut | None:
    """The comparison the row's outcome came nearest to flipping on (None: it reports none)."""
    cuts = [*det.cuts, *ver.cuts]
    return min(cuts, key=lambda c: c.margin) if cuts else None


def _cut_text(c: Cut) -> str:
    return f"{c.name} {c.value:.4g} against {c.cutoff:.4g}"


def settled(row: Row, det: Detection, ver: Verification) -> Verification:
    """A confirmation, held to the margin rule on the cuts that *decide* it: one decided by a cut within
    :data:`~perfkit.triage.thresholds.CONFIRM_MARGIN` of its cut-off is leading, not confirmed (verdict
    ``inconclusive``, its text saying which cut and how close). A confirmatory cut (``row.confirms``)
    within its noise neither confirms nor vetoes on its own: it is weighed against how far the deciding
    cuts are past theirs. With every deciding cut at least
    :data:`~perfkit.triage.thresholds.OUTWEIGH_MARGIN` past its cut-off the row stays confirmed, and its
    why and its ``weighed`` number say which cut was close and what outweighed it; otherwise it is
    leading."""
    if ver.verdict != "confirmed":
        return ver
    cuts = [*det.cuts, *ver.cuts]
    deciding = sorted((c for c in cuts if c.name not in row.confirms), key=lambda c: c.margin)
    near = [c for c in cuts if c.name in row.confirms and c.margin < T.CONFIRM_MARGIN]
    if deciding and deciding[0].margin < T.CONFIRM_MARGIN:
        close = deciding[0]
        why = (
            f"leading, not confirmed: {close.name} decided it {close.margin:.1%} from its cut-off "
            f"({close.value:.4g} against {close.cutoff:.4g}); {ver.why}"
        )
        return Verification("inconclusive", why, {**ver.numbers, "leading": True}, ver.cuts)
    if not near:
        return ver
    gate = min(near, key=lambda c: c.margin)
    said = (
        f"the confirmatory cut {_cut_text(gate)} was {gate.margin:.1%} from its cut-off "
        f"({'passed' if gate.passed else 'missed'}), within its noise"
    )
    if deciding and deciding[0].margin >= T.OUTWEIGH_MARGIN:
        weakest = deciding[0]
        why = (
            f"confirmed; {said}, outweighed by the deciding evidence, every cut of it at least "
            f"{weakest.margin:.0%} past its cut-off (the closest: {_cut_text(weakest)}; the furthest: "
            f"{_cut_text(deciding[-1])}): {ver.why}"
        )
        weighed = {
            "within_noise": [c.as_dict() for c in near],
            "outweighed_by": [c.as_dict() for c in deciding],
        }
        return Verification("confirmed", why, {**ver.numbers, "weighed": weighed}, ver.cuts)
    close_d = f"{deciding[0].margin:.0%} past its cut-off ({_cut_text(deciding[0])})" if deciding else "none"
    why = (
        f"leading, not confirmed: {said}, and the deciding evidence is not far enough past its cuts to "
        f"outweigh it (the closest {close_d}, {T.OUTWEIGH_MARGIN:.0%} needed); {ver.why}"
    )
    return Verification("inconclusive", why, {**ver.numbers, "leading": True}, ver.cuts)


def run(ev: Evidence) -> TriageResult:
    """Detect every row; verify the rows that fired; rank by strength x verdict, causes over effects."""
    results: list[RowResult] = []
    kind = workload_kind(ev)
    missing = [m for m in ev.missing if not about_rows(m, set(), kind)]  # the other workload's: no gap
    for row in ROWS:
        ev.read_log, ev.gate_log = [], []
        det = row.detect(ev)
        about = det.detected or applies(row.direction, kind)
        for m in det.missing if about else ():  # a gap in the other workload's evidence is no gap
            # what the engine exports under no name is said as such ("cannot check on TGI: ...")
            note = f"{row.symptom}: {m}" if m.startswith(CANNOT) else f"{row.symptom}: missing {m}"
            if note not in missing:
                missing.append(note)
        if det.detected:
            ver = settled(row, det, row.verify(ev))
        elif det.missing:
            lacks = [m for m in det.missing if m.startswith(CANNOT)]
            gaps = [m for m in det.missing if not m.startswith(CANNOT)]
            why = "; ".join([*lacks, *([f"cannot check: missing {', '.join(gaps)}"] if gaps else [])])
            ver = Verification("inconclusive", why, {})
        else:
            ver = Verification("ruled_out", f"symptom not present: {row.seen_as}", {})
        score = det.strength * T.VERDICT_WEIGHT[ver.verdict] if det.detected else 0.0
        reads, gates = list(dict.fromkeys(ev.read_log)), list(ev.gate_log)
        results.append(RowResult(row, det, ver, score, applies=about, reads=reads, gates=gates))
    ev.read_log = ev.gate_log = None
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
    results.sort(key=_rank_key)
    judged = ev.onset.as_dict() if ev.onset else None
    window = ev.onset.window.as_dict() if ev.onset else ev.incident.window.as_dict()
    return TriageResult(
        ev.incident.id,
        window,
        results,
        missing,
        ev.release.suspect_version,
        judged=judged,
        workload=kind,
        engine=engine_text(ev.serving_engine, ev.engine_version),
        replicas=ev.replicas.as_dict() if ev.replicas is not None and ev.replicas.label else None,
    )


def triage_evidence(
    engine: Any,
    incident: Any,
    *,
    events: pl.DataFrame,
    logs: Any,
    missing: list[str],
    scope: Any = None,
    notes: list[str] | None = None,
) -> TriageResult:
    """The triage table on opened evidence (a bundle's or live sources'), with the evidence the
    sources could not get added to the result's ``missing`` (and what they read but is less certain
    than it looks, ``notes``: log lines placed by their neighbours' times). ``scope`` is the
    :class:`~perfkit.core.scope.ScopeReport` of already scoped evidence; without one, the
    workloads the evidence holds are listed and, when there are several, the result says they are
    judged together."""
    from perfkit.analyses.workloads import fill_identity, find_workloads
    from perfkit.triage.evidence import gather, release_history_given

    fill_identity(engine, incident)  # the same model and GPU the runbook reads (runbook._identify)
    result = run(
        gather(engine, incident, events=events, logs=logs, history_given=release_history_given(missing))
    )
    for m in missing:
        if m not in result.missing:
            result.missing.append(m)
    result.notes = list(notes or [])
    if scope is not None:
        result.scope = scope.as_dict()
        result.missing.extend(f"scope: {note}" for note in scope.notes)
    else:
        workloads = find_workloads(engine, incident.window)
        result.workloads = [w.as_dict() for w in workloads]
        if len(workloads) > 1:
            result.missing.insert(
                0,
                f"scope: the evidence holds {len(workloads)} workloads "
                f"({', '.join(w.value for w in workloads)}), judged together; give --scope to judge one",
            )
    return result


def engine_text(name: str | None, version: str | None) -> dict[str, str | None] | None:
    """The serving engine as the JSON and the postmortem give it (None: no serving engine's series)."""
    from perfkit.engine.dialects import BY_NAME

    d = BY_NAME.get(name or "")
    if d is None:
        return None
    return {"name": d.name, "title": d.title, "version": version if d.name == "vllm" else None}


def triage_bundle(
    path: Any,
    scope: str | None = None,
    hosts: str | None = None,
    serving: str | None = None,
    tensorboard: str | None = None,
) -> TriageResult:
    """The triage table on an incident bundle folder: what ``perfkit triage --bundle``, drills and
    grading all run (one seam, so they cannot disagree). ``scope``/``hosts`` override the
    incident's ``scope:``/``hosts:`` (:mod:`perfkit.core.scope`); ``serving`` reads only that serving
    engine's series (:class:`perfkit.engine.dialects.OnlyEngine`); ``tensorboard`` a folder of a
    training job's TensorBoard event files kept outside the bundle."""
    from perfkit.core.scope import parse_scope
    from perfkit.engine.local import LocalEngine
    from perfkit.engine.scope import ScopeMatchesNothing
    from perfkit.engine.signals import is_triage_family
    from perfkit.sources.bundle import load_bundle

    chosen = parse_scope(scope, hosts) if scope or hosts else None
    try:
        b = load_bundle(
            path, scope=chosen, families=is_triage_family, tensorboard=tensorboard
        )  # what the rows read
    except ScopeMatchesNothing as exc:
        raise with_workloads(exc, path) from None
    engine: Any = LocalEngine(b.store)
    if serving:
        from perfkit.engine.dialects import OnlyEngine

        engine = OnlyEngine(engine, serving)
    return triage_evidence(
        engine, b.incident, events=b.events, logs=b.logs, missing=b.missing, scope=b.scope, notes=b.notes
    )


def with_workloads(exc: Exception, path: Any) -> Exception:
    """A scope that matched nothing, with the workloads the bundle at ``path`` does hold and the
    scope that selects each."""
    from perfkit.analyses.workloads import find_workloads
    from perfkit.core.scope import Scope
    from perfkit.engine.local import LocalEngine
    from perfkit.engine.scope import ScopeMatchesNothing
    from perfkit.sources.bundle import load_bundle

    whole = load_bundle(path, scope=Scope())
    found = find_workloads(LocalEngine(whole.store), whole.incident.window)
    listed = "; ".join(f"scope '{w.scope}'" for w in found) or "none found"
    return ScopeMatchesNothing(f"{exc}; the bundle's workloads: {listed}")
