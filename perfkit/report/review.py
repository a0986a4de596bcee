"""The parts of an SRE postmortem that look back (the Google SRE book's template, ch. 15 and its
example): how the incident was resolved and mitigated, with times, and the lessons learned (what went
well, what went wrong, where we got lucky).

Everything here is read from what the postmortem already holds: the onset and recovery of the
breaches the incident caused (:mod:`perfkit.analyses.impact`), the first alert, the changes recorded in
``events.csv`` after the onset, the triage's confirmed direction, the pre-existing breaches, the missing
evidence. What perfkit cannot know (whether a change after the onset was meant as a mitigation, where
the team got lucky) is said as a question for the review, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from perfkit.core.frames import iso
from perfkit.core.incident import Incident

CHANGE_KINDS = ("deploy", "config", "rollback", "scale", "flag", "restart")
"""``events.csv`` kinds that change the service (a note or an alert does not)."""
PROMPT_ALERT_MIN = 5.0
"""An alert within 5 minutes of the breach's onset is prompt: the ``for: 5m`` of an SLO alert rule
(:data:`perfkit.report.postmortem.RULE_FOR_MIN`)."""
LUCKY = (
    "For the review to fill in: what limited the damage by chance (traffic that happened to be low, a "
    "restart that happened to clear it). perfkit cannot tell luck from design."
)
DUE_BY = {"P0": "set at review (within 1 day)", "P1": "set at review (within 2 weeks)"}
"""The due-by placeholder per priority: the review sets the date; the span is the usual one for the
priority (P0 before the next on-call shift hands over, P1 within a sprint, the rest within a quarter)."""
DUE_LATER = "set at review (within a quarter)"


@dataclass
class Review:
    resolution: list[str] = field(default_factory=list)
    went_well: list[str] = field(default_factory=list)
    went_wrong: list[str] = field(default_factory=list)
    lucky: list[str] = field(default_factory=lambda: [LUCKY])

    def as_dict(self) -> dict[str, Any]:
        return {
            "resolution": self.resolution,
            "lessons": {"went_well": self.went_well, "went_wrong": self.went_wrong, "lucky": self.lucky},
        }


def _at(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _minutes(a: datetime, b: datetime) -> str:
    return f"{(b - a).total_seconds() / 60:.0f} min"


def due_by(priority: str) -> str:
    """The due-by placeholder of an action item of ``priority``."""
    return DUE_BY.get(priority, DUE_LATER)


def review(
    incident: Incident,
    events: pl.DataFrame,
    *,
    onset: str | None,
    recovered: str | None,
    what: str,
    first_alert: tuple[datetime, str] | None,
    alert_proposed: bool,
    pre_existing: list[str],
    confirmed: str | None,
    ruled_out: int,
    trigger: str | None,
    missing: int,
    fix_predicted: bool,
) -> Review:
    """Resolution with times and the lessons learned (module docstring). ``onset``/``recovered``:
    ISO times of the caused breach (or the job's degradation), ``what`` names it; ``trigger``: the
    change it started with, in words."""
    out = Review()
    began, back = _at(onset), _at(recovered)
    end = incident.window.end
    if began is not None and back is not None:
        out.resolution.append(
            f"Recovered: {what} back at {recovered}, {_minutes(began, back)} after it began ({onset})."
        )
    elif began is not None:
        out.resolution.append(
            f"Not recovered by the end of the evidence ({iso(end)}): {what} from {onset} on, "
            f"{_minutes(began, end)} and counting."
        )
    else:
        out.resolution.append(
            f"No onset was found in the evidence, so no time to detect or recover is given ({what})."
        )
    if began is not None and not (events.height and "kind" in events.columns):
        out.resolution.append(
            "No change history (events.csv) in the evidence: what mitigated it, if anything, is unknown."
        )
    elif began is not None:
        after = events.filter(
            pl.col("kind").is_in(CHANGE_KINDS) & (pl.col("ts") > began) & (pl.col("ts") <= end)
        )
        changes = [
            " ".join(str(x) for x in (iso(e["ts"]), e["kind"], e.get("version"), e.get("detail")) if x)
            for e in after.sort("ts").head(5).iter_rows(named=True)
        ]
        if changes:
            out.resolution.append(
                "Changes recorded after the onset: " + "; ".join(changes) + ". Which of them were meant to "
                "mitigate, and whether they did, is for the responders to say: perfkit sees only their times."
            )
        else:
            out.resolution.append(
                "No change was recorded after the onset: nothing in the evidence mitigated it."
            )
    if confirmed:
        out.resolution.append(
            "Proposed mitigation: the P0 action item, for the direction the evidence confirmed."
        )
    times = []
    if began is not None and first_alert is not None and first_alert[0] >= began:
        times.append(f"time to detect {_minutes(began, first_alert[0])}")
    if began is not None and back is not None:
        times.append(f"time to recover {_minutes(began, back)}")
    if times:
        out.resolution.append("Times from the onset: " + ", ".join(times) + ".")

    # lessons learned
    if first_alert is not None and began is not None:
        lag = (first_alert[0] - began).total_seconds() / 60
        if lag <= PROMPT_ALERT_MIN:
            when = "at the breach's onset" if lag < 1 else f"{lag:.0f} min after the breach began"
            out.went_well.append(f"An alert ({first_alert[1]}) fired {when}.")
        else:
            out.went_wrong.append(
                f"The first alert ({first_alert[1]}) came {lag:.0f} min after the breach began."
            )
    elif first_alert is None:
        out.went_wrong.append(f"No alert fired on {what}" + (": a human noticed it." if began else "."))
    if alert_proposed:
        out.went_wrong.append(
            "No SLO alert covered the breach: the alert that would have fired first is a P1 action."
        )
    if confirmed:
        out.went_well.append(
            f"The evidence confirmed one direction, {confirmed}, and ruled out {ruled_out} other(s) (Triage trail)."
        )
    else:
        out.went_wrong.append(
            "No direction was confirmed by the evidence: the triage trail says what was missing."
        )
    if fix_predicted:
        out.went_well.append(
            "The proposed fix was replayed against every SLO before anything shipped (Root-cause direction)."
        )
    if trigger:
        out.went_wrong.append(
            f"The change it started with ({trigger}) reached production without a gate that caught it."
        )
    out.went_wrong += [p[:1].upper() + p[1:] for p in pre_existing]  # "already breached before: ..."
    if missing:
        n = "1 piece of evidence was" if missing == 1 else f"{missing} pieces of evidence were"
        out.went_wrong.append(f"{n} missing, so some directions could not be checked (Missing evidence).")
    return out


__all__ = ["DUE_BY", "Review", "due_by", "review"]
