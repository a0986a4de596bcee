"""Render a postmortem (Markdown, self-contained HTML, findings.json, PNG figures) from an executed notebook.

::

    paths = render_postmortem("out/inc-42/inference_latency.ipynb", "out/inc-42")
    paths["markdown"], paths["html"], paths["findings"]   # postmortem.md, postmortem.html, findings.json
    paths["figure:changes"]                                # figures/changes.png

The document model is the ``postmortem`` finding's data (:class:`perfkit.core.findings.PostmortemModel`);
the other findings fill the analysis sections and the appendix. Nothing is queried again.
The HTML embeds plotly.js once, from the installed package, and loads nothing from the network.

The document model lives in :mod:`perfkit.report.document`, the Markdown escaping and the
templates' filters in :mod:`perfkit.report.markdown`.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfkit.core.scrub import known_secrets
from perfkit.errors import ConfigError
from perfkit.report.document import LESSONS, Document, _first_line, _slug, build_document, findings_document
from perfkit.report.markdown import (
    format_cell,
    html_json,
    md_alt,
    md_code_block,
    md_code_span,
    md_escape,
    md_oneline,
    md_table,
    scrub,
    text_to_html,
)
from perfkit.report.notebook import read_executed_notebook

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
_PLOTLYJS_MARK = "/*@@perfkit-plotlyjs@@*/"


def templates_dir() -> Path:
    """The shipped ``templates/`` folder: the checkout's, or the installed wheel's data files."""
    from perfkit.core.resources import shipped

    return shipped("templates")


def render_postmortem(
    notebook_path: str | Path, out_dir: str | Path, *, now: datetime | None = None
) -> dict[str, Path]:
    """Write ``postmortem.md``, ``postmortem.html``, ``findings.json`` and ``figures/<key>.png``
    into ``out_dir`` and return their paths by name: ``"markdown"``, ``"html"``, ``"findings"``
    and ``"figure:<key>"`` for each figure.

    ``now`` is the generation time shown in the header (default: the current UTC time).
    Raises :class:`~perfkit.errors.ConfigError` when the notebook cannot be read.
    """
    nb = read_executed_notebook(notebook_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = build_document(nb, now=now)
    paths: dict[str, Path] = {}
    paths.update(_write_figures(doc, out / "figures"))
    secrets = known_secrets(nb.parameters)  # the parameters' secrets and the environment's

    md = _env("md").get_template("postmortem.md.j2").render(doc=doc)
    paths["markdown"] = _write(out / "postmortem.md", scrub(md, secrets, markdown=True))

    html = _env("html").get_template("postmortem.html.j2").render(doc=doc, plotlyjs_mark=_PLOTLYJS_MARK)
    html = scrub(html, secrets)  # before plotly.js goes in: never rewrite the library's code
    if doc.has_figures:
        html = html.replace(_PLOTLYJS_MARK, plotlyjs(), 1)
    paths["html"] = _write(out / "postmortem.html", html)

    text = json.dumps(findings_document(nb, doc), indent=2, ensure_ascii=False, allow_nan=False)
    paths["findings"] = _write(out / "findings.json", scrub(text, secrets, json_escaped=True) + "\n")
    return paths


# -- output --------------------------------------------------------------------------------------


def _write_figures(doc: Document, folder: Path) -> dict[str, Path]:
    """Draw each finding's figure once as ``folder/<key>.png``; a figure that fails is noted, not raised."""
    from perfkit.report.static import figure_to_png

    written: dict[str, Path] = {}
    for view in doc.views.values():
        if not view.figure:
            continue
        name = f"{_slug(view.key)}.png"
        try:
            written[f"figure:{view.key}"] = figure_to_png(view.figure, folder / name)
            view.figure_png = f"figures/{name}"
        except Exception as err:  # a broken figure must not cost the whole postmortem
            view.figure_error = (
                f"static image could not be drawn ({type(err).__name__}: {_first_line(str(err), 200)})"
            )
    return written


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@lru_cache(maxsize=1)
def plotlyjs() -> str:
    """plotly.js from the installed ``plotly`` package (read once per process), safe inside ``<script>``."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script")


@lru_cache(maxsize=2)
def _env(kind: str) -> Any:
    """The Jinja environment for ``"html"`` (autoescape on) or ``"md"`` (every value Markdown-escaped)."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    folder = templates_dir()
    if not (folder / "postmortem.md.j2").is_file():
        raise ConfigError(f"postmortem templates not found in {folder}")
    if kind == "html":
        env = Environment(
            loader=FileSystemLoader(folder),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters["prose"] = text_to_html
    else:
        env = Environment(
            loader=FileSystemLoader(folder),
            autoescape=False,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            finalize=md_escape,  # everything printed is escaped unless it is already Markup
        )
        env.filters["table"] = md_table
        env.filters["code"] = md_code_block
        env.filters["code_span"] = md_code_span
        env.filters["oneline"] = md_oneline
        env.filters["alt"] = md_alt
    env.filters["cell"] = format_cell
    env.globals["plotly_config"] = html_json(PLOTLY_CONFIG)
    env.globals["lessons_headings"] = LESSONS
    return env
