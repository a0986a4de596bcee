"""Executed-notebook builders for the report tests: real nbformat notebooks carrying perfkit findings."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
import plotly.graph_objects as go
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from perfkit.core.findings import MIME, Finding

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
CANARY = "abc123secretvalue0123456789xyz"
XSS = "<script>alert(1)</script>"
MISSING_DCGM = "no DCGM metrics in window"


def timeseries_figure(title: str = "p95 TTFT", points: int = 120) -> dict[str, Any]:
    """A perfkit-style time series: incident line, dashed baseline, shaded window, deploy marker, SLO line."""
    xs = [T0 + timedelta(minutes=i) for i in range(points)]
    ys = [0.4 + 0.01 * (i % 7) + (2.5 if i >= points // 2 else 0.0) for i in range(points)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="incident p95"))
    fig.add_trace(go.Scatter(x=xs, y=[0.42] * points, mode="lines", name="baseline", line={"dash": "dash"}))
    fig.add_vrect(x0=xs[points // 2], x1=xs[-10], fillcolor="red", opacity=0.2, line_width=0)
    fig.add_vline(
        x=xs[points // 2 - 2], line_dash="dot", line_color="purple", annotation_text="deploy v2.3.1"
    )
    fig.add_hline(y=1.0, line_dash="dash", line_color="orange", annotation_text="SLO 1.0 s")
    fig.update_layout(title=title, xaxis_title="time", yaxis_title="seconds")
    return fig.to_plotly_json()


def bar_figure() -> dict[str, Any]:
    stages = ["queue", "prefill", "decode"]
    fig = go.Figure(
        [
            go.Bar(x=stages, y=[0.05, 2.9, 0.4], name="incident"),
            go.Bar(x=stages, y=[0.05, 0.3, 0.35], name="baseline"),
        ]
    )
    fig.update_layout(title="Per-stage p95 (s)")
    return fig.to_plotly_json()


TRIAGE_DATA: dict[str, Any] = {
    "incident": "INC-42",
    "window": {"start": "2026-11-30T04:00:00Z", "end": "2026-11-30T05:00:00Z"},
    "symptoms": [
        {"id": "post_deploy_shift", "detected": True, "evidence": {"shift_x": 7.1}},
        {"id": "ttft_high_prefill_slow", "detected": True, "evidence": {"prefill_share_frac": 0.83}},
        {"id": "gpu_low_cpu_busy", "detected": False, "evidence": {}},
    ],
    "directions": [
        {
            "id": "release_regression",
            "rank": 1,
            "score": 0.91,
            "verdict": "confirmed",
            "symptom": "post_deploy_shift",
            "verification": {"why": "change point 2 min after deploy v2.3.1"},
            "suspect_version": "v2.3.1",
        },
        {
            "id": "kv_cache_allocation",
            "rank": 2,
            "score": 0.4,
            "verdict": "inconclusive",
            "symptom": "ttft_high_prefill_slow",
            "verification": {"why": "KV-cache usage metric missing"},
            "suspect_version": None,
        },
    ],
    "missing": [MISSING_DCGM],
}

POSTMORTEM_DATA: dict[str, Any] = {
    "title": "TTFT regression after v2.3.1",
    "incident": "INC-42",
    "service": "chat-api",
    "model": "llama-3-70b",
    "status": "draft",
    "severity": "SEV-2",
    "window": {"start": "2026-11-30T04:00:00Z", "end": "2026-11-30T05:20:00Z"},
    "baseline": {"start": "2026-11-29T04:00:00Z", "end": "2026-11-29T05:20:00Z"},
    "summary": "p95 TTFT rose from 0.41 s to 3.4 s for 80 min after deploy v2.3.1.",
    "impact": {
        "columns": ["metric", "baseline", "incident", "change", "SLO"],
        "rows": [
            ["ttft_p95_s", 0.41, 3.4, "8.3x", 1.0],
            ["requests over SLO", "0.2%", "61%", "+60.8 pp", None],
        ],
    },
    "detection": "Alert TTFTHigh fired at 04:06 UTC, 6 min after impact began.",
    "trigger": "Deploy v2.3.1 at 03:58 UTC, 2 min before the change point.",
    "stages": "Prefill accounts for 83% of TTFT in the incident window (31% in the baseline).",
    "triage_checked": [
        {
            "direction": "release_regression",
            "symptom": "post_deploy_shift",
            "detected": True,
            "verdict": "confirmed",
            "why": "change point 2 min after deploy",
        },
        {
            "direction": "data_pipeline",
            "symptom": "gpu_low_cpu_busy",
            "detected": False,
            "verdict": "ruled_out",
            "why": "GPU busy",
        },
        {
            "direction": "kv_cache_allocation",
            "symptom": "ttft_high_prefill_slow",
            "detected": True,
            "verdict": "inconclusive",
            "why": "KV-cache metric missing",
        },
    ],
    "root_cause": "Release regression in v2.3.1 (chunked prefill disabled).",
    "timeline": [
        {"ts": "2026-11-30T04:06:00Z", "event": "Alert TTFTHigh firing", "source": "alertmanager"},
        {"ts": "2026-11-30T03:58:00Z", "event": "Deploy v2.3.1", "source": "events.csv"},
        {"ts": "2026-11-30T04:00:00Z", "event": "p95 TTFT breaches SLO", "source": "slo"},
    ],
    "action_items": [
        {"action": "Add a TTFT canary gate", "type": "detect", "priority": "P1", "owner": "serving"},
        {"action": "Re-enable chunked prefill", "type": "mitigate", "priority": "P0", "owner": "serving"},
    ],
    "missing": ["No DCGM metrics in window"],
}


def finding_output(finding: Finding) -> Any:
    """The display_data output ``perfkit.core.findings.record`` produces."""
    return new_output("display_data", data={MIME: finding.to_json(), "text/plain": ""})


def full_findings() -> list[Finding]:
    return [
        Finding(
            "scope",
            "Scope",
            f"INC-42 on chat-api {XSS}",
            data={"title": "Scope title", "incident": "INC-42", "service": "chat-api"},
        ),
        Finding("completeness", "Data completeness", "98% of expected samples present", status="ok"),
        Finding(
            "changes",
            "Changes in the window",
            "1 deploy 2 min before the change point",
            table={
                "columns": ["ts", "kind", "version", "detail"],
                "rows": [["2026-11-30T03:58:00Z", "deploy", "v2.3.1", f"rollout a|b {XSS}"]],
            },
            figure=timeseries_figure("TTFT and deploys"),
            figure_caption="histogram_quantile(0.95, ...) step 30s, 02:00-04:00 UTC",
            queries=[
                "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))"
            ],
        ),
        Finding(
            "baseline",
            "Baseline vs now",
            "p95 TTFT 3.4 s vs 0.41 s in the baseline (8.3x)",
            status="critical",
            figure=timeseries_figure("Baseline vs now"),
            queries=["rate(vllm:request_success_total[5m])"],
        ),
        Finding(
            "stages",
            "Per-stage latency",
            "prefill 83% of TTFT",
            status="warn",
            table={
                "columns": ["stage", "baseline_s", "incident_s"],
                "rows": [["prefill", 0.3, 2.9], ["decode", 0.35, 0.4]],
            },
            figure=bar_figure(),
        ),
        Finding("triage", "Triage", "release_regression confirmed", data=TRIAGE_DATA, missing=[MISSING_DCGM]),
        Finding(
            "gpu", "GPU state", "no GPU metrics", status="missing", missing=["no  DCGM metrics in window "]
        ),
        Finding("cost", "Cost", "12.4 GPU-hours lost", data={"gpu_hours_lost": 12.4}),
    ]


def make_notebook(
    findings: Iterable[Finding],
    *,
    papermill_params: dict[str, Any] | None = None,
    parameters_source: str = 'prometheus_url = "http://127.0.0.1:9090"\nsince = "2h"\n',
    injected_source: str | None = None,
    error: tuple[str, str] | None = None,
    durations: bool = True,
    perfkit_meta: dict[str, Any] | None = None,
) -> Any:
    """An executed notebook (nbformat v4) with one code cell per finding."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if perfkit_meta is not None:
        nb.metadata["perfkit"] = perfkit_meta
    cells = [new_markdown_cell("# Inference latency runbook")]
    params_cell = new_code_cell(parameters_source)
    params_cell.metadata["tags"] = ["parameters"]
    cells.append(params_cell)
    if injected_source is not None:
        injected = new_code_cell("# Parameters\n" + injected_source)
        injected.metadata["tags"] = ["injected-parameters"]
        cells.append(injected)
    for finding in findings:
        cells.append(new_markdown_cell(f"## {finding.title}"))
        cell = new_code_cell("perfkit.core.findings.record(finding)")
        cell.outputs = [finding_output(finding)]
        cells.append(cell)
    if error is not None:
        cells.append(new_markdown_cell("## Broken section"))
        cell = new_code_cell("raise RuntimeError()")
        cell.outputs = [
            new_output("error", ename=error[0], evalue=error[1], traceback=[f"{error[0]}: {error[1]}"])
        ]
        cells.append(cell)
    if durations:
        for i, cell in enumerate(cells):
            if cell.cell_type == "code":
                cell.metadata["papermill"] = {"duration": 0.5 + i * 0.25, "exception": False}
    nb.cells = cells
    if papermill_params is not None:
        nb.metadata["papermill"] = {
            "parameters": papermill_params,
            "start_time": "2026-11-30T05:30:00.000000",
            "end_time": "2026-11-30T05:31:10.000000",
        }
    return nb


@pytest.fixture
def write_notebook(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``write_notebook(findings, name=..., **make_notebook kwargs)`` -> path of the .ipynb."""

    def write(findings: Iterable[Finding], name: str = "inference_latency.ipynb", **kwargs: Any) -> Path:
        path = tmp_path / "nb" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(make_notebook(findings, **kwargs), path)
        return path

    return write


@pytest.fixture
def full_notebook(write_notebook: Callable[..., Path]) -> Path:
    """A complete executed runbook: every section, a postmortem model, a leaked secret, a cell error."""
    findings = [
        *full_findings(),
        Finding("postmortem", "Postmortem", "draft ready", data=POSTMORTEM_DATA, missing=[MISSING_DCGM]),
    ]
    return write_notebook(
        findings,
        papermill_params={"prometheus_token": CANARY, "prometheus_token_env": "PROM_TOKEN", "since": "2h"},
        injected_source=f'prometheus_token = "{CANARY}"\nprometheus_token_env = "PROM_TOKEN"\nsince = "2h"\n',
        error=("HTTPError", f"401 Unauthorized for http://127.0.0.1:9090 with token {CANARY}"),
        perfkit_meta={"runbook": "inference_latency", "runbook_version": "1.2.0"},
    )
