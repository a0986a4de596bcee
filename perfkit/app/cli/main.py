"""The ``perfkit`` command line: run, postmortem, batch, open, triage, generate, lab, drill; bench,
baseline and gate (their modules in this room: ``loadgen``, ``gate``; ``lab`` and ``drill`` too)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfkit import __version__
from perfkit.app.cli.lab import lab
from perfkit.app.cli.options import live_options
from perfkit.errors import PerfkitError, SourceError

if TYPE_CHECKING:
    from perfkit.core.incident import Incident
    from perfkit.sources.live import IncidentParams, LiveEvidence


class Cli(click.Group):
    """Turns perfkit's own errors into one line on stderr and exit status 2, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PerfkitError as exc:
            click.echo(f"perfkit: {exc}", err=True)
            for note in getattr(exc, "__notes__", ()):
                click.echo(f"  {note}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C before or after a run: the conventional status
            click.echo("perfkit: interrupted", err=True)
            sys.exit(130)


@click.group(cls=Cli)
@click.version_option(__version__, prog_name="perfkit")
def cli() -> None:
    """perfkit: performance-incident runbooks and postmortems for LLM serving and training."""


def _incident_params(live: dict[str, Any]) -> IncidentParams:
    """The incident parameters the :func:`live_options` of a command stand for."""
    from perfkit.sources.live import IncidentParams

    return IncidentParams.from_mapping(live)


def _live(live: dict[str, Any]) -> tuple[Incident, LiveEvidence]:
    from perfkit.core.secrets import parameter_warnings
    from perfkit.sources.live import open_live

    wanted = _incident_params(live)
    incident = wanted.incident()
    cfg = wanted.live_config()
    for warning in parameter_warnings(cfg.as_parameters()):
        click.echo(f"perfkit: warning: {warning}", err=True)
    return incident, open_live(cfg, incident)


def bundle_path(text: str) -> Path:
    """A ``--bundle`` value: a folder, or the name of an embedded incident (``demo``)."""
    from perfkit.app.runner.embedded import bundle_path as resolve

    return resolve(text)


def _params(pairs: tuple[str, ...]) -> dict[str, Any]:
    from perfkit.app.runner.parameters import parse_parameter

    return dict(parse_parameter(p) for p in pairs)


def _printable(text: str) -> str:
    """``text`` without control characters (a notebook's heading may hold any)."""
    return "".join(ch for ch in text if ch.isprintable())


def cell_progress() -> Any:
    """A line on stderr as each runbook section starts: where the run is and for how long."""

    def report(index: int, count: int, title: str, elapsed_s: float) -> None:
        click.echo(f"  [{index:>2}/{count}] {elapsed_s:6.1f} s  {_printable(title)}", err=True)

    return report


def _print_outputs(result) -> None:
    click.echo(f"executed notebook: {result.notebook}")
    for key in ("markdown", "html", "findings"):
        if key in result.outputs:
            click.echo(f"{key:>9}: {result.outputs[key]}")


@cli.command()
@click.argument("runbook")
@click.option(
    "--bundle",
    type=click.Path(file_okay=False),
    help="incident bundle folder, or an embedded incident's name (demo: the runbook's own demo)",
)
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="output folder")
@click.option(
    "-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help="runbook parameter (repeatable)"
)
@click.option(
    "--force", is_flag=True, help="replace OUT even if it holds perfkit files changed since they were written"
)
@live_options
def run(
    runbook: str, bundle: str | None, out: str, params: tuple[str, ...], force: bool, **live: Any
) -> None:
    """Execute RUNBOOK with papermill and write the postmortem into OUT (from a bundle or live sources).

    Exit 0 when the runbook ran on its evidence (sections without evidence are listed), 1 when a
    cell failed or the evidence source could not be opened, 2 on invalid parameters, 128+N on signal N.
    """
    from perfkit.app.runner.run import DEMO, Interrupted, execute

    parameters = _params(params)
    if bundle:  # `demo` is the runbook's own embedded demo, resolved by the run
        parameters["bundle"] = bundle if bundle == DEMO else str(bundle_path(bundle))
    wanted = _incident_params(live)
    for name, value in wanted.runbook_parameters().items():
        if name != "timeout_s":  # the timeout goes to live runs only (below)
            parameters[name] = value
    if wanted.prometheus_url and not bundle:
        parameters["bundle"] = ""
        parameters["timeout_s"] = wanted.timeout_s
    try:
        result = execute(
            runbook,
            Path(out),
            parameters,
            force=force,
            source="-p/options",
            require_evidence=True,
            progress=cell_progress() if sys.stderr.isatty() else None,
        )
    except Interrupted as exc:
        _print_outputs(exc.result)
        click.echo(f"perfkit: {exc}", err=True)
        sys.exit(128 + exc.signum)
    for warning in result.warnings:
        click.echo(f"perfkit: warning: {warning}", err=True)
    _print_outputs(result)
    t = result.timings
    click.echo(
        f"    times: execute {t.get('execute_s', 0):.1f} s, render {t.get('render_s', 0):.1f} s, "
        f"total {t.get('total_s', 0):.1f} s"
    )
    if result.missing:
        click.echo(f"  sections without evidence: {', '.join(result.missing)} (see each section)")
    if result.error:
        click.echo(
            f"perfkit: runbook failed: {result.error} (the partial record and postmortem are in {result.folder})",
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
@click.option("--force", is_flag=True, help="replace records whose perfkit files were changed since written")
def batch(file: str, jobs: int, out: str, force: bool) -> None:
    """Run every incident listed in FILE (YAML) into OUT/<name>/; one failure does not stop the others.

    Exit 0 when every incident ran on its evidence, 1 when any failed, 2 when FILE is invalid.
    """
    from perfkit.app.cli.console import make_console
    from perfkit.app.runner.batch import load_batch, run_batch

    items = load_batch(Path(file))
    try:
        failed = run_batch(items, Path(out), jobs=max(1, min(jobs, 64)), force=force, console=make_console())
    except KeyboardInterrupt:
        click.echo(
            "perfkit: batch interrupted; partial records were written where runs had started", err=True
        )
        sys.exit(130)
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
@click.option(
    "--fresh", is_flag=True, help="start over: the existing notebook is kept beside as NAME.<time>.ipynb"
)
@click.option("--terminals", is_flag=True, help="let JupyterLab open shell terminals (off by default)")
def open_(
    runbook: str,
    bundle: str | None,
    out: str | None,
    params: tuple[str, ...],
    port: int,
    no_lab: bool,
    fresh: bool,
    terminals: bool,
) -> None:
    """Write a parameterized copy of RUNBOOK into an incident folder and open it in JupyterLab.

    An incident notebook that is already there is re-opened as it is (your notes are kept);
    --fresh starts over and keeps the old one beside it.
    """
    from perfkit.app.runner.lab_open import open_runbook
    from perfkit.app.runner.parameters import plain_parameters
    from perfkit.core.secrets import parameter_warnings

    parameters = plain_parameters(_params(params), source="-p")
    if bundle:
        parameters["bundle"] = str(bundle_path(bundle))
    folder = Path(out) if out else Path("out/incidents") / (Path(bundle).name if bundle else "incident")
    for warning in parameter_warnings(parameters):
        click.echo(f"perfkit: warning: {warning}", err=True)
    open_runbook(
        runbook, folder, parameters, port=port, start_lab=not no_lab, fresh=fresh, terminals=terminals
    )


@cli.command()
@click.option("--bundle", type=click.Path(file_okay=False), help="incident bundle folder")
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="table", show_default=True)
@click.option(
    "--engine",
    "serving",
    type=click.Choice(["vllm", "sglang", "trtllm", "dynamo", "tgi", "triton"]),
    default=None,
    help="read only this serving engine's series (default: the first engine found; docs/engines.md)",
)
@click.option(
    "--tensorboard",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="a training job's TensorBoard event files (folder) kept outside the bundle (default: its tensorboard/)",
)
@live_options
def triage(bundle: str | None, fmt: str, serving: str | None, tensorboard: str | None, **live: Any) -> None:
    """Run the triage table on a bundle or live sources; print the triage JSON of docs/bundle.md or a table."""
    from perfkit.triage.table import triage_bundle, triage_evidence

    if bundle:
        result = triage_bundle(
            bundle_path(bundle),
            scope=live.get("scope"),
            hosts=live.get("hosts"),
            serving=serving,
            tensorboard=tensorboard,
        )
    elif live.get("prometheus_url"):
        from perfkit.analyses.workloads import window_has_samples

        if tensorboard:
            raise click.UsageError("--tensorboard goes with --bundle (live sources read no event files)")

        incident, ev = _live(live)
        if not window_has_samples(ev.engine, incident.window):  # type: ignore[arg-type]
            w = incident.window
            raise SourceError(
                f"no samples of any series perfkit reads (serving engines, DCGM, node exporter, train_*) from "
                f"{w.start:%Y-%m-%dT%H:%M:%SZ} to {w.end:%Y-%m-%dT%H:%M:%SZ}"
                f"{' in scope ' + _printable(str(live['scope'])) if live.get('scope') else ''}: check the window "
                "(--since/--start/--end), the scope and that Prometheus scrapes the service"
            )
        engine: Any = ev.engine
        if serving:
            from perfkit.engine.dialects import OnlyEngine

            engine = OnlyEngine(engine, serving)
        result = triage_evidence(
            engine, incident, events=ev.events, logs=ev.logs, missing=ev.missing, notes=ev.notes
        )
    else:
        raise click.UsageError("give --bundle DIR or --prometheus URL with --start/--end (or --since)")
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    from perfkit.app.cli.console import triage_table

    triage_table(result)


@cli.command()
@click.option(
    "-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="bundle folder to write"
)
@click.option(
    "--match",
    default=None,
    help="regex of metric names to keep (default: the serving engines', DCGM, node, train_)",
)
@live_options
def capture(out: str, match: str | None, **live: Any) -> None:
    """Freeze a window's evidence (and its baseline) from live sources into an incident bundle."""
    from perfkit.sources.capture import DEFAULT_MATCH
    from perfkit.sources.capture import capture as run_capture

    if not live.get("prometheus_url"):
        raise click.UsageError("capture needs --prometheus URL and --start/--end (or --since)")
    incident, ev = _live(live)
    from rich.progress import Progress

    from perfkit.app.cli.console import make_console

    with Progress(console=make_console(), transient=True) as progress:
        task = progress.add_task("capturing", total=None)
        facts = run_capture(
            ev.engine,
            incident,
            Path(out),
            match=match or DEFAULT_MATCH,
            logs=ev.log_files,
            events=ev.events,
            progress=lambda text: progress.update(task, description=text),
        )
    click.echo(
        f"bundle: {out} ({facts['metrics']} metrics, {facts['samples']:,} samples, {facts['logs']} log files, "
        f"{facts['events']} events)"
    )
    for m in ev.missing:
        click.echo(f"  missing: {m}")


@cli.command()
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="every embedded scenario")
@click.option(
    "-o", "--out", "out", default="data/scenarios", show_default=True, type=click.Path(file_okay=False)
)
def generate(names: tuple[str, ...], all_: bool, out: str) -> None:
    """Simulate embedded incident scenarios into bundles (seeded: same input, same bundle)."""
    from perfkit.app.runner.embedded import specs

    every = specs()
    chosen = list(every) if all_ else list(names)
    unknown = [n for n in chosen if n not in every]
    if unknown or not chosen:
        raise click.BadParameter(f"choose from {', '.join(every)} (or --all)", param_hint="NAMES")
    for name in chosen:
        spec, gen = every[name]
        facts = gen(spec(), Path(out) / name)
        click.echo(
            f"{name}: {facts.get('lines', 0)} metric lines, simulated in {facts['simulate_s']:.1f} s "
            f"→ {Path(out) / name}"
        )


cli.add_command(lab)


def _attach_drill() -> None:
    """``perfkit drill list/start/check``: their commands live in :mod:`perfkit.app.cli.drill`."""
    from perfkit.app.cli.drill import drill

    cli.add_command(drill)


_attach_drill()


def _attach() -> None:
    """Commands that live in their own modules: load tests, baselines and the gate, the lab server."""
    from perfkit.app.cli.compare import compare
    from perfkit.app.cli.gate import baseline, gate
    from perfkit.app.cli.loadgen import bench
    from perfkit.app.cli.scaling import scaling_cmd
    from perfkit.app.cli.serve import serve
    from perfkit.app.cli.trace import trace
    from perfkit.app.cli.whatif import whatif

    cli.add_command(bench)
    cli.add_command(baseline)
    cli.add_command(gate)
    cli.add_command(trace)
    cli.add_command(compare)
    cli.add_command(scaling_cmd)
    lab.add_command(serve)
    lab.add_command(whatif)


_attach()


def main() -> None:
    cli()
