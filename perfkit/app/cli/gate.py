"""``perfkit baseline add|list|show`` and ``perfkit gate``: keep bench results, and judge a new one.

The integrator attaches :data:`baseline` and :data:`gate` to the top-level group in ``cli.py``,
whose :class:`~perfkit.app.cli.main.Cli` turns a :class:`~perfkit.errors.PerfkitError` into one line on
stderr and exit status 2. Exit codes mean one thing (issue 22): 0 pass, 1 a regression, 2 could
not judge (bad input, no comparable baseline, an invalid or empty run, nothing judged, and any
unexpected error: :func:`never_one` turns a crash into one line and exit 2, never 1). ``gate``
writes its verdict as JSON with ``-o``/``--out`` in every one of those cases, saying why. Text from
stored results (labels, ``meta.started``, a model name) is printed without control characters
(:func:`perfkit.app.cli.console.terminal_text`): a stored file cannot drive the terminal.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from perfkit.app.cli.console import terminal_text
from perfkit.errors import ConfigError, PerfkitError
from perfkit.loadgen import gate as gating
from perfkit.loadgen import store as stores

F = TypeVar("F", bound=Callable[..., Any])

STATUS_STYLE = {"regressed": "bold red", "improved": "green", "pass": "", "no-data": "dim"}
VERDICT_STYLE = {"pass": "bold green", "regress": "bold red", "unusable": "bold yellow"}

_index_option = click.option(
    "--index",
    type=click.IntRange(0, 9999),
    default=None,
    help="Which result of a file holding several (a guidellm sweep, vLLM --append-result).",
)
_store_option = click.option(
    "--store",
    "store_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The baseline store: a folder (git can hold it) with baselines/ inside.",
)


def _console() -> Console:
    """Wide when not a terminal (a CI log), so ids and metric names are never folded."""
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def _esc(text: Any) -> str:
    """Text from a stored result or a message, for rich: control characters out, markup escaped."""
    return escape(terminal_text(str(text)))


def _warn(message: str) -> None:
    click.echo(f"perfkit: warning: {terminal_text(message)}", err=True)


def never_one(command: str) -> Callable[[F], F]:
    """A command whose unexpected error (a bug, ``MemoryError``, ``RecursionError``) is one line and
    exit 2, "could not judge": exit 1 means a regression, and a crash is none. ``PerfkitError`` and
    click's own exits pass through (the top-level group prints the first, exit 2)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except (PerfkitError, click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
                raise
            except Exception as exc:  # noqa: BLE001 - any other failure: could not judge
                raise PerfkitError(crash_text(command, exc)) from None

        return run  # type: ignore[return-value]

    return wrap


def crash_text(command: str, exc: BaseException) -> str:
    """``perfkit gate: could not judge: RecursionError: ...`` (one line, bounded, no control characters)."""
    said = terminal_text(" ".join(str(exc).split()))[:200]
    return f"{command}: could not judge: {type(exc).__name__}{': ' + said if said else ''}"


@click.group("baseline")
def baseline() -> None:
    """Keep bench results as baselines in a store folder: add, list, show."""


@baseline.command("add")
@click.argument("result", type=click.Path(dir_okay=False, path_type=Path))
@_store_option
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="K=V",
    help="version=, config=, hardware= or any k=v (repeatable); hardware decides what the gate compares.",
)
@_index_option
@click.option(
    "--allow-invalid",
    is_flag=True,
    help="Store a run marked invalid, interrupted or uncalibrated all the same (as gate and compare).",
)
@click.option("--force", is_flag=True, hidden=True, help="Deprecated: --allow-invalid.")
@never_one("baseline add")
def add_command(
    result: Path,
    store_dir: Path,
    labels: tuple[str, ...],
    allow_invalid: bool,
    force: bool,
    index: int | None,
) -> None:
    """Store RESULT (a perfkit bench result, or a vLLM/guidellm/inference-perf one) as a baseline.

    Prints the new baseline's id. Exit 2 when it cannot be stored (an invalid run without
    --allow-invalid, a run already stored, an unreadable file).
    """
    if force:
        click.echo(
            "perfkit: note: baseline add --force is now --allow-invalid (the name gate and compare use)",
            err=True,
        )
    ident = stores.add(
        result,
        store_dir,
        stores.parse_labels(labels),
        force=allow_invalid or force,
        warn=_warn,
        index=index,
        require_calibration=True,
    )
    click.echo(ident)


def _format_option(fn: Any) -> Any:
    """``--format table|json`` as every command spells it (``--json``: the older, hidden spelling)."""
    fn = click.option("--json", "as_json", is_flag=True, hidden=True, help="the same as --format json")(fn)
    return click.option(
        "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
    )(fn)


@baseline.command("list")
@_store_option
@click.option("--model", default=None, help="Only the baselines of this model.")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Only baselines with this label.")
@_format_option
@never_one("baseline list")
def list_command(
    store_dir: Path, model: str | None, labels: tuple[str, ...], fmt: str, as_json: bool
) -> None:
    """The baselines of the store, newest first (JSON: id, started, model, labels, load)."""
    as_json = as_json or fmt == "json"
    skipped: list[str] = []

    def warn(message: str) -> None:
        skipped.append(message)
        _warn(message)

    found = stores.list_baselines(store_dir, model=model, labels=stores.parse_labels(labels), warn=warn)
    if as_json:
        rows = [
            {
                "id": b.id,
                "started": b.started,
                "added": b.added,
                "model": b.model,
                "labels": b.labels,
                "load": stores.load_signature(b.doc),
            }
            for b in found
        ]
        click.echo(json.dumps(rows, indent=1))
        return
    left_out = (
        f", {len(skipped)} file{'s' if len(skipped) != 1 else ''} skipped (see the warnings)"
        if skipped
        else ""
    )
    table = Table(title=_esc(f"baselines in {store_dir} ({len(found)}{left_out})"))
    table.add_column("id", no_wrap=True)
    for col in ("started", "load", "labels", "p50 TTFT ms", "p99 TTFT ms", "TPOT ms", "req/s", "errors"):
        table.add_column(col, overflow="fold")
    for b in found:
        table.add_row(
            _esc(b.id),
            _esc(str(b.started or b.added or "")),
            _esc(_load_text(b.doc)),
            _esc(", ".join(f"{k}={v}" for k, v in sorted(b.labels.items()))),
            _num(b.doc.get("median_ttft_ms")),
            _num(b.doc.get("p99_ttft_ms")),
            _num(b.doc.get("median_tpot_ms")),
            _num(b.doc.get("request_throughput")),
            _esc(_errors_text(b.doc)),
        )
    _console().print(table)


@baseline.command("show")
@click.argument("ident", metavar="ID")
@_store_option
@_format_option
@never_one("baseline show")
def show_command(ident: str, store_dir: Path, fmt: str, as_json: bool) -> None:
    """One baseline (ID or a unique start of it): its labels, load and summary (JSON: the stored document)."""
    as_json = as_json or fmt == "json"
    b = stores.show(store_dir, ident)
    if as_json:
        click.echo(json.dumps(b.doc, indent=1))
        return
    table = Table(title=_esc(f"baseline {b.id}"), show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    meta = _obj(b.doc.get("meta"))
    rows: list[tuple[str, str]] = [
        ("model", str(b.model)),
        ("started", str(b.started)),
        ("added", str(b.added)),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(b.labels.items())) or "-"),
        ("load", _load_text(b.doc)),
        ("target", str(meta.get("target"))),
        ("completed / failed", f"{b.doc.get('completed')} / {b.doc.get('failed')} ({_errors_text(b.doc)})"),
        ("valid", str(_obj(b.doc.get("validity")).get("valid"))),
        ("records", str(b.doc.get("records") or "-")),
    ]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        rows.append(
            (
                f"{metric.upper()} ms mean / median / p99",
                " / ".join(_num(b.doc.get(f"{s}_{metric}_ms")) for s in ("mean", "median", "p99")),
            )
        )
    rows.append(
        (
            "req/s, output tok/s",
            f"{_num(b.doc.get('request_throughput'))}, {_num(b.doc.get('output_throughput'))}",
        )
    )
    for name, value in rows:
        table.add_row(name, _esc(value))
    _console().print(table)


@click.command("gate")
@click.argument("result", type=click.Path(dir_okay=False, path_type=Path))
@_store_option
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A YAML policy: history, min_history, k, and per-metric max_regression, direction, floor, k, enabled.",
)
@click.option(
    "--history", type=int, default=None, help="Compare with the newest N comparable baselines (default 5)."
)
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the verdict as JSON to this FILE (in every case, saying why when it could not judge).",
)
@click.option("--allow-invalid", is_flag=True, help="Judge a run marked invalid (its reasons become a note).")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="K=V",
    help="Labels of RESULT (e.g. hardware=h200) over its own.",
)
@_index_option
@click.pass_context
def gate(
    ctx: click.Context,
    result: Path,
    store_dir: Path,
    policy_file: Path | None,
    history: int | None,
    out: Path | None,
    allow_invalid: bool,
    labels: tuple[str, ...],
    index: int | None,
) -> None:
    """Judge RESULT against the store's comparable baselines: exit 0 pass, 1 regression, 2 could not judge.

    Each metric's band comes from its measured noise: the runs' own intervals from their
    per-request records (RESULT.requests.parquet) and, from three baselines on, the history's spread.
    """
    if out is not None:
        _check_out(out, result, store_dir)
    try:
        policy = gating.Policy.from_file(policy_file) if policy_file else gating.Policy()
        policy = policy.with_history(history)
        verdict = gating.gate(
            result,
            store_dir,
            policy,
            allow_invalid=allow_invalid,
            labels=stores.parse_labels(labels),
            warn=_warn,
            index=index,
        )
        print_verdict(verdict, _console(), headline=verdict.overall != "unusable")
    except Exception as exc:  # noqa: BLE001 - bad input or a crash: could not judge, and said so
        message = str(exc) if isinstance(exc, PerfkitError) else crash_text("gate", exc)
        if out is not None:  # CI keeps a verdict file whatever happened
            _write_verdict(out, _unusable(message))
        raise PerfkitError(message) from None
    if out is not None:
        _write_verdict(out, verdict.as_dict())
        click.echo(f"verdict written to {out}", err=True)
    if verdict.overall == "unusable":
        click.echo(f"perfkit: gate: {terminal_text(verdict.headline())}", err=True)
    ctx.exit(verdict.exit_code)


def _unusable(why: str) -> dict[str, Any]:
    return {"schema": "perfkit.gate/1", "verdict": "unusable", "exit_code": 2, "summary": f"unusable: {why}", "reasons": [why]}  # fmt: skip


def _write_verdict(out: Path, doc: dict[str, Any]) -> None:
    """The verdict file; when the full verdict cannot be written (a value JSON refuses), a short one
    that says so, exit 2: a gate whose verdict is lost has not passed."""
    try:
        stores.write_json_atomic(doc, out)
    except (PerfkitError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        stores.write_json_atomic(_unusable(crash_text("gate: the verdict could not be written", exc)), out)
        raise PerfkitError(
            f"--out {out}: the verdict could not be written ({str(exc)[:120]}); wrote why"
        ) from None


def _check_out(out: Path, result: Path, store_dir: Path) -> None:
    """The verdict file may not replace the result judged nor anything in the store; its folder is made."""
    target = out.resolve()
    if target == result.resolve() or target.is_relative_to(store_dir.resolve()):
        raise ConfigError(f"--out {out}: that is the result or inside the store; write the verdict elsewhere")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create its folder ({exc.strerror or exc})") from None


def print_verdict(verdict: gating.Verdict, console: Console, *, headline: bool = True) -> None:
    """Failures first, then the verdict line, the other notes, then the table with the regressed
    metrics on top.

    ``headline=False`` leaves the verdict line out (``gate`` says an unusable verdict on stderr)."""
    failures = [n for n in verdict.notes if n.startswith("the new result has")]
    for note in failures:
        console.print(f"[bold red]{_esc(note)}[/]")
    if headline:
        console.print(f"[{VERDICT_STYLE[verdict.overall]}]{_esc(verdict.headline())}[/]")
    for reason in verdict.reasons[1:]:
        console.print(f"[yellow]also: {_esc(reason)}[/]")
    for note in verdict.notes:
        if note not in failures:
            console.print(f"[yellow]{_esc(note)}[/]")
    if verdict.history:
        ids = ", ".join(h["id"] for h in verdict.history)
        console.print(_esc(f"history ({len(verdict.history)}, newest first): {ids}"), style="dim")
    if not verdict.rows:
        return
    table = Table(
        title="gate: new result vs the median of its history (band = allowed worsening, the largest of "
        "its terms; noise = k x the measured SD, from the runs' own intervals, within-run CI, and the "
        "history's spread, history MAD)"
    )
    for col in (
        "metric",
        "status",
        "baseline median",
        "spread",
        "band",
        "noise",
        "noise from",
        "limit",
        "new",
        "change",
        "n",
    ):
        table.add_column(col, justify="left" if col in ("metric", "status", "noise from") else "right")
    for row in verdict.rows:
        style = STATUS_STYLE[row.status]
        table.add_row(
            f"{row.metric} ({'↓' if row.direction == gating.LOWER else '↑'} better)",
            f"[{style}]{row.status}{_why(row.why)}[/]" if style else row.status,
            _value(row.median, row.unit),
            _value(row.spread, row.unit),
            f"{_value(row.band, row.unit)} ({row.band_from})" if row.band_from else "-",
            _value(row.noise, row.unit),
            row.noise_from if row.status != "no-data" else "-",
            _value(row.limit, row.unit),
            _value(row.new, row.unit),
            "-" if row.change_pct is None else f"{row.change_pct:+.1f} %",
            str(row.n),
        )
    console.print(table)


def _why(why: str | None) -> str:
    """`` (too few requests for p99)``: a row's reason, its first clause (the notes say the rest)."""
    return f" ({_esc(why.split(':')[0])})" if why else ""


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "frac":
        return f"{value * 100:.2f} %"
    return f"{value:,.2f} {unit}".rstrip()


def _num(value: Any) -> str:
    return "-" if not isinstance(value, int | float) or isinstance(value, bool) else f"{value:,.2f}"


def _errors_text(doc: dict[str, Any]) -> str:
    errors = _obj(doc.get("errors"))
    rate = errors.get("rate")
    total = errors.get("total", doc.get("failed"))
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        return f"{total} ({rate * 100:.1f} %)"
    return str(total if total is not None else "-")


def _load_text(doc: dict[str, Any]) -> str:
    sig = stores.load_signature(doc)
    parts = [str(sig.get("shape") or "?")]
    for key, short in (
        ("concurrency", "c"),
        ("rate", "rate"),
        ("prompt_tokens", "in"),
        ("output_tokens", "out"),
    ):
        if sig.get(key) is not None:
            parts.append(f"{short}={sig[key]}")
    if sig.get("replay.source"):
        parts.append(f"trace={sig['replay.source']} x{sig.get('replay.time_scale')}")
    if sig.get("endpoint"):
        parts.append(str(sig["endpoint"]))
    return " ".join(parts)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
