"""Assemble the postmortem's document model from the analyses' results (pure; no rendering)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from perfkit.analyses.baseline import BaselineComparison
from perfkit.analyses.impact import Impact
from perfkit.analyses.release import ReleaseCorrelation
from perfkit.analyses.stages import StageBreakdown
from perfkit.analyses.tenant_impact import concentration
from perfkit.core.findings import ActionItem, PostmortemModel, Table, TimelineRow
from perfkit.core.frames import iso
from perfkit.core.incident import Incident
from perfkit.engine.dialects import TRAINING_REVERT
from perfkit.report.review import due_by, review
from perfkit.triage.table import TriageResult
from perfkit.triage.workload_notes import about_rows

MECHANISMS = {
    ("queue", "prefill_decode_interference"): (
        "that queue time is prefill's doing: requests wait behind whole-prompt prefills (head-of-line "
        "blocking), not for capacity, so the fix is in how prefills are scheduled, not more replicas"
    ),
    ("queue", "scheduler_queueing"): (
        "that queue time is load's doing: more work arrived than the engine serves, so requests wait "
        "for a slot"
    ),
    ("queue", "kv_cache_allocation"): (
        "that queue time is the KV cache's doing: requests wait for cache blocks (or are preempted "
        "and queued again), not for compute"
    ),
}
"""What a stage's growth means under the confirmed direction: the mechanism, not the stage's name."""


def _stages_text(stages: StageBreakdown | None, direction: str | None) -> str:
    """The per-stage summary, with the mechanism the confirmed direction gives the stage that grew."""
    if stages is None:
        return "per-stage analysis not available"
    text = stages.summary()
    mechanism = MECHANISMS.get((stages.tail_owner or stages.ttft_owner or "", direction or ""))
    return f"{text}; {mechanism}" if mechanism else text


def _changes_between(events: pl.DataFrame, incident: Incident) -> list[dict[str, Any]]:
    """The deploys and config changes between the baseline's end and the incident window's start."""
    if not events.height or incident.baseline is None or "kind" not in events.columns:
        return []
    return list(
        events.filter(
            pl.col("kind").is_in(("deploy", "config"))
            & (pl.col("ts") > incident.baseline.end)
            & (pl.col("ts") <= incident.window.start)
        ).iter_rows(named=True)
    )


def training_change(c: Any, events: pl.DataFrame, incident: Incident) -> dict[str, Any] | None:
    """The change a training P0 reverts, for the confirmed row ``c``: the config or deploy its crashes
    started with (the row's ``trigger``), else the one deploy or config change between the baseline
    and the incident window; None when neither. ``name``, ``kind``, ``at`` (a datetime or None),
    ``at_text`` and ``trigger`` (whether the row tied it to the onset)."""
    trigger = (c.verification.numbers or {}).get("trigger")
    if isinstance(trigger, dict) and trigger.get("kind") in ("config", "deploy"):
        ts = trigger.get("ts")
        try:
            at = datetime.fromisoformat(str(ts).replace("Z", "+00:00")) if ts else None
        except ValueError:
            at = None
        name = trigger.get("version") or trigger.get("detail") or ""
        return {"kind": trigger["kind"], "name": name, "at": at, "at_text": str(ts or ""), "trigger": True}
    between = _changes_between(events, incident)
    if len(between) != 1:
        return None
    e = between[0]
    version, detail = e["version"] or "", e["detail"] or ""
    name = detail if version and version in detail else " ".join(x for x in (version, detail) if x)
    return {"kind": e["kind"], "name": name, "at": e["ts"], "at_text": iso(e["ts"]), "trigger": False}


def breach_interval(
    frame: pl.DataFrame | None, slo: float | None, after: datetime
) -> tuple[str | None, str | None]:
    """First and last minute the (5-point median smoothed) series is above ``slo`` after ``after``."""
    if frame is None or slo is None or not frame.height:
        return None, None
    f = frame.filter(pl.col("ts") >= after).sort("ts")
    if not f.height:
        return None, None
    v = f["value"].to_numpy().astype(float)
    v = np.where(np.isfinite(v), v, 0.0)
    k = 5
    smooth = np.array([np.median(v[max(0, i - k // 2) : i + k // 2 + 1]) for i in range(v.size)])
    above = np.flatnonzero(smooth > slo)
    if not above.size:
        return None, None
    ts = f["ts"].to_list()
    end = ts[above[-1]] if above[-1] < v.size - 1 else None
    return iso(ts[above[0]]), iso(end) if end else None


@dataclass
class JobTerms:
    """A training job's impact for the postmortem, in the job's own terms."""

    impact: Table  # metric | baseline | incident | change | note
    headline: str  # one sentence for the summary: what the job lost
    breakdown: str  # per rank and per phase, in words (replaces the latency stages)
    severity: str
    prevent: ActionItem
    #: where a rollback of the change resumes ("the checkpoint of step 25,000 ..."), if one is due
    resume: str = ""


BRIEF_CHARS = 200
"""A confirmed direction's why is said whole once, under Root-cause direction; the summary and the
triage trail carry its first clauses, up to 200 characters (two lines of a page)."""
IN_FULL = "in full under Root-cause direction"


def brief(why: str, limit: int = BRIEF_CHARS) -> tuple[str, bool]:
    """``why``'s first clauses within ``limit`` characters, cut at the last clause break (``;``,
    ``:``, ``,``), else at a word, never inside a parenthesis; and whether anything was cut."""
    if len(why) <= limit:
        return why, False
    cut = max(why.rfind(mark, 0, limit) for mark in ("; ", ": ", ", "))  # the last clause break
    if cut < limit // 3:
        cut = why.rfind(" ", 0, limit)
    head = why[: max(cut, 0)]
    while head.count("(") > head.count(")"):  # never end inside a parenthesis
        head = head[: head.rfind("(")]
    return head.rstrip(" ,:;(") + " …", True


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


RULE_FOR_MIN = 5
"""The proposed SLO alert's ``for:``: five minutes of a 5-minute rate over the bound, a sustained breach."""


def _breach_text(breach: bool | None, judged: Any) -> str:
    """The impact table's breach cell: whether the incident made the breach or found it there."""
    if not breach:
        return ""
    if judged is None or not judged.pre_existing:
        return "BREACH"
    return "BREACH (worse than before)" if judged.caused == "worse" else "breached before too"


def _impact_sentence(impact: Impact) -> str:
    """The summary's impact in SLO terms: what the incident caused, then what was there before."""
    caused = [s for s in impact.slos if s.caused]
    labels = {s.metric: s.label for s in impact.slos}
    if not caused:
        met = all(s.incident_met for s in impact.slos)
        text = (
            f"All {len(impact.slos)} SLOs met in the incident window" if met else "No SLO breach of its own"
        )
        text += f" ({impact.severity.level}: {impact.severity.why})."
    else:
        bits = []
        for s in caused:
            bit = f"{s.label} over its {_fmt_s(s.slo_s)} SLO"
            if s.minutes_over is not None and s.minutes_measured:
                bit += f" for {s.minutes_over} of {s.minutes_measured} min"
            if s.requests_over is not None:
                bit += (
                    f" (~{s.requests_over:,.0f} requests, {100 * (1 - (s.incident_attainment or 0)):.1f} %)"
                )
            if s.caused == "worse":
                bit += ", already breached before and made worse"
            bits.append(bit)
        text = (
            f"Impact ({impact.severity.level}, set by {', '.join(labels[m] for m in impact.severity.basis)}): "
            + "; ".join(bits)
            + "."
        )
    if where := concentration(impact.tenant_label, impact.tenants):
        text += " " + "; ".join(w[:1].upper() + w[1:] for w in where) + "."
    if pre := [s for s in impact.pre_existing() if s.caused != "worse"]:
        text += (
            " Already breached before the incident: "
            + ", ".join(f"{s.label} ({_fmt_s(s.baseline_quantile_s)} against {_fmt_s(s.slo_s)})" for s in pre)
            + "."
        )
    return text


def build(
    incident: Incident,
    *,
    base: BaselineComparison | None,
    stages: StageBreakdown | None,
    release: ReleaseCorrelation | None,
    triage: TriageResult | None,
    events: pl.DataFrame,
    missing: list[str],
    gpu_summary: str | None = None,
    cost_summary: str | None = None,
    restarts: list[dict[str, Any]] | None = None,
    job: JobTerms | None = None,
    predicted_fix: str | None = None,
    fix_helps: bool = True,
    impact: Impact | None = None,
) -> PostmortemModel:
    """The postmortem's document model. ``job``: a training job's impact in its own terms (step
    time, tokens/s, MFU, time lost; :mod:`perfkit.report.training_impact`) in place of the latency
    quantiles, its per-rank and per-phase breakdown in place of the latency stages. ``impact``: the
    SLOs' impact (:mod:`perfkit.analyses.impact`), which sets the severity from what the incident
    caused and tells a breach that was there before from one it made. ``predicted_fix``: the replay's
    mitigation in one line; where no setting it tried helps (``fix_helps`` False) the row's own advice
    stays the action, with the replay's word against it."""
    top = triage.top if triage else None
    confirmed = triage.confirmed() if triage else []
    head = base.headline() if base else None
    slo = incident.slo
    na = {r.row.symptom for r in triage.results if not r.applies} if triage else set()
    workload = triage.workload if triage else ("training" if job is not None else "")
    missing = [m for m in missing if not about_rows(m, na, workload)]  # the other workload's: no gaps

    # impact table: the rows with an SLO or a large change
    judged = {s.label: s for s in impact.slos} if impact else {}
    impact_rows: list[list[Any]] = []
    if base:
        for r in base.rows:
            felt = r.slo is not None or (r.ratio or 1) >= 1.5 or r.metric.endswith("p50")
            if r.unit == "s" and felt and r.metric.split()[0] in ("TTFT", "TPOT", "ITL", "E2E", "queue"):
                impact_rows.append(
                    [
                        r.metric,
                        r.shown(0, _fmt_s),
                        r.shown(1, _fmt_s),
                        r.ratio_text,
                        _fmt_s(r.slo) if r.slo is not None else "",
                        _breach_text(r.breach, judged.get(r.metric)),
                    ]
                )
        for name in ("requests_per_s", "generated_tokens_per_s", "errors_per_s", "waiting_avg"):
            extra = base.get(name)
            if extra and extra.incident is not None:
                impact_rows.append(
                    [
                        name,
                        f"{extra.baseline:.3g}" if extra.baseline is not None else "n/a",
                        f"{extra.incident:.3g}",
                        f"{extra.ratio:.2f}x" if extra.ratio else "n/a",
                        "",
                        "",
                    ]
                )
    if impact is not None and impact.slos:
        sev = impact.severity
        severity, basis, severity_why = sev.level, list(sev.basis), sev.why
    else:  # no SLO histogram: the baseline table's quantiles against their SLOs
        breached = [r for r in (base.rows if base else []) if r.breach]
        severity = "SEV-3"
        if any((r.incident or 0) >= 2 * (r.slo or float("inf")) for r in breached):
            severity = "SEV-2"
        elif not breached:
            severity = "SEV-4"
        basis = [r.metric for r in breached]
        severity_why = "quantiles against their SLOs (no SLO attainment from histograms)"
    pre_existing = impact.pre_existing_text() if impact is not None else []
    if job is not None:
        impact_rows, severity = [list(r) for r in job.impact["rows"]], job.severity
        basis, severity_why, pre_existing = [], "the job's own terms (time lost)", []

    caused = [s for s in impact.slos if s.caused and s.start] if impact is not None and job is None else []
    if caused:  # the breaches the incident caused: their onset and recovery
        breach_start, breach_end = impact.start if impact else None, impact.end if impact else None
        breach_what = ", ".join(s.label for s in caused)
    else:
        ttft_series = release.series.get("TTFT p95") if release else None
        after = incident.baseline.end if incident.baseline else incident.window.start
        breach_start, breach_end = breach_interval(ttft_series, slo.get("ttft_p95_s"), after)
        breach_what = "TTFT p95"

    # summary
    parts = [
        f"{incident.service} ({incident.model or 'model n/a'}) between {iso(incident.window.start)} and "
        f"{iso(incident.window.end)}:"
    ]
    healthy = impact is not None and impact.slos and job is None and not any(s.caused for s in impact.slos)
    if healthy and impact is not None:  # said first: what a reader needs before any ratio
        parts.append(_impact_sentence(impact))
    if job is not None and job.headline:
        parts.append(job.headline)
    elif head and head.ratio:
        parts.append(
            f"{head.metric} was {head.shown(1, _fmt_s)} against {head.shown(0, _fmt_s)} in the baseline "
            f"({head.ratio_text})."
        )
    if impact is not None and impact.slos and job is None and not healthy:
        parts.append(_impact_sentence(impact))
    if top and top.verification.verdict == "confirmed":
        said, cut = brief(top.verification.why)
        parts.append(
            f"Most likely direction: {top.row.direction} (confirmed: {said}{'; ' + IN_FULL if cut else ''})."
        )
    elif top and top.score > 0:
        parts.append(f"Leading direction, not confirmed: {top.row.direction} ({top.verification.why}).")
    else:
        parts.append("No triage direction fired.")
    odd = list((triage.replicas or {}).get("outliers") or []) if triage else []
    if odd:  # the rows read the fleet's sums; a replica apart from its peers is the lead they miss
        parts.append(
            f"Not the whole fleet: {' and '.join(odd)} {'diverges' if len(odd) == 1 else 'diverge'} from "
            "its peers (under Root-cause direction)."
        )
    if release:
        parts.append(f"Release history: {release.summary()}.")

    alerts = events.filter(pl.col("kind") == "alert").sort("ts") if events.height else events
    first_alert = alerts.filter(
        pl.col("ts") >= incident.window.start - (incident.window.end - incident.window.start)
    )
    if first_alert.height:
        row = first_alert.row(0, named=True)
        detection = f"Alert at {iso(row['ts'])}: {row['detail']}."
        if breach_start:
            lag = (
                row["ts"] - datetime.fromisoformat(breach_start.replace("Z", "+00:00"))
            ).total_seconds() / 60
            detection += f" The SLO breach ({breach_what}) began at {breach_start}, {lag:.0f} min before."
    else:
        detection = "No alert fired in the incident window (no alert events recorded)."
        if breach_start and (not caused or any(s_.caused == "new" for s_ in caused)):
            detection += (
                f" The SLO breach ({breach_what}) began at {breach_start}: an alert on it would have paged."
            )

    # the alert that would have fired first: on the earliest breach the incident caused, proposed where
    # no alert fired or the first came more than RULE_FOR_MIN after that breach began
    rule = None
    new = [s_ for s_ in caused if s_.caused == "new" and s_.start]  # an SLO alert on a breach there
    if caused and not new:  # before would have been firing already: no rule to propose on it
        detection += (
            f" An SLO alert on {', '.join(s_.label for s_ in caused)} would already have been firing before "
            "the incident (breached in the baseline too): its SLO or the service needs a look first."
        )
    if new:
        first = min(new, key=lambda s_: s_.start or "")
        began = datetime.fromisoformat(str(first.start).replace("Z", "+00:00"))
        late = not first_alert.height or (first_alert["ts"][0] - began).total_seconds() > 60 * RULE_FOR_MIN
        rule = first.alert_rule(RULE_FOR_MIN) if late else None
        if rule is not None:
            detection += (
                f" Proposed detection: {rule['alert']}, `{rule['expr']}` for {rule['for']} (it would have "
                f"fired about {RULE_FOR_MIN} min after the {first.label} breach began)."
            )

    triage_checked: list[dict[str, Any]] = []
    if triage:
        for res in triage.results:
            why, cut = (
                brief(res.verification.why)
                if confirmed and res is confirmed[0]
                else (res.verification.why, False)
            )
            triage_checked.append(
                {
                    "direction": res.row.direction,
                    "symptom": res.row.symptom,
                    "detected": res.detection.detected,
                    "verdict": res.verification.verdict,
                    "score": round(res.score, 3),
                    "why": why
                    + (f" ({IN_FULL})" if cut else "")
                    + (f" (explained by {res.explained_by})" if res.explained_by else ""),
                    "applies": res.applies,
                }
            )
    if confirmed and triage is not None:
        c = confirmed[0]
        root = f"Direction: {c.row.direction} — {c.verification.why}. Next step: {triage.next_step(c)}."  # fmt: skip
        if triage and triage.suspect_version and c.row.direction == "release_regression":
            root += f" Suspect version: {triage.suspect_version}."
    else:
        root = "No direction was confirmed by its verification; see the triage trail for what was ruled out."
    apart = (triage.replicas or {}) if triage else {}
    if apart.get("outliers"):  # the fleet's sums hide it: say which replica, first
        root = f"Not the whole fleet: {apart['summary']}. {root}"

    timeline: list[TimelineRow] = [
        {"ts": iso(incident.window.start), "event": "incident window starts", "source": "incident.yaml"},
        {"ts": iso(incident.window.end), "event": "incident window ends", "source": "incident.yaml"},
    ]
    if events.height:
        span_start = incident.baseline.start if incident.baseline else incident.window.start
        for e in events.filter(
            (pl.col("ts") >= span_start) & (pl.col("ts") <= incident.window.end)
        ).iter_rows(named=True):
            label = f"{e['kind']}: {e['version'] or ''} {e['detail'] or ''}".strip()
            timeline.append({"ts": iso(e["ts"]), "event": label, "source": "events.csv"})
    if release:
        for sh in release.shifts:
            if sh.degrading:
                timeline.append(
                    {
                        "ts": iso(sh.ts),
                        "event": f"change point: {sh.series} {sh.rel_change:+.0%}",
                        "source": "change point",
                    }
                )
    for rs in restarts or []:  # from the completeness check: counter resets, series under a new instance
        what = f"restart of the {rs.get('source')} ({rs.get('how')}, {rs.get('series')} series)"
        timeline.append({"ts": str(rs.get("ts")), "event": what, "source": "completeness"})
    if caused:
        for s_ in caused:
            assert s_.start is not None
            edge = " (already at the window's start)" if s_.start_at_edge else ""
            what = (
                f"{s_.label} above its usual {_fmt_s(s_.baseline_quantile_s)} (over its SLO "
                f"{_fmt_s(s_.slo_s)} before too)"
                if s_.caused == "worse"
                else f"{s_.label} above its SLO {_fmt_s(s_.slo_s)}"
            )
            timeline.append({"ts": s_.start, "event": what + edge, "source": "slo"})
            if s_.end:
                back = "back to its usual level" if s_.caused == "worse" else "back under its SLO"
                timeline.append({"ts": s_.end, "event": f"{s_.label} {back}", "source": "slo"})
    else:
        if breach_start:
            timeline.append(
                {
                    "ts": breach_start,
                    "event": f"TTFT p95 above SLO {slo.get('ttft_p95_s')} s",
                    "source": "slo",
                }
            )
        if breach_end:
            timeline.append({"ts": breach_end, "event": "TTFT p95 back under SLO", "source": "slo"})
    timeline.sort(key=lambda r: r["ts"])

    actions: list[ActionItem] = []
    if confirmed:
        c = confirmed[0]
        # the replay's recommended setting replaces the row's general advice (one command, not two)
        action = (
            f"{c.row.direction}: {predicted_fix}; confirm it in a replayed load test before it ships"
            if predicted_fix and fix_helps
            else (triage.next_step(c) if triage else c.row.next_step)
        )
        if predicted_fix and not fix_helps:  # the general advice, and what the replay says of it
            action += f"; but {predicted_fix}"
        change = training_change(c, events, incident) if job is not None else None
        if change is not None and change["trigger"]:
            rest = action.replace(TRAINING_REVERT, "")
            action = f"revert the {change['kind']} change `{change['name']}` of {change['at_text']} that it started with; if it must stay: {rest}"
        elif change is not None:  # a training job's one change between its baseline and the incident
            resume = f"; resume from {job.resume}" if job is not None and job.resume else ""
            action = (
                f"revert the {change['kind']} `{change['name']}` of {change['at_text']}, the one change between "
                f"the baseline and the incident window, unless the triage trail clears it{resume}; then: {action}"
            )
        actions.append({"action": action, "type": "mitigate", "priority": "P0", "owner": "service owner"})
        if c.row.action and triage is not None:
            actions.append(
                {
                    "action": triage.action(c),
                    "type": "detect",
                    "priority": "P1",
                    "owner": "on-call",
                }
            )
    if rule is not None:
        actions.append(
            {
                "action": f"add the alert that would have fired first: {rule['alert']}: {rule['expr']} for {rule['for']}",
                "type": "detect",
                "priority": "P1",
                "owner": "on-call",
            }
        )
    actions.append(
        job.prevent
        if job is not None
        else {
            "action": "add a replayed-traffic load test (real prompt-length mix) as a release gate",
            "type": "prevent",
            "priority": "P1",
            "owner": "release engineering",
        }
    )
    # a signal the engine cannot export is no evidence to collect (it is said in Missing evidence)
    for m in [m for m in missing if " exports no " not in m][:5]:
        actions.append(
            {
                "action": f"collect the missing evidence: {m}",
                "type": "process",
                "priority": "P2",
                "owner": "observability",
            }
        )
    for a in actions:
        a["due"] = due_by(a["priority"])
    onset, what = breach_start, f"{breach_what} over {'their SLOs' if ', ' in breach_what else 'its SLO'}"
    if job is not None:  # a training job: from its first degrading shift, said in its terms
        shifts = sorted(
            (sh for sh in (release.shifts if release else []) if sh.degrading), key=lambda sh: sh.ts
        )
        onset, what = (iso(shifts[0].ts) if shifts else None), "the job's slowdown"
    suspect = release.suspect if release else None
    looked_back = review(
        incident,
        events,
        onset=onset,
        recovered=breach_end if job is None else None,
        what=what,
        first_alert=(first_alert["ts"][0], str(first_alert["detail"][0])) if first_alert.height else None,
        alert_proposed=rule is not None,
        pre_existing=pre_existing,
        confirmed=confirmed[0].row.direction if confirmed else None,
        ruled_out=sum(r.applies and r.verification.verdict == "ruled_out" for r in triage.results)
        if triage
        else 0,
        trigger=f"{suspect['kind']} {suspect['version'] or suspect['detail']} at {suspect['ts']}"
        if suspect
        else None,
        missing=len(dict.fromkeys(missing)),
        fix_predicted=bool(predicted_fix),
    )
    return {
        **looked_back.as_dict(),  # type: ignore[typeddict-item]
        "title": incident.title,
        "incident": incident.id,
        "service": incident.service,
        "model": incident.model,
        "status": "draft",
        "severity": severity,
        "severity_basis": basis,
        "severity_why": severity_why,
        "pre_existing": pre_existing,
        "impact_span": {"start": breach_start, "end": breach_end},
        "alert_rule": rule,
        "window": incident.window.as_dict(),
        "baseline": incident.baseline.as_dict() if incident.baseline else {},
        "summary": " ".join(parts),
        "impact": {
            "columns": list(job.impact["columns"])
            if job is not None
            else ["metric", "baseline", "incident", "change", "SLO", "breach"],
            "rows": impact_rows,
        },
        "detection": detection,
        "trigger": release.summary() if release else "release history not analysed",
        "stages": job.breakdown
        if job is not None
        else (_stages_text(stages, confirmed[0].row.direction if confirmed else None)),
        "triage_checked": triage_checked,
        "root_cause": root,
        "timeline": timeline,
        "action_items": actions,
        "missing": list(dict.fromkeys(missing)),
        "gpu": gpu_summary,
        "cost": cost_summary,
    }
