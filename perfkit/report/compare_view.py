"""How a before/after comparison looks: the runbook's "Did the fix work?" section and its figure.

The comparison itself is :mod:`perfkit.analyses.compare`; this module turns its result into a
finding (verdict line, status, table, figure) and says when the section was skipped.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from perfkit.analyses.compare import Comparison
from perfkit.core.findings import Finding, table_from_frame
from perfkit.report.bench_figures import TablesSection
from perfkit.report.figures import PALETTE
from perfkit.report.markdown import md_escape
from perfkit.report.sections import Section

KEY, TITLE = "verify_fix", "Did the fix work? Before and after"
STATUS = {
    "worked": "ok",
    "within-noise": "warn",
    "mixed": "warn",
    "regressed": "critical",
    "unusable": "missing",
}
COLORS = {"improved": PALETTE[2], "regressed": "#d62728", "within noise": "#444444"}
CAPTION = (
    "Each metric's change, after against before, in % of the before value; the bar is its band: the "
    "change noise alone can make (3 standard errors of the difference, from each side's own variation, "
    "or the gate's relative and absolute floors, whichever is wider). Beyond the bar: improved or regressed."
)


class Skipped:
    """A section that did not run because its input was not given: it says so and why, and records
    no finding (a runbook without an after-fix window has nothing to put in the postmortem)."""

    def __init__(self, title: str, why: str) -> None:
        self.title, self.why = title, why

    def __repr__(self) -> str:
        return f"{self.title}: skipped: {self.why}"

    def _ipython_display_(self) -> None:
        from IPython.display import Markdown, display

        display(Markdown(f"**\\[SKIPPED\\] {md_escape(self.title)}** — {md_escape(self.why)}"))


def skipped_section(why: str) -> Skipped:
    return Skipped(TITLE, why)


def compare_section(result: Comparison, *, after_source: str = "") -> Section:
    """The finding of a comparison: the headline, one row per metric, the change-versus-band figure."""
    table = result.table()
    summary = result.headline()
    if result.symptom:
        summary += f" (symptom {result.symptom}: {result.symptom_why})"
    data = result.as_dict()
    if after_source:
        data["after_source"] = after_source
    fig = change_figure(result)
    notes = list(dict.fromkeys(result.notes))
    missing = [f"verify_fix: {r}" for r in result.reasons]
    f = Finding(KEY, TITLE, summary, STATUS[result.overall], data, table_from_frame(table),
                fig.to_plotly_json() if fig is not None else None, CAPTION, missing,
                [*result.before.queries, *result.after.queries])  # fmt: skip
    return TablesSection(f, table, fig, notes=notes)


def change_figure(result: Comparison) -> Any:
    """Change in % per metric (dots) with its band (bars around zero); None when nothing has both sides."""
    rows = [r for r in result.rows if r.change_pct is not None and r.band is not None and r.before]
    if not rows:
        return None
    labels = [r.label + (" ★" if r.metric == result.symptom else "") for r in rows][::-1]
    bands = [abs(r.band / r.before) * 100 if r.band is not None and r.before else 0.0 for r in rows][::-1]
    fig = go.Figure()
    for sign, legend in ((1, True), (-1, False)):  # two bars from zero: both renderers centre the band on 0
        fig.add_trace(
            go.Bar(y=labels, x=[sign * b for b in bands], orientation="h", name="noise band",
                   marker={"color": "#dcdcdc"}, showlegend=legend, hoverinfo="skip")
        )  # fmt: skip
    for status, color in COLORS.items():
        pick = [r for r in rows[::-1] if r.status == status]
        if pick:
            fig.add_trace(
                go.Scatter(
                    y=[r.label + (" ★" if r.metric == result.symptom else "") for r in pick],
                    x=[r.change_pct for r in pick],
                    mode="markers",
                    marker={"color": color, "size": 11},
                    name=status,
                    hovertemplate="%{y}: %{x:+.1f} %<extra></extra>",
                )
            )
    fig.add_vline(x=0, line_color="#444", line_width=1)
    fig.update_layout(
        title={"text": f"After against before: {result.overall}", "x": 0.01},
        height=max(300, 26 * len(rows) + 120),
        margin={"l": 150, "r": 20, "t": 50, "b": 40},
        template="plotly_white",
        xaxis_title="change (%)",
        legend={"orientation": "h", "y": -0.15},
        barmode="overlay",
    )
    return fig
