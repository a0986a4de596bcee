"""``perfkit batch``: run many incidents headless, one OUT folder each; failures don't stop the rest.

The batch file is a YAML list::

    - name: inc-1042                       # output folder name (default: the bundle's name)
      runbook: inference_latency           # default inference_latency
      bundle: data/scenarios/release-regression
      parameters: {start: "2026-11-18T13:50:00Z"}

The file is hostile input: loaded safely with alias expansion capped (:mod:`perfkit.sources.safeyaml`),
parameters must be plain data (:mod:`perfkit.app.runner.parameters`, refused with the file and line), and a
name is one safe path component, so every record lands inside OUT.
"""

from __future__ import annotations

import multiprocessing
import re
import signal
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from perfkit.errors import ConfigError, PerfkitError

if TYPE_CHECKING:
    from rich.console import Console

#: One path component: starts with a letter or digit, no separators, no "..", at most 100 characters.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass
class BatchItem:
    name: str
    runbook: str
    bundle: str | None
    parameters: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # FILE:LINE of the entry


@dataclass
class BatchRow:
    name: str
    error: str | None
    seconds: float
    folder: str
    missing: list[str] = field(default_factory=list)


def safe_name(name: str, *, where: str) -> str:
    """``name`` when it is one safe path component, else ConfigError naming ``where``."""
    if not SAFE_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"{where}: name {name[:60]!r} is not a plain folder name "
            "(letters, digits, '.', '_', '-'; no '/' or '..'): records stay inside the output folder"
        )
    return name


def _default_name(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip(".-_")[:100]
    return cleaned or "incident"


def _nodes(text: str) -> Any:
    """The YAML node tree (for line numbers); None when it cannot be composed."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def _line(node: Any, path: tuple[Any, ...]) -> int | None:
    """1-based line of the value at ``path`` (indexes and keys) in ``node``, or of its nearest parent."""
    line = node.start_mark.line + 1 if node is not None else None
    for step in path:
        child = None
        if isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            child = node.value[step]
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if getattr(k, "value", None) == step:
                    child = v
                    break
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line


def load_batch(path: Path) -> list[BatchItem]:
    from perfkit.app.runner.parameters import plain_parameters
    from perfkit.sources.safeyaml import load_yaml

    data = load_yaml(path)
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{path}: expected a non-empty YAML list of incidents")
    tree = _nodes(path.read_text(encoding="utf-8", errors="replace"))

    def at(*steps: Any) -> str:
        line = _line(tree, steps)
        return f"{path}:{line}" if line else str(path)

    items: list[BatchItem] = []
    names: set[str] = set()
    for i, entry in enumerate(data):
        where = at(i)
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: item {i + 1} is not a mapping")
        unknown = sorted(str(k) for k in entry if k not in ("name", "runbook", "bundle", "parameters"))
        if unknown:
            raise ConfigError(f"{where}: item {i + 1}: unknown key(s) {', '.join(unknown)}")
        for key in ("name", "runbook", "bundle"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise ConfigError(f"{at(i, key)}: {key} must be text, not {type(entry[key]).__name__}")
        bundle = entry.get("bundle")
        if bundle:
            bundle_path = Path(bundle)
            if not bundle_path.is_absolute():
                bundle_path = (
                    (path.parent / bundle_path) if (path.parent / bundle_path).is_dir() else bundle_path
                )
            if bundle_path.is_dir():  # else left as given: an embedded incident's name, checked by the run
                bundle = str(bundle_path.resolve())
        if entry.get("name"):
            name = safe_name(entry["name"], where=at(i, "name"))
        else:
            name = _default_name(Path(bundle).name if bundle else f"incident-{i + 1}")
        if name in names:
            raise ConfigError(f"{where}: item {i + 1}: duplicate name {name!r}")
        names.add(name)
        params = entry.get("parameters") or {}
        if not isinstance(params, dict):
            raise ConfigError(f"{at(i, 'parameters')}: parameters must be a mapping")
        params = plain_parameters(
            params,
            source=where,
            where=lambda p, i=i: at(i, "parameters", *p),  # type: ignore[misc]
        )
        items.append(BatchItem(name, str(entry.get("runbook") or "inference_latency"), bundle, params, where))
    return items


def _run_one(item: BatchItem, out: Path, force: bool) -> BatchRow:
    from perfkit.app.runner.run import Interrupted, execute

    params = dict(item.parameters)
    if item.bundle:
        params["bundle"] = item.bundle
    target = out / item.name
    try:
        result = execute(item.runbook, target, params, force=force, source=item.source, require_evidence=True)
    except Interrupted as exc:
        r = exc.result
        return BatchRow(item.name, str(exc), r.timings.get("total_s", 0.0), str(r.folder))
    except PerfkitError as exc:
        return BatchRow(item.name, str(exc), 0.0, "")
    except Exception as exc:  # one broken incident must not stop the batch
        return BatchRow(item.name, f"{type(exc).__name__}: {exc}", 0.0, "")
    return BatchRow(
        item.name, result.error, result.timings.get("total_s", 0.0), str(result.folder), result.missing
    )


def run_batch(
    items: list[BatchItem], out: Path, *, jobs: int = 1, force: bool = False, console: Console | None = None
) -> list[str]:
    """Run every item; print a progress bar and a summary table. Returns the names that failed.

    Every item's folder is checked before any runs (so a batch does not stop half-way on a folder
    it may not write). SIGTERM is passed on to the workers, which write their partial records.
    ``console``: where to print (the command line passes :func:`perfkit.app.cli.console.make_console`'s;
    by default one as wide when not a terminal, so IDs and paths are never folded).
    """
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table
    from rich.text import Text

    from perfkit.app.runner.records import check_target
    from perfkit.app.runner.run import RUNBOOKS

    for item in items:
        check_target(out / item.name, force=force, protected=[RUNBOOKS])
    console = console or Console(width=None if sys.stdout.isatty() else 200)  # as make_console's
    results: dict[str, BatchRow] = {}
    interrupted = False
    with Progress(console=console) as progress:
        task = progress.add_task("incidents", total=len(items))
        # spawn, not fork: a forked child inherits the parent's ZeroMQ state and can hang on its kernel
        with ProcessPoolExecutor(
            max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            previous = signal.getsignal(signal.SIGTERM)

            def forward(signum: int, frame: Any) -> None:
                for proc in list(getattr(pool, "_processes", {}).values()):
                    if proc.is_alive():
                        proc.terminate()  # SIGTERM: the worker's run scrubs and writes its partial record
                raise KeyboardInterrupt

            signal.signal(signal.SIGTERM, forward)
            futures = [pool.submit(_run_one, item, out, force) for item in items]
            try:
                for fut in as_completed(futures):
                    row = fut.result()
                    results[row.name] = row
                    progress.advance(task)
            except KeyboardInterrupt:
                interrupted = True
                for fut in futures:
                    fut.cancel()
                for fut in futures:  # the running ones end with their partial records written
                    if not fut.cancelled():
                        try:
                            row = fut.result(timeout=60)
                            results[row.name] = row
                        except Exception:  # noqa: S112 - a worker that died is reported as not run
                            continue
            finally:
                signal.signal(signal.SIGTERM, previous)
    table = Table(title=f"perfkit batch → {out}")
    for col in ("incident", "status", "seconds", "output / error"):
        table.add_column(col, overflow="fold")
    failed = []
    for item in items:
        row = results.get(item.name) or BatchRow(item.name, "not run (interrupted)", 0.0, "")
        if row.error:
            failed.append(item.name)
        detail = row.error or str(Path(row.folder) / "postmortem.html")
        if row.error and row.folder:
            detail += f" (partial record: {row.folder})"
        elif row.missing:
            detail += f" (sections without evidence: {', '.join(row.missing)})"
        table.add_row(
            Text(item.name),
            "[red]failed[/]" if row.error else "[green]ok[/]",
            f"{row.seconds:.1f}",
            Text(detail),  # text from errors and paths, never rich markup
        )
    console.print(table)
    console.print(f"{len(items) - len(failed)} ok, {len(failed)} failed")
    if interrupted:
        raise KeyboardInterrupt
    return failed
