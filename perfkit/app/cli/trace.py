"""``perfkit trace PATH``: the profiler-trace breakdown of one rank's file or a folder of ranks.

PATH may also be a folder of phases (a bundle's ``traces/`` with ``baseline/`` and ``incident/``:
each is analysed), a bundle folder (its ``traces/``) or the name of an embedded incident
(``allreduce-scaling-64gpu``, resolved as ``perfkit scaling`` resolves it).

``--format json`` prints :meth:`perfkit.traces.analysis.TraceReport.as_dict` (percentages on a
0-100 scale, times in µs; for phases, ``{"phases": {name: report}}``); ``table`` (the default)
prints it for people. ``--whole-trace`` turns off HTA's trimming to GPU work launched before the
last ProfilerStep; ``--hta-compat`` types kernels exactly as HTA 0.5.0 (docs/traces.md).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from perfkit.errors import ConfigError


def _finite(value: Any) -> Any:
    """The report with any NaN or infinity (a ratio over nothing) as null: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def _ms(us: float | None) -> str:
    return "—" if us is None else f"{us / 1000:,.1f} ms"


def render_table(report: dict[str, Any], console: Console | None = None) -> None:
    """The report as terminal tables: the per-rank breakdown, idle and launch causes, steps,
    kernel types, the top kernels of the first rank, stragglers and notes."""
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    title = f"GPU time by rank — {report['path']}  ({report['trimming']})"
    t = Table(title=escape(title))
    for col in ("rank", "device", "kernel time", "idle %", "compute %", "non-compute %", "comm hidden %"):
        t.add_column(col, justify="right" if col != "device" else "left")
    for r in report["ranks"]:
        t.add_row(
            str(r["rank"]),
            escape(r["device"] or "?"),
            _ms(r["kernel_time_us"]),
            _fmt(r["idle_pct"]),
            _fmt(r["compute_pct"]),
            _fmt(r["non_compute_pct"]),
            _fmt(r["comm_comp_overlap_pct"]),
        )
    console.print(t)

    t = Table(
        title="Why the GPU was idle (no stream busy; the causes add up to idle %) and how launches went"
    )
    for col in (
        "rank",
        "GPU idle",
        "host wait",
        "kernel wait",
        "other",
        "stream gaps (HTA)",
        "launches",
        "delay p50",
        "delay p95",
        ">100 µs",
        "data loader",
    ):
        t.add_column(col, justify="right")
    for r in report["ranks"]:
        idle, launch = r["idle_breakdown"], r["launch"]
        cause = r.get("gpu_idle_by_cause") or {}
        gaps = sum(idle[k] for k in ("host_wait_us", "kernel_wait_us", "other_us"))
        t.add_row(
            str(r["rank"]),
            _ms(r["idle_us"]),
            _ms(cause.get("host_wait_us")),
            _ms(cause.get("kernel_wait_us")),
            _ms(cause.get("other_us")),
            _ms(gaps),
            str(launch["count"]),
            _fmt(launch["launch_delay_p50_us"], " µs", 0),
            _fmt(launch["launch_delay_p95_us"], " µs", 0),
            str(launch["launch_delay_over_cutoff"]),
            _fmt(r["dataloader_pct"], " %"),
        )
    console.print(t)
    console.print(
        "[dim]stream gaps (HTA): every stream's gaps summed (JSON idle_breakdown); a stream waiting while "
        "another computes is a gap there, not GPU idle[/]"
    )

    if report["kernel_types"]:
        t = Table(title="Kernel types, all ranks")
        t.add_column("type")
        t.add_column("time", justify="right")
        t.add_column("%", justify="right")
        for k, v in report["kernel_types"].items():
            t.add_row(escape(k), _ms(v["us"]), _fmt(v["pct"]))
        console.print(t)

    for r in report["ranks"][:1]:
        if r["top_kernels"]:
            t = Table(title=f"Top kernels, rank {r['rank']}")
            for col in ("type", "kernel", "count", "total", "mean µs"):
                t.add_column(
                    col, justify="right" if col in ("count", "total", "mean µs") else "left", overflow="fold"
                )
            for k in r["top_kernels"]:
                t.add_row(
                    k["kernel_type"],
                    escape(k["name"][:100]),
                    str(k["count"]),
                    _ms(k["sum_us"]),
                    _fmt(k["mean_us"], "", 1),
                )
            console.print(t)
        if r["steps"]:
            t = Table(title=f"Profiler steps, rank {r['rank']}")
            for col in ("step", "duration", "data loader", "data loader %"):
                t.add_column(col, justify="right")
            for s in r["steps"]:
                t.add_row(
                    str(s["step"]), _ms(s["dur_us"]), _ms(s["dataloader_us"]), _fmt(s["dataloader_pct"])
                )
            console.print(t)

    s = report["stragglers"]
    if s["ranks"]:
        console.print(
            f"stragglers: ranks {s['ranks']} start [bold]{escape(str(s['kernel']))[:80]}[/] last (stream {s['stream']})"
        )
    if s["note"]:
        console.print(f"stragglers: {escape(s['note'])}")
    for note in report["notes"]:
        console.print(f"note: {escape(note)}")
    for r in report["ranks"]:
        for note in r["notes"]:
            console.print(f"note (rank {r['rank']}): {escape(note)}")


def resolve_trace_path(text: str) -> Path:
    """PATH as given when it exists (a bundle folder: its ``traces/``); else the name of an embedded
    incident, resolved by :func:`perfkit.app.runbooks.context.resolve_bundle` (what ``perfkit scaling``
    opens bundles with), to its ``traces/``."""
    p = Path(os.path.expanduser(text))
    if not os.path.lexists(p):
        from perfkit.app.runbooks.context import resolve_bundle

        found = resolve_bundle(text)
        if not found.is_dir():
            if len(p.parts) > 1 or p.suffix:
                raise ConfigError(f"{text}: no such trace file or folder")
            from perfkit.app.runner.embedded import specs

            raise ConfigError(
                f"{text}: no such trace file or folder, nor an embedded incident (demo, {', '.join(specs())})"
            )
        p = found
    if p.is_dir() and (p / "incident.yaml").is_file():
        if not (p / "traces").is_dir():
            raise ConfigError(f"{p}: the bundle carries no profiler traces (no traces/ folder)")
        return p / "traces"
    return p


@click.command("trace")
@click.argument("path", metavar="PATH")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--whole-trace",
    is_flag=True,
    help="Analyse every GPU event; by default only GPU work launched before the last ProfilerStep (as HTA).",
)
@click.option(
    "--candidates", default=2, show_default=True, type=click.IntRange(1, 1024), help="Stragglers to name."
)
@click.option(
    "--hta-compat",
    is_flag=True,
    help="Type kernels exactly as HTA 0.5.0 (only ^nccl.*Kernel is communication): for parity with HTA.",
)
def trace(path: str, fmt: str, whole_trace: bool, candidates: int, hta_compat: bool) -> None:
    """Break down PyTorch profiler (Kineto) traces: PATH is one rank's .json/.json.gz, a folder
    with one file per rank, a folder of phases (baseline/, incident/), a bundle or an embedded
    incident's name. Idle / compute / non-compute time, communication hidden under compute,
    idle causes, kernel types, launch delays, data-loader wait per step, stragglers."""
    from perfkit.traces import analyze_phases

    if len(path) > 4096:
        raise ConfigError(f"a path of {len(path)} characters, more than 4096: refused")
    where = resolve_trace_path(path)
    phases = analyze_phases(where, whole_trace=whole_trace, num_candidates=candidates, hta_compat=hta_compat)
    reports = {name: _finite(r.as_dict()) for name, r in phases.items()}
    if fmt == "json":
        out = reports[""] if list(reports) == [""] else {"path": str(where), "phases": reports}
        click.echo(json.dumps(out, indent=1, allow_nan=False))
        return
    console = Console(width=None if sys.stdout.isatty() else 160)
    for name, report in reports.items():
        if name:
            console.rule(f"phase {escape(name)}/")
        render_table(report, console)
