"""postmortem.md: text from evidence cannot create links, images, HTML or block structure.

Every place evidence text reaches the Markdown (title, incident, service, model, summaries, table
cells, triage rows, timeline, action items, missing evidence, figure captions, cell errors) carries
hostile payloads; the rendered HTML (markdown-it-py, mistune with GFM's bare-URL autolinks, and
cmark-gfm when installed) must hold no link, no foreign image, no script, no extra heading or
list, while the payloads still read exactly as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from report_fixtures import POSTMORTEM_DATA, bar_figure, timeseries_figure

from perfkit.core.findings import Finding
from perfkit.report import render_postmortem
from perfkit.report.markdown import md_cell, md_escape, md_oneline

IMG = "![x](http://evil.example/x.png)"
LINK = "[click](javascript:alert(1))"
HTML_IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert(2)</script>"
AUTOLINK = "<http://evil.example/auto> and https://evil.example/bare and www.evil.example"
HOSTILE = f"{IMG} {LINK} {HTML_IMG} {SCRIPT} {AUTOLINK}"
#: Block-level payloads: each line would start a definition, heading, list, fence, quote or table.
BLOCKS = "\n".join(
    [
        "[ref]: http://evil.example/ref",
        "# heading from evidence",
        "- bullet from evidence",
        "1. ordered from evidence",
        "```",
        "> quoted",
        "| a | b |",
        "|---|---|",
        "***",
        "see [ref] and *emphasis* and __strong__ and ~~gone~~ and `code`",
    ]
)
SECRET = "s3cr*t_[tok]<en>&#1;|x"  # punctuation md_escape would spell differently
PARAMETER_URL = "http://127.0.0.1:9090"  # the parameters cell's default (report_fixtures.make_notebook)


def hostile_findings() -> list[Finding]:
    table = {
        "columns": [f"level {IMG}", "message"],
        "rows": [
            ["ERROR", f"log line {HOSTILE}"],
            [LINK, f"multi\nline {SCRIPT}\n{IMG}"],
            ["WARN", f"token {SECRET} in a log line"],
        ],
    }
    postmortem = {
        **POSTMORTEM_DATA,
        "title": f"Postmortem {IMG}",
        "incident": f"INC-1 {LINK}",
        "service": f"chat-api {HTML_IMG}",
        "model": f"llama {SCRIPT}",
        "severity": f"SEV-1 {IMG}",
        "summary": f"Summary {HOSTILE}\n{BLOCKS}",
        "impact": {"columns": ["metric", f"value {LINK}"], "rows": [[f"ttft {IMG}", f"3.4 {HTML_IMG}"]]},
        "detection": f"Alert said {HOSTILE}",
        "trigger": f"Deploy note {IMG}\n{BLOCKS}",
        "stages": f"Stage {LINK}",
        "triage_checked": [
            {
                "direction": f"dir {IMG}",
                "symptom": f"sym {LINK}",
                "detected": True,
                "verdict": "confirmed",
                "why": f"why {HTML_IMG} | {SCRIPT}",
            }
        ],
        "root_cause": f"Root {IMG}\n\n{BLOCKS}",
        "timeline": [
            {"ts": "2026-11-30T04:06:00Z", "event": f"pod log: {HOSTILE}", "source": f"loki {LINK}"},
            {"ts": f"not a time {IMG}", "event": "- list?", "source": "1. ordered?"},
        ],
        "action_items": [
            {"action": f"Fix {IMG}", "type": f"detect {LINK}", "priority": "P0", "owner": f"{HTML_IMG}"}
        ],
        "missing": [f"no logs {IMG}", f"# {LINK}", f"1. {SCRIPT}", f"- {HTML_IMG}"],
    }
    return [
        Finding(
            "scope",
            f"Scope {IMG}",
            f"scope summary {HOSTILE}",
            data={"title": f"Scope {IMG}", "incident": "INC-1", "service": "chat-api"},
        ),
        Finding(
            "changes",
            f"Changes {LINK}",
            f"1 deploy {IMG}",
            status=f"warn {LINK}",
            table=table,
            figure=timeseries_figure(f"TTFT {IMG}"),
            figure_caption=f"caption {HOSTILE}",
        ),
        Finding("stages", f"Stages {HTML_IMG}", f"- prefill {SCRIPT}", figure=bar_figure()),
        Finding("logs", f"Logs {IMG}", f"# {LINK}", table=table, missing=[f"no traces {LINK}"]),
        Finding("postmortem", "Postmortem", "ready", data=postmortem),
    ]


@pytest.fixture
def hostile_md(write_notebook: Callable[..., Path], tmp_path: Path) -> str:
    path = write_notebook(
        hostile_findings(),
        papermill_params={"prometheus_token": SECRET, "since": "2h"},
        error=("HTTPError", f"502 from http://evil.example/api {IMG} {SECRET}"),
        perfkit_meta={"runbook": f"inference_latency{IMG}", "runbook_version": f"1 {LINK}"},
    )
    return render_postmortem(path, tmp_path / "out")["markdown"].read_text(encoding="utf-8")


# -- renderers ------------------------------------------------------------------------------------


def _markdown_it(md: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(md)


def _mistune(md: str) -> str:
    import mistune  # nbconvert's renderer (nbconvert comes with jupyterlab); its url plugin is GFM's autolinks

    return mistune.create_markdown(escape=False, plugins=["strikethrough", "table", "url"])(md)


def _cmark_gfm(md: str) -> str:
    import cmarkgfm  # GitHub's renderer: a dev dependency, so this never skips
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)


RENDERERS = {"markdown-it": _markdown_it, "mistune": _mistune, "cmark-gfm": _cmark_gfm}


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> _Html:
    parser = _Html()
    parser.feed(html)
    return parser


# -- the rendered postmortem ----------------------------------------------------------------------


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_evidence_cannot_create_links_images_or_html(hostile_md: str, renderer: str) -> None:
    html = RENDERERS[renderer](hostile_md)
    page = parse(html)
    tags = [tag for tag, _ in page.tags]
    # the one link: the operator's own prometheus_url parameter, a bare URL in the provenance table
    links = [attrs for tag, attrs in page.tags if tag == "a"]
    assert links in ([], [{"href": PARAMETER_URL}]), links
    for tag in ("script", "iframe", "ol", "hr", "del"):  # none of these is perfkit's own
        assert tag not in tags, tag
    # the only images are perfkit's figures; no attribute but alt text carries evidence
    images = [attrs for tag, attrs in page.tags if tag == "img"]
    assert [a.get("src") for a in images] == ["figures/changes.png", "figures/stages.png"]
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            if name != "alt":
                assert not re.search(r"evil|javascript|alert", str(value)), (tag, attrs)
    # one <h1>, the title; the other headings are perfkit's sections and finding titles
    assert len(re.findall(r"<h1>", html)) == 1
    assert not [h for h in re.findall(r"<h[1-6]>(.*?)</h[1-6]>", html) if "from evidence" in h]
    # evidence emphasis is shown, not applied: <em>/<strong> hold perfkit's own words only
    for inner in re.findall(r"<(?:em|strong)>(.*?)</(?:em|strong)>", html, re.S):
        assert "emphasis" not in inner and "strong" not in inner, inner
    quotes = re.findall(r"<blockquote>(.*?)</blockquote>", html, re.S)
    assert len(quotes) == 1 and "raised an error" in quotes[0]  # perfkit's notice of the failed cell
    text = "".join(page.text)
    assert "evil.example" in text
    assert HTML_IMG in text and SCRIPT in text  # shown as text


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_evidence_reads_as_written(hostile_md: str, renderer: str) -> None:
    html = RENDERERS[renderer](hostile_md)
    text = "".join(parse(html).text)
    for shown in (
        f"Postmortem {IMG}",  # the title
        f"INC-1 {LINK}",  # incident
        f"chat-api {HTML_IMG}",  # service
        f"llama {SCRIPT}",  # model
        f"Summary {HOSTILE}",
        f"Alert said {HOSTILE}",
        f"pod log: {HOSTILE}",  # a timeline event
        f"log line {HOSTILE}",  # a table cell
        f"caption {HOSTILE}",  # a figure caption
        f"why {HTML_IMG} | {SCRIPT}",  # a triage cell with a pipe
        f"no logs {IMG}",  # missing evidence
        f"# {LINK}",  # a summary starting with a heading marker
        "- prefill <script>alert(2)</script>",
        "[ref]: http://evil.example/ref",
        "see [ref] and *emphasis* and __strong__ and ~~gone~~ and `code`",
        "1. ordered from evidence",
        f"inference_latency{IMG}",  # the runbook name in a code span
    ):
        assert shown in text, shown
    assert f"Postmortem {IMG}" in re.findall(r"<h1>(.*?)</h1>", html)[0].replace("&amp;", "&")


def test_no_bare_url_autolinks_in_the_markdown(hostile_md: str) -> None:
    # GFM links bare http(s)://, ftp:// and www. text; outside code, every one is broken by an escape
    assert f"| prometheus_url | {PARAMETER_URL} |" in hostile_md  # the operator's input: kept as typed
    prose = hostile_md.replace(f"| prometheus_url | {PARAMETER_URL} |", "")
    prose = re.sub(r"^```.*?^```", "", prose, flags=re.S | re.M)
    prose = re.sub(r"`[^`\n]+`", "", prose)
    assert not re.search(r"(?i)(?:https?|ftp)://|(?<!\\)www\.", prose)
    assert "http\\://evil.example/x.png" in hostile_md
    assert "www\\.evil.example" in hostile_md


def test_perfkit_formatting_is_kept(hostile_md: str) -> None:
    assert hostile_md.startswith("# Postmortem !\\[x\\](http\\://evil.example/x.png)\n")
    assert "- **Incident:** INC-1 \\[click\\](javascript:alert(1))" in hostile_md
    assert "![TTFT" not in hostile_md  # figure alt text is the finding's title, brackets made parens
    assert "![Changes (click)(javascript:alert(1))](figures/changes.png)" in hostile_md
    assert "*(status: warn \\[click\\](javascript:alert(1)))*" in hostile_md
    assert "## Missing evidence\n\n- no logs !\\[x\\]" in hostile_md
    assert "- \\# \\[click\\]" in hostile_md
    assert "- 1\\. &lt;script\\>" in hostile_md
    assert "- \\- &lt;img" in hostile_md


def test_secret_scrubbed_in_its_escaped_spelling(hostile_md: str) -> None:
    assert SECRET not in hostile_md
    assert md_escape(SECRET) not in hostile_md
    assert "s3cr" not in hostile_md
    assert "token [redacted] in a log line" in hostile_md
    assert "| prometheus_token | [redacted] |" in hostile_md


# -- the escaping function -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        (IMG, "!\\[x\\](http\\://evil.example/x.png)"),
        (LINK, "\\[click\\](javascript:alert(1))"),
        (HTML_IMG, "&lt;img src=x onerror=alert(1)\\>"),
        ("ttft_p95_s and _private and __dunder__", "ttft_p95_s and \\_private and \\_\\_dunder\\_\\_"),
        ("a*b `c` #3 ~x~ $5 a|b back\\slash", "a\\*b \\`c\\` \\#3 \\~x\\~ \\$5 a\\|b back\\\\slash"),
        ("&amp; & &#60;", "&amp;amp; & &amp;\\#60;"),
        ("- a\n+ b\n= c\n12. d\n3) e\n12.4 GB", "\\- a\n\\+ b\n\\= c\n12\\. d\n3\\) e\n12.4 GB"),
        ("see WWW.evil.example, ftp://x", "see WWW\\.evil.example, ftp\\://x"),
        ("vllm.om:2 at 04:06 UTC, 2026-11-30", "vllm.om:2 at 04:06 UTC, 2026-11-30"),
        (
            "[redacted] and [redacted](http://e) [redacted]: x",
            "[redacted] and \\[redacted\\](http\\://e) \\[redacted\\]: x",
        ),
        (None, ""),
    ],
)
def test_md_escape(text: Any, escaped: str) -> None:
    assert md_escape(text) == escaped


def test_md_escape_renders_back_to_the_text() -> None:
    samples = [IMG, LINK, HTML_IMG, SCRIPT, "ttft_p95_s *x* _y_ __z__ `c` ~~s~~ #1 $2 a|b \\ &amp;", BLOCKS]
    for sample in samples:
        html = _markdown_it(md_escape(sample))
        page = parse(html)
        assert [t for t, _ in page.tags if t != "p"] == [], (sample, html)
        assert " ".join("".join(page.text).split()) == " ".join(sample.split())


def test_cells_and_one_line_helpers() -> None:
    assert md_cell(f"a|b\n{IMG}") == "a\\|b<br>!\\[x\\](http\\://evil.example/x.png)"
    assert md_cell("http://127.0.0.1:9090", bare_urls=True) == "http://127.0.0.1:9090"
    assert md_cell("http://127.0.0.1:9090") == "http\\://127.0.0.1:9090"
    assert md_oneline("# a\n- b") == "\\# a - b"
