"""``perfkit batch``: run many incidents headless, one OUT folder each; failures don't stop the rest.

The batch file is a YAML list::

    - name: inc-1042                       # output folder name (default: the bundle's name)
      runbook: inference_latency           # default inference_latency
      bundle: data/scenarios/release-regression
      parameters: {start: "2026-11-18T13:50:00Z"}
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from perfkit.errors import ConfigError, PerfkitError


@dataclass
class BatchItem:
    name: str
    runbook: str
    bundle: str | None
    parameters: dict[str, Any] = field(default_factory=dict)


def load_batch(path: Path) -> list[BatchItem]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{path}: expected a non-empty YAML list of incidents")
    items: list[BatchItem] = []
    names: set[str] = set()
    for i, entry in enumerate(data, start=1):
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: item {i} is not a mapping")
        bundle = entry.get("bundle")
        if bundle:
            bundle_path = Path(bundle)
            if not bundle_path.is_absolute():
                bundle_path = (
                    (path.parent / bundle_path) if (path.parent / bundle_path).is_dir() else bundle_path
                )
            bundle = str(bundle_path.resolve())
        name = str(entry.get("name") or (Path(bundle).name if bundle else f"incident-{i}"))
        if name in names:
            raise ConfigError(f"{path}: item {i}: duplicate name {name!r}")
        names.add(name)
        params = entry.get("parameters") or {}
        if not isinstance(params, dict):
            raise ConfigError(f"{path}: item {i}: parameters must be a mapping")
        items.append(BatchItem(name, str(entry.get("runbook") or "inference_latency"), bundle, dict(params)))
    return items


def _run_one(item: BatchItem, out: Path) -> tuple[str, str | None, float]:
    from perfkit.run import execute

    params = dict(item.parameters)
    if item.bundle:
        params["bundle"] = item.bundle
    try:
        result = execute(item.runbook, out / item.name, params)
    except PerfkitError as exc:
        return item.name, str(exc), 0.0
    except Exception as exc:  # one broken incident must not stop the batch
        return item.name, f"{type(exc).__name__}: {exc}", 0.0
    return item.name, result.error, result.timings.get("total_s", 0.0)


def run_batch(items: list[BatchItem], out: Path, *, jobs: int = 1) -> list[str]:
    """Run every item; print a progress bar and a summary table. Returns the names that failed."""
    from rich.progress import Progress
    from rich.table import Table

    from perfkit.console import make_console

    console = make_console()
    results: dict[str, tuple[str | None, float]] = {}
    with Progress(console=console) as progress:
        task = progress.add_task("incidents", total=len(items))
        # spawn, not fork: a forked child inherits the parent's ZeroMQ state and can hang on its kernel
        with ProcessPoolExecutor(
            max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            futures = [pool.submit(_run_one, item, out) for item in items]
            for fut in as_completed(futures):
                name, error, secs = fut.result()
                results[name] = (error, secs)
                progress.advance(task)
    table = Table(title=f"perfkit batch → {out}")
    for col in ("incident", "status", "seconds", "output / error"):
        table.add_column(col, overflow="fold")
    failed = []
    for item in items:
        error, secs = results[item.name]
        if error:
            failed.append(item.name)
        table.add_row(
            item.name,
            "[red]failed[/]" if error else "[green]ok[/]",
            f"{secs:.1f}",
            error or str(out / item.name / "postmortem.html"),
        )
    console.print(table)
    console.print(f"{len(items) - len(failed)} ok, {len(failed)} failed")
    return failed
