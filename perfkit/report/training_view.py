"""How the training runbook's sections look (profiler traces, efficiency, memory, scaling, training
cost) and a training job's impact for its postmortem, in the job's own terms.

The numbers come from :mod:`perfkit.traces` (HTA's breakdown per rank), :mod:`perfkit.analyses.mfu`,
:mod:`perfkit.analyses.memory`, :mod:`perfkit.analyses.scaling` and :mod:`perfkit.analyses.cost`;
:mod:`perfkit.app.runbooks.training` wires them. Here they become findings (verdict line, status,
table, figure) and the postmortem's Impact table (:class:`~perfkit.report.postmortem.JobTerms`).

**Time lost** is measured against the baseline's tokens/s per GPU: a synchronous data-parallel job
that keeps its per-GPU batch should keep its per-GPU rate (linear scaling when GPUs are added).
With ``k`` = incident per-GPU rate / baseline per-GPU rate, a share ``1 - k`` of the incident
window's GPU time trained nothing the baseline would not have: ``(1 - k) x window`` of wall time,
``(1 - k) x window x GPUs`` GPU-hours, at the hardware price.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
import polars as pl

from perfkit.analyses.cost import usd_per_million_tokens
from perfkit.core.findings import ActionItem, Finding, Table, table_from_frame
from perfkit.report.bench_figures import TablesSection
from perfkit.report.figures import PALETTE
from perfkit.report.postmortem import JobTerms
from perfkit.report.sections import Section
from perfkit.report.trace_figures import TracePhase, phase_text

SIDES = ("baseline", "incident")
SEV2_LOST = 1.0 / 3.0
"""A job that lost a third of its GPU time or more: its schedule slips by half (1 / (1 - 1/3) =
1.5x the time to the same tokens): SEV-2."""
SEV3_LOST = 0.10
"""10 % lost is beyond a healthy job's run-to-run noise (step time varies by a few % between
windows: the simulator's and real jobs' jitter), so it is an incident: SEV-3; under it SEV-4."""
SHARE_FLOOR = 1.0
"""A share of the step under 1 % in the baseline gets no ratio in the Impact table: a 0.1 % data
wait (a prefetched batch's queue get) doubling to 0.2 % is noise, not a change."""
COMPONENT_COLORS = {
    "compute": PALETTE[0],
    "communication": PALETTE[1],
    "data": "#d62728",
    "idle": "#c7c7c7",
    "memory": PALETTE[2],
}


def _pct(v: float | None, scale: float = 100.0) -> str:
    return "n/a" if v is None else f"{v * scale:.0f} %"


def _num(v: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else ""


# -- efficiency ----------------------------------------------------------------------------------------


FRAMEWORK_FORMULAS = {
    "torchtitan": "torchtitan's MFU = 100 × FLOPs per token × tps / the GPU's peak, FLOPs per token = 6N + "
    "12·L·H·Q·T (torchtitan/components/metrics.py; tps per device), as reported",
    "Megatron-LM": "Megatron-LM's throughput per GPU (TFLOP/s/GPU) = num_floating_point_operations(batch) / "
    "(time per iteration × 10^12 × world size) (megatron/training/training.py: forward + backward model FLOPs, "
    "attention and logits included), as reported",
}
PERFKIT_FORMULA = (
    "perfkit's MFU = tokens/s × (6N + 12·L·H·Q·T) / (GPUs × the GPU's dense peak) (PaLM, appendix B; "
    "perfkit/analyses/mfu.py)"
)


def efficiency_section(
    sides: Mapping[str, Any],
    util: Mapping[str, Any],
    why_not: str,
    notes: Sequence[str],
    reported: Mapping[str, Mapping[str, float | None]] | None = None,
    frameworks: Sequence[str] = (),
) -> Section:
    """Tokens/s per GPU of each window from all ranks (scaled when only some export) and MFU/HFU.
    ``sides``: window -> :class:`~perfkit.analyses.scaling.RunSide`; ``util``: window ->
    :class:`~perfkit.analyses.mfu.Utilisation` or None; ``reported``: window -> the framework's own
    ``tflops`` per GPU and ``mfu`` as its lines state them, shown beside perfkit's with the formula
    each uses (they count FLOPs differently, so they need not agree)."""
    rows = []
    reported = reported or {}
    shown = {k for r in reported.values() for k, v in r.items() if v is not None}
    for side in SIDES:
        s, u = sides.get(side), util.get(side)
        if s is None:
            continue
        row = {
            "window": side,
            "GPUs": s.gpus,
            "GPUs from": s.gpus_from or "",
            "ranks exporting": s.ranks_reporting,
            "tokens/s (job)": s.tokens_per_s,
            "tokens/s per GPU": s.tokens_per_s_per_gpu,
            "sequence length": u.seq_len if u else None,
            "model TFLOP/s per GPU": u.model_tflops_per_gpu if u else None,
            "MFU %": 100 * u.mfu if u else None,
            "HFU %": 100 * u.hfu if u else None,
        }
        r = reported.get(side, {})
        if "tflops" in shown:
            row["framework TFLOP/s per GPU (reported)"] = r.get("tflops")
        if "mfu" in shown:
            fw_mfu = r.get("mfu")
            row["framework MFU % (reported)"] = None if fw_mfu is None else 100 * fw_mfu
        rows.append(row)
    if shown:
        notes = [
            *notes,
            *(FRAMEWORK_FORMULAS[f] for f in dict.fromkeys(frameworks) if f in FRAMEWORK_FORMULAS),
        ]
        notes.append(PERFKIT_FORMULA)
    table = pl.DataFrame(rows) if rows else pl.DataFrame()
    inc, base = sides.get("incident"), sides.get("baseline")
    ui, ub = util.get("incident"), util.get("baseline")
    parts = []
    if inc is not None and inc.tokens_per_s_per_gpu is not None:
        parts.append(f"{inc.tokens_per_s_per_gpu:,.0f} tokens/s per GPU on {inc.gpus} GPUs")
        if base is not None and base.tokens_per_s_per_gpu:
            parts[-1] += (
                f" against {base.tokens_per_s_per_gpu:,.0f} on {base.gpus} in the baseline "
                f"({inc.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu:.2f}x)"
            )
        if inc.scaled or (base is not None and base.scaled):
            parts.append("scaled from the ranks that export train_tokens_total to every GPU")
    else:
        parts.append("tokens/s unknown: no train_tokens_total and no tokens/s the framework reports in the incident window")  # fmt: skip
    if ui is not None:
        mfu = f"MFU {ui.mfu:.1%}" + (
            f" (HFU {ui.hfu:.1%}, recompute {ui.recompute})" if ui.hfu != ui.mfu else ""
        )
        if ub is not None:
            mfu += f" against {ub.mfu:.1%} in the baseline"
        parts.append(mfu)
    else:
        parts.append(f"no MFU: {why_not}")
    ri = reported.get("incident", {})
    if ri.get("mfu") is not None:
        parts.append(f"the framework reports MFU {ri['mfu']:.1%}")
    elif ri.get("tflops") is not None:
        parts.append(f"the framework reports {ri['tflops']:,.1f} TFLOP/s per GPU")
    status = "ok" if ui is not None else ("warn" if inc is not None and inc.tokens_per_s else "missing")
    data = {
        "sides": {k: v.as_dict() for k, v in sides.items() if v is not None},
        "utilisation": {k: v.as_dict() if v is not None else None for k, v in util.items()},
        "why_no_mfu": why_not or None,
        "reported_by_framework": {k: dict(v) for k, v in reported.items()} or None,
    }
    all_notes = [*notes, *(n for u in util.values() if u is not None for n in u.notes)]
    f = Finding(
        "efficiency",
        "Efficiency: MFU and tokens/s per GPU",
        "; ".join(parts),
        status=status,
        data=data,
        table=table_from_frame(table) if rows else None,
        missing=[] if ui is not None else [f"efficiency: {why_not}"],
    )
    return TablesSection(f, table if rows else None, notes=list(dict.fromkeys(all_notes)))


# -- the trainer's checklist ----------------------------------------------------------------------------


def checklist_section(
    rows: Sequence[Mapping[str, str]], frameworks: Sequence[str], trainer: Mapping[str, Any] | None
) -> Section:
    """The trainer's checklist (:func:`perfkit.analyses.training_checklist.checklist`) as a finding."""
    table = pl.DataFrame(list(rows)) if rows else pl.DataFrame()
    found = [r for r in rows if r["found"] != "missing"]
    lacking = [r["checks"] for r in rows if r["found"] == "missing"]
    who = ", ".join(dict.fromkeys(frameworks)) or "no framework's own lines"
    summary = f"evidence: {who}; {len(found)} of {len(rows)} checkable"
    if lacking:
        summary += " (not: " + ", ".join(lacking) + ")"
    notes = [*((trainer or {}).get("notes") or []), *((trainer or {}).get("missing") or [])]
    if trainer and trainer.get("restarts"):
        notes.append(f"{trainer['restarts']} torchrun worker-group restart(s) in the logs")
    f = Finding(
        "training_evidence",
        "Trainer's checklist",
        summary,
        status="ok" if not lacking else "warn",
        data={"frameworks": list(frameworks), "trainer": dict(trainer) if trainer else None, "notes": notes},
        table=table_from_frame(table) if rows else None,
    )
    return TablesSection(f, table if rows else None, notes=notes)


def with_checklist(scope: Section, checklist: Section) -> Section:
    """The scope section with the checklist's table and notes under it, both findings recorded."""
    tables = [("Trainer's checklist: " + checklist.finding.summary, checklist.table)] if checklist.table is not None else []  # fmt: skip
    notes = list(getattr(checklist, "notes", []))
    if checklist.table is None:
        notes.insert(0, f"Trainer's checklist: {checklist.finding.summary}")
    return TablesSection(
        scope.finding,
        scope.table,
        scope.figure,
        extra_findings=[*scope.extra_findings, checklist.finding],
        tables=tables,
        notes=notes,
    )


# -- memory ---------------------------------------------------------------------------------------------


def memory_section(result: Any, notes: Sequence[str], missing: Sequence[str] = ()) -> Section:
    """A :class:`~perfkit.analyses.memory.MemoryBreakdown` (item by item) or a
    :class:`~perfkit.analyses.memory_peak.StatesVsPeak` (states per ZeRO stage against the peak)."""
    gib = float(2**30)
    if hasattr(result, "items"):
        table = pl.DataFrame(
            {
                "item": [i.name for i in result.items],
                "GiB per GPU": [i.bytes / gib for i in result.items],
                "how": [i.formula for i in result.items],
            }
        )
        summary = result.summary()
        status = "critical" if result.fits is False else "ok"
    else:
        table = pl.DataFrame(
            {
                "ZeRO stage": list(result.states_bytes),
                "model states GiB per GPU": [v / gib for v in result.states_bytes.values()],
                "fits with runtime buffers": [result.fits[z] for z in result.states_bytes],
                "rest of the peak GiB": [
                    result.rest_bytes[z] / gib if z in result.rest_bytes else None
                    for z in result.states_bytes
                ],
            }
        )
        summary = result.summary() + (f"; first try: {result.first_try}" if result.first_try else "")
        status = "warn"
    f = Finding(
        "memory",
        "GPU memory: what each item takes",
        summary,
        status=status,
        data=result.as_dict(),
        table=table_from_frame(table),
        missing=list(missing),
    )
    return TablesSection(f, table, notes=list(dict.fromkeys(notes)))


def missing_section(key: str, title: str, why: str) -> Section:
    """A section that could not say anything: what is missing, in one line."""
    return Section(Finding(key, title, why, status="missing", missing=[f"{key}: {why}"]))


# -- scaling ----------------------------------------------------------------------------------------------


def scaling_figure(result: Any) -> go.Figure | None:
    """Each side's step split into its components (seconds, stacked), GPUs and per-GPU rate in
    the labels: what grew between the two."""
    from perfkit.analyses.scaling import COMPONENTS

    pairs = [(n, s) for n, s in (("before", result.before), ("after", result.after)) if s.step_s]
    if len(pairs) < 2 or any(s.shares.compute is None for _, s in pairs):
        return None
    sides = [s for _, s in pairs]
    labels = [f"{n}: {s.gpus} GPUs, {_num(s.tokens_per_s_per_gpu)} tokens/s per GPU" for n, s in pairs]
    fig = go.Figure()
    for k in COMPONENTS:
        values = [(s.shares.get(k) or 0.0) * (s.step_s or 0.0) for s in sides]
        if not any(v > 0.005 * (sides[-1].step_s or 1) for v in values):
            continue
        mark = " (most of the time lost)" if k == result.lost_to else ""
        fig.add_trace(
            go.Bar(
                x=labels,
                y=values,
                name=k + mark,
                marker={"color": COMPONENT_COLORS.get(k, PALETTE[3])},
                hovertemplate="%{x}<br>" + k + ": %{y:.2f} s<extra></extra>",
            )
        )
    fig.update_layout(
        title={"text": "Step time split, before and after", "x": 0.01},
        barmode="stack",
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        template="plotly_white",
        yaxis_title="seconds per step",
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def scaling_section(result: Any, runs: Mapping[str, str | None]) -> Section:
    """A :class:`~perfkit.analyses.scaling.Scaling`: the headline, both sides, the time lost."""
    from perfkit.analyses.scaling import COMPONENTS

    b, a = result.before, result.after
    rows: list[list[Any]] = [
        ["GPUs", b.gpus, a.gpus, None, None],
        ["tokens/s (job)", b.tokens_per_s, a.tokens_per_s, None, None],
        ["tokens/s per GPU", b.tokens_per_s_per_gpu, a.tokens_per_s_per_gpu, None, None],
        ["step time (s)", b.step_s, a.step_s, None, None],
    ]
    for k in COMPONENTS:
        sb, sa = b.shares.get(k), a.shares.get(k)
        if sb is None and sa is None:
            continue
        share = result.lost_share.get(k)
        rows.append(
            [
                f"{k} share of the step",
                None if sb is None else round(100 * sb, 1),
                None if sa is None else round(100 * sa, 1),
                result.lost_s_per_step.get(k),
                None if share is None else round(100 * share, 1),
            ]
        )
    columns = ["measure", "baseline (before)", "incident (after)", "s lost per step", "% of the time lost"]
    table = pl.DataFrame(rows, schema=columns, orient="row")
    same = b.gpus is not None and b.gpus == a.gpus
    if same:
        summary = (
            f"not a scaling change: {a.gpus} GPUs in both windows ({a.gpus_from or 'as read'}); "
            + result.headline()
        )
    else:
        summary = result.headline()
        if result.weak_efficiency is not None:
            summary += f"; weak scaling (same batch per GPU): efficiency {result.weak_efficiency:.2f}"
        if result.strong_efficiency is not None:
            summary += f"; strong scaling (same global batch): efficiency {result.strong_efficiency:.2f}"
    fig = scaling_figure(result)
    notes = [*result.notes, *(f"before: {n}" for n in b.as_dict()["notes"]), *(f"after: {n}" for n in a.as_dict()["notes"])]  # fmt: skip
    known = result.speedup is not None and result.efficiency is not None
    f = Finding(
        "scaling",
        "Scaling: speed-up and where the time went",
        summary,
        status=("ok" if same else ("warn" if (result.efficiency or 1.0) < 0.9 else "ok"))
        if known
        else "missing",
        data={**result.as_dict(), "traces": dict(runs)},
        table=table_from_frame(table),
        figure=fig.to_plotly_json() if fig is not None else None,
        figure_caption="the step split on the critical path (traces when the window has them, else train_* "
        "gauges), in seconds per step, before and after"
        if fig is not None
        else None,
        missing=[] if known else [f"scaling: {result.notes[0] if result.notes else 'no throughput'}"],
    )
    return TablesSection(f, table, fig, notes=list(dict.fromkeys(notes)))


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

    def summary(self) -> str:
        inc, base = self.per_million.get("incident"), self.per_million.get("baseline")
        if inc is None:
            return "training cost unknown: " + (
                "no hardware price" if self.usd_per_gpu_hour is None else "no tokens/s in the incident window"
            )
        text = f"${inc:.2f} per million training tokens in the incident window"
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
        return {**self.__dict__, "summary": self.summary()}


def training_cost(
    sides: Mapping[str, Any], price: float | None, price_from: str, window_s: float
) -> TrainingCost:
    """Cost per million tokens and per step for each side (:class:`~perfkit.analyses.scaling.RunSide`),
    and the incident window's lost time and money (module docstring)."""
    out = TrainingCost(price, price_from, window_minutes=window_s / 60.0)
    for name, s in sides.items():
        if s is None or price is None or not s.gpus:
            continue
        tps = s.tokens_per_s
        out.per_million[name] = usd_per_million_tokens(price, s.gpus, tps) if tps else None
        out.per_step[name] = price * s.gpus * s.step_s / 3600.0 if s.step_s else None
    inc, base = sides.get("incident"), sides.get("baseline")
    if inc is not None and base is not None and inc.tokens_per_s_per_gpu and base.tokens_per_s_per_gpu:
        k = inc.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu
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
        status="ok" if cost.per_million.get("incident") is not None else "missing",
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
) -> JobTerms:
    """The postmortem's Impact table, headline, severity and breakdown in the job's terms.
    ``step_s``: the ``train_step`` gauges' mean per window (used when no side has one)."""
    b, a = sides.get("baseline"), sides.get("incident")
    rows: list[list[Any]] = []

    def add(
        metric: str, vb: float | None, va: float | None, fmt: str, note: str = "", floor: float = 0.0
    ) -> None:
        """One row; no ratio when the baseline is under ``floor`` (a ratio of near-zero shares is noise)."""
        if vb is None and va is None:
            return
        change = _ratio(va, vb) if vb is None or abs(vb) >= floor else ""
        rows.append([metric, _num(vb, fmt) if vb is not None else "n/a", _num(va, fmt), change, note])

    add("GPUs", b.gpus if b else None, a.gpus if a else None, "d", a.gpus_from if a else "")
    sb = (b.step_s if b else None) or step_s.get("baseline")
    sa = (a.step_s if a else None) or step_s.get("incident")
    add("step time (s)", sb, sa, ".2f")
    scaled = [s for s in (b, a) if s is not None and s.scaled]
    note = "scaled from the ranks that export" if scaled else ""
    add("tokens/s (job)", b.tokens_per_s if b else None, a.tokens_per_s if a else None, ",.0f", note)
    add(
        "tokens/s per GPU",
        b.tokens_per_s_per_gpu if b else None,
        a.tokens_per_s_per_gpu if a else None,
        ",.0f",
    )
    ub, ua = util.get("baseline"), util.get("incident")
    u = ua or ub
    if u is not None:
        what = f"{u.model} on {u.gpu}, dense {u.dtype} peak, recompute {u.recompute}"
        add("MFU (%)", 100 * ub.mfu if ub else None, 100 * ua.mfu if ua else None, ".1f", what)
    for key, label in (
        ("data", "data wait, slowest rank (% of step)"),
        ("communication", "exposed communication (% of step)"),
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
    if cost is not None and cost.lost_share is not None:
        rows.append(["time lost in the window", "", f"{cost.lost_minutes:.1f} min of {cost.window_minutes:.0f}",
                     f"{cost.lost_share:.0%}", "against the baseline's tokens/s per GPU"])  # fmt: skip
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
    severity = "SEV-4" if lost is None or lost < SEV3_LOST else ("SEV-3" if lost < SEV2_LOST else "SEV-2")
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
        if cost is not None and cost.lost_gpu_hours is not None and lost:
            usd = f", ${cost.lost_usd:,.0f}" if cost.lost_usd is not None else ""
            headline += (
                f": {lost:.0%} of the window's GPU time lost ({cost.lost_gpu_hours:.1f} GPU-hours{usd})"
            )
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
    return JobTerms(table, headline, breakdown, severity, prevent)


__all__ = [
    "TrainingCost",
    "cost_section",
    "efficiency_section",
    "job_terms",
    "memory_section",
    "missing_section",
    "scaling_figure",
    "scaling_section",
    "training_cost",
]
