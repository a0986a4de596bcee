"""Where the incident starts inside the window: the span the triage rows judge.

An on-call engineer picks the window before knowing the onset (``--since 2h``). Averages over the
whole window dilute the fault by the healthy time before it (a 60-minute fault in a 3-hour
window shows a third of its size), so the rows judge the span from the onset to the window's end.

The onset is the earliest *degrading* level shift (a latency quantile up, the step time up, the
token rate down: :mod:`perfkit.analyses.release` finds them over baseline → window) that starts
inside the window and is still there at its end (a shift the same series took back by half or more
before degrading again, such as a minute's p95 spike, is an episode that ended; when every shift
ended, the one that left the most of itself at the window's end, or the largest; a lasting shift under
half the size of the largest lasting one is wander, not the start), or else the first sustained SLO
breach. With neither, or when the onset is at the window's start anyway, the whole window is
judged, and the result says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from perfkit.analyses.release import PERSIST_SHARE, ReleaseCorrelation, Shift
from perfkit.core.frames import Window, iso

MIN_LEAD_FRAC = 0.25
"""An onset in the first quarter of the window counts as its start: the window is already tight (the
healthy minutes before dilute a ratio by at most a quarter, which the rows' cut-offs absorb), and a
change point's minute differs by a step between engines, which must not move the span judged. The
embedded incidents' onsets sit at most 11 % into their windows; a window 3x the fault puts it at 67 %."""
MIN_SPAN_S = 20 * 60.0
"""The judged span keeps at least 20 minutes: the interference row bins by 2 minutes and needs 10
bins, and a quantile over fewer minutes of traffic is noise."""
SLO_BREACH_STEPS = 3
"""An SLO breach counts as an onset when it lasts 3 consecutive steps (not one slow scrape)."""
SLO_SERIES = {
    "ttft_p95_s": "TTFT p95",
    "e2e_p99_s": "E2E p95",
    "itl_p95_s": "ITL p95",
    "tpot_p95_s": "TPOT p95",
}


@dataclass(frozen=True)
class Onset:
    window: Window  # the incident window as given
    span: Window  # what the rows judge
    ts: datetime | None  # the onset found (None: none)
    why: str

    @property
    def narrowed(self) -> bool:
        return self.span != self.window

    def as_dict(self) -> dict[str, Any]:
        return {
            "start": iso(self.span.start),
            "end": iso(self.span.end),
            "onset": iso(self.ts) if self.ts else None,
            "narrowed": self.narrowed,
            "why": self.why,
        }


def find_onset(
    rel: ReleaseCorrelation, window: Window, baseline: Window | None, slo: dict[str, float] | None = None
) -> Onset:
    """The span of ``window`` after the incident's onset (see the module docstring).

    Shifts between the baseline's end and the window count: one before the window's start means
    the fault was on when the window began, and the whole window is judged."""
    lead = max(MIN_LEAD_FRAC * window.seconds, rel.step_s)
    latest = window.end - timedelta(seconds=MIN_SPAN_S)
    since = baseline.end if baseline is not None and baseline.end < window.start else window.start
    shifts = sorted(
        (s for s in rel.shifts if s.degrading and since <= s.ts <= window.end), key=lambda s: s.ts
    )
    if shifts:
        # An episode the same series took back inside the window (a minute's p95 spike and its fall)
        # is over: the incident is the degradation still there at the window's end. A lasting shift
        # under half the size of the largest (on a log scale: PERSIST_SHARE) is the level a one-minute
        # tail quantile wanders to in a long lead-in, not the fault's start.
        lasting = [s for s in shifts if _lasting(rel.shifts, s, window.end)]
        big = max((abs(_log_change(s.rel_change)) for s in lasting), default=0.0)
        main = [s for s in lasting if abs(_log_change(s.rel_change)) >= PERSIST_SHARE * big]
        first = main[0] if main else _most_left(rel.shifts, shifts, window.end)
        why = f"{first.series} shifted {first.rel_change:+.0%} at {iso(first.ts)}"
        if main and main[0] is not lasting[0]:
            small = lasting[0]
            why += (
                f" (the earlier {small.series} shift of {small.rel_change:+.0%} at {iso(small.ts)} lasted, "
                "at under half the size of the largest)"
            )
        elif not lasting and first is not shifts[0]:
            why += (
                " (every shift was taken back inside the window; this one left the most, or was the largest)"
            )
        elif first is not shifts[0]:
            over = shifts[0]
            why += f" (the {over.series} shift of {over.rel_change:+.0%} at {iso(over.ts)} was taken back inside the window)"
        return _span(window, first.ts, why, lead, latest)
    for key, name in SLO_SERIES.items():
        bound = (slo or {}).get(key)
        frame = rel.series.get(name)
        if not bound or frame is None or not frame.height:
            continue
        inside = frame.filter(frame["ts"] >= window.start)
        run = 0
        for ts, value in zip(inside["ts"].to_list(), inside["value"].to_list(), strict=True):
            run = run + 1 if value is not None and value > bound else 0
            if run == SLO_BREACH_STEPS:
                start = ts - timedelta(seconds=(SLO_BREACH_STEPS - 1) * rel.step_s)
                return _span(
                    window,
                    start,
                    f"{name} first breached its SLO ({bound:g} s) at {iso(start)}",
                    lead,
                    latest,
                )
    return Onset(
        window,
        window,
        None,
        "no clear onset in the window (no level shift, no SLO breach): judged the whole window",
    )


def _lasting(every: list[Shift], shift: Shift, end: datetime) -> bool:
    """At least half of ``shift`` (:data:`~perfkit.analyses.release.PERSIST_SHARE`, on a log scale)
    is still there after the same series' later shifts up to its next degrading one or ``end``."""
    size = _log_change(shift.rel_change)
    return _left(every, shift, end) / size >= PERSIST_SHARE if size else True


def _left(every: list[Shift], shift: Shift, end: datetime) -> float:
    """How much of ``shift`` (log of after over before, in its degrading direction) is still there
    after the same series' later shifts up to its next degrading one or ``end``."""
    level = _log_change(shift.rel_change)
    for x in sorted(every, key=lambda x: x.ts):
        if x.series != shift.series or x.ts <= shift.ts or x.ts > end:
            continue
        if x.degrading:
            break
        level += _log_change(x.rel_change)
    return level


def _most_left(every: list[Shift], shifts: list[Shift], end: datetime) -> Shift:
    """When every episode was taken back (in part), the onset is the one that left the most of itself
    at the window's end: a minute's blip at the window's start that is wholly gone is no onset
    beside a tail that fell back from +150 % to +30 %. When none left anything, the largest."""

    def left(s: Shift) -> float:
        size = _log_change(s.rel_change)
        return _left(every, s, end) * (1.0 if size > 0 else -1.0) if size else 0.0

    best = max(shifts, key=left)  # the earliest of equals
    return best if left(best) > 0 else max(shifts, key=lambda s: abs(_log_change(s.rel_change)))


def _log_change(rel: float) -> float:
    """log(after / before), a fall to nothing held at -log(1000) (a series at zero has no log)."""
    return math.log1p(max(rel, -0.999))


def _span(window: Window, ts: datetime, why: str, lead: float, latest: datetime) -> Onset:
    if (ts - window.start).total_seconds() < lead:
        return Onset(window, window, ts, f"{why}: at the window's start, judged the whole window")
    start = min(ts, latest)
    if start <= window.start:
        return Onset(window, window, ts, f"{why}: judged the whole window")
    kept = " (kept the last 20 minutes)" if start < ts else ""
    return Onset(window, Window(start, window.end), ts, f"{why}: judged from the onset{kept}")
