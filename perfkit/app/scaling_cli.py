"""``perfkit scaling``: scaling efficiency between two runs or two windows of a training job.

    perfkit scaling BUNDLE                                  # its baseline window against its incident window
    perfkit scaling BUNDLE --before START/END --after START/END
    perfkit scaling BEFORE AFTER                            # two bundles (each its incident window)

Each side is measured by :func:`perfkit.analyses.scaling.metrics_side` from the ``train_*`` series;
when the bundle carries profiler traces (``traces/``, read by :mod:`perfkit.traces`) of a run
inside the side's window, the split of the step and the GPU count (``distributedInfo.world_size``)
come from them. :func:`perfkit.analyses.scaling.scaling` compares the sides. ``--format json``
prints :meth:`~perfkit.analyses.scaling.Scaling.as_dict` (shares on a 0-1 scale) plus the trace
runs used. :func:`scaling_for` is the same for a runbook's opened incident.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from perfkit.core.incident import window_arg
from perfkit.errors import ConfigError, PerfkitError, SourceError

if TYPE_CHECKING:
    from perfkit.analyses.scaling import RunSide, Scaling, TraceRank
    from perfkit.core.frames import Window

WINDOW = "START/END"
MAX_ARG = 4096
"""A path or window longer than this is refused before anything is read."""
MIN_RUN_OVERLAP = 0.5
"""A trace run belongs to a window when at least half of its time span lies inside it (a profile
of a few steps is seconds long; a window minutes)."""


@dataclass
class TraceRun:
    """A profiled run of a bundle matched to a side: its name, the traced ranks' numbers, the
    job's world size."""

    name: str
    ranks: list[TraceRank]
    world_size: int | None
    notes: list[str] = field(default_factory=list)


# -- the sides -------------------------------------------------------------------------------------------


def _overlap(span: tuple[float, float], window: Window) -> float:
    """The share of ``span`` (µs since the epoch) inside ``window``."""
    a, b = span
    w0, w1 = window.start.timestamp() * 1e6, window.end.timestamp() * 1e6
    inside = max(0.0, min(b, w1) - max(a, w0))
    return inside / (b - a) if b > a else float(a >= w0 and a <= w1)


def trace_run(bundle: Any, window: Window) -> TraceRun | None:
    """The bundle's profiled run inside ``window`` (most of its span in it), analysed; None when
    the bundle has no traces there. Raises :class:`~perfkit.errors.SourceError` for a run whose
    files disagree (one rank twice, two world sizes), :class:`~perfkit.errors.BundleError` for an
    unreadable trace (perfkit.traces' messages, naming the file)."""
    from perfkit.analyses.scaling import TraceRank
    from perfkit.traces.analysis import analyze_traces
    from perfkit.traces.read import read_trace

    runs = bundle.trace_runs() if bundle is not None and hasattr(bundle, "trace_runs") else {}
    best: tuple[float, str] | None = None
    for name, paths in sorted(runs.items()):
        # one rank tells the run's time span (the ranks of a run overlap in time: perfkit.traces
        # checks it when the run is read whole below)
        span = read_trace(paths[0]).span()
        share = _overlap(span, window) if span is not None else 0.0
        if share >= MIN_RUN_OVERLAP and (best is None or share > best[0]):
            best = (share, name)
    if best is None:
        return None
    name = best[1]
    traces = sorted((read_trace(p) for p in runs[name]), key=lambda t: t.rank)
    label = f"traces/{name}" if name else "traces/"
    ranks = [t.rank for t in traces]
    sizes = {t.world_size for t in traces if t.world_size is not None}
    if len(set(ranks)) < len(ranks) or len(sizes) > 1:
        raise SourceError(f"{label}: ranks of different runs in one folder (a rank twice or two world sizes)")
    report = analyze_traces(traces, path=label)
    out = []
    for r in report.ranks:
        if r.temporal is None or not r.steps:
            continue
        out.append(
            TraceRank(
                rank=r.rank,
                step_us=float(sum(s.dur_us for s in r.steps)),
                compute_us=float(r.temporal.compute_us),
                idle_us=float(r.temporal.idle_us),
                memory_us=float(r.kernel_types.get("MEMORY", 0.0)),
                steps={s.step: (float(s.dur_us), float(s.dataloader_us)) for s in r.steps},
            )
        )
    return TraceRun(label, out, sizes.pop() if sizes else None, list(report.notes))


def side_for(
    ctx: Any, window: Window, *, label: str, gpus: int | None = None, use_traces: bool = True
) -> tuple[RunSide, TraceRun | None]:
    """One side from an opened incident (:func:`perfkit.app.runbook.open_incident`): the metrics in
    ``window``, with the split and the GPU count from the bundle's traces of that window (an
    unreadable trace is named in the side's notes and the metrics' split kept)."""
    from perfkit.analyses.scaling import metrics_side, with_traces

    side = metrics_side(ctx.engine, window, label=label, gpus=gpus)
    run = None
    if use_traces:
        try:
            run = trace_run(ctx.bundle, window)
        except PerfkitError as exc:  # a bad trace costs the split from traces, not the comparison
            side.notes.append(f"traces not used: {exc}")
    if run is not None and run.ranks:
        side = with_traces(side, run.ranks, run.world_size, prefer_gpus=gpus is None)
    inc = ctx.incident
    if (
        gpus is None
        and side.gpus_from.startswith("at least")
        and inc is not None
        and inc.window == window
        and inc.hardware.count > 1
    ):
        side.gpus, side.gpus_from = inc.hardware.count, "incident.yaml hardware.count"
    return side, run


def scaling_for(
    ctx: Any,
    *,
    before: Window | None = None,
    after: Window | None = None,
    after_ctx: Any = None,
    gpus_before: int | None = None,
    gpus_after: int | None = None,
    use_traces: bool = True,
) -> tuple[Scaling, dict[str, str | None]]:
    """Scaling between two windows of one opened incident (default: its baseline and its window),
    or between ``ctx`` and ``after_ctx`` (each its incident window). Returns the comparison and
    the trace runs used per side."""
    from perfkit.analyses.scaling import scaling

    other = after_ctx or ctx
    wb = before or (ctx.incident.window if after_ctx is not None else ctx.incident.baseline)
    wa = after or other.incident.window
    if wb is None:
        raise ConfigError("no baseline window to compare with: give --before START/END")
    b, rb = side_for(ctx, wb, label="before", gpus=gpus_before, use_traces=use_traces)
    a, ra = side_for(other, wa, label="after", gpus=gpus_after, use_traces=use_traces)
    result = scaling(b, a)
    return result, {"before": rb.name if rb else None, "after": ra.name if ra else None}


# -- the command -----------------------------------------------------------------------------------------


def _open(bundle: str) -> Any:
    from perfkit.app.runbook import open_incident

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


__all__ = ["TraceRun", "print_scaling", "scaling_cmd", "scaling_for", "side_for", "trace_run"]
