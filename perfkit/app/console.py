"""Terminal rendering with rich (tables for people)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from perfkit.triage.table import TriageResult

VERDICT_STYLE = {"confirmed": "bold red", "ruled_out": "dim", "inconclusive": "yellow"}


def make_console() -> Console:
    """A console; when not a terminal (a pipe, a CI log) wide enough that IDs and paths are never folded."""
    return Console(width=None if sys.stdout.isatty() else 200)


def triage_table(result: TriageResult, console: Console | None = None) -> None:
    console = console or make_console()
    table = Table(title=f"Triage — {result.incident}  ({result.window['start']} → {result.window['end']})")
    for col in ("rank", "direction", "symptom", "fired", "verdict", "score", "why"):
        table.add_column(col, overflow="fold")
    for i, r in enumerate(result.results, start=1):
        v = r.verification.verdict
        table.add_row(
            str(i),
            r.row.direction,
            r.row.symptom,
            "yes" if r.detection.detected else "no",
            f"[{VERDICT_STYLE[v]}]{v}[/]",
            f"{r.score:.2f}",
            r.verification.why,
        )
    console.print(table)
    if result.suspect_version:
        console.print(f"suspect version: [bold]{result.suspect_version}[/]")
    if result.missing:
        console.print("missing evidence: " + "; ".join(result.missing), style="dim")
