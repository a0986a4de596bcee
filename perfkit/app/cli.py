"""The ``perfkit`` command line: run, postmortem, batch, open, triage, generate, lab, drill; bench,
baseline and gate (their modules: ``loadgen_cli``, ``gate_cli``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfkit import __version__
from perfkit.app.options import live_options, scope_options, scoped_incident
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
    from perfkit.app.embedded import bundle_path as resolve

    return resolve(text)


def _params(pairs: tuple[str, ...]) -> dict[str, Any]:
    from perfkit.app.parameters import parse_parameter

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
    from perfkit.app.run import DEMO, Interrupted, execute

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
    from perfkit.app.batch import load_batch, run_batch

    items = load_batch(Path(file))
    try:
        failed = run_batch(items, Path(out), jobs=max(1, min(jobs, 64)), force=force)
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
    from perfkit.app.lab_open import open_runbook
    from perfkit.app.parameters import plain_parameters
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
@live_options
def triage(bundle: str | None, fmt: str, **live: Any) -> None:
    """Run the triage table on a bundle or live sources; print the triage JSON of docs/bundle.md or a table."""
    from perfkit.triage.table import triage_bundle, triage_evidence

    if bundle:
        result = triage_bundle(bundle_path(bundle), scope=live.get("scope"), hosts=live.get("hosts"))
    elif live.get("prometheus_url"):
        from perfkit.analyses.workloads import window_has_samples

        incident, ev = _live(live)
        if not window_has_samples(ev.engine, incident.window):  # type: ignore[arg-type]
            w = incident.window
            raise SourceError(
                f"no samples of any series perfkit reads (vLLM, DCGM, node exporter, train_*) from "
                f"{w.start:%Y-%m-%dT%H:%M:%SZ} to {w.end:%Y-%m-%dT%H:%M:%SZ}"
                f"{' in scope ' + _printable(str(live['scope'])) if live.get('scope') else ''}: check the window "
                "(--since/--start/--end), the scope and that Prometheus scrapes the service"
            )
        result = triage_evidence(ev.engine, incident, events=ev.events, logs=ev.logs, missing=ev.missing)
    else:
        raise click.UsageError("give --bundle DIR or --prometheus URL with --start/--end (or --since)")
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    from perfkit.app.console import triage_table

    triage_table(result)


@cli.command()
@click.option(
    "-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="bundle folder to write"
)
@click.option(
    "--match", default=None, help="regex of metric names to keep (default: vLLM, DCGM, node, train_)"
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

    from perfkit.app.console import make_console

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
    from perfkit.app.embedded import specs

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


@cli.group()
def lab() -> None:
    """Local Prometheus/VictoriaMetrics loaded with a bundle, to run runbooks against a live API."""


def _lab_dir() -> Path:
    import os

    return Path(os.environ.get("PERFKIT_LAB_DIR") or Path.home() / ".cache" / "perfkit" / "lab")


def lab_parameters(url: str, root: Path, incident) -> dict[str, Any]:
    """Runbook parameters that reproduce the bundle's findings against the lab server."""
    window = incident.window.as_dict()
    params: dict[str, Any] = {
        "bundle": "",
        "prometheus_url": url,
        "start": window["start"],
        "end": window["end"],
    }
    if incident.baseline:
        params["baseline_start"] = incident.baseline.as_dict()["start"]
        params["baseline_end"] = incident.baseline.as_dict()["end"]
    params["service"] = incident.service
    if (root / "events.csv").exists():
        params["deploys"] = str(root / "events.csv")
    if (root / "logs").is_dir():
        params["logs"] = str(root / "logs")
    for key in ("ttft_p95_s", "tpot_p95_s", "itl_p95_s", "e2e_p99_s"):
        if key in incident.slo:
            params[f"slo_{key}"] = incident.slo[key]
    if incident.hardware.usd_per_gpu_hour:
        params["gpu_count"] = incident.hardware.count
        params["usd_per_gpu_hour"] = incident.hardware.usd_per_gpu_hour
    for key in ("scope", "hosts"):
        if getattr(incident, key):
            params[key] = getattr(incident, key)
    return params


def _lab_start(engine: str, root: Path, name: str, *, port: int = 0):
    """Start a lab server for ``root`` under the lab folder ``name`` and record its PID there."""
    from perfkit.lab.servers import start

    workdir = _lab_dir() / name
    if (workdir / "state.json").exists():
        raise click.ClickException(f"{name} is already up (perfkit lab down {name})")
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)
    server = start(engine, root, workdir, port=port, detach=True)
    (workdir / "state.json").write_text(json.dumps(server.as_dict(), indent=1))
    return server, workdir


@lab.command("up")
@click.argument("bundle")
@click.option(
    "--engine", type=click.Choice(["prometheus", "victoriametrics"]), default="prometheus", show_default=True
)
@click.option("--port", default=0, help="port on 127.0.0.1 (default: a free one)")
@scope_options
def lab_up(bundle: str, engine: str, port: int, scope: str, hosts: str) -> None:
    """Start ENGINE on 127.0.0.1 with BUNDLE loaded; print the URL to paste into a runbook.

    The server holds every workload of the bundle, as a fleet's Prometheus does; --scope goes into
    the parameters printed, so the runbook judges the affected one."""
    from perfkit.sources.incident_file import read_incident

    root = bundle_path(bundle)
    incident = scoped_incident(read_incident(root / "incident.yaml"), scope, hosts)
    name = f"{engine}-{root.name}"
    server, workdir = _lab_start(engine, root, name, port=port)
    click.echo(f"{engine} is up: {server.url}  (pid {server.pid}, data {workdir})")
    click.echo(
        "paste into the runbook's parameters (deploys and logs stand in for your deploy system and log store):"
    )
    for key, value in lab_parameters(server.url, root, incident).items():
        click.echo(f"  {key} = {json.dumps(value)}")
    click.echo(f"stop it with: perfkit lab down {name}")


@lab.command("down")
@click.argument("names", nargs=-1)
def lab_down(names: tuple[str, ...]) -> None:
    """Stop lab servers by the PID recorded when they started (all of them without NAMES)."""
    from perfkit.lab.servers import LabServer, NotOurProcess

    root = _lab_dir()
    states = sorted(root.glob("*/state.json")) if root.exists() else []
    if names:
        states = [s for s in states if s.parent.name in names]
        unknown = set(names) - {s.parent.name for s in states}
        if unknown:
            raise click.ClickException(f"no lab server named {', '.join(sorted(unknown))}")
    if not states:
        click.echo("no lab server is up")
        return
    for state in states:
        try:
            server = LabServer(**json.loads(state.read_text()))
        except (ValueError, TypeError) as exc:
            click.echo(
                f"{state.parent.name}: unreadable state ({type(exc).__name__}); removed, nothing signalled"
            )
            state.unlink()
            continue
        try:
            was_running = server.stop()
        except NotOurProcess as err:
            click.echo(f"{state.parent.name}: {err}; removed its stale state")
        else:
            click.echo(
                f"stopped {state.parent.name} (pid {server.pid})"
                if was_running
                else f"{state.parent.name} was not running (pid {server.pid}); removed its state"
            )
        state.unlink()  # in every case: our server cannot be running under that PID any more


def _attach_drill() -> None:
    """``perfkit drill list/start/check``: their commands live in :mod:`perfkit.app.drill_cli`."""
    from perfkit.app.drill_cli import drill

    cli.add_command(drill)


_attach_drill()


def _attach() -> None:
    """Commands that live in their own modules: load tests, baselines and the gate, the lab server."""
    from perfkit.app.compare_cli import compare
    from perfkit.app.gate_cli import baseline, gate
    from perfkit.app.loadgen_cli import bench
    from perfkit.app.scaling_cli import scaling_cmd
    from perfkit.app.serve_cli import serve
    from perfkit.app.trace_cli import trace
    from perfkit.app.whatif_cli import whatif

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
