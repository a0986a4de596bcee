"""render_postmortem: what an incident owner gets from an executed notebook."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from plotly.offline import get_plotlyjs
from report_fixtures import CANARY, MISSING_DCGM, POSTMORTEM_DATA, TRIAGE_DATA, XSS, full_findings

from perfkit.core.findings import Finding
from perfkit.errors import ConfigError
from perfkit.report import render_postmortem
from perfkit.report.markdown import md_table

XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"  # as the HTML writes it
XSS_MD = "&lt;script\\>alert(1)&lt;/script\\>"  # as the Markdown writes it: no tag can open
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def rendered(full_notebook: Path, tmp_path: Path) -> dict[str, Path]:
    return render_postmortem(full_notebook, tmp_path / "out")


def read(paths: dict[str, Path], name: str) -> str:
    return paths[name].read_text(encoding="utf-8")


def md_section(md: str, heading: str) -> str:
    """The text of one ``## heading`` section of the Markdown postmortem."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", md, re.S | re.M)
    assert match, f"no section {heading!r}"
    return match.group(1)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_writes_every_output(rendered: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert rendered["markdown"] == out / "postmortem.md"
    assert rendered["html"] == out / "postmortem.html"
    assert rendered["findings"] == out / "findings.json"
    # one PNG per finding that has a figure, and only those
    assert sorted(k for k in rendered if k.startswith("figure:")) == [
        "figure:baseline",
        "figure:changes",
        "figure:stages",
    ]
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        "baseline.png",
        "changes.png",
        "stages.png",
    ]
    for key in ("baseline", "changes", "stages"):
        data = rendered[f"figure:{key}"].read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 10_000  # a drawn chart, not an empty canvas


def test_markdown_sections_in_order_with_content(rendered: dict[str, Path]) -> None:
    md = read(rendered, "markdown")
    assert md.startswith("# TTFT regression after v2.3.1\n")
    headings = re.findall(r"^## (.+)$", md, re.M)
    assert headings == [
        "Summary",
        "Impact",
        "Detection",
        "Trigger / lead-up",
        "Per-stage analysis",
        "Triage trail",
        "Root-cause direction",
        "Resolution and mitigation",
        "GPU state",
        "Cost",
        "Timeline",
        "Action items",
        "Lessons learned",
        "Missing evidence",
        "Appendix: other findings",
        "Provenance",
    ]
    assert "- **Severity:** SEV-2" in md
    assert "2026-11-30 04:00:00 → 05:20:00 UTC (1 h 20 min)" in md
    assert POSTMORTEM_DATA["summary"] in md_section(md, "Summary")
    impact = md_section(md, "Impact")
    assert "| metric | baseline | incident | change | SLO |" in impact
    assert "| ttft_p95_s | 0.41 | 3.4 | 8.3x | 1 |" in impact
    trigger = md_section(md, "Trigger / lead-up")
    assert POSTMORTEM_DATA["trigger"] in trigger
    assert "![Changes in the window](figures/changes.png)" in trigger
    assert "![Per-stage latency](figures/stages.png)" in md_section(md, "Per-stage analysis")
    assert "| release_regression | post_deploy_shift | yes | confirmed |" in md_section(md, "Triage trail")
    root = md_section(md, "Root-cause direction")
    assert "Top-ranked direction: release_regression (confirmed, score 0.91, suspect version v2.3.1)" in root
    assert "no GPU metrics" in md_section(md, "GPU state")
    assert "12.4 GPU-hours lost" in md_section(md, "Cost")
    # timeline is sorted by time, shown in UTC
    timeline = md_section(md, "Timeline")
    assert "| Time (UTC) | Event | Source |" in timeline
    assert timeline.index("Deploy v2.3.1") < timeline.index("breaches SLO") < timeline.index("Alert TTFTHigh")
    assert "| 2026-11-30 03:58:00 | Deploy v2.3.1 | events.csv |" in timeline
    actions = md_section(md, "Action items")
    assert actions.index("Re-enable chunked prefill") < actions.index("Add a TTFT canary gate")  # P0 first
    appendix = md_section(md, "Appendix: other findings")
    assert re.findall(r"^### (.+)$", appendix, re.M) == [
        "Scope",
        "Data completeness",
        "Baseline vs now",
        "Triage",
    ]
    assert "![Baseline vs now](figures/baseline.png)" in appendix


def test_provenance(rendered: dict[str, Path], full_notebook: Path) -> None:
    md = read(rendered, "markdown")
    prov = md_section(md, "Provenance")
    assert hashlib.sha256(full_notebook.read_bytes()).hexdigest() in prov
    assert "**Runbook:** inference_latency (version 1.2.0)" in prov
    assert "**perfkit:** 0.1.0" in prov
    assert "rate(vllm:time_to_first_token_seconds_bucket[5m])" in prov  # a finding's query
    assert "| prometheus_url | http://127.0.0.1:9090 |" in prov  # the parameters cell's default
    # slowest five cells, slowest first; the failed cell is listed as a problem
    slowest = re.findall(r"^\| (cell \d+[^|]*) \| ([\d.]+) s \|$", prov, re.M)
    assert len(slowest) == 5
    assert [float(s) for _, s in slowest] == sorted((float(s) for _, s in slowest), reverse=True)
    assert "Broken section: **HTTPError**: 401 Unauthorized" in prov


def test_html_is_self_contained_with_plotly_once(rendered: dict[str, Path]) -> None:
    html = read(rendered, "html")
    plotlyjs = get_plotlyjs()
    assert html.count(plotlyjs[:200]) == 1
    assert html.count("Plotly.newPlot(") == 3
    outside = html.replace(plotlyjs, "")  # the library's own strings (map tile URLs) are not requests
    assert len(outside) < len(html) - 4_000_000
    for needle in ('src="http', "src='http", 'href="http', "cdn.", "mathjax", "MathJax", "require.js"):
        assert needle not in outside, needle
    parser = _Tags()
    parser.feed(outside)
    assert not [a for t, a in parser.tags if t == "script" and "src" in a]
    assert not [t for t, _ in parser.tags if t in ("link", "iframe", "img")]
    # each figure's JSON is parseable and keeps the shaded window, deploy line and SLO line
    blocks = dict(
        re.findall(r'<script type="application/json" id="(fig-[\w.-]+)-json">(.*?)</script>', html, re.S)
    )
    assert sorted(blocks) == ["fig-baseline", "fig-changes", "fig-stages"]
    figure = json.loads(blocks["fig-changes"])
    assert [s["type"] for s in figure["layout"]["shapes"]] == ["rect", "line", "line"]
    assert figure["data"][0]["name"] == "incident p95"
    assert '"displaylogo":false' in html and '"responsive":true' in html


def test_html_sections_and_verdict_colours(rendered: dict[str, Path]) -> None:
    html = read(rendered, "html").replace(get_plotlyjs(), "")
    for anchor in ("summary", "impact", "trigger", "stages", "triage", "gpu", "cost", "timeline", "missing"):
        assert f'<section id="{anchor}">' in html
    assert html.index('id="summary"') < html.index('id="triage"') < html.index('id="provenance"')
    assert html.count('<tr class="verdict-confirmed">') == 1
    assert html.count('<tr class="verdict-ruled_out">') == 1
    assert html.count('<tr class="verdict-inconclusive">') == 1
    assert ".verdict-confirmed .verdict" in html  # styled inline
    assert "<td>Deploy v2.3.1</td>" in html


def test_text_from_findings_is_escaped(rendered: dict[str, Path]) -> None:
    html = read(rendered, "html")
    md = read(rendered, "markdown")
    assert XSS not in html
    assert "alert(1)</script>" not in html
    assert html.count(XSS_ESCAPED) == 2  # the scope summary and the changes table cell
    assert XSS not in md
    assert "<script" not in md
    assert md.count(XSS_MD) == 2
    assert "rollout a\\|b " + XSS_MD in md  # the pipe cannot split the table row


def test_secret_parameter_never_written(rendered: dict[str, Path], tmp_path: Path) -> None:
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert len(files) == 6
    for path in files:
        assert CANARY.encode() not in path.read_bytes(), path.name
    for name in ("markdown", "html", "findings"):
        text = read(rendered, name)
        assert "PROM_TOKEN" in text
        assert "prometheus_token_env" in text
        assert "[redacted]" in text
    assert "| prometheus_token | [redacted] |" in read(rendered, "markdown")
    params = json.loads(read(rendered, "findings"))["parameters"]
    assert params["prometheus_token"] == "[redacted]"
    assert params["prometheus_token_env"] == "PROM_TOKEN"


def test_credentials_in_cell_errors_are_redacted(write_notebook: Callable[..., Path], tmp_path: Path) -> None:
    path = write_notebook([], error=("HTTPError", "403 with Authorization: Bearer zq81Xk29Lm47Qp03"))
    paths = render_postmortem(path, tmp_path / "err")
    for name in ("markdown", "html", "findings"):
        assert "zq81Xk29Lm47Qp03" not in read(paths, name)
    assert "HTTPError**: 403 with Authorization: [redacted]" in read(paths, "markdown")


def test_no_local_paths_in_outputs(rendered: dict[str, Path], tmp_path: Path) -> None:
    for name in ("markdown", "html", "findings"):
        assert str(tmp_path) not in read(rendered, name)


def test_findings_json(rendered: dict[str, Path], full_notebook: Path) -> None:
    def no_constants(name: str) -> Any:
        raise AssertionError(f"non-strict JSON constant {name}")

    doc = json.loads(read(rendered, "findings"), parse_constant=no_constants)
    assert doc["perfkit_version"] == "0.1.0"
    assert doc["runbook"] == "inference_latency"
    assert doc["runbook_version"] == "1.2.0"
    assert doc["notebook_sha256"] == hashlib.sha256(full_notebook.read_bytes()).hexdigest()
    assert doc["incident"] == "INC-42"
    assert doc["triage"] == TRIAGE_DATA
    assert list(doc["findings"]) == [
        "scope",
        "completeness",
        "changes",
        "baseline",
        "stages",
        "triage",
        "gpu",
        "cost",
        "postmortem",
    ]
    assert doc["findings"]["changes"]["figure"] is True
    assert doc["findings"]["gpu"]["figure"] is False
    assert doc["findings"]["changes"]["table"]["rows"][0][2] == "v2.3.1"
    assert doc["missing"] == ["No DCGM metrics in window"]


def test_missing_evidence_is_deduplicated(rendered: dict[str, Path]) -> None:
    md = read(rendered, "markdown")
    section = md_section(md, "Missing evidence")
    items = re.findall(r"^- (.+)$", section, re.M)
    assert items == ["No DCGM metrics in window (triage, gpu, postmortem)"]
    assert md.lower().count(MISSING_DCGM.lower()) == 1
    html = read(rendered, "html")
    assert html.lower().count(MISSING_DCGM.lower()) == 1


def test_no_postmortem_finding_still_renders(write_notebook: Callable[..., Path], tmp_path: Path) -> None:
    path = write_notebook(full_findings(), name="half_done.ipynb", durations=False)
    paths = render_postmortem(path, tmp_path / "half")
    md = read(paths, "markdown")
    assert md.startswith("# Scope title\n")  # the scope finding's title
    assert "did not complete its findings section" in md
    summary = md_section(md, "Summary")
    assert "- **Baseline vs now** (critical): p95 TTFT 3.4 s vs 0.41 s in the baseline (8.3x)" in summary
    # the triage trail falls back to the triage finding's directions
    assert (
        "| release_regression | post_deploy_shift | yes | confirmed | change point 2 min after deploy v2.3.1 |"
        in md
    )
    assert "| Runbook:" not in md and "**Runbook:** half_done (version unknown)" in md
    assert "not run by papermill" in md
    assert "did not complete its findings section" in read(paths, "html")
    assert json.loads(read(paths, "findings"))["incident"] == "INC-42"


def test_notebook_without_figures_has_no_plotlyjs(
    write_notebook: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_notebook([Finding("scope", "Scope", "nothing to plot", data={"title": "Quiet"})])
    paths = render_postmortem(path, tmp_path / "quiet", now=datetime(2026, 12, 1, 9, 30, tzinfo=UTC))
    assert "- **Generated:** 2026-12-01 09:30 UTC by perfkit 0.1.0" in read(paths, "markdown")
    html = read(paths, "html")
    assert get_plotlyjs()[:200] not in html
    assert len(html) < 100_000
    assert "Missing evidence" in html and "<p>none</p>" in html
    assert "## Missing evidence\n\nnone\n" in read(paths, "markdown")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "invalid JSON"),
        (b'{"nbformat": 4}', "no 'cells'"),
        (b"\xff\xfe\x00garbage", "invalid JSON"),
    ],
)
def test_unreadable_notebook_raises_config_error(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "broken.ipynb"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="broken.ipynb") as err:
        render_postmortem(path, tmp_path / "out")
    assert reason in str(err.value)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_missing_notebook_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nowhere.ipynb"):
        render_postmortem(tmp_path / "nowhere.ipynb", tmp_path / "out")


def test_md_table_escapes_pipes_and_newlines() -> None:
    table = md_table({"columns": ["a|b", "c"], "rows": [["x|y", "line1\nline2"], [None, 1.5]]})
    assert table.splitlines() == [
        "| a\\|b | c |",
        "|---|---|",
        "| x\\|y | line1<br>line2 |",
        "| — | 1.5 |",
    ]
