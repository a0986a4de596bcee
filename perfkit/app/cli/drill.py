"""``perfkit drill``: game-day drills by neutral id (:mod:`perfkit.app.drills.recorded`), attached to the
command line in :mod:`perfkit.app.cli.main`. What a trainee sees before grading names neither the
scenario nor the direction; ``drill list --answers`` is the instructor's view."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from perfkit.app.cli.options import MAX_SEED, scope_options, scoped_incident


@click.group()
def drill() -> None:
    """Game-day drills: recorded incidents served as if live, graded against their answer keys."""


@drill.command("list")
@click.option("--answers", is_flag=True, help="the instructor's view: each drill's scenario and direction")
@click.option("--live", "live_only", is_flag=True, help="only the drills that run live on the simulator")
def drill_list(answers: bool, live_only: bool) -> None:
    """Drills by id, with their difficulty and a brief that gives nothing away."""
    from rich.markup import escape
    from rich.table import Table

    from perfkit.app.cli.console import make_console
    from perfkit.app.drills import recorded as d
    from perfkit.app.drills.live_specs import SPECS

    if not answers:
        table = Table(title="perfkit drills" + (" that run live" if live_only else ""))
        for col in ("drill", "difficulty", "live", "brief"):
            table.add_column(col, overflow="fold")
        for one in d.drills():
            if live_only and one.name not in SPECS:
                continue
            live = "yes" if one.name in SPECS else ""
            table.add_row(
                one.id, escape(one.difficulty), live, escape(one.brief)
            )  # text from files: no markup
        make_console().print(table)
        click.echo("start one with: perfkit drill start DRILL [--live]")
        return
    table = Table(title="perfkit drills: the answers (instructors only)")
    for col in ("drill", "scenario", "difficulty", "direction", "version"):
        table.add_column(col, overflow="fold")
    for one, a in d.answers():
        table.add_row(
            *(
                escape(str(v))
                for v in (one.id, one.name, one.difficulty, a["direction"], a.get("suspect_version") or "")
            )
        )
    make_console().print(table)


@drill.command("start")
@click.argument("name", metavar="DRILL")
@click.option(
    "-o",
    "--out",
    "out",
    default=None,
    type=click.Path(file_okay=False),
    help="incident folder (default out/drills/DRILL)",
)
@click.option(
    "--live",
    is_flag=True,
    help="the incident happens now, on the serving-engine simulator, scraped by a real Prometheus",
)
@click.option(
    "--recorded",
    is_flag=True,
    help="serve the recorded evidence from a local Prometheus (perfkit lab), as if live",
)
@click.option(
    "--speed",
    type=float,
    default=None,
    help="with --live: the simulator's clock runs this many times faster than the wall clock [default: 5]",
)
@click.option(
    "--seed",
    type=click.IntRange(0, MAX_SEED),
    default=None,
    help="with --live: fixes the fault's minute and the traffic",
)
@click.option(
    "--engine",
    type=click.Choice(["vllm", "sglang", "trtllm"]),
    default=None,
    help="with --live: the engine whose metric names and log lines the simulator speaks [default: vllm]",
)
@click.option("--lab/--no-lab", "start_lab", default=False, help="also open the runbook in JupyterLab")
@scope_options
def drill_start(
    name: str,
    out: str | None,
    live: bool,
    recorded: bool,
    speed: float | None,
    seed: int | None,
    engine: str | None,
    start_lab: bool,
    scope: str,
    hosts: str,
) -> None:
    """Set up an incident folder for DRILL (drill-07): the evidence, naming neither the cause nor the
    scenario, and a parameterized runbook. With --live the incident unfolds on the simulator: work it
    on the live Prometheus, then perfkit drill fix / status / stop."""
    from perfkit.app.drills.recorded import prepare, write_runbook
    from perfkit.core.scope import parse_scope

    if live and recorded:
        raise click.UsageError("--live runs the simulator, --recorded replays the evidence: choose one")
    if not live and (speed is not None or seed is not None or engine is not None):
        raise click.UsageError("--speed, --seed and --engine are for --live drills")
    if live:
        _start_live(name, out, speed, seed, start_lab, engine or "vllm")
        return
    parse_scope(scope, hosts)  # a typo fails before anything is written
    if recorded:
        from perfkit.lab.servers import binary

        binary("prometheus")  # a missing server fails before anything is written
    prepared = prepare(name, Path(out) if out else None, scope={"scope": scope, "hosts": hosts})
    label, bundle = prepared.label, prepared.bundle
    click.echo(f"drill {label}: evidence in {bundle}")
    if prepared.dropped:
        click.echo(f"  left out (binary files naming the answer): {', '.join(prepared.dropped)}")
    params = None
    if recorded:
        from perfkit.app.cli.lab import lab_parameters, lab_start
        from perfkit.sources.incident_file import read_incident

        lab_name = f"prometheus-{label}" if label.startswith("drill-") else f"prometheus-drill-{label}"
        server, _ = lab_start("prometheus", bundle, lab_name)
        given = {k: v for k, v in prepared.params.items() if k in ("scope", "hosts")}
        incident = scoped_incident(
            read_incident(bundle / "incident.yaml"), given.get("scope", ""), given.get("hosts", "")
        )
        params = lab_parameters(server.url, bundle.resolve(), incident)
        click.echo(f"recorded: metrics served by {server.url} (stop with: perfkit lab down {lab_name})")
    runbook = write_runbook(prepared, params)
    click.echo(f"work the incident in {runbook}, or run the runbook on it:")
    click.echo(f"  {run_command(prepared.runbook, prepared.folder / 'run', params or prepared.params)}")
    where = f" -o {prepared.folder}" if out else ""
    click.echo(f"then: perfkit drill check {label}{where} --answer DIRECTION [--version V]")
    if start_lab:
        from perfkit.app.runner.lab_open import open_runbook

        open_runbook(str(runbook), prepared.folder, {}, start_lab=True)


def _start_live(
    name: str, out: str | None, speed: float | None, seed: int | None, start_lab: bool, engine: str = "vllm"
) -> None:
    from perfkit.app.drills import live as L

    started = L.start(
        name, Path(out) if out else None, speed=speed or L.DEFAULT_SPEED, seed=seed, engine=engine
    )
    st, p = started.state, started.params
    plan, speed_x = st["plan"], st["speed"]
    click.echo(f"drill {started.label}: live on the simulator at {speed_x:g}x, in {started.folder}")
    if st.get("speed_asked"):
        click.echo(
            f"  this machine kept the drill clock at {st['sustained_asked']:.1f}x of the {st['speed_asked']:g}x asked "
            f"(measured over {L.PROBE_S:g} s at start, under the drill's load): it runs at {speed_x:g}x instead"
        )
    if st.get("sustained", speed_x) < L.HOLD_MIN * speed_x:
        click.echo(
            f"  warning: this machine keeps the drill clock at only {st['sustained']:.1f}x: the windows close later "
            "than said (the engine admits the load on its own clock, so the drill's load holds; "
            "perfkit drill status says how it goes)"
        )
    click.echo(f"  first scrape {started.first_scrape_s:.1f} s after the command started")
    click.echo(
        f"  Prometheus: {p['prometheus_url']}  (the drill clock: samples sit at its time, not the wall's)"
    )
    click.echo(
        f"  baseline {p['baseline_start']} .. {p['baseline_end']}; incident window {p['start']} .. {p['end']}"
    )
    wait = (plan["window"][1] - plan["v0"]) / speed_x
    click.echo(f"  the window is complete in about {wait:.0f} s (wall); then run the runbook on it:")
    click.echo(f"    {run_command('inference_latency', started.folder / 'run', p)}")
    click.echo(f"  or open {started.runbook} (parameterized for the live Prometheus)")
    where = f" -o {started.folder}" if out else ""
    click.echo(f"  perfkit drill status {started.label}{where}: what runs, and whether the fault is due")
    click.echo(
        f"then: perfkit drill check {started.label}{where} --answer DIRECTION; "
        f"perfkit drill fix {started.label}{where} --set KEY=VALUE | --remedy NAME; perfkit drill stop {started.label}{where}"
    )
    if start_lab:
        from perfkit.app.runner.lab_open import open_runbook

        open_runbook(str(started.runbook), started.folder, {}, start_lab=True)


_RUN_OPTIONS = {
    "prometheus_url": "--prometheus",
    "start": "--start",
    "end": "--end",
    "baseline_start": "--baseline-start",
    "baseline_end": "--baseline-end",
    "logs": "--logs",
    "deploys": "--deploys",
    "release_metric": "--release-metric",
    "service": "--service",
    "scope": "--scope",
    "hosts": "--hosts",
}


def run_command(runbook: str, out_dir: Path, params: dict[str, Any]) -> str:
    """The ``perfkit run`` command that executes ``runbook`` with ``params`` (a drill's runbook
    parameters: a bundle, or a Prometheus and its windows), every value shell-quoted."""
    from shlex import quote

    words = ["perfkit", "run", runbook, "-o", quote(str(out_dir))]
    for key, value in params.items():
        if value is None or value == "":
            continue
        if key == "bundle":
            words += ["--bundle", quote(str(value))]
        elif key in _RUN_OPTIONS:
            words += [_RUN_OPTIONS[key], quote(str(value))]
        else:  # SLOs, GPUs, price
            words += ["-p", quote(f"{key}={value}")]
    return " ".join(words)


def _folder(name: str, out: str | None) -> Path:
    """A live drill's folder: ``-o``, else the default folder of the drill as typed."""
    if out:
        return Path(out)
    from perfkit.app.drills.recorded import DEFAULT_FOLDER, resolve

    return DEFAULT_FOLDER / resolve(name)[1]


_OUT = click.option(
    "-o",
    "--out",
    "out",
    default=None,
    type=click.Path(file_okay=False),
    help="the drill's folder (as at start)",
)


@drill.command("fix")
@click.argument("name", metavar="DRILL")
@_OUT
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="an engine setting to change live (repeatable)"
)
@click.option(
    "--remedy",
    "remedies",
    multiple=True,
    type=click.Choice(["rollback", "drain", "isolate-tenant", "shed-load"]),
    help="an operational fix: roll the release back, drain this node, move the other tenant off, shed load",
)
def drill_fix(name: str, out: str | None, sets: tuple[str, ...], remedies: tuple[str, ...]) -> None:
    """Apply a fix to a live drill's engine now (e.g. --set enable_chunked_prefill=true), recorded on
    the drill clock; prints the before/after comparison to run once the after window has passed."""
    from perfkit.app.drills import live as L
    from perfkit.errors import ConfigError

    changes: dict[str, str] = {}
    for pair in sets:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"--set {pair[:60]!r}: expected KEY=VALUE, e.g. enable_chunked_prefill=true")
        changes[key.strip()] = value.strip()
    folder = _folder(name, out)
    done = L.fix(folder, changes, remedies)
    what = ", ".join([*(f"{k}={v}" for k, v in changes.items()), *remedies])
    click.echo(f"applied {what} at {done['at']} (drill clock)")
    state = L.read_state(folder)
    wait = max(0.0, (done["after_end_v"] - done["v"]) / state["speed"])
    click.echo(f"before: {done['before']}\nafter:  {done['after']}")
    if done.get("load"):
        click.echo(done["load"])
    click.echo(f"in about {wait:.0f} s (wall) the after window is complete; then see whether it worked:")
    click.echo(f"  {done['compare']}")


@drill.command("status")
@click.argument("name", metavar="DRILL")
@_OUT
def drill_status(name: str, out: str | None) -> None:
    """What runs, the drill clock, the windows, and whether the fault is still due or has happened."""
    import time

    from perfkit.app.drills import live as L

    folder = _folder(name, out)
    got = L.status(folder)
    st, sup, v = got["state"], got["supervisor"], got["v"]
    for key, alive in got["running"].items():
        rec = st["processes"][key]
        pid = rec.get("pid") if isinstance(rec, dict) else None
        click.echo(f"{key[:20]:>10}: {'running' if alive else 'not running'} (pid {pid!r:.20})")
    if got["load_stopped"] and not st.get("stopped"):
        click.echo(
            "warning: the drill's load has stopped: no requests reach the engine, so windows from now on "
            "judge nothing (a drill fix schedules more; or start the drill again)"
        )
    rate, at = sup.get("rate"), sup.get("rate_wall")
    fresh = isinstance(at, int | float) and time.time() - at < 30 and got["running"].get("engine")
    if isinstance(rate, int | float) and fresh and rate < L.HOLD_MIN * st["speed"] and not st.get("stopped"):
        click.echo(
            f"warning: the drill clock ran at {rate:.1f}x, not {st['speed']:g}x, over the last "
            "10 s: this machine is not keeping up, so the windows close later in wall time than said "
            "(the engine admits the load on the drill clock: the load itself stays the drill's)"
        )
    plan = st.get("plan") or {}
    if v is not None:
        click.echo(f"drill clock: {L.iso_at(st, v)} (virtual second {v:.0f}, {st['speed']:g}x)")
        scraped = got["scraped_v"]
        if scraped is not None and not st.get("stopped") and v - scraped > 2 * float(st["timing"]["scrape"]):
            click.echo(
                f"warning: Prometheus holds samples up to {L.iso_at(st, scraped)} only, {v - scraped:.0f} "
                "virtual seconds behind the drill clock: its scrapes are late on this machine, so a window "
                "that ends after that reads as quieter than it is; wait for them"
            )
    if plan:
        p = st.get("params", {})
        click.echo(
            f"baseline {p.get('baseline_start')} .. {p.get('baseline_end')}; window {p.get('start')} .. {p.get('end')}"
        )
        if v is not None and v < plan["window"][1]:
            click.echo(
                f"  the window is complete in about {(plan['window'][1] - v) / st['speed']:.0f} s (wall)"
            )
    if "injected_v" in sup:
        click.echo(f"the incident began at {L.iso_at(st, sup['injected_v'])} (drill clock)")
    elif plan:
        due = L.iso_at(st, plan["fault_at"])
        eta = f", in about {(plan['fault_at'] - v) / st['speed']:.0f} s (wall)" if v is not None else ""
        click.echo(f"the incident is due at {due} (drill clock){eta}")
    if sup.get("error"):  # its text may name the fault: the trainee gets where to look
        click.echo(
            "the supervisor could not start the incident yet (retrying; .live/supervisor.json says why)"
        )
    if sup.get("ended"):
        click.echo("the drill ended itself (its planned length passed, or the simulator stopped)")
    for f in st.get("fixes", []):
        what = ", ".join([*(f"{k}={x}" for k, x in (f.get("set") or {}).items()), *(f.get("remedies") or [])])
        click.echo(f"fix at {f['at']}: {what}")
    if st.get("stopped"):
        click.echo("stopped (the evidence stays in the folder)")


@drill.command("stop")
@click.argument("name", metavar="DRILL")
@_OUT
def drill_stop(name: str, out: str | None) -> None:
    """Stop a live drill's processes by PID; its folder (runbook, logs, Prometheus data) stays."""
    from perfkit.app.drills import live as L

    lines, malformed = L.stop(_folder(name, out))
    for line in lines:
        click.echo(line)
    if malformed:
        click.echo(
            "perfkit: error: the drill's state is malformed (above): those entries were left alone", err=True
        )
        sys.exit(2)


@drill.command("check")
@click.argument("name", metavar="DRILL")
@click.option(
    "--answer", "direction", required=True, help="the direction you conclude (a triage direction id)"
)
@click.option("--version", default=None, help="the suspect version, for a release regression")
@_OUT
def drill_check(name: str, direction: str, version: str | None, out: str | None) -> None:
    """Grade a trainee's conclusion, then say which incident it was, the evidence to look for and the fix."""
    from perfkit.app.drills.recorded import check

    grade = check(name, direction, version, live_params=_live_params(name, out))
    a, f = grade.answer, grade.found
    click.echo(
        ("CORRECT" if grade.correct else "NOT QUITE")
        + f": the direction was {a['direction']}"
        + (f", suspect version {a['suspect_version']}" if a.get("suspect_version") else "")
    )
    if grade.version_correct is False:
        click.echo(f"  the direction is right but the version is not: {version or 'none given'}")
    scenario = grade.drill.name if grade.drill else str(a.get("scenario", name))
    told = f"{grade.label} was the scenario {scenario}" if grade.label != scenario else f"scenario {scenario}"
    if a.get("base_scenario") and a.get("variant"):
        told += f" (the {a['variant']} variant of {a['base_scenario']})"
    click.echo(told)
    click.echo("evidence you should have seen:")
    for line in a.get("evidence", []):
        click.echo(f"  - {line}")
    if a.get("fix"):
        click.echo(f"fix: {a['fix']}")
    on = f" on {f['source']}" if f.get("source") else ""
    undecided = f.get("inconclusive") or []
    if f["direction"] is None and not undecided:
        click.echo(f"perfkit's triage{on}: every direction ruled out (nothing to fix)")
    elif f["direction"] is None:
        click.echo(f"perfkit's triage{on}: no direction confirmed; the rest ruled out, but not:")
    else:
        click.echo(f"perfkit's triage{on}: rank 1 {f['direction']} ({f['verdict']}): {f['why']}")
        click.echo(f"  quick check: {f['check']}")
    for row, why in undecided[:4]:
        click.echo(f"  inconclusive: {row}: {why}")
    _live_facts(name, out)
    sys.exit(0 if grade.correct else 1)


def _live_params(name: str, out: str | None) -> dict[str, Any] | None:
    """A live drill's runbook parameters (its live Prometheus and windows), None for other drills."""
    from perfkit.app.drills import live as L
    from perfkit.app.drills.live_state import state_path
    from perfkit.errors import ConfigError

    folder = _folder(name, out)
    if not state_path(folder).is_file():
        return None
    try:
        params = L.read_state(folder).get("params")
    except ConfigError:
        return None
    return params if isinstance(params, dict) else None


def _live_facts(name: str, out: str | None) -> None:
    """After grading, for a live drill: what the simulator was made to do, and when."""
    from perfkit.app.drills import live as L
    from perfkit.app.drills.live_state import state_path
    from perfkit.errors import ConfigError

    folder = _folder(name, out)
    if not state_path(folder).is_file():
        return
    try:
        st = L.read_state(folder)
    except ConfigError:
        return
    sup = L.supervisor_facts(folder)
    fault = ", ".join(f"{k}={v}" for k, v in st.get("fault", {}).items() if k != "fault")
    when = (
        f"at {L.iso_at(st, sup['injected_v'])} (drill clock)" if "injected_v" in sup else "(not injected yet)"
    )
    click.echo(f"live: the simulator's {st.get('fault', {}).get('fault')} fault ({fault}) {when}")
