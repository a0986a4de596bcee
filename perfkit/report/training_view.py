"""How the training runbook's sections look (profiler traces, efficiency, memory, scaling) in the
job's own terms; the training cost and the postmortem's Impact are
:mod:`perfkit.report.training_impact`'s.

The numbers come from :mod:`perfkit.traces` (HTA's breakdown per rank), :mod:`perfkit.analyses.mfu`,
:mod:`perfkit.analyses.memory` and :mod:`perfkit.analyses.scaling`;
:mod:`perfkit.app.runbooks.training` wires them. Here they become findings (verdict line, status,
table, figure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import polars as pl

from perfkit.core.findings import Finding, table_from_frame
from perfkit.report.bench_figures import TablesSection
from perfkit.report.figures import PALETTE
from perfkit.report.sections import Section

SIDES = ("baseline", "incident")
COMPONENT_COLORS = {
    "compute": PALETTE[0],
    "communication": PALETTE[1],
    "data": "#d62728",
    "idle": "#c7c7c7",
    "memory": PALETTE[2],
}


def _pct(v: float | None, scale: float = 100.0) -> str:
    return "n/a" if v is None else f"{v * scale:.0f} %"


def num_text(v: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if v is None else format(v, fmt)


def ratio_text(a: float | None, b: float | None) -> str:
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
    labels = [f"{n}: {s.gpus} GPUs, {num_text(s.tokens_per_s_per_gpu)} tokens/s per GPU" for n, s in pairs]
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


__all__ = [
    "SIDES",
    "num_text",
    "ratio_text",
    "checklist_section",
    "efficiency_section",
    "memory_section",
    "missing_section",
    "scaling_figure",
    "scaling_section",
    "with_checklist",
]
