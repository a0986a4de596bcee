"""The ``perfkit`` command line: run, postmortem, batch, open, triage, generate."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from perfkit import __version__
from perfkit.errors import PerfkitError


class Cli(click.Group):
    """Turns perfkit's own errors into one line on stderr and exit status 2, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PerfkitError as exc:
            click.echo(f"perfkit: {exc}", err=True)
            sys.exit(2)


@click.group(cls=Cli)
@click.version_option(__version__, prog_name="perfkit")
def cli() -> None:
    """perfkit: performance-incident runbooks and postmortems for LLM serving and training."""


def _params(pairs: tuple[str, ...]) -> dict[str, Any]:
    from perfkit.run import parse_parameter

    return dict(parse_parameter(p) for p in pairs)


def _print_outputs(result) -> None:
    click.echo(f"executed notebook: {result.notebook}")
    for key in ("markdown", "html", "findings"):
        if key in result.outputs:
            click.echo(f"{key:>9}: {result.outputs[key]}")


@cli.command()
@click.argument("runbook")
@click.option("--bundle", type=click.Path(file_okay=False), help="incident bundle folder")
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="output folder")
@click.option(
    "-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help="runbook parameter (repeatable)"
)
def run(runbook: str, bundle: str | None, out: str, params: tuple[str, ...]) -> None:
    """Execute RUNBOOK with papermill and write the postmortem into OUT."""
    from perfkit.run import execute

    parameters = _params(params)
    if bundle:
        if not Path(bundle).is_dir():
            raise click.BadParameter(f"{bundle}: not a folder", param_hint="--bundle")
        parameters["bundle"] = str(Path(bundle).resolve())
    result = execute(runbook, Path(out), parameters)
    _print_outputs(result)
    t = result.timings
    click.echo(
        f"    times: execute {t.get('execute_s', 0):.1f} s, render {t.get('render_s', 0):.1f} s, "
        f"total {t.get('total_s', 0):.1f} s"
    )
    if result.error:
        click.echo(
            f"perfkit: runbook failed at {result.error} (the partial record and postmortem were written)",
            err=True,
        )
        sys.exit(1)


@cli.command()
@click.argument("notebook", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False))
def postmortem(notebook: str, out: str) -> None:
    """Render an executed NOTEBOOK into OUT/postmortem.md, postmortem.html and findings.json."""
    from perfkit.report import render_postmortem

    for key, path in render_postmortem(Path(notebook), Path(out)).items():
        if not key.startswith("figure:"):
            click.echo(f"{key:>9}: {path}")


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("-j", "--jobs", default=1, show_default=True, help="incidents run in parallel")
@click.option("-o", "--out", "out", default="out/batch", show_default=True, type=click.Path(file_okay=False))
def batch(file: str, jobs: int, out: str) -> None:
    """Run every incident listed in FILE (YAML) into OUT/<name>/; one failure does not stop the others."""
    from perfkit.batch import load_batch, run_batch

    items = load_batch(Path(file))
    failed = run_batch(items, Path(out), jobs=jobs)
    sys.exit(1 if failed else 0)


@cli.command(name="open")
@click.argument("runbook")
@click.option("--bundle", type=click.Path(file_okay=False))
@click.option(
    "-o",
    "--out",
    "out",
    default=None,
    type=click.Path(file_okay=False),
    help="incident folder (default out/incidents/<bundle name>)",
)
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE")
@click.option("--port", default=0, help="JupyterLab port on 127.0.0.1 (default: a free one)")
@click.option("--no-lab", is_flag=True, help="only write the parameterized copy")
def open_(
    runbook: str, bundle: str | None, out: str | None, params: tuple[str, ...], port: int, no_lab: bool
) -> None:
    """Write a parameterized copy of RUNBOOK into an incident folder and open it in JupyterLab."""
    from perfkit.lab_open import open_runbook

    parameters = _params(params)
    if bundle:
        parameters["bundle"] = str(Path(bundle).resolve())
    folder = Path(out) if out else Path("out/incidents") / (Path(bundle).name if bundle else "incident")
    open_runbook(runbook, folder, parameters, port=port, start_lab=not no_lab)


@cli.command()
@click.option("--bundle", required=True, type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="table", show_default=True)
def triage(bundle: str, fmt: str) -> None:
    """Run the triage table on an incident bundle and print DESIGN.md §5's JSON or a table."""
    from perfkit.query.local import LocalEngine
    from perfkit.sources.bundle import load_bundle
    from perfkit.triage.evidence import gather
    from perfkit.triage.table import run as run_triage

    b = load_bundle(bundle)
    result = run_triage(gather(LocalEngine(b.store), b.incident, events=b.events, logs=b.logs))
    for m in b.missing:
        if m not in result.missing:
            result.missing.append(m)
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    from perfkit.console import triage_table

    triage_table(result)


@cli.command()
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="every embedded scenario")
@click.option(
    "-o", "--out", "out", default="data/scenarios", show_default=True, type=click.Path(file_okay=False)
)
def generate(names: tuple[str, ...], all_: bool, out: str) -> None:
    """Simulate embedded incident scenarios into bundles (seeded: same input, same bundle)."""
    from perfkit.sim.bundle import generate as gen
    from perfkit.sim.scenarios import SCENARIOS

    chosen = list(SCENARIOS) if all_ else list(names)
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown or not chosen:
        raise click.BadParameter(f"choose from {', '.join(SCENARIOS)} (or --all)", param_hint="NAMES")
    for name in chosen:
        facts = gen(SCENARIOS[name](), Path(out) / name)
        click.echo(
            f"{name}: {facts['requests']} requests, {facts['lines']} metric lines, "
            f"simulated in {facts['simulate_s']:.1f} s → {Path(out) / name}"
        )


def main() -> None:
    cli()
