"""Read an incident bundle (DESIGN.md §4) from disk into frames.

Missing parts are not errors: a bundle without ``logs/`` or ``events.csv`` loads, and the gap is
listed in :attr:`Bundle.missing` so runbooks can say what they could not check. Malformed parts
are errors naming the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from perfkit.errors import BundleError
from perfkit.frames import EVENTS_SCHEMA, LOG_SCHEMA, STATS_SCHEMA, MetricStore
from perfkit.incident import Incident, read_incident
from perfkit.sources import openmetrics


@dataclass
class Bundle:
    path: Path
    incident: Incident
    store: MetricStore
    events: pl.DataFrame
    logs: pl.DataFrame
    stats: pl.DataFrame
    unknown_log_lines: int = 0
    files: dict[str, list[str]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def load_bundle(path: str | Path, *, incident: Incident | None = None) -> Bundle:
    """Load everything a bundle holds; ``incident`` overrides its incident.yaml (e.g. a runbook's window)."""
    root = Path(path)
    if not root.is_dir():
        raise BundleError("bundle folder not found", path=str(root))
    inc = incident or read_incident(root / "incident.yaml")
    missing: list[str] = []
    files: dict[str, list[str]] = {}

    metric_files = sorted((root / "metrics").glob("*.om")) if (root / "metrics").is_dir() else []
    if not (root / "metrics").is_dir():
        missing.append("metrics: the bundle has no metrics/ folder")
    elif not metric_files:
        missing.append("metrics: metrics/ holds no *.om files")
    store = openmetrics.read_files(metric_files) if metric_files else MetricStore()
    files["metrics"] = [str(p.relative_to(root)) for p in metric_files]

    from perfkit.sources.events import read_events

    events_path = root / "events.csv"
    if events_path.exists():
        events = read_events(events_path)
    else:
        events = pl.DataFrame(schema=EVENTS_SCHEMA)
        missing.append("events: no events.csv (deploy history unknown)")

    log_paths = (
        sorted(p for p in (root / "logs").glob("*") if p.is_file()) if (root / "logs").is_dir() else []
    )
    files["logs"] = [str(p.relative_to(root)) for p in log_paths]
    logs = pl.DataFrame(schema=LOG_SCHEMA)
    stats = pl.DataFrame(schema=STATS_SCHEMA)
    unknown = 0
    if log_paths:
        from perfkit.sources.logs import read_logs

        result = read_logs(log_paths, window=inc.window)
        logs, stats, unknown = result.records, result.stats, result.unknown
        missing.extend(f"logs: {err}" for err in result.errors)
    else:
        missing.append("logs: the bundle has no logs/")
    return Bundle(root, inc, store, events, logs, stats, unknown, files, missing)
