"""Terminal rendering with rich (tables for people), and :func:`terminal_text`: text from a file or
a server made safe to print (no escape sequences, no control characters)."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:  # the triage table (polars) is imported by the command that prints it
    from perfkit.triage.table import TriageResult

_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, ESC[2J
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: titles, OSC 52 clipboard writes
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # any other escape
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: str) -> str:
    """``text`` fit for a terminal: escape sequences (CSI, OSC 52 clipboard writes, DCS) removed whole,
    every other control character (newlines, C1, bidirectional overrides) made a space.

    >>> terminal_text("v1\\x1b]52;c;ZWNobyBoaQ==\\x07.2\\x1b[2J ok")
    'v1.2 ok'
    """
    return _CONTROL.sub(" ", _ESCAPES.sub("", text))


VERDICT_STYLE = {"confirmed": "bold red", "ruled_out": "dim", "inconclusive": "yellow"}


def make_console() -> Console:
    """A console; when not a terminal (a pipe, a CI log) wide enough that IDs and paths are never folded."""
    return Console(width=None if sys.stdout.isatty() else 200)


def _other(workload: str) -> str:
    return {"serving": "training jobs", "training": "serving"}.get(workload, "another workload")


def triage_table(result: TriageResult, console: Console | None = None) -> None:
    """The ranked table, the scope it judged, and (unscoped, several workloads) the --scope to use."""
    from perfkit.analyses.workloads import describe

    console = console or make_console()
    table = Table(
        title=escape(f"Triage — {result.incident}  ({result.window['start']} → {result.window['end']})")
    )
    for col in ("rank", "direction", "symptom", "fired", "verdict", "score", "why"):
        table.add_column(col, overflow="fold")
    shown = [r for r in result.results if r.applies]  # a training row on a serving incident: not listed
    for i, r in enumerate(result.results, start=1):  # each keeps its rank in the JSON
        if not r.applies:
            continue
        v = r.verification.verdict
        table.add_row(
            str(i),
            r.row.direction,
            r.row.symptom,
            "yes" if r.detection.detected else "no",
            f"[{VERDICT_STYLE[v]}]{v}[/]",
            f"{r.score:.2f}",
            escape(r.verification.why),
        )
    console.print(table)
    hidden = len(result.results) - len(shown)
    if hidden:
        console.print(
            escape(
                f"{hidden} row(s) about {_other(result.workload)} not listed: this is a {result.workload} incident"
            )
        )
    if result.judged:
        console.print(
            escape(
                f"judged span: {result.judged.get('start')} → {result.judged.get('end')} "
                f"({result.judged.get('why')})"
            )
        )
    if result.scope:
        scope = result.scope
        console.print(
            escape(
                f"scope: {scope['scope']['matchers'] or 'hosts ' + ', '.join(scope['scope']['hosts'] or [])}; "
                f"hosts {', '.join(scope['hosts']) or '(not joined)'}; "
                f"{scope['workload_series']['kept']} workload and {scope['gpu_host_series']['kept']} GPU/host series kept"
            )
        )
    if len(result.workloads) > 1:
        console.print(
            f"[bold yellow]{len(result.workloads)} workloads in the evidence, judged together.[/] "
            "Judge the affected one with --scope:"
        )
        for w in result.workloads:
            console.print(escape(f"  --scope '{w['scope']}'   {describe(w)}"), soft_wrap=True)
    if result.suspect_version:
        console.print(f"suspect version: [bold]{escape(result.suspect_version)}[/]")
    if result.missing:
        console.print(escape("missing evidence: " + "; ".join(result.missing)), style="dim")
