"""What changed: change points in the key series, aligned with deploy events.

A deploy is a suspect only if a shift *starts at it*: a change point within a few steps after the
deploy (the rate window delays what the series show by up to one window), on a series that was
still at its baseline level when the deploy landed (a deploy cannot cause what started before it:
a tail quantile that climbs in a staircase through an incident has a step near any deploy made
during it). Deploys with no such shift are cleared by name; a shift with no deploy is reported as
"no deploy explains this shift".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from perfkit.analyses.changepoints import MIN_REL_CHANGE, ChangePoint, detect
from perfkit.analyses.training_stalls import stalls
from perfkit.core.frames import Window, iso, utc
from perfkit.engine import signals as S

SUSPECT_KINDS = ("deploy", "rollback", "config")

STEP_POINTS = 150  # about 150 points over baseline → window end: one-minute steps for a few hours
MIN_STEP_S = 60.0  # never finer than a minute: a rate over fewer scrapes is noise
ALIGN_AFTER_STEPS = 3
"""A change point up to 3 steps after a deploy starts at it: the rate window (one step) delays what
the series show, the rollout takes a minute or two, and the rolling median moves a step later."""
ALIGN_MIN_S = 180.0  # ... and never less than 3 minutes (a rolling deploy of a few replicas)
ALIGN_BEFORE_STEPS = 1
"""A change point up to 1 step *before* the deploy's timestamp still starts at it: the event is
logged when the rollout finishes, and the step holding it mixes both sides."""
PRE_DEPLOY_DRIFT = 0.2
"""A series already 20 %+ worse than its baseline level just before the deploy had degraded before
it: the shift at the deploy continues an incident in progress and is not the deploy's. 20 % is the
change-point detector's own floor for a real change (``changepoints.MIN_REL_CHANGE``)."""

PERSIST_SHARE = 0.5
"""A shift counts for a deploy only while at least half of it is still there in the incident window:
the series' median from the shift (or the window's start) to the window's end, against its baseline
level, over how far the shift took it from that level. A regression that persists keeps about all of
it (1.0); a deploy rolled back before the window, whose series came back to baseline, keeps about none
(0.0) and explains nothing in the window. Minute medians wander by a few percent of a level, against
a shift of at least ``MIN_REL_CHANGE`` (20 %)."""

#: series watched for shifts: (name, signal, kind, quantile or None, degrading direction +1 up / -1 down)
WATCHED: tuple[tuple[str, str, str, float | None, int], ...] = (
    ("TTFT p50", "ttft", "quantile", 0.5, +1),
    ("TTFT p95", "ttft", "quantile", 0.95, +1),
    ("ITL p50", "itl", "quantile", 0.5, +1),
    ("ITL p95", "itl", "quantile", 0.95, +1),
    ("TPOT p95", "tpot", "quantile", 0.95, +1),
    ("E2E p95", "e2e", "quantile", 0.95, +1),
    # only where the engine has neither a TTFT nor an inter-token histogram (TGI): the medians it does
    # have, so a regression of the median request still shows as one
    ("TPOT p50", "tpot", "median-fallback", 0.5, +1),
    ("E2E p50", "e2e", "median-fallback", 0.5, +1),
    # only where the engine has no E2E histogram: its mean from cumulative time and count counters
    # (Triton's microsecond counters, perfkit.engine.dialects.COUNTER_MEANS)
    ("E2E mean", "e2e", "mean", None, +1),
    ("requests/s", "e2e", "rate", None, 0),
    ("generated tokens/s", "generation_tokens_total", "counter", None, -1),
    # training jobs
    ("step time", "train_step", "gauge", None, +1),
    ("training tokens/s", "train_tokens", "counter", None, -1),
)


STEP_TIME, TRAINING_RATE = "step time", "training tokens/s"
SERVING_RATE, REQUEST_RATE = "generated tokens/s", "requests/s"

#: the tail series by the part of a request they time: prefill (first token), decode (the tokens
#: after it; ITL and TPOT are two statistics of the same gaps) and the whole request
TAIL_VIEWS = {"TTFT p95": "prefill", "ITL p95": "decode", "TPOT p95": "decode", "E2E p95": "end-to-end"}


def is_mean(series: str) -> bool:
    """A watched series that is a mean (Triton's E2E from its time and count counters): a few slow
    requests move it as much as all of them a little, so alone it cannot tell a slower median request
    from a new mix of requests."""
    return any(name == series and kind == "mean" for name, _, kind, _, _ in WATCHED)


#: the request mix read where a deploy is suspected on means alone: (name, histogram signal)
MIX_SIGNALS = (
    ("prompt tokens per request", "prompt_tokens"),
    ("output tokens per request", "generation_tokens"),
)


def mix_at(engine, span: Window, step_s: float, ts: datetime, queries: list[str]) -> dict[str, float]:
    """How the requests' mix moved at ``ts``: for each of :data:`MIX_SIGNALS` the engine exports, the
    median over the span's steps after ``ts`` of the mean per request, against the median over its
    steps before (the step holding ``ts`` mixes both sides and is left out), as a relative change
    (0.11: 11 % more tokens per request). Medians of the steps' means, as :func:`_level` reads a
    series' level: a minute with a burst of long prompts, or a later change that takes less than half
    the span after ``ts``, does not move them."""
    out: dict[str, float] = {}
    for name, signal in MIX_SIGNALS:
        if not S.resolve(engine, signal).found:
            continue
        means = S.mean_series(engine, signal, span, step_s, queries)
        if not means.height:
            continue
        before = _level(means, Window(span.start, ts - timedelta(seconds=step_s)))
        after = _level(means, Window(ts + timedelta(seconds=step_s), span.end))
        if before is not None and after is not None and before > 0:
            out[name] = after / before - 1.0
    return out


def is_tail(series: str) -> bool:
    """A watched series that is a tail quantile (p95): a subset of requests, which a change in the
    traffic mix (a few long prompts) moves without any code change."""
    return any(name == series and kind == "quantile" and (q or 0) > 0.5 for name, _, kind, q, _ in WATCHED)


def tail_views(series: list[str]) -> set[str]:
    """The parts of a request (:data:`TAIL_VIEWS`) whose tail the named series show."""
    return {TAIL_VIEWS[name] for name in series if name in TAIL_VIEWS}


@dataclass
class Shift:
    series: str
    ts: datetime
    before: float
    after: float
    rel_change: float
    degrading: bool
    aligned_event: dict[str, Any] | None = None
    nearby: list[dict[str, Any]] = field(default_factory=list)  # other events (notes, alerts) just before
    #: how much worse than its baseline level the series already was before the shift (0.3: 30 %)
    drift_before: float | None = None
    score: float | None = None  # the change point's standardised size (changepoints.SHIFT_SCORE is its floor)
    #: the share of the shift still there in the incident window (1: all of it, 0: back at baseline)
    persisted: float | None = None

    @property
    def from_baseline(self) -> bool:
        """The series left its baseline level here (not already degraded before the shift)."""
        return self.drift_before is None or self.drift_before < PRE_DEPLOY_DRIFT

    @property
    def persists(self) -> bool:
        """At least half the shift is still there in the incident window (:data:`PERSIST_SHARE`)."""
        return self.persisted is None or self.persisted >= PERSIST_SHARE

    @property
    def counts(self) -> bool:
        """The shift can blame the deploy it starts at: it degrades, left the series' baseline level
        and is still there in the incident window."""
        return self.degrading and self.from_baseline and self.persists

    def as_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "ts": iso(self.ts),
            "before": self.before,
            "after": self.after,
            "rel_change": round(self.rel_change, 4),
            "degrading": self.degrading,
            "aligned_event": self.aligned_event,
            "nearby": self.nearby,
            "drift_before": None if self.drift_before is None else round(self.drift_before, 4),
            "score": None if self.score is None else round(self.score, 2),
            "persisted": None if self.persisted is None else round(self.persisted, 3),
        }


def at_deploy(shift: Shift, deploy_ts: str | None) -> bool:
    """Whether ``shift`` starts at the deploy of ISO time ``deploy_ts`` (aligned to it)."""
    return (
        deploy_ts is not None and shift.aligned_event is not None and shift.aligned_event["ts"] == deploy_ts
    )


def blamed_on(shift: Shift, suspect: dict[str, Any] | None) -> bool:
    """Whether ``shift`` is one the suspect deploy is blamed for: it starts at the deploy and its
    series is among the suspect's."""
    return suspect is not None and at_deploy(shift, suspect["ts"]) and shift.series in suspect["series"]


@dataclass
class ReleaseCorrelation:
    span: Window
    step_s: float
    shifts: list[Shift]
    events: list[dict[str, Any]]
    cleared: list[dict[str, Any]]  # deploys in the span with no shift starting at them
    suspect: dict[str, Any] | None
    unexplained: list[Shift]
    series: dict[str, pl.DataFrame] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: where the suspect is blamed on means alone (:func:`is_mean`): how the requests' mix moved at it
    #: (:func:`mix_at`); empty where it was not read or the engine exports no token histograms
    mix: dict[str, float] = field(default_factory=dict)
    #: a training job's stalls over the span (:mod:`perfkit.analyses.training_stalls`): its step gauge
    #: froze there, drawn as gaps; the change points are found on the series as it was exported
    stalled: list[tuple[datetime, datetime]] = field(default_factory=list)

    @property
    def suspect_version(self) -> str | None:
        return self.suspect.get("version") if self.suspect else None

    def summary(self) -> str:
        if self.suspect:
            s = self.suspect
            return (
                f"{s['kind']} {s['version'] or s['detail']} at {s['ts']} is where "
                f"{', '.join(s['series'])} shifted"
            )
        if self.unexplained:
            first = min(self.unexplained, key=lambda x: x.ts)
            text = f"no deploy explains this shift: {first.series} {first.rel_change:+.0%} at {iso(first.ts)}"
            if first.nearby:
                text += "; just before it: " + "; ".join(f"{e['kind']} {e['detail']}" for e in first.nearby)
            return text
        if not self.series:
            return "no latency or throughput series to look for shifts in"
        return "no significant shift in the watched series"

    def as_dict(self) -> dict[str, Any]:
        return {
            "step_s": self.step_s,
            "span": self.span.as_dict(),
            "shifts": [s.as_dict() for s in self.shifts],
            "suspect": self.suspect,
            "suspect_version": self.suspect_version,
            "cleared": self.cleared,
            "unexplained": [s.as_dict() for s in self.unexplained],
            "mix_at_suspect": {k: round(v, 4) for k, v in self.mix.items()},
            "summary": self.summary(),
        }


def watched_series(engine, span: Window, step_s: float, queries: list[str]) -> dict[str, pl.DataFrame]:
    out: dict[str, pl.DataFrame] = {}
    for name, signal, kind, q, _ in WATCHED:
        if kind == "median-fallback" and (S.resolve(engine, "ttft").found or S.resolve(engine, "itl").found):
            continue  # the engine's TTFT and inter-token medians are watched instead
        if kind in ("quantile", "median-fallback"):
            frame = S.quantile_series(engine, signal, q or 0.5, span, step_s, queries)
        elif kind == "mean":
            if S.resolve(engine, signal).found:
                continue  # the histogram's quantiles are watched instead
            frame = S.mean_series(engine, signal, span, step_s, queries)
        elif kind == "rate":
            # requests: the E2E histogram's observations, the finished-request counter where there is none
            frame = (
                S.request_rate_series(engine, span, step_s, queries)
                if signal == "e2e"
                else S.rate_series(engine, signal, span, step_s, queries, histogram_count=True)
            )
        elif kind == "gauge":
            frame = S.gauge_series(engine, signal, span, step_s, queries, combine="avg")
        else:
            frame = S.rate_series(engine, signal, span, step_s, queries)
        if frame.height:
            out[name] = frame.select("ts", "value").sort("ts")
    return out


def _level(frame: pl.DataFrame, w: Window) -> float | None:
    """The series' median over ``w`` (its baseline level)."""
    inside = frame.filter((pl.col("ts") >= w.start) & (pl.col("ts") <= w.end))["value"].to_numpy()
    inside = inside[np.isfinite(inside)]
    return float(np.median(inside)) if inside.size else None


def _persisted(
    frame: pl.DataFrame, ts: datetime, after: float, base: float | None, window: Window, direction: int
) -> float | None:
    """The share of a shift (to ``after``, from ``base``) still there over [max(ts, window start),
    window end]: 1 all of it, 0 back at baseline (:data:`PERSIST_SHARE`). None when it cannot be said
    (no baseline level, no degrading direction, no points, or a shift that ends after the window)."""
    if ts > window.end:
        return None
    total = _drift(after, base, direction)
    level = _level(frame, Window(max(ts, window.start), window.end))
    now = _drift(level, base, direction) if level is not None else None
    if total is None or now is None or total <= 0:
        return None
    return now / total


def _drift(before: float, base: float | None, direction: int) -> float | None:
    """How much worse than ``base`` the level ``before`` is, in the degrading ``direction`` (0.3: 30 %
    worse); None when there is no baseline level or the series has no degrading direction."""
    if base is None or base <= 0 or before <= 0 or direction == 0:
        return None
    return before / base - 1.0 if direction > 0 else base / before - 1.0


def _demand_fell(tokens: Shift, shifts: list[Shift], tolerance: timedelta) -> bool:
    """Whether a fall of the generated-token rate is its demand's: the request rate fell at the same
    change (within ``tolerance``) and the tokens per request fell by less than ``MIN_REL_CHANGE``. A
    server generates what it is asked for, so such a fall is less traffic (a surge that ended), not a
    slower server; a slower one shows in its latencies."""
    for o in shifts:
        if o.series != REQUEST_RATE or o.rel_change >= 0:
            continue
        if abs((o.ts - tokens.ts).total_seconds()) > tolerance.total_seconds():
            continue
        if (1 + tokens.rel_change) / (1 + o.rel_change) > 1 - MIN_REL_CHANGE:
            return True
    return False


def correlate(engine, window: Window, baseline: Window | None, events: pl.DataFrame) -> ReleaseCorrelation:
    """Change points over baseline-start → window-end, each matched to the deploy it starts at."""
    start = min(baseline.start, window.start) if baseline else window.start - (window.end - window.start)
    span = Window(start, window.end)
    step_s = max(MIN_STEP_S, S.choose_step(span, points=STEP_POINTS))
    queries: list[str] = []
    series = watched_series(engine, span, step_s, queries)
    missing = []
    if not series:
        missing.append("release correlation: no latency or throughput series to look for shifts in")
    tolerance = timedelta(seconds=max(ALIGN_AFTER_STEPS * step_s, ALIGN_MIN_S))
    base_span = baseline if baseline else Window(span.start, window.start)
    evs = []
    if events.height:
        in_span = events.filter((pl.col("ts") >= span.start - tolerance) & (pl.col("ts") <= span.end))
        evs = [dict(r) for r in in_span.iter_rows(named=True)]
    suspects = [e for e in evs if e["kind"] in SUSPECT_KINDS]
    shifts: list[Shift] = []
    for name, _signal, _kind, _q, direction in WATCHED:
        frame = series.get(name)
        if frame is None:
            continue
        ts = frame["ts"].to_list()
        cps: list[ChangePoint] = detect(ts, frame["value"].to_numpy(), log_scale=True)
        base_level = _level(frame, base_span)
        for cp in cps:
            degrading = (direction > 0 and cp.rel_change > 0) or (direction < 0 and cp.rel_change < 0)
            shift = Shift(name, cp.ts, cp.before, cp.after, cp.rel_change, degrading, score=cp.score)
            shift.drift_before = _drift(cp.before, base_level, direction)
            shift.persisted = _persisted(frame, cp.ts, cp.after, base_level, window, direction)
            # the deploy the shift starts at: at or before the change point, within tolerance
            best = None
            for e in suspects:
                lead = (cp.ts - e["ts"]).total_seconds()
                if -ALIGN_BEFORE_STEPS * step_s <= lead <= tolerance.total_seconds() and (
                    best is None or abs(lead) < best[0]
                ):
                    best = (abs(lead), e)
            if best:
                e = best[1]
                shift.aligned_event = {
                    "ts": iso(e["ts"]),
                    "kind": e["kind"],
                    "version": e["version"] or None,
                    "detail": e["detail"],
                }
            shifts.append(shift)
    # A suspect needs degrading shifts starting at it, from the baseline level; rank by their total.
    for sh in shifts:
        if sh.series == STEP_TIME and TRAINING_RATE in series and sh.aligned_event:
            # a longer step at the same tokens/s is a bigger step (more micro-batches or sequences),
            # not a slower job: the step time counts only when the throughput fell at the same change
            sh.degrading = sh.degrading and any(
                o.series == TRAINING_RATE and o.degrading and o.aligned_event == sh.aligned_event
                for o in shifts
            )
        if sh.series == SERVING_RATE and sh.degrading:
            sh.degrading = not _demand_fell(sh, shifts, tolerance)
    scores: dict[str, tuple[float, dict[str, Any], list[str]]] = {}
    for sh in shifts:
        if sh.aligned_event and sh.counts and sh.ts >= span.start:
            key = f"{sh.aligned_event['ts']}|{sh.aligned_event['version']}"
            total, ev, names = scores.get(key, (0.0, sh.aligned_event, []))
            scores[key] = (total + abs(float(np.log1p(sh.rel_change))), ev, [*names, sh.series])
    suspect = None
    if scores:
        total, ev, names = max(scores.values(), key=lambda x: x[0])
        suspect = {**ev, "series": names, "score": round(total, 3)}
    cleared = []
    for e in suspects:
        hit = any(at_deploy(sh, iso(e["ts"])) and sh.counts for sh in shifts)
        if not hit and span.start <= e["ts"] <= span.end:
            cleared.append(
                {
                    "ts": iso(e["ts"]),
                    "kind": e["kind"],
                    "version": e["version"] or None,
                    "detail": e["detail"],
                }
            )
    context = [e for e in evs if e["kind"] not in SUSPECT_KINDS and e["kind"] != "alert"]
    for sh in shifts:
        if sh.aligned_event is None:
            sh.nearby = [
                {"ts": iso(e["ts"]), "kind": e["kind"], "detail": e["detail"]}
                for e in context
                if 0 <= (sh.ts - e["ts"]).total_seconds() <= 2 * tolerance.total_seconds()
            ]
    onset_from = baseline.end if baseline and baseline.end < window.start else window.start - tolerance
    unexplained = [sh for sh in shifts if sh.degrading and not sh.aligned_event and sh.ts >= onset_from]
    mix: dict[str, float] = {}
    if suspect is not None and all(is_mean(name) for name in suspect["series"]):
        mix = mix_at(engine, span, step_s, utc(suspect["ts"]), queries)
    return ReleaseCorrelation(
        span,
        step_s,
        shifts,
        [{**e, "ts": iso(e["ts"])} for e in evs],
        cleared,
        suspect,
        unexplained,
        series,
        queries,
        missing,
        mix,
        stalls(engine, span) if STEP_TIME in series else [],
    )
