"""How a load-test result looks: its words, tables and figures, and the postmortem model of a
baseline capture.

Everything here works on plain data: a ``perfkit.bench/1`` result document (a dict), the points of
a sweep and its knee (``perfkit.loadgen.sweep.find_knee``), a gate verdict as its JSON
(``Verdict.as_dict()``). The report layer never imports ``loadgen``: ``perfkit.app.runbooks.baseline``
reads the files and hands the data over.

Evidence text (a model name, a label, a URL) never reaches a figure unescaped: plotly renders a
subset of HTML in titles and tick labels, so such text goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from perfkit.report.figures import PALETTE, SLO_COLOR
from perfkit.report.markdown import md_escape
from perfkit.report.sections import Section

LATENCIES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL (per token)", "itl_chunk": "ITL (per chunk)", "e2el": "E2E"}  # fmt: skip
PERCENTILES = ("50", "90", "95", "99", "99.9")
STATUS_COLOURS = {"regressed": "#d62728", "improved": "#2ca02c", "pass": "#1f77b4", "no-data": "#7f7f7f"}
GREY, KNEE_COLOUR = "#7f7f7f", "#2ca02c"
BAND_FILL = "rgba(31, 119, 180, 0.12)"
MAX_POINTS = 5000
"""Most requests drawn one by one in the per-request figure (a browser stays responsive)."""
HEADLINE_METRICS = (
    "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_tpot_ms", "p99_e2el_ms",
    "output_throughput", "request_throughput", "errors.rate", "goodput.attainment",
)  # fmt: skip
"""The gated metrics a reader looks at first (the impact table, the history's panels)."""


@dataclass
class TablesSection(Section):
    """A :class:`Section` that shows more tables (each with a caption) and notes under its own.
    The finding records the main table; the others belong in the finding's ``data``."""

    tables: list[tuple[str, pl.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # plain text, shown under the tables

    def _ipython_display_(self) -> None:
        from IPython.display import Markdown, display

        from perfkit.core.findings import record

        f = self.finding
        self._show_header()
        for caption, table in [("", self.table), *self.tables]:
            if table is None or not table.height:
                continue
            if caption:
                display(Markdown(f"*{md_escape(caption)}*"))
            frame = table.to_pandas()
            styler = self.style(frame) if self.style and not caption else frame.style.hide(axis="index")
            display(styler.format(precision=4, escape="html", na_rep="–"))
        for note in self.notes:
            display(Markdown(md_escape(note)))
        for fig in [self.figure, *self.extra_figures]:
            if fig is not None:
                fig.show()
        record(f)
        for extra in self.extra_findings:
            record(extra)


# -- numbers and words ------------------------------------------------------------------------------


def number(value: Any) -> float | None:
    """``value`` as a finite float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def ms(value: Any) -> str:
    """Milliseconds for reading: ``51.5 ms``, ``1.23 s``, ``–``."""
    v = number(value)
    if v is None:
        return "–"
    return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g} ms"


def _num(value: Any) -> str:
    v = number(value)
    return "–" if v is None else f"{v:.4g}"


def _pct(value: Any) -> str:
    v = number(value)
    return "–" if v is None else f"{v:.1%}"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any, limit: int = 120) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _frame(data: dict[str, list[Any]], text: Sequence[str]) -> pl.DataFrame:
    """A frame whose ``text`` columns are strings and the others floats."""
    return pl.DataFrame(data, schema={k: pl.Utf8 if k in text else pl.Float64 for k in data})


def percentile(doc: Mapping[str, Any], metric: str, q: str) -> float | None:
    """``percentiles.<metric>_ms.<q>``, else the vLLM field (``median_``/``p99_``) when there is one."""
    v = number(_dict(_dict(doc.get("percentiles")).get(f"{metric}_ms")).get(q))
    if v is None and q in ("50", "99"):
        v = number(doc.get(f"{'median' if q == '50' else 'p99'}_{metric}_ms"))
    return v


def load_text(doc: Mapping[str, Any]) -> str:
    """The load in words: ``concurrency 8, 200 requests, 128 → 16 tokens, completions``."""
    load = _dict(doc.get("load"))
    parts = [_text(load.get("shape") or "unknown shape", 20)]
    if load.get("concurrency") is not None:
        parts[0] = f"concurrency {_text(load['concurrency'], 12)}"
    if number(load.get("rate")):
        parts.append(f"{number(load['rate']):g} req/s {_text(load.get('arrival') or '', 12)}".strip())
    replay = _dict(load.get("replay"))
    if replay:
        parts.append(f"replay of {_text(replay.get('source'), 60)} x{_text(replay.get('time_scale'), 8)}")
    if load.get("num_requests") is not None:
        parts.append(f"{_text(load['num_requests'], 12)} requests")
    if load.get("prompt_tokens") is not None or load.get("output_tokens") is not None:
        parts.append(
            f"{_text(load.get('prompt_tokens') or '?', 10)} → {_text(load.get('output_tokens') or '?', 10)} tokens"
        )
    if load.get("endpoint"):
        parts.append(_text(load["endpoint"], 20))
    return ", ".join(parts)


def failures_text(doc: Mapping[str, Any]) -> str:
    """``3 of 200 requests FAILED (1.5%: http_5xx 3)`` or ``all 200 requests completed``."""
    completed, failed = int(number(doc.get("completed")) or 0), int(number(doc.get("failed")) or 0)
    sent = completed + failed
    if not failed:
        return f"all {sent} requests completed"
    kinds = _dict(_dict(doc.get("errors")).get("by_kind"))
    by_kind = ", ".join(f"{_text(k, 20)} {int(v)}" for k, v in kinds.items() if number(v))
    return f"{failed} of {sent} requests FAILED ({failed / sent:.1%}{': ' + by_kind if by_kind else ''})"


def headline(doc: Mapping[str, Any]) -> str:
    """One line, failures and validity first, then the numbers a reader compares."""
    parts = [failures_text(doc)]
    validity = _dict(doc.get("validity"))
    if validity.get("valid") is False:
        reasons = "; ".join(_text(r, 200) for r in validity.get("reasons") or []) or "no reason given"
        parts.append(f"INVALID run: {reasons}")
    if doc.get("interrupted") is True:
        parts.append("interrupted before the plan's end")
    pct = {(m, q): ms(percentile(doc, m, q)) for m in ("ttft", "itl") for q in ("50", "99")}
    parts.append(
        f"TTFT p50 {pct['ttft', '50']} p99 {pct['ttft', '99']}, ITL p50 {pct['itl', '50']} p99 {pct['itl', '99']}"
    )
    if number(doc.get("request_throughput")) is not None:
        parts.append(
            f"{_num(doc['request_throughput'])} req/s, {_num(doc.get('output_throughput'))} output tok/s"
        )
    attainment = number(_dict(doc.get("goodput")).get("attainment"))
    if attainment is not None:
        parts.append(f"SLO attainment {attainment:.1%}")
    return "; ".join(parts)


def client_server_text(doc: Mapping[str, Any]) -> str:
    """``TTFT 51.9 ms against 50.5 ms; ...`` (client, then server means), each disagreement said."""
    return "; ".join(
        f"{_text(r.get('metric'), 10).upper()} {ms(r.get('client_mean_ms'))} against {ms(r.get('server_mean_ms'))}"
        + (
            " (they disagree: time spent outside the engine: network, gateway, client)"
            if r.get("disagree")
            else ""
        )
        for r in doc.get("client_vs_server") or []
        if isinstance(r, Mapping)
    )


def status_of(doc: Mapping[str, Any]) -> str:
    """critical for an invalid run, warn for failures or an interrupted run, else ok."""
    if _dict(doc.get("validity")).get("valid") is False:
        return "critical"
    return "warn" if number(doc.get("failed")) or doc.get("interrupted") is True else "ok"


# -- tables -----------------------------------------------------------------------------------------


def latency_table(doc: Mapping[str, Any]) -> pl.DataFrame:
    """Mean and percentiles (ms) of every latency the result has."""
    data: dict[str, list[Any]] = {"metric": [], "mean ms": [], **{f"p{q} ms": [] for q in PERCENTILES}}
    for key, label in LATENCIES.items():
        values = [number(doc.get(f"mean_{key}_ms")), *(percentile(doc, key, q) for q in PERCENTILES)]
        if any(v is not None for v in values):
            for column, v in zip(data, [label, *values], strict=True):
                data[column].append(v)
    return _frame(data, ["metric"])


def load_table(doc: Mapping[str, Any]) -> pl.DataFrame:
    """Throughput, errors, goodput and load fidelity: what the latencies were measured under."""
    load, gp = _dict(doc.get("load")), _dict(doc.get("goodput"))
    lag, cal = _dict(load.get("schedule_lag_ms")), _dict(_dict(doc.get("validity")).get("calibration"))
    rows = [
        ("load", load_text(doc), ""),
        ("requests completed / failed", f"{doc.get('completed')} / {doc.get('failed')}", ""),
        ("error rate", _pct(_dict(doc.get("errors")).get("rate")), ""),
        ("request throughput", _num(doc.get("request_throughput")), "req/s"),
        ("output throughput (peak)", f"{_num(doc.get('output_throughput'))} ({_num(doc.get('max_output_tokens_per_s'))})", "tok/s"),
        ("tokens per chunk (mean)", _num(_dict(doc.get("tokens_per_chunk")).get("mean")), ""),
        ("requested / achieved rate", f"{_num(load.get('requested_rate'))} / {_num(load.get('achieved_rate'))}", "req/s"),
        ("schedule lag p90 / max", f"{_num(lag.get('90'))} / {_num(lag.get('max'))}", "ms"),
        ("run duration", _num(doc.get("duration")), "s"),
    ]  # fmt: skip
    if gp:
        slo = ", ".join(f"{_text(k, 10)} ≤ {_num(v)} ms" for k, v in _dict(gp.get("slo_ms")).items())
        rows.append(("goodput", f"{_num(gp.get('requests_per_s'))} ({slo})", "req/s"))
        rows.append(("SLO attainment", f"{_pct(gp.get('attainment'))} of {gp.get('judged')} judged", ""))
    if number(doc.get("token_mismatches")):
        rows.append(("client/server token count mismatches", str(doc.get("token_mismatches")), "requests"))
    overhead = f"{_num(cal.get('overhead_ttft_ms'))} / {_num(cal.get('overhead_itl_ms'))}"
    rows.append(("client overhead TTFT / ITL", overhead if cal else "not calibrated", "ms" if cal else ""))
    return _frame({k: [str(r[i]) for r in rows] for i, k in enumerate(("measure", "value", "unit"))}, ["measure", "value", "unit"])  # fmt: skip


def beside_metrics_table(doc: Mapping[str, Any], base: Any) -> pl.DataFrame:
    """The bench result's headline numbers beside the server's in the baseline and incident windows
    (``base``: a :class:`~perfkit.analyses.baseline.BaselineComparison`, or None)."""

    def server(signal: str, q: float) -> list[float | None]:
        return [v * 1000 if base and (v := base.q(side, signal, q)) is not None else None for side in SIDES]

    def rate(name: str) -> list[float | None]:
        return [number(base.rates.get(side, {}).get(name)) if base else None for side in SIDES]

    rows: list[tuple[str, str, float | None, list[float | None]]] = []
    for key, signal, label in (("ttft", "ttft", "TTFT"), ("tpot", "tpot", "TPOT"), ("itl", "itl", "ITL"), ("e2el", "e2e", "E2E")):  # fmt: skip
        for q in ("50", "99"):
            bench, windows = percentile(doc, key, q), server(signal, int(q) / 100)
            if bench is not None or any(v is not None for v in windows):
                rows.append((f"{label} p{q}", "ms", bench, windows))
    rows.append(
        ("request throughput", "req/s", number(doc.get("request_throughput")), rate("requests_per_s"))
    )
    rows.append(
        ("output throughput", "tok/s", number(doc.get("output_throughput")), rate("generated_tokens_per_s"))
    )
    errors = [100 * e / (e + r) if e is not None and r else None for e, r in zip(rate("errors_per_s"), rate("requests_per_s"), strict=True)]  # fmt: skip
    err = number(_dict(doc.get("errors")).get("rate"))
    rows.append(("error rate", "%", 100 * err if err is not None else None, errors))
    gp = _dict(doc.get("goodput"))
    if gp:
        attainment = number(gp.get("attainment"))
        rows.append(("goodput", "req/s", number(gp.get("requests_per_s")), [None, None]))
        rows.append(("SLO attainment (the bench's SLOs)", "%", 100 * attainment if attainment is not None else None, [None, None]))  # fmt: skip
    data: dict[str, list[Any]] = {
        "metric": [r[0] for r in rows],
        "unit": [r[1] for r in rows],
        "bench": [r[2] for r in rows],
    }
    data |= {f"{side} window": [r[3][i] for r in rows] for i, side in enumerate(SIDES)}
    return _frame(data, ["metric", "unit"])


SIDES = ("baseline", "incident")


def verdict_table(verdict: Mapping[str, Any]) -> pl.DataFrame:
    """The gate's rows as ``perfkit gate`` prints them, worst first; ``why`` says why a row was not judged."""
    rows = [m for m in verdict.get("metrics") or [] if isinstance(m, Mapping)]
    columns = {"metric": "metric", "status": "status", "unit": "unit", "new": "new", "history median": "median",
               "change %": "change_pct", "band": "band", "band from": "band_from", "noise": "noise", "noise from": "noise_from",
               "limit": "limit", "why": "why"}  # fmt: skip
    text = ("metric", "status", "unit", "band from", "noise from", "why")
    data = {t: [_text(m.get(k) or "", 60) if t in text else number(m.get(k)) for m in rows] for t, k in columns.items()}  # fmt: skip
    data["change %"] = [None if (v := number(x)) is None else round(v, 1) for x in data["change %"]]
    frame = _frame(data, text)
    return frame.insert_column(11, pl.Series("runs", [int(number(m.get("n")) or 0) for m in rows], pl.Int64))


VERDICT_STYLE = {"regressed": "background-color: #fde2e1", "improved": "background-color: #e3f4e1", "no-data": "color: #6b7280"}  # fmt: skip


def verdict_style(frame: Any) -> Any:  # pandas Styler: colour each gate row by its status
    return frame.style.hide(axis="index").apply(
        lambda row: [VERDICT_STYLE.get(row.get("status"), "")] * len(row), axis=1
    )


def points_table(points: Sequence[Mapping[str, Any]], knee: Mapping[str, Any] | None) -> pl.DataFrame:
    """A sweep's load levels, lowest first, the knee and the first saturated level marked."""
    top = "knee" if _dict(knee).get("next") else "knee (or above)"
    mark = {id(_dict(knee).get("point")): top, id(_dict(knee).get("next")): "saturated"}
    rows = sorted(points, key=lambda p: number(p.get("offered_rate")) or 0)
    cols = (
        "offered_rate",
        "achieved_rate",
        "p50_ttft_ms",
        "p99_ttft_ms",
        "median_itl_ms",
        "output_throughput",
    )
    data: dict[str, list[Any]] = {c: [number(p.get(c)) for p in rows] for c in cols}
    data["error %"] = [100 * e if (e := number(p.get("error_rate"))) is not None else None for p in rows]
    data["valid"] = ["yes" if p.get("valid") is not False else "NO" for p in rows]
    data[""] = [mark.get(id(p), "") for p in rows]
    return _frame(data, ["valid", ""])


HISTORY_COLUMNS = {"TTFT p50 ms": "median_ttft_ms", "TTFT p99 ms": "p99_ttft_ms", "ITL p50 ms": "median_itl_ms",
                   "ITL p99 ms": "p99_itl_ms", "req/s": "request_throughput", "out tok/s": "output_throughput"}  # fmt: skip


def history_table(runs: Sequence[tuple[str, str, Mapping[str, str], Mapping[str, Any]]]) -> pl.DataFrame:
    """One row a run; ``runs``: (label, id or file, labels, document), oldest first, the new one last."""
    data: dict[str, list[Any]] = {
        "run": [r[0] for r in runs],
        "id": [_text(r[1], 60) for r in runs],
        "started (UTC)": [
            str(_dict(r[3].get("meta")).get("started") or "")[:19].replace("T", " ") for r in runs
        ],
        "labels": [_text(", ".join(f"{k}={v}" for k, v in r[2].items()), 80) for r in runs],
    }
    data |= {title: [number(r[3].get(key)) for r in runs] for title, key in HISTORY_COLUMNS.items()}
    data["error %"] = [100 * (number(_dict(r[3].get("errors")).get("rate")) or 0) for r in runs]
    return _frame(data, ["run", "id", "started (UTC)", "labels"])


# -- figures ----------------------------------------------------------------------------------------


def fig_json(fig: go.Figure | None) -> dict[str, Any] | None:
    return fig.to_plotly_json() if fig is not None else None


def _layout(fig: go.Figure, title: str, *, height: int = 380) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        height=height,
        margin={"l": 60, "r": 20, "t": 70, "b": 50},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.18},
        hovermode="closest",
    )
    return fig


def _line(x: list[Any], y: list[Any], name: str, colour: str, **style: Any) -> go.Scatter:
    mode = style.pop("mode", "lines+markers")
    return go.Scatter(
        x=x, y=y, name=name, mode=mode, line={"color": colour, **style}, marker={"color": colour}
    )


def requests_figure(series: Mapping[str, Sequence[Any]], *, sampled: int | None = None) -> go.Figure:
    """TTFT and E2E latency of each request by when it was sent; failed requests as red crosses at
    the bottom. ``series``: ``sent_s``, ``ttft_ms``, ``e2el_ms``, ``error`` (its kind, or None)."""
    sent, errors = list(series["sent_s"]), list(series["error"])
    ok = [i for i, e in enumerate(errors) if e is None]
    bad = [i for i, e in enumerate(errors) if e is not None]
    fig = go.Figure()
    for name, key, colour in (("E2E latency", "e2el_ms", PALETTE[1]), ("TTFT", "ttft_ms", PALETTE[0])):
        values = list(series[key])
        marker = {"size": 4, "color": colour, "opacity": 0.6}
        fig.add_trace(go.Scatter(x=[sent[i] for i in ok], y=[values[i] for i in ok], mode="markers", name=name, marker=marker))  # fmt: skip
    if bad:
        floor = min((v for v in series["ttft_ms"] if v is not None and v > 0), default=1.0)
        marker = {"size": 7, "color": SLO_COLOR, "symbol": "x"}
        text = [html.escape(str(errors[i])[:20]) for i in bad]
        fig.add_trace(go.Scatter(x=[sent[i] for i in bad], y=[floor] * len(bad), mode="markers", name=f"failed ({len(bad)})", text=text, marker=marker))  # fmt: skip
    drawn = f" (every {sampled}th request drawn, and the failures)" if sampled else ""
    fig = _layout(fig, f"Each request's TTFT and E2E latency by when it was sent{drawn}")
    fig.update_xaxes(title_text="sent (s from the run's start)")
    fig.update_yaxes(title_text="ms", type="log")
    return fig


def curve_figure(points: Sequence[Mapping[str, Any]], knee: Mapping[str, Any] | None) -> go.Figure:
    """Latency against offered load (top) and achieved against offered rate (bottom), with the
    knee, the first saturated level and the two cut-offs that decide saturation."""
    pts = sorted((p for p in points if number(p.get("offered_rate"))), key=lambda p: p["offered_rate"])
    x = [p["offered_rate"] for p in pts]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12, row_heights=[0.6, 0.4])
    for key, name, colour in (("p99_ttft_ms", "TTFT p99", PALETTE[1]), ("p50_ttft_ms", "TTFT p50", PALETTE[0]), ("median_itl_ms", "ITL p50", PALETTE[2])):  # fmt: skip
        ys = [number(p.get(key)) for p in pts]
        if any(v is not None for v in ys):
            fig.add_trace(_line(x, ys, name, colour), row=1, col=1)
    fig.add_trace(
        _line(x, [number(p.get("achieved_rate")) for p in pts], "achieved req/s", PALETTE[3]), row=2, col=1
    )
    limits = _dict(_dict(knee).get("limits"))
    frac, growth = number(limits.get("achieved_min_frac")), number(limits.get("p99_ttft_max_growth"))
    if x:  # drawn through every level: a straight segment between the ends bends on a log axis
        fig.add_trace(_line(x, x, "achieved = offered", GREY, dash="dot", mode="lines"), row=2, col=1)
        if frac:
            low = [frac * v for v in x]
            fig.add_trace(_line(x, low, f"{frac:.0%} of offered", SLO_COLOR, dash="dash", width=1, mode="lines"), row=2, col=1)  # fmt: skip
    base = next((v for p in pts if (v := number(p.get("p99_ttft_ms")))), None)
    if base and growth and x:
        limit = [growth * base] * 2
        fig.add_trace(_line([x[0], x[-1]], limit, f"{growth:g}x the lowest load's p99", SLO_COLOR, dash="dash", width=1, mode="lines"), row=1, col=1)  # fmt: skip
    point, nxt = _dict(_dict(knee).get("point")), _dict(_dict(knee).get("next"))
    if number(point.get("offered_rate")):  # a trace, not an annotation: both renderers place it on a log axis
        r = point["offered_rate"]
        fig.add_vline(x=r, line={"color": KNEE_COLOUR, "width": 2, "dash": "dot"})
        name = f"knee {r:.3g} req/s" + ("" if nxt else " (or above: never saturated)")
        marker = {"size": 14, "color": KNEE_COLOUR, "symbol": "circle-open", "line": {"width": 2}}
        fig.add_trace(go.Scatter(x=[r], y=[number(point.get("p99_ttft_ms"))], name=name, mode="markers", marker=marker), row=1, col=1)  # fmt: skip
    if number(nxt.get("offered_rate")):
        marker = {"size": 13, "color": SLO_COLOR, "symbol": "x"}
        fig.add_trace(go.Scatter(x=[nxt["offered_rate"]], y=[number(nxt.get("p99_ttft_ms"))], name="first saturated level", mode="markers", marker=marker), row=1, col=1)  # fmt: skip
    fig = _layout(fig, "Latency against load: the knee is the last level before saturation", height=520)
    fig.update_xaxes(
        type="log" if len(x) > 1 and x[-1] / x[0] >= 4 else "linear",
        tickvals=x,
        ticktext=[f"{v:.3g}" for v in x],
    )
    fig.update_xaxes(title_text="offered load (req/s)", row=2, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="req/s", row=2, col=1)
    return fig


@dataclass
class Panel:
    """One metric's history for :func:`history_figure`: earlier values by run label, the new value,
    and the gate's judgement of it (``row``: one entry of a verdict's ``metrics``)."""

    metric: str
    unit: str
    history: list[tuple[str, float]]
    new: float | None
    row: Mapping[str, Any] = field(default_factory=dict)


def history_figure(panels: Sequence[Panel], *, new_label: str = "new") -> go.Figure:
    """A small plot per metric: the history (grey), the new run (a diamond coloured by the gate's
    status), the history's median (dotted), the band the gate allows around it (shaded), the limit (dashed)."""
    panels = [p for p in panels if p.history or p.new is not None]
    cols = 2 if len(panels) > 1 else 1
    rows = max(1, math.ceil(len(panels) / cols))
    titles = [html.escape(f"{p.metric} ({p.unit})" if p.unit else p.metric) for p in panels]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles or None, vertical_spacing=0.5 / rows, horizontal_spacing=0.1)  # fmt: skip
    for i, p in enumerate(panels):
        at = {"row": i // cols + 1, "col": i % cols + 1}
        labels = [html.escape(label) for label, _ in p.history]
        fig.add_trace(_line(labels, [v for _, v in p.history], "history", GREY), **at)
        status = str(p.row.get("status") or "no-data")
        if p.new is not None:
            marker = {"size": 12, "color": STATUS_COLOURS.get(status, GREY), "symbol": "diamond"}
            fig.add_trace(
                go.Scatter(x=[new_label], y=[p.new], mode="markers", name=status, marker=marker), **at
            )
        median, band, limit = (number(p.row.get(k)) for k in ("median", "band", "limit"))
        if median is not None and band is not None:
            fig.add_hrect(y0=median - band, y1=median + band, fillcolor=BAND_FILL, line_width=0, **at)
            fig.add_hline(y=median, line={"color": GREY, "dash": "dot", "width": 1}, **at)
        if limit is not None:
            fig.add_hline(y=limit, line={"color": SLO_COLOR, "dash": "dash", "width": 1}, **at)
    title = "Each gated metric's history: the new run (◆) against the band the gate allows"
    fig = _layout(fig, title, height=max(320, 240 * rows))
    fig.update_layout(showlegend=False)
    fig.update_xaxes(type="category")
    return fig


# -- the postmortem model of a baseline capture --------------------------------------------------------


def capture_model(
    doc: Mapping[str, Any],
    verdict: Mapping[str, Any],
    knee: Mapping[str, Any] | None,
    *,
    ident: str = "",
    baselines: Sequence[Mapping[str, Any]] = (),
    added: str | None = None,
    timeline: Sequence[Mapping[str, str]] = (),
    missing: Sequence[str] = (),
) -> dict[str, Any]:
    """The postmortem's document model (:class:`perfkit.core.findings.PostmortemModel`) of one
    load-test result judged by the gate (``baselines``: the documents it was judged against)."""
    meta, load, validity = _dict(doc.get("meta")), _dict(doc.get("load")), _dict(doc.get("validity"))
    overall = str(verdict.get("verdict") or "unusable")
    model, target = _text(meta.get("model") or "model n/a", 80), _text(meta.get("target") or "the target", 120)  # fmt: skip
    start, end = str(meta.get("started") or ""), _plus(meta.get("started"), doc.get("duration"))
    used = sorted(s for b in baselines if isinstance(s := _dict(b.get("meta")).get("started"), str))
    rows = [m for m in verdict.get("metrics") or [] if isinstance(m, Mapping) and m.get("status") != "no-data"]  # fmt: skip
    impact = [
        [_text(m.get("metric"), 40), _num(m.get("median")), _num(m.get("new")),
         f"{m['change_pct']:+.1f} %" if number(m.get("change_pct")) is not None else "–",
         _num(m.get("limit")), _text(m.get("status"), 12)]
        for m in rows
        if m.get("status") in ("regressed", "improved") or m.get("metric") in HEADLINE_METRICS
    ]  # fmt: skip
    cal = _dict(validity.get("calibration"))
    measured = "valid" if validity.get("valid") is not False else "INVALID: " + "; ".join(map(str, validity.get("reasons") or []))  # fmt: skip
    measured += (
        f"; the client's own overhead (calibration) TTFT +{_num(cal.get('overhead_ttft_ms'))} ms, ITL +{_num(cal.get('overhead_itl_ms'))} ms"
        if cal else "; not calibrated: the client's own overhead was not measured"
    )  # fmt: skip
    gaps = client_server_text(doc)
    knee_text = f"Knee: {_text(_dict(knee).get('reason'), 300)}." if knee else "No sweep was run: the knee is not known."  # fmt: skip
    regressed = [m for m in rows if m.get("status") == "regressed"]
    if overall == "regress":
        worse = "; ".join(
            f"{_text(m.get('metric'), 40)} {_num(m.get('new'))} against a median of {_num(m.get('median'))} "
            f"(limit {_num(m.get('limit'))}, band from {_text(m.get('band_from'), 12)})"
            for m in regressed
        )
        root = f"Regressed past the gate's band: {worse}. Find what changed since the newest baseline (its labels: version, config, hardware)."  # fmt: skip
    elif overall == "pass":
        root = "No regression: every gated metric is within its band around the history's median."
    else:
        root = "Not judged: " + "; ".join(_text(r, 300) for r in verdict.get("reasons") or ["no reason given"]) + "."  # fmt: skip
    actions = []
    for when, action, kind, priority, owner in (
        (overall == "regress", "block the release; rerun the bench to rule out noise, then bisect the change", "mitigate", "P0", "release owner"),
        (validity.get("valid") is False, "rerun with less load per client process: an invalid run measured the client", "process", "P0", "bench owner"),
        (bool(number(doc.get("failed"))), f"find why requests failed: {failures_text(doc)}", "mitigate", "P1", "service owner"),
        (not cal, "calibrate before keeping a baseline: `perfkit bench --self-check` at this load", "process", "P2", "bench owner"),
        (not knee, "run a sweep to know the knee: `perfkit bench --sweep LOW:HIGH`", "detect", "P2", "capacity owner"),
        (overall == "pass" and not added, "keep this run as a baseline: `perfkit baseline add RESULT --store DIR --label version=...`", "process", "P2", "release owner"),
    ):  # fmt: skip
        if when:
            actions.append({"action": action, "type": kind, "priority": priority, "owner": owner})
    events = [dict(e) for e in timeline]
    events.append({"ts": end or start, "event": f"release gate: {_text(verdict.get('summary'), 200)}", "source": "gate"})  # fmt: skip
    if added:
        events.append({"ts": end or start, "event": f"added to the store as {added}", "source": "store"})
    return {
        "title": f"Baseline capture: {model}, gate {overall}",
        "incident": _text(added or ident or f"bench {start[:19]}", 80),
        "service": target,
        "model": model,
        "status": "draft",
        "severity": {"regress": "blocks the release", "pass": "none"}.get(overall, "not judged"),
        "window": {"start": start, "end": end} if start and end else {},
        "baseline": {"start": used[0], "end": used[-1]} if used else {},
        "summary": f"perfkit bench measured {model} at {target} under {load_text(doc)}: {headline(doc)}. "
        f"Release gate: {_text(verdict.get('summary'), 400)}. {knee_text}",
        "impact": {"columns": ["metric", "history median", "this run", "change", "limit", "status"], "rows": impact},
        "detection": f"Measured by perfkit {_text(meta.get('perfkit_version'), 20)}: {measured}.",
        "trigger": f"Load: {load_text(doc)}; achieved {_num(load.get('achieved_rate'))} req/s"
        + (f" of {_num(load.get('requested_rate'))} requested." if load.get("requested_rate") else "."),
        "stages": f"Mean latency at the client against the server's histograms: {gaps}." if gaps else "The server's /metrics were not scraped.",
        "triage_checked": [],
        "root_cause": root,
        "timeline": sorted(events, key=lambda e: str(e.get("ts"))),
        "action_items": actions,
        "missing": list(dict.fromkeys(missing)),
        "gpu": None,
        "cost": None,
    }  # fmt: skip


def _plus(start: Any, seconds: Any) -> str:
    """``start`` (ISO 8601) plus ``seconds``, as ISO 8601 UTC; "" when either is unreadable."""
    try:
        t = datetime.fromisoformat(str(start).replace("Z", "+00:00")) + timedelta(seconds=number(seconds) or 0.0)  # fmt: skip
    except (ValueError, OverflowError):
        return ""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
