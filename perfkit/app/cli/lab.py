"""``perfkit lab up/down``: a local Prometheus or VictoriaMetrics loaded with a bundle, to run runbooks
against a live API; ``lab serve`` (:mod:`perfkit.app.cli.serve`) and ``lab whatif``
(:mod:`perfkit.app.cli.whatif`) join the group in :mod:`perfkit.app.cli.main`. ``perfkit drill start``
starts its Prometheus with :func:`lab_start`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from perfkit.app.cli.options import scope_options, scoped_incident


def embedded_bundle(text: str) -> Path:
    from perfkit.app.runner.embedded import bundle_path

    return bundle_path(text)


@click.group()
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


def lab_start(engine: str, root: Path, name: str, *, port: int = 0):
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

    root = embedded_bundle(bundle)
    incident = scoped_incident(read_incident(root / "incident.yaml"), scope, hosts)
    name = f"{engine}-{root.name}"
    server, workdir = lab_start(engine, root, name, port=port)
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
    from perfkit.lab.servers import DidNotExit, LabServer, NotOurProcess

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
        except DidNotExit as err:
            click.echo(f"{state.parent.name}: {err}")
            continue
        else:
            click.echo(
                f"stopped {state.parent.name} (pid {server.pid})"
                if was_running
                else f"{state.parent.name} was not running (pid {server.pid}); removed its state"
            )
        state.unlink()  # our server cannot be running under that PID any more
