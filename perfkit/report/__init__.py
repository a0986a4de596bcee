"""Postmortems from executed runbook notebooks: Markdown, self-contained HTML, findings.json, PNGs.

::

    from perfkit.report import render_postmortem
    render_postmortem("out/inc-42/inference_latency.ipynb", "out/inc-42")

This package only renders: it reads the findings recorded in the notebook and never queries a source.
"""

from __future__ import annotations

from perfkit.report.notebook import (
    CellDuration,
    CellProblem,
    ExecutedNotebook,
    read_executed_notebook,
    redact_parameters,
)
from perfkit.report.render import build_document, render_postmortem
from perfkit.report.static import figure_to_png

__all__ = [
    "CellDuration",
    "CellProblem",
    "ExecutedNotebook",
    "build_document",
    "figure_to_png",
    "read_executed_notebook",
    "redact_parameters",
    "render_postmortem",
]
