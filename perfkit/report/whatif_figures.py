"""How a what-if sweep looks (``perfkit lab whatif --plot``): one bar group per engine configuration
for TTFT and TPOT (p50 and p95, with the SLOs drawn), goodput and output throughput, and the cost of
a million output tokens; the best configuration under the SLOs is starred.

It works on plain data, the rows of the sweep's JSON (``{"set": {...}, "ttft_p50_ms": ..., "best":
bool}``): the report layer never imports ``lab``. Setting names and values reach plotly through
:func:`html.escape` (plotly renders a subset of HTML in tick labels).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perfkit.report.figures import PALETTE, SLO_COLOR

PANELS = (
    ("TTFT (ms)", ("ttft_p50_ms", "ttft_p95_ms"), "ttft"),
    ("TPOT (ms)", ("tpot_p50_ms", "tpot_p95_ms"), "tpot"),
    ("goodput (req/s) and output throughput (tok/s / 1000)", ("goodput", "output_throughput"), None),
    ("cost ($ per million output tokens)", ("usd_per_million_tokens",), None),
)
_TRACE_NAMES = {
    "ttft_p50_ms": "p50", "ttft_p95_ms": "p95", "tpot_p50_ms": "p50", "tpot_p95_ms": "p95",
    "goodput": "goodput", "output_throughput": "output tok/s / 1000", "usd_per_million_tokens": "$/M tokens",
}  # fmt: skip


def config_label(row: Mapping[str, Any]) -> str:
    """The configuration's values, ``128 / True`` (escaped; the axis title names the settings),
    starred when best."""
    setting = row.get("set") or {}
    text = " / ".join(html.escape(str(v)) for v in setting.values()) or "as recorded"
    return ("★ " if row.get("best") else "") + text


def axis_title(configs: Sequence[Mapping[str, Any]]) -> str:
    """The settings the labels list, in order (``max_num_seqs / enable_chunked_prefill``)."""
    keys = list((configs[0].get("set") or {}) if configs else {})
    return html.escape(" / ".join(str(k) for k in keys)) or "configuration"


def whatif_figure(
    configs: Sequence[Mapping[str, Any]], slo_ms: Mapping[str, float] | None = None, *, title: str = "What-if"
) -> go.Figure:
    """Four panels over the configurations (module docstring); ``slo_ms`` draws the TTFT/TPOT SLOs."""
    labels = [config_label(r) for r in configs]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[0] for p in PANELS], vertical_spacing=0.2)
    for n, (_, keys, slo_key) in enumerate(PANELS):
        row, col = n // 2 + 1, n % 2 + 1
        for j, key in enumerate(keys):
            scale = 1e-3 if key == "output_throughput" else 1.0
            values = [None if r.get(key) is None else float(r[key]) * scale for r in configs]
            colour = PALETTE[(2 * n + j) % len(PALETTE)]
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=values,
                    name=_TRACE_NAMES[key],
                    marker={"color": colour},
                    legendgroup=_TRACE_NAMES[key],
                    showlegend=n in (0, 2) or len(keys) == 1,
                ),
                row=row,
                col=col,
            )
        if slo_key and slo_ms and slo_ms.get(slo_key):
            fig.add_hline(
                y=float(slo_ms[slo_key]),
                line={"color": SLO_COLOR, "width": 1.5, "dash": "dash"},
                annotation_text=f"SLO {float(slo_ms[slo_key]):g} ms",
                annotation_font={"size": 10, "color": SLO_COLOR},
                row=row,
                col=col,
            )
    fig.update_xaxes(title_text=axis_title(configs), title_font={"size": 10}, row=2)
    fig.update_layout(
        title={"text": html.escape(title) + "<br><sup>★ best under the SLOs</sup>", "x": 0.01},
        height=720,
        barmode="group",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 70, "b": 60},
        legend={"orientation": "h", "y": -0.12},
    )
    return fig
