"""``perfkit scaling``: scaling efficiency between two runs or two windows of a training job.

    perfkit scaling BUNDLE                                  # its baseline window against its incident window
    perfkit scaling BUNDLE --before START/END --after START/END
    perfkit scaling BEFORE AFTER                            # two bundles (each its incident window)

Each side is measured by :func:`perfkit.analyses.scaling.metrics_side` from the ``train_*`` series;
when the bundle carries profiler traces (``traces/``, read by :mod:`perfkit.traces`) of a run
inside the side's window, the split of the step and the GPU count (``distributedInfo.world_size``)
come from them. :func:`perfkit.analyses.scaling.scaling` compares the sides. ``--format json``
prints :meth:`~perfkit.analyses.scaling.Scaling.as_dict` (shares on a 0-1 scale) plus the trace
runs used. The measuring is :mod:`perfkit.app.runbooks.scaling`, shared with the training runbook.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from perfkit.app.runbooks.scaling import scaling_for
from perfkit.core.incident import window_arg
from perfkit.errors import ConfigError, SourceError

if TYPE_CHECKING:
    from perfkit.analyses.scaling import Scaling

WINDOW = "START/END"
MAX_ARG = 4096
"""A path or window longer than this is refused before anything is read."""
# -- the command -----------------------------------------------------------------------------------------


def _open(bundle: str) -> Any:
    from perfkit.app.runbooks.context import open_incident

    ctx = open_incident(bundle)
    if ctx.error or ctx.incident is None:
        raise SourceError(ctx.error or f"{bundle}: no evidence loaded")
    return ctx


@click.command("scaling")
@click.argument("before", metavar="BEFORE")
@click.argument("after", required=False, metavar="[AFTER]")
@click.option("--before", "before_window", default="", metavar=WINDOW, help="the window before (UTC ISO 8601); default: the bundle's baseline")  # fmt: skip
@click.option("--after", "after_window", default="", metavar=WINDOW, help="the window after; default: the incident window")  # fmt: skip
@click.option("--gpus-before", type=click.IntRange(1, 10_000_000), default=None, help="GPUs of the job before (default: from traces or the rank labels)")  # fmt: skip
@click.option("--gpus-after", type=click.IntRange(1, 10_000_000), default=None, help="GPUs of the job after")
@click.option("--no-traces", is_flag=True, help="ignore the bundles' profiler traces (metrics only)")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def scaling_cmd(before: str, after: str | None, before_window: str, after_window: str, gpus_before: int | None,
                gpus_after: int | None, no_traces: bool, fmt: str) -> None:  # fmt: skip
    """Scaling efficiency of a training job: speed-up, efficiency and where the time went.

    BEFORE is a bundle folder (or an embedded incident): its baseline window against its incident
    window, or --before/--after windows of it. With AFTER (a second bundle), each bundle's incident
    window (or the windows given).
    """
    for text in (before, after, before_window, after_window):
        if text and len(text) > MAX_ARG:
            raise ConfigError(f"an argument of {len(text)} characters, more than {MAX_ARG}: refused")
    wb, wa = window_arg(before_window, "--before"), window_arg(after_window, "--after")
    ctx = _open(before)
    after_ctx = _open(after) if after else None
    result, runs = scaling_for(
        ctx, before=wb, after=wa, after_ctx=after_ctx, gpus_before=gpus_before, gpus_after=gpus_after,
        use_traces=not no_traces,
    )  # fmt: skip
    if all(s.reported_tokens_per_s is None and s.step_s is None for s in (result.before, result.after)):
        raise SourceError(
            f"{after or before}: neither side has a training job's throughput or step time "
            "(train_tokens_total, train_step_duration_seconds, profiler traces): nothing to compare"
        )
    if fmt == "json":
        click.echo(json.dumps({**result.as_dict(), "traces": runs}, indent=1))
    else:
        print_scaling(result, runs)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def _num(v: float | None, fmt: str = ",.0f") -> str:
    return "—" if v is None else format(v, fmt)


def print_scaling(result: Scaling, runs: dict[str, str | None], console: Any = None) -> None:
    """The headline, one table of both sides and the lost time, then the notes."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from perfkit.analyses.scaling import COMPONENTS

    console = console or Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    console.print(f"[bold]{escape(result.headline())}[/]")
    b, a = result.before, result.after
    t = Table(title="before and after")
    for col in ("", "before", "after", "lost per after-step", "share of the loss"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("GPUs", _num(b.gpus, "d"), _num(a.gpus, "d"), "", "")
    t.add_row("GPUs from", escape(b.gpus_from or "—"), escape(a.gpus_from or "—"), "", "")
    t.add_row("tokens/s (job)", _num(b.tokens_per_s), _num(a.tokens_per_s), "", "")
    t.add_row("tokens/s per GPU", _num(b.tokens_per_s_per_gpu), _num(a.tokens_per_s_per_gpu), "", "")
    t.add_row("step time", _num(b.step_s, ".2f") + " s", _num(a.step_s, ".2f") + " s", "", "")
    for k in COMPONENTS:
        sb, sa = b.shares.get(k), a.shares.get(k)
        if sb is None and sa is None:
            continue
        lost = result.lost_s_per_step.get(k)
        mark = " ★" if k == result.lost_to else ""
        t.add_row(f"{k} share{mark}", _pct(sb), _pct(sa), "—" if lost is None else f"{lost:+.3f} s",
                  _pct(result.lost_share.get(k)))  # fmt: skip
    t.add_row("split from", escape(b.shares.source or "—"), escape(a.shares.source or "—"), "", "")
    t.add_row("traces", escape(runs.get("before") or "—"), escape(runs.get("after") or "—"), "", "")
    console.print(t)
    line = f"speed-up {_num(result.speedup, '.2f')}x, GPUs {_num(result.gpu_ratio, '.2f')}x, efficiency {_num(result.efficiency, '.2f')}"  # fmt: skip
    if result.weak_efficiency is not None:
        line += f"; weak scaling (same batch per GPU): step-time efficiency {result.weak_efficiency:.2f}"
    if result.strong_efficiency is not None:
        line += f"; strong scaling (same global batch): efficiency {result.strong_efficiency:.2f}"
    console.print(escape(line))
    notes = [*result.notes, *(f"before: {n}" for n in b.as_dict()["notes"]), *(f"after: {n}" for n in a.as_dict()["notes"])]  # fmt: skip
    for note in dict.fromkeys(notes):
        console.print(f"[dim]{escape(note)}[/]")


__all__ = ["print_scaling", "scaling_cmd"]
