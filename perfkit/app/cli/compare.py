"""``perfkit compare BEFORE AFTER``: did the fix work? Metric by metric, each change beside its noise band.

Each side is an incident bundle (its ``incident.yaml`` window, or ``--before``/``--after``), a bench
result (``perfkit bench``'s, or vLLM's, guidellm's, inference-perf's), or a window of a live
Prometheus (``--prometheus URL --before START/END --after START/END``; credentials by reference, as
every live command takes them). One bundle with ``--before`` and ``--after`` compares two windows of
it. A bundle is the server's view and a bench result the client's: the two are not compared.

Exit status as the gate's: 0 the fix worked, 1 it did not (within noise, traded, regressed), 2 the
input cannot be judged (unreadable, not comparable, no value for the symptom, or any unexpected
error: a crash is one line and exit 2, never 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from perfkit.analyses.compare import BY_KEY, Comparison, Side, judge
from perfkit.app.cli.console import terminal_text
from perfkit.app.cli.gate import never_one
from perfkit.core.incident import window_arg
from perfkit.errors import ConfigError, PerfkitError, SourceError

if TYPE_CHECKING:
    from perfkit.core.frames import Window

STYLE = {"worked": "bold green", "within-noise": "bold yellow", "mixed": "bold yellow",
         "regressed": "bold red", "unusable": "bold yellow"}  # fmt: skip
ROW_STYLE = {"improved": "green", "regressed": "bold red", "within noise": "", "no data": "dim"}
WINDOW = "START/END"
MAX_ARG = 4096
"""A path, URL or window longer than this is refused before anything is read."""


def _live_options(fn: Any) -> Any:
    """The live source's options, named as the runbook parameters they stand for (``perfkit.app.cli.options``)."""
    opts = [
        click.option("--prometheus", "prometheus_url", default="", help="Prometheus-compatible API base URL"),
        click.option("--token-env", "prometheus_token_env", default="", help="name of the env var holding the bearer token"),
        click.option("--token-file", "prometheus_token_file", default="", help="file holding the bearer token"),
        click.option("--basic-auth-user", "prometheus_basic_auth_user", default="", help="basic auth user (password from --password-env)"),
        click.option("--password-env", "prometheus_password_env", default="", help="name of the env var holding the basic-auth password"),
        click.option("--timeout", "timeout_s", default=30.0, show_default=True, type=click.FloatRange(min=0.1, max=3600), help="seconds one HTTP request may take"),
        click.option("--ca-file", "tls_ca_file", default="", help="CA bundle for an https source"),
        click.option("--scope", default="", help="the workload as PromQL label matchers, e.g. '{model_name=\"llama-70b\"}'"),
        click.option("--hosts", default="", help="the workload's hosts, comma-separated"),
    ]  # fmt: skip
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@click.command("compare")
@click.argument("before", required=False, metavar="BEFORE")
@click.argument("after", required=False, metavar="AFTER")
@click.option(
    "--before", "before_window", default="", metavar=WINDOW, help="the window before the fix (UTC ISO 8601)"
)
@click.option("--after", "after_window", default="", metavar=WINDOW, help="the window after the fix")
@click.option(
    "--baseline",
    "baseline_window",
    default="",
    metavar=WINDOW,
    help="an ordinary period before the incident, to name the symptom (a bundle's: from incident.yaml)",
)
@_live_options
@click.option(
    "--symptom",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", *BY_KEY]),
    help="the metric the fix was for; auto: the one that worsened most against the baseline",
)
@click.option(
    "--accept",
    multiple=True,
    type=click.Choice(list(BY_KEY)),
    help="a metric whose regression is the fix's known cost: shown, not counted (repeatable)",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--allow-invalid", is_flag=True, help="judge a bench run marked invalid (its reasons become a note)"
)
@click.pass_context
@never_one("compare")
def compare(ctx: click.Context, /, before: str | None, after: str | None, before_window: str, after_window: str,
            baseline_window: str, symptom: str, accept: tuple[str, ...], fmt: str, allow_invalid: bool,
            **live: Any) -> None:  # fmt: skip
    """Did the fix work? Compare BEFORE with AFTER metric by metric, each change beside its noise band.

    BEFORE and AFTER are bundle folders (or embedded incident names) or bench result files; or give
    --prometheus URL with --before START/END and --after START/END (one bundle with both windows
    compares two windows of it). Exit 0: the fix worked; 1: it did not; 2: the input cannot be judged.
    """
    for text in (before, after, before_window, after_window, baseline_window, live.get("prometheus_url")):
        if text and len(text) > MAX_ARG:
            raise ConfigError(f"an argument of {len(text)} characters, more than {MAX_ARG}: refused")
    windows = {k: window_arg(v, f"--{k}") for k, v in (("before", before_window), ("after", after_window), ("baseline", baseline_window))}  # fmt: skip
    if live.get("prometheus_url"):
        if before or after:
            raise click.UsageError(
                "with --prometheus the sides are windows: give --before and --after, not BEFORE/AFTER"
            )
        b, a = _live_sides(windows, live)
        reasons: list[str] = []
    elif not before:
        raise click.UsageError("give BEFORE and AFTER (bundles or bench results), or --prometheus URL with --before and --after")  # fmt: skip
    else:
        b, a, reasons = _path_sides(before, after, windows, allow_invalid, live["scope"], live["hosts"])
    result = judge(b, a, symptom=symptom, accept=accept)
    result.reasons.extend(reasons)
    if fmt == "json":
        click.echo(json.dumps(result.as_dict(), indent=1))
    else:
        print_comparison(result, _console())
    if result.overall == "unusable":
        click.echo(f"perfkit: compare: {terminal_text(result.headline())}", err=True)
    ctx.exit(result.exit_code)


# -- the sides --------------------------------------------------------------------------------------


def _open(bundle: str, **params: Any) -> Any:
    """A runbook context on a bundle or live source; its error (already redacted) raised."""
    from perfkit.app.runbooks.context import open_incident

    opened = open_incident(bundle, **params)
    if opened.error or opened.incident is None:
        raise SourceError(opened.error or f"{bundle or params.get('prometheus_url')}: no evidence loaded")
    return opened


def _live_sides(windows: dict[str, Window | None], live: dict[str, Any]) -> tuple[Side, Side]:
    from perfkit.analyses.compare_sides import window_side
    from perfkit.core.frames import iso
    from perfkit.core.secrets import parameter_warnings
    from perfkit.sources.live import IncidentParams

    wb, wa = windows["before"], windows["after"]
    if wb is None or wa is None:
        raise click.UsageError("with --prometheus give both --before START/END and --after START/END")
    early, late = sorted((wb, wa), key=lambda w: w.start)
    params = IncidentParams.from_mapping(
        {**live, "start": iso(late.start), "end": iso(late.end),
         "baseline_start": iso(early.start), "baseline_end": iso(early.end)}
    ).runbook_parameters()  # fmt: skip
    params["timeout_s"] = live.get("timeout_s")
    for warning in parameter_warnings(IncidentParams.from_mapping(params).live_config().as_parameters()):
        click.echo(f"perfkit: warning: {warning}", err=True)
    opened = _open("", **params)
    url = str(live["prometheus_url"])
    side_b = window_side(opened.engine, wb, f"{url} before", baseline=windows["baseline"])
    return side_b, window_side(opened.engine, wa, f"{url} after")


def _kind(text: str) -> tuple[str, Path]:
    if Path(text).expanduser().is_file():
        return "bench", Path(text).expanduser()
    from perfkit.app.runner.embedded import bundle_path

    try:
        return "bundle", bundle_path(text)
    except ConfigError:
        raise ConfigError(
            f"{text}: neither a bench result file nor a bundle folder (nor an embedded incident)"
        ) from None


def _path_sides(
    before: str,
    after: str | None,
    windows: dict[str, Window | None],
    allow_invalid: bool,
    scope: str = "",
    hosts: str = "",
) -> tuple[Side, Side, list[str]]:
    kb, pb = _kind(before)
    if after is None:
        if kb != "bundle" or windows["before"] is None or windows["after"] is None:
            raise click.UsageError(
                "with one BEFORE, it is a bundle and --before and --after are two windows of it"
            )
        return (*_bundle_sides(pb, pb, windows, scope, hosts), [])
    ka, pa = _kind(after)
    if kb != ka:
        raise ConfigError(
            f"{before} is a {kb} and {after} a {ka}: a bundle is the server's view of production traffic, a "
            "bench result the client's view of a test load; compare like with like"
        )
    if kb == "bundle":
        return (*_bundle_sides(pb, pa, windows, scope, hosts), [])
    if windows["before"] or windows["after"] or windows["baseline"]:
        raise click.UsageError(
            "--before, --after and --baseline are windows: they apply to bundles and live sources"
        )
    return _bench_sides(pb, pa, allow_invalid)


def _bundle_sides(
    pb: Path, pa: Path, windows: dict[str, Window | None], scope: str = "", hosts: str = ""
) -> tuple[Side, Side]:
    """Each bundle's incident window (or the window given), scoped to the workload given."""
    from perfkit.analyses.compare_sides import window_side
    from perfkit.core.frames import iso

    def opened(path: Path, window: Window | None) -> Any:
        span = {"start": iso(window.start), "end": iso(window.end)} if window else {}
        return _open(str(path), **span, scope=scope, hosts=hosts)

    ob = opened(pb, windows["before"])
    oa = ob if pa == pb and windows["after"] is None else opened(pa, windows["after"])
    wb, wa = ob.incident.window, oa.incident.window
    if pa == pb and windows["after"] is not None:
        wa = windows["after"]
    base = windows["baseline"] or ob.incident.baseline
    return window_side(ob.engine, wb, str(pb), baseline=base), window_side(oa.engine, wa, str(pa))


def _bench_sides(pb: Path, pa: Path, allow_invalid: bool) -> tuple[Side, Side, list[str]]:
    from perfkit.analyses.compare_sides import bench_side
    from perfkit.loadgen.gate import differences
    from perfkit.loadgen.store import Baseline, read_input

    db, da = read_input(pb), read_input(pa)
    reasons: list[str] = []
    for field, theirs, ours in differences(da, Baseline.from_doc(db), {}):
        if field != "hardware":  # a fix may move to other hardware; the load and model must be the same
            reasons.append(f"not the same test: {field} is {theirs!r} before and {ours!r} after")
    sides = []
    for path, doc in ((pb, db), (pa, da)):
        side = bench_side(doc, path.name, _samples(path, doc))
        if (doc.get("validity") or {}).get("valid") is False and not allow_invalid:
            reasons.append(f"{path.name} is marked invalid; judge it anyway with --allow-invalid")
        sides.append(side)
    return sides[0], sides[1], reasons


def _samples(path: Path, doc: dict[str, Any]) -> dict[str, Any] | None:
    """Per-request TTFT, TPOT and E2E (seconds) from the records beside a result, if there are any."""
    from perfkit.loadgen.result import records_path
    from perfkit.loadgen.summary import Gathered, gather

    rec = records_path(path, doc)
    if rec is None or not rec.is_file():
        return None
    try:
        g = gather(rec)
    except (OSError, ValueError, PerfkitError) as exc:
        click.echo(f"perfkit: warning: {rec.name}: records not read ({exc}); noise not estimated", err=True)
        return None
    return {"ttft": Gathered.cat(g.ttft), "tpot": Gathered.cat(g.tpot), "e2e": Gathered.cat(g.e2el)}


# -- output -----------------------------------------------------------------------------------------


def _esc(text: str) -> str:
    """Text from a result, a bundle or a server, for rich: control characters out, markup escaped."""
    return escape(terminal_text(text))


def _console() -> Console:
    """Wide when not a terminal (a CI log), so metric names are never folded."""
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def print_comparison(result: Comparison, console: Console) -> None:
    """The verdict line, the notes, then one row per metric."""
    from perfkit.analyses.compare import fmt_value

    console.print(f"[{STYLE[result.overall]}]{_esc(result.headline())}[/]")
    if result.symptom:
        console.print(_esc(f"symptom: {result.symptom} ({result.symptom_why})"), style="dim")
    for reason in result.reasons[1:]:
        console.print(f"[yellow]also: {_esc(reason)}[/]")
    for note in dict.fromkeys(result.notes):
        console.print(f"[yellow]{_esc(note)}[/]")
    b, a = result.before, result.after
    console.print(_esc(f"before: {b.name} ({b.noise}); after: {a.name} ({a.noise})"), style="dim")
    table = Table(title="after against before (band: the change noise can make)")
    for col in ("metric", "before", "after", "change", "band", "verdict"):
        table.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    for r in result.rows:
        style = ROW_STYLE[r.status]
        verdict = r.status + (f" ({r.why})" if r.why else "")
        table.add_row(
            _esc(r.label + (" ★" if r.metric == result.symptom else "") + (" ↓" if r.direction.startswith("lower") else " ↑")),
            r.shown("before"),
            r.shown("after"),
            "-" if r.change_pct is None else f"{r.change_pct:+.1f} %",
            f"±{fmt_value(r.band, r.unit)} ({r.band_from})" if r.band is not None else "-",
            f"[{style}]{_esc(verdict)}[/]" if style else _esc(verdict),
        )  # fmt: skip
    console.print(table)
