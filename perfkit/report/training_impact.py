"""The training job's cost and its impact for the postmortem, in the job's own terms: time, GPU-hours
and money lost, the Impact table, the headline and the severity
(:class:`~perfkit.report.postmortem.JobTerms`).

**Time lost** is measured against the baseline's tokens/s per GPU: a synchronous data-parallel job
that keeps its per-GPU batch should keep its per-GPU rate (linear scaling when GPUs are added).
With ``k`` = incident per-GPU rate / baseline per-GPU rate, a share ``1 - k`` of the incident
window's GPU time trained nothing the baseline would not have: ``(1 - k) x window`` of wall time,
``(1 - k) x window x GPUs`` GPU-hours, at the hardware price.

A job that went down or ran steps again gained less than its rate while running says. When the logs
number its steps (:mod:`perfkit.analyses.training_progress`), ``k`` is multiplied by the share of
each window that made progress (up, and on new steps), incident over baseline: a crash loop that
resumes from the same checkpoint every time gains nothing, ``k = 0``, 100 % lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.analyses.cost import usd_per_million_tokens
from perfkit.core.findings import ActionItem, Finding, Table, table_from_frame
from perfkit.core.frames import iso
from perfkit.report.postmortem import JobTerms
from perfkit.report.sections import Section
from perfkit.report.trace_figures import TracePhase, phase_text
from perfkit.report.training_view import SIDES, num_text, ratio_text

SEV2_LOST = 1.0 / 3.0
"""A job that lost a third of its GPU time or more: its schedule slips by half (1 / (1 - 1/3) =
1.5x the time to the same tokens): SEV-2."""
SEV3_LOST = 0.10
"""10 % lost is beyond a healthy job's run-to-run noise (step time varies by a few % between
windows: the simulator's and real jobs' jitter), so it is an incident: SEV-3; under it SEV-4."""
SHARE_FLOOR = 1.0
"""A share of the step under 1 % in the baseline gets no ratio in the Impact table: a 0.1 % data
wait (a prefetched batch's queue get) doubling to 0.2 % is noise, not a change."""

# -- cost and the job's impact ----------------------------------------------------------------------------


@dataclass
class TrainingCost:
    """What the job's GPUs cost per token and per step in each window, and what the incident lost."""

    usd_per_gpu_hour: float | None
    price_from: str
    per_million: dict[str, float | None] = field(default_factory=dict)
    per_step: dict[str, float | None] = field(default_factory=dict)
    per_gpu_ratio: float | None = None  # incident per-GPU tokens/s over the baseline's
    lost_share: float | None = None  # of the incident window's GPU time
    lost_minutes: float | None = None
    lost_gpu_hours: float | None = None
    lost_usd: float | None = None
    lost_usd_per_day: float | None = None  # if the job kept running like this
    window_minutes: float | None = None
    running_ratio: float | None = None  # per-GPU tokens/s while running, incident over baseline
    progress: dict[str, Any] = field(default_factory=dict)  # window -> Progress (training_progress)

    def summary(self) -> str:
        inc, base = self.per_million.get("incident"), self.per_million.get("baseline")
        stalled = self.progress.get("incident")
        if inc is None and stalled is not None and stalled.net_share == 0 and self.lost_usd is not None:
            return (
                f"no net progress in the incident window ({stalled.summary()}): every GPU-hour of it was lost, "
                f"{self.lost_gpu_hours:.1f} GPU-hours (${self.lost_usd:,.0f}), ${self.lost_usd_per_day:,.0f} a day "
                f"while it lasts (at ${self.usd_per_gpu_hour:g}/GPU-hour, {self.price_from})"
            )
        if inc is None:
            return "training cost unknown: " + (
                "no hardware price" if self.usd_per_gpu_hour is None else "no tokens/s in the incident window"
            )
        text = f"${inc:.2f} per million training tokens in the incident window"
        if self.progress.get("incident") is not None:
            text += " (net: tokens of steps run again and time down paid for, not gained)"
        if base:
            text += f" against ${base:.2f} in the baseline ({inc / base:.2f}x)"
        step = self.per_step.get("incident")
        if step is not None:
            text += f"; ${step:.3f} per step"
        if self.lost_usd is not None and self.lost_share:
            text += (
                f"; {self.lost_gpu_hours:.1f} GPU-hours (${self.lost_usd:,.0f}) lost in the window, "
                f"${self.lost_usd_per_day:,.0f} a day while it lasts"
            )
        return text + f" (at ${self.usd_per_gpu_hour:g}/GPU-hour, {self.price_from})"

    def as_dict(self) -> dict[str, Any]:
        progress = {k: v.as_dict() for k, v in self.progress.items() if v is not None}
        return {**self.__dict__, "progress": progress, "summary": self.summary()}


def training_cost(
    sides: Mapping[str, Any],
    price: float | None,
    price_from: str,
    window_s: float,
    progress: Mapping[str, Any] | None = None,
) -> TrainingCost:
    """Cost per million tokens and per step for each side (:class:`~perfkit.analyses.scaling.RunSide`),
    and the incident window's lost time and money (module docstring); ``progress``: window ->
    :class:`~perfkit.analyses.training_progress.Progress` or None."""
    out = TrainingCost(price, price_from, window_minutes=window_s / 60.0, progress=dict(progress or {}))
    for name, s in sides.items():
        if s is None or price is None or not s.gpus:
            continue
        tps = s.tokens_per_s
        # per million tokens *gained*: a window that ran steps again or was down paid for them too
        net = getattr(out.progress.get(name), "net_share", 1.0)
        out.per_million[name] = usd_per_million_tokens(price, s.gpus, tps * net) if tps and net > 0 else None
        out.per_step[name] = price * s.gpus * s.step_s / 3600.0 if s.step_s else None
    inc, base = sides.get("incident"), sides.get("baseline")
    if inc is not None and base is not None and inc.tokens_per_s_per_gpu and base.tokens_per_s_per_gpu:
        k = inc.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu
        out.running_ratio = k
        pb, pi = out.progress.get("baseline"), out.progress.get("incident")
        if pb is not None and pi is not None and pb.net_share > 0:
            k *= pi.net_share / pb.net_share
        out.per_gpu_ratio = k
        out.lost_share = max(0.0, 1.0 - k)
        out.lost_minutes = out.lost_share * window_s / 60.0
        if inc.gpus:
            out.lost_gpu_hours = out.lost_share * window_s / 3600.0 * inc.gpus
            if price is not None:
                out.lost_usd = out.lost_gpu_hours * price
                out.lost_usd_per_day = out.lost_share * 24.0 * inc.gpus * price
    return out


def cost_section(cost: TrainingCost) -> Section:
    rows = [
        [side, cost.per_million.get(side), cost.per_step.get(side)]
        for side in SIDES
        if side in cost.per_million or side in cost.per_step
    ]
    table = pl.DataFrame(rows, schema=["window", "$ per million tokens", "$ per step"], orient="row")
    f = Finding(
        "training_cost",
        "Training cost",
        cost.summary(),
        status="ok"
        if cost.per_million.get("incident") is not None or cost.lost_usd is not None
        else "missing",
        data=cost.as_dict(),
        table=table_from_frame(table) if rows else None,
        missing=[] if cost.usd_per_gpu_hour is not None else ["training_cost: no hardware price"],
    )
    return Section(f, table if rows else None)


def _share_of(side: Any, key: str) -> float | None:
    return None if side is None else side.shares.get(key)


def job_terms(
    *,
    sides: Mapping[str, Any],
    util: Mapping[str, Any],
    cost: TrainingCost | None,
    scaling: Any,
    phases: Sequence[TracePhase],
    step_s: Mapping[str, float | None],
    rollback: Any = None,
    reverted: str = "",
) -> JobTerms:
    """The postmortem's Impact table, headline, severity and breakdown in the job's terms.
    ``step_s``: the ``train_step`` gauges' mean per window (used when no side has one).
    ``rollback``: what reverting ``reverted`` discards
    (:class:`~perfkit.analyses.training_progress.Rollback`), when the change spoiled the training
    itself: the steps since the checkpoint it resumes from count as lost, and set the severity."""
    b, a = sides.get("baseline"), sides.get("incident")
    rows: list[list[Any]] = []

    def add(
        metric: str, vb: float | None, va: float | None, fmt: str, note: str = "", floor: float = 0.0
    ) -> None:
        """One row; no ratio when the baseline is under ``floor`` (a ratio of near-zero shares is noise)."""
        if vb is None and va is None:
            return
        change = ratio_text(va, vb) if vb is None or abs(vb) >= floor else ""
        rows.append([metric, num_text(vb, fmt) if vb is not None else "n/a", num_text(va, fmt), change, note])

    add("GPUs", b.gpus if b else None, a.gpus if a else None, "d", a.gpus_from if a else "")
    sb = (b.step_s if b else None) or step_s.get("baseline")
    sa = (a.step_s if a else None) or step_s.get("incident")
    add("step time (s)", sb, sa, ".2f")
    scaled = [s for s in (b, a) if s is not None and s.scaled]
    note = "scaled from the ranks that export" if scaled else ""
    add("tokens/s (job)", b.tokens_per_s if b else None, a.tokens_per_s if a else None, ",.0f", note)
    add(
        "tokens/s per GPU (while running)",
        b.tokens_per_s_per_gpu if b else None,
        a.tokens_per_s_per_gpu if a else None,
        ",.0f",
    )
    ub, ua = util.get("baseline"), util.get("incident")
    u = ua or ub
    if u is not None:
        what = f"{u.model} on {u.gpu}, dense {u.dtype} peak, recompute {u.recompute}"
        add("MFU (%)", 100 * ub.mfu if ub else None, 100 * ua.mfu if ua else None, ".1f", what)
        if u.recompute != "none":
            add("HFU (%)", 100 * ub.hfu if ub else None, 100 * ua.hfu if ua else None, ".1f",
                f"the FLOPs the GPUs ran, recomputation ({u.recompute}) included")  # fmt: skip
    for key, label in (
        ("data", "data wait, slowest rank (% of step)"),
        ("communication", "exposed communication, critical path (% of step)"),
    ):
        vb, va = _share_of(b, key), _share_of(a, key)
        source = (a.shares.source if a else "") or (b.shares.source if b else "")
        add(
            label,
            None if vb is None else 100 * vb,
            None if va is None else 100 * va,
            ".1f",
            source,
            SHARE_FLOOR,
        )
    pb, pi = (cost.progress.get(k) if cost is not None else None for k in SIDES)
    if pi is not None:
        rate_b = None if pb is None else pb.steps_new / max(pb.window.seconds / 60.0, 1e-9)
        rate_i = pi.steps_new / max(pi.window.seconds / 60.0, 1e-9)
        rows.append(["new steps per minute (net progress)", "n/a" if rate_b is None else f"{rate_b:,.1f}",
                     f"{rate_i:,.1f}", ratio_text(rate_i, rate_b), f"step {pi.frontier_start:,} → {pi.frontier_end:,}; {pi.source}"])  # fmt: skip
        if pi.restarts:
            resumed = ", ".join(f"{r:,}" for r in sorted({r.resumed_step for r in pi.restarts}))
            rows.append(["relaunches", str(len(pb.restarts)) if pb else "n/a", str(len(pi.restarts)), "",
                         f"resumed at step {resumed}" + ("; a crash loop" if pi.crash_loop else "")])  # fmt: skip
        if pi.steps_redone:
            rows.append(["steps run again (since the checkpoint resumed from)", "", f"{pi.steps_redone:,}", "",
                         f"{pi.steps_run:,} steps run, {pi.steps_new:,} of them new"])  # fmt: skip
        if pi.down_s >= 60.0:
            rows.append(["down (crashed, relaunching, hung)", "", f"{pi.down_s / 60.0:.1f} min of {pi.window.seconds / 60.0:.0f}",
                         f"{pi.down_s / pi.window.seconds:.0%}", "no step line where one was due"])  # fmt: skip
    if cost is not None and cost.lost_share is not None:
        basis = "against the baseline's tokens/s per GPU"
        if pi is not None and cost.running_ratio is not None:
            basis += (
                f" ({cost.running_ratio:.2f}x while running), net of the time down and the steps run again"
            )
        rows.append(["time lost in the window", "", f"{cost.lost_minutes:.1f} min of {cost.window_minutes:.0f}",
                     f"{cost.lost_share:.0%}", basis])  # fmt: skip
        if cost.lost_gpu_hours is not None:
            rows.append(["GPU-hours lost", "", f"{cost.lost_gpu_hours:.1f}", "", ""])
        if cost.lost_usd is not None:
            rows.append(["cost of the time lost", "", f"${cost.lost_usd:,.0f}", "",
                         f"${cost.lost_usd_per_day:,.0f} a day while it lasts ({cost.price_from})"])  # fmt: skip
    if cost is not None:
        add("$ per million tokens", cost.per_million.get("baseline"), cost.per_million.get("incident"), ".2f")
    lost = cost.lost_share if cost is not None else None
    if lost is None and sa and sb:
        lost = max(0.0, 1.0 - sb / sa)  # same per-GPU work per step: the step time says it
    discarded = _rollback_rows(rows, rollback, reverted, a, cost)
    graded = lost
    if discarded is not None:  # every step since the resume point is trained again: lost as well
        window_s = (cost.window_minutes or 0.0) * 60.0 if cost is not None else 0.0
        graded = max(lost or 0.0, min(rollback.seconds, window_s) / window_s if window_s > 0 else 1.0)
    severity = (
        "SEV-4" if graded is None or graded < SEV3_LOST else ("SEV-3" if graded < SEV2_LOST else "SEV-2")
    )
    headline = ""
    if a is not None and b is not None and a.tokens_per_s_per_gpu and b.tokens_per_s_per_gpu:
        headline = (
            f"The job trained {a.tokens_per_s_per_gpu:,.0f} tokens/s per GPU on {a.gpus} GPUs against "
            f"{b.tokens_per_s_per_gpu:,.0f} on {b.gpus} in the baseline "
            f"({a.tokens_per_s_per_gpu / b.tokens_per_s_per_gpu:.2f}x"
        )
        if a.gpus != b.gpus and a.tokens_per_s and b.tokens_per_s:
            headline += f"; {a.tokens_per_s / b.tokens_per_s:.2f}x the job's throughput for {a.gpus / b.gpus:.2g}x the GPUs"
        headline += ")"
        if pi is not None and pi.crash_loop:
            headline += (
                f" while it ran, but it made no net progress: {len(pi.restarts)} relaunches in the window, "
                f"each resumed at step {pi.restarts[-1].resumed_step:,} and went down before passing step "
                f"{pi.frontier_end:,};"
            )
        elif pi is not None and (pi.steps_redone or pi.down_s >= 60.0):
            net = [f"{pi.steps_redone:,} steps run again"] if pi.steps_redone else []
            net += [f"{pi.down_s / 60.0:.1f} min down"] if pi.down_s >= 60.0 else []
            headline += "; net of " + " and ".join(net)
        if cost is not None and cost.lost_gpu_hours is not None and lost:
            usd = f", ${cost.lost_usd:,.0f}" if cost.lost_usd is not None else ""
            per_day = f"; ${cost.lost_usd_per_day:,.0f} a day while it lasts" if cost.lost_usd_per_day else ""
            headline += (
                f"{'' if headline.endswith(';') else ':'} {lost:.0%} of the window's GPU time lost "
                f"({cost.lost_gpu_hours:.1f} GPU-hours{usd}{per_day})"
            )
        if discarded:
            headline += f"; {discarded}"
        headline += "."
    elif sa and sb:
        headline = f"Step time {sa:.2f} s against {sb:.2f} s in the baseline ({sa / sb:.2f}x)."
    parts = []
    if scaling is not None:
        if scaling.speedup is not None:
            parts.append(f"Per phase, {scaling.headline()}")
        for side, s in (("baseline", scaling.before), ("incident", scaling.after)):
            shares = ", ".join(
                f"{k} {v:.0%}" for k, v in s.shares.as_dict().items() if isinstance(v, float) and v >= 0.005
            )
            if shares and s.step_s:
                parts.append(f"{side} step {s.step_s:.2f} s: {shares} ({s.shares.source})")
    parts += [phase_text(p) for p in phases]
    parts = [t[:1].upper() + t[1:] for t in parts]
    breakdown = (
        ". ".join(parts) + "."
        if parts
        else "no step breakdown: neither a step split (train_* or a framework's timers) nor profiler traces"
    )
    prevent: ActionItem = {
        "action": "gate every relaunch, resize or config change on a short run compared with the last good one: "
        f"tokens/s per GPU and MFU within {SEV3_LOST:.0%} (a healthy job's run-to-run noise is a few %), and a "
        "profiled step (perfkit trace, perfkit scaling)",
        "type": "prevent",
        "priority": "P1",
        "owner": "training infrastructure",
    }
    table: Table = {"columns": ["metric", "baseline", "incident", "change", "note"], "rows": rows}
    return JobTerms(
        table, headline, breakdown, severity, prevent, resume_point(rollback) if discarded else ""
    )


def resume_point(rb: Any) -> str:
    """Where a rollback resumes: the last checkpoint saved before the change, or the step at it."""
    if rb.from_checkpoint:
        return (
            f"the checkpoint of step {rb.resume_step:,} saved {iso(rb.resume_at)}, the last before the change"
        )
    return f"step {rb.resume_step:,}, logged at the change (no checkpoint save in the logs: a lower bound)"


def _rollback_rows(
    rows: list[list[Any]], rb: Any, reverted: str, side: Any, cost: TrainingCost | None
) -> str | None:
    """The Impact rows of what rolling back ``reverted`` discards, and the headline's words for it."""
    if rb is None or not reverted:
        return None
    rows.append([f"steps a rollback of `{reverted}` discards", "", f"{rb.steps:,}", "",
                 f"back to {resume_point(rb)}; every step since is trained again (step {rb.frontier:,} reached)"])  # fmt: skip
    gpus = getattr(side, "gpus", None)
    words = f"rolling back `{reverted}` discards {rb.steps:,} steps ({rb.seconds / 60:.0f} min of training"
    if gpus:
        hours = rb.seconds / 3600.0 * gpus
        price = cost.usd_per_gpu_hour if cost is not None else None
        usd = f", ${hours * price:,.0f}" if price else ""
        rows.append(["GPU-hours a rollback discards", "", f"{hours:.1f}", "",
                     f"{rb.seconds / 60:.0f} min on {gpus} GPUs since the resume point{usd}"])  # fmt: skip
        words += f", {hours:.1f} GPU-hours{usd}"
    return words + ")"


__all__ = ["SEV2_LOST", "SEV3_LOST", "TrainingCost", "cost_section", "job_terms", "training_cost"]
