"""Which missing-evidence notes are no gap: those about what does not apply to the incident's
workload (a training job has no latency histograms, a server no ``train_*`` series). The triage
table, the console and the postmortem all leave such notes out, by this one rule.
"""

from __future__ import annotations

import re

#: Missing-evidence notes about the other workload's signals: a training job has no latency
#: histograms (perfkit.analyses.baseline's and stages' notes), a server no train_* series
#: (perfkit.triage.evidence's note). Their absence is no gap in the evidence.
OTHER_WORKLOAD_NOTES = {
    "training": re.compile(r"^(baseline: no \w+ histogram|stages: no )"),
    "serving": re.compile(r"^training: no train_\* metrics"),
}


def about_rows(note: str, symptoms: set[str], workload: str = "") -> bool:
    """Whether a missing-evidence note is about what does not apply to the workload: one of these
    triage rows' (``"<symptom>: missing ..."``), or the other workload's signals."""
    other = OTHER_WORKLOAD_NOTES.get(workload)
    return any(note.startswith((f"{s}: missing", f"{s}: cannot check on ")) for s in symptoms if s) or bool(
        other and other.match(note)
    )
