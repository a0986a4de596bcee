"""A training job's scaling between two windows of one incident, or between two incidents: each side
measured by :func:`perfkit.analyses.scaling.metrics_side` from the ``train_*`` series, with the split of
the step and the GPU count from the bundle's profiler traces (:mod:`perfkit.traces`) of a run inside
the side's window. ``perfkit scaling`` (:mod:`perfkit.app.cli.scaling`) prints it; the training
runbook's scaling section shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfkit.errors import ConfigError, PerfkitError, SourceError

if TYPE_CHECKING:
    from perfkit.analyses.scaling import RunSide, Scaling, TraceRank
    from perfkit.core.frames import Window

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
    """One side from an opened incident (:func:`perfkit.app.runbooks.context.open_incident`): the metrics in
    ``window``, with the split and the GPU count from the bundle's traces of that window (an
    unreadable trace is named in the side's notes and the metrics' split kept), else from NCCL's
    init lines in the logs when they name more GPUs than the exporting ranks suggest (ranks that
    do not export are invisible to the metrics: :func:`perfkit.sources.trainer_steps.nccl_world_size`)."""
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
    if gpus is None and not side.gpus_from.startswith("traces"):
        from perfkit.sources.trainer_steps import nccl_world_size

        world = nccl_world_size(getattr(ctx, "logs", None), window.end)
        if world and (side.gpus is None or world > side.gpus):
            if side.gpus:
                side.notes.append(
                    f"GPU count {world} from NCCL's init lines (the exporting ranks suggested {side.gpus})"
                )
            side.gpus, side.gpus_from = world, f"NCCL's init lines in the logs (nranks {world})"
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
