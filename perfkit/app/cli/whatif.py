"""``perfkit lab whatif``: engine-config sweeps on the serving simulator, faster than real time
(:mod:`perfkit.app.whatif.replay` does the work; the figure is :func:`perfkit.report.whatif_figures.whatif_figure`).

The command is attached to the ``lab`` group in :mod:`perfkit.app.cli.main`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from perfkit.app.cli.options import MAX_SEED
from perfkit.app.whatif.replay import DEFAULT_MINUTES, MAX_MINUTES
from perfkit.errors import ConfigError

MAX_ARG = 4096
"""Longest path or option text taken (a path of the deepest real tree is a few hundred characters)."""


@click.command("whatif")
@click.option(
    "--replay",
    required=True,
    metavar="FILE|BUNDLE",
    help="the traffic: a request log (.jsonl/.csv) or an incident bundle folder (which also gives the engine, SLOs and price)",
)
@click.option(
    "--engine-config",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="the engine to start from (YAML, as `perfkit lab serve`); replaces what a bundle recorded",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=V1,V2",
    help="values of an engine setting to sweep (repeatable; the runs are every combination)",
)
@click.option(
    "--minutes",
    type=click.FloatRange(0, MAX_MINUTES, min_open=True),
    default=DEFAULT_MINUTES,
    show_default=True,
    help="simulated minutes of traffic, from the replay's start",
)
@click.option(
    "--time-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="replay the traffic this many times as fast (2: twice the request rate)",
)
@click.option(
    "--slo",
    default=None,
    metavar="ttft=MS,tpot=MS",
    help="per-request SLOs for goodput (ttft, tpot, e2el in ms); default: the bundle's incident.yaml",
)
@click.option(
    "--usd-per-gpu-hour",
    type=float,
    default=None,
    help="GPU price for the cost column; default: the bundle's, else data/hardware/gpus.yaml's",
)
@click.option(
    "--seed",
    type=click.IntRange(0, MAX_SEED),
    default=0,
    show_default=True,
    help="seed of the traffic draw and the step jitter",
)
@click.option(
    "--speedup-info", is_flag=True, help="also show each run's wall time and simulated/wall speed-up"
)
@click.option(
    "--no-calibration",
    "raw",
    is_flag=True,
    help="replay on the roofline as it is, without fitting its step costs to the bundle's windows",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="OUT.html|OUT.png",
    help="write the figure (self-contained HTML, or a PNG)",
)
@click.option("--force", is_flag=True, help="replace the --plot file if it exists")
def whatif(replay: str, engine_config: Path | None, sets: tuple[str, ...], minutes: float, time_scale: float,
           slo: str | None, usd_per_gpu_hour: float | None, seed: int, speedup_info: bool, raw: bool, fmt: str,
           plot: Path | None, force: bool) -> None:  # fmt: skip
    """What if the engine ran differently? Replay traffic through the simulated engine once per
    configuration and compare TTFT/TPOT, throughput, goodput and cost, the best under the SLOs marked.

    \b
    perfkit lab whatif --replay data/scenarios/p95-prefill-interference \\
        --set enable_chunked_prefill=false,true --set long_prefill_token_threshold=0,512
    """
    from perfkit.app.whatif.replay import run_whatif

    for text in (replay, str(engine_config or ""), slo or "", str(plot or ""), *sets):
        if len(text) > MAX_ARG:
            raise ConfigError(f"an argument of {len(text)} characters, more than {MAX_ARG}: refused")
    if plot is not None and plot.suffix.lower() not in (".html", ".png"):
        raise ConfigError(f"--plot {plot}: expected a .html or .png file name")
    if plot is not None and (plot.exists() or plot.is_symlink()) and not force:
        raise ConfigError(f"--plot {plot}: the file exists; choose another name, or --force to replace it")
    result = run_whatif(
        replay, sets, engine_config=engine_config, minutes=minutes, slo=slo,
        usd_per_gpu_hour=usd_per_gpu_hour, seed=seed, time_scale=time_scale, calibrated=not raw,
    )  # fmt: skip
    doc = result.as_dict()
    if plot is not None:
        write_plot(doc, plot)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=1, allow_nan=False))
    else:
        print_table(doc, speedup_info)
        if plot is not None:
            click.echo(f"figure: {plot}")


def write_plot(doc: dict[str, Any], path: Path) -> None:
    """The sweep's figure as self-contained HTML (plotly.js embedded, nothing fetched) or a PNG."""
    from perfkit.report.whatif_figures import whatif_figure

    fig = whatif_figure(doc["configs"], doc.get("slo_ms"), title=_title(doc))
    try:
        if path.suffix.lower() == ".png":
            from perfkit.report import figure_to_png

            figure_to_png(fig.to_plotly_json(), path, height_in=7.0)
        else:
            fig.write_html(str(path), include_plotlyjs=True, full_html=True)
    except OSError as exc:
        raise ConfigError(f"--plot {path}: cannot write ({exc.strerror or exc})") from None


def _title(doc: dict[str, Any]) -> str:
    base, traffic = doc["base"], doc["traffic"]
    tp = base["tensor_parallel_size"]["value"]
    return (
        f"What-if: {base['model']['value']} on {tp}x {base['gpu']['value']}, "
        f"{traffic['num_requests']} requests over {traffic['minutes']:g} simulated min"
        + (f" ({traffic['time_scale']:g}x the recorded rate)" if traffic.get("time_scale", 1) != 1 else "")
    )


def _fmt(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_table(doc: dict[str, Any], speedup: bool) -> None:
    """The engine the sweep started from (each field's origin), the table, the notes."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    console.print(escape(_title(doc)), style="bold")
    recorded = [
        f"{k}={v['value']} ({v['origin']})" for k, v in doc["base"].items() if v["origin"] != "default"
    ]
    console.print(escape("engine: " + "; ".join(recorded)), style="dim")
    console.print("other fields: simulator defaults (docs/simulator.md)", style="dim")
    slo = doc.get("slo_ms")
    if slo:
        slo_text = ", ".join(f"{k} {v:g} ms" for k, v in slo.items())
        console.print(escape(f"SLOs: {slo_text} ({doc['slo_origin']})"), style="dim")
    if doc.get("usd_per_gpu_hour") is not None:
        console.print(
            escape(f"price: ${doc['usd_per_gpu_hour']:g}/GPU-hour ({doc['price_origin']})"), style="dim"
        )
    _print_reproduction(console, doc.get("reproduction"))
    table = Table(
        title="one row per configuration; ★ best under the SLOs (most requests within them, then cost)"
    )
    cols = ["set", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms", "TPOT p95 ms", "out tok/s", "goodput req/s",
            "$/M out tok", "done/rejected/unfinished"]  # fmt: skip
    if speedup:
        cols += ["wall s", "simulated s", "speed-up"]
    for c in cols:
        table.add_column(c, justify="left" if c == "set" else "right")
    for row, run in zip(doc["configs"], doc["runs"], strict=True):
        label = ", ".join(f"{k}={v}" for k, v in row["set"].items()) or "(as recorded)"
        cells = [
            ("★ " if row["best"] else "") + escape(label),
            _fmt(row["ttft_p50_ms"]), _fmt(row["ttft_p95_ms"]), _fmt(row["tpot_p50_ms"], 1),
            _fmt(row["tpot_p95_ms"], 1), _fmt(row["output_throughput"]), _fmt(row["goodput"], 2),
            _fmt(row["usd_per_million_tokens"], 2),
            "cannot run" if run.get("error") else f"{run['completed']}/{run['rejected']}/{run['unfinished']}",
        ]  # fmt: skip
        if speedup:
            cells += (
                ["—"] * 3
                if run.get("error")
                else [f"{run['wall_s']:.2f}", f"{run['simulated_s']:.0f}", f"{run['speedup']:,.0f}x"]
            )
        table.add_row(*cells, style="bold green" if row["best"] else ("dim" if run.get("error") else None))
    console.print(table)
    if speedup:
        ran = [r for r in doc["runs"] if not r.get("error")]
        simulated = sum(r["simulated_s"] for r in ran)
        console.print(
            escape(f"{len(ran)} runs: {simulated:,.0f} simulated s in {doc['wall_s']:.1f} s of wall "
                   f"clock ({simulated / max(doc['wall_s'], 1e-9):,.0f}x real time)")
        )  # fmt: skip
    for run in doc["runs"]:
        if run.get("rejections"):
            console.print(
                escape(f"rejected ({run['rejected']}), e.g. {run['rejections'][0]}"), style="yellow"
            )
            break
    for note in dict.fromkeys(doc["notes"]):
        console.print(escape(note), style="yellow")


def _print_reproduction(console: Any, rep: dict[str, Any] | None) -> None:
    """The windows replayed as they were: simulated beside observed, the error of each."""
    if not rep:
        return
    from rich.markup import escape
    from rich.table import Table

    from perfkit.app.whatif.calibrate import TARGETS

    fitted = {metric for _, metric, _, _ in TARGETS} if rep.get("calibration") else set()
    table = Table(title="the incident replayed as it was: simulated against observed")
    for c in ("window", "metric", "observed", "roofline", "calibrated", "error"):
        table.add_column(c, justify="left" if c in ("window", "metric") else "right")
    for r in rep["rows"]:
        if r["observed"] is None and r["simulated"] is None:
            continue
        err = r["error"]
        own = r["window"] in rep.get("calibration", {})
        metric = r["metric"] + (" (fitted)" if own and r["metric"] in fitted else "")
        table.add_row(r["window"], metric, _fmt(r["observed"], 2), _fmt(r.get("uncalibrated"), 2),
                      _fmt(r["simulated"], 2), "—" if err is None else f"{err:+.0%}")  # fmt: skip
    console.print(table)
    for side, cal in rep.get("calibration", {}).items():
        scales = ", ".join(f"{k}={v:.3g}" for k, v in cal["scales"].items())
        state = "fitted" if cal["fitted"] else "not fitted within 5 %: the closest round kept"
        console.print(escape(f"{side} engine calibrated in {len(cal['rounds'])} replays: {scales} ({state})"))
    if rep["trusted"]:
        console.print(
            "replay trusted: TTFT p50/p95 within 25 %, TPOT p50 within 15 % of the incident", style="green"
        )
    else:
        console.print(escape("replay UNTRUSTED: " + "; ".join(rep["why"])), style="bold yellow")
