"""Read an incident bundle (docs/bundle.md) from disk into frames.

Missing parts are not errors: a bundle without ``logs/`` or ``events.csv`` loads, and the gap is
listed in :attr:`Bundle.missing` so runbooks can say what they could not check. Malformed parts
are errors naming the file and line.

A bundle is untrusted (a drill from someone else, a capture from another machine), so:

* a file or folder that resolves through a symlink to somewhere *outside* the bundle (``logs/``
  linked to ``/var/log``, ``metrics/a.om`` linked to ``/dev/zero``) is never opened: it is listed
  in :attr:`Bundle.missing` as refused, with its path (for ``incident.yaml``, which every bundle
  needs, it is a :class:`~perfkit.errors.BundleError`). Symlinks that stay inside are followed;
* a FIFO, device or socket is never opened; it is listed in :attr:`Bundle.missing`;
* every reader is bounded (:mod:`perfkit.sources.openmetrics`, :mod:`perfkit.sources.logs`,
  :mod:`perfkit.sources.safeyaml`; ``events.csv`` over :data:`MAX_EVENTS_BYTES` is not read).

``metrics/`` may hold OpenMetrics, ``promtool tsdb dump`` text, query API JSON and TSDB snapshots,
told apart by content (:mod:`perfkit.sources.metric_files`); a file of none of these formats, a
sub-folder of ``logs/`` and a file of ``traces/`` that is no trace are named in :attr:`Bundle.missing`.

A bundle may carry PyTorch profiler traces (``traces/``, one ``.json`` or ``.json.gz`` file per rank):
directly in ``traces/`` (one profiled run) or in sub-folders of it, one per run
(``traces/baseline/``, ``traces/incident/``: ranks of two runs cannot share a folder). They are
listed, not read (:attr:`Bundle.traces`, :meth:`Bundle.trace_runs`): ``perfkit.traces`` reads them,
streamed and bounded. At most :data:`MAX_TRACE_FILES` files in :data:`MAX_TRACE_RUNS` runs are
listed; what is left out, deeper folders and refused files are named in :attr:`Bundle.missing`.

A training job's own evidence is read too: its framework's step lines in ``logs/`` (Megatron-LM,
NeMo, torchtitan, DeepSpeed, the HF Trainer) and the TensorBoard event files under ``tensorboard/``
(:mod:`perfkit.sources.tensorboard`) become ``trainer_*`` series in the store
(:mod:`perfkit.sources.trainer_series`), described in :attr:`Bundle.trainer`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import polars as pl

from perfkit.core.frames import EVENTS_SCHEMA, LOG_SCHEMA, STATS_SCHEMA, MetricStore
from perfkit.core.incident import Incident, incident_scope
from perfkit.core.scope import Scope, ScopeReport, host_keys, is_infrastructure
from perfkit.engine.scope import scope_store
from perfkit.errors import BundleError
from perfkit.sources import openmetrics
from perfkit.sources.incident_file import read_incident
from perfkit.sources.metric_files import read_metrics, survey
from perfkit.sources.safeio import outside, refusal, size_text
from perfkit.sources.series_store import Select
from perfkit.sources.trainer_series import TrainerEvidence, trainer_store

MAX_EVENTS_BYTES = 64 * 2**20
"""Largest events.csv read: about half a million events, far more than any incident's history."""
TRACE_SUFFIXES = (".json", ".gz")
"""Trace file names as ``perfkit.traces`` reads them (``tensorboard_trace_handler`` writes
``*.pt.trace.json`` or, gzipped, ``*.pt.trace.json.gz``)."""
NOT_A_TRACE = "perfkit reads profiler traces named *.json or *.json.gz"
MAX_TRACE_FILES = 1024
"""Trace files listed at most: one per rank of a 1024-GPU job profiled whole (profiling usually
records a few ranks; each file is read streamed, so the bound is on the listing and the work)."""
MAX_TRACE_RUNS = 64
"""Sub-folders of ``traces/`` (profiled runs or windows) listed at most."""


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
    scope: ScopeReport | None = None  # what the workload scope kept (None: not scoped)
    traces: list[Path] = field(default_factory=list)  # profiler trace files under traces/, sorted
    trainer: TrainerEvidence | None = None  # a training framework's lines as series (merged into store)
    #: what was read but is less certain than it looks: log lines without a time of their own, placed
    #: by their stamped neighbours (sources.log_times), said once per file
    notes: list[str] = field(default_factory=list)

    def trace_runs(self) -> dict[str, list[Path]]:
        """The trace files by profiled run: ``""`` for files directly in ``traces/``, else the name
        of the sub-folder holding them (each one run: one file per rank)."""
        runs: dict[str, list[Path]] = {}
        base = self.path / "traces"
        for p in self.traces:
            rel = p.relative_to(base).parts
            runs.setdefault(rel[0] if len(rel) > 1 else "", []).append(p)
        return runs


def load_bundle(
    path: str | Path,
    *,
    incident: Incident | None = None,
    scope: Scope | None = None,
    families: openmetrics.Families = None,
    tensorboard: str | Path | None = None,
) -> Bundle:
    """Load everything a bundle holds; ``incident`` overrides its incident.yaml (e.g. a runbook's window).

    ``scope`` (default: the incident's ``scope:``/``hosts:``) keeps only the affected workload's
    series and those of its hosts (:mod:`perfkit.engine.scope`); a scope that matches nothing is a
    :class:`~perfkit.engine.scope.ScopeMatchesNothing` error. The scope is applied while the
    metrics are read (:func:`read_scoped`), so a fleet capture costs
    the memory of the workload's series, not of the fleet's.

    ``families`` (a set of sample names, or a predicate on them) reads only those metrics: the
    lines of every other family are skipped before they are split (and are not checked).

    ``tensorboard``: a folder of TensorBoard event files to read instead of the bundle's own
    ``tensorboard/`` (a training job's scalars kept elsewhere; given by the user, so it may lie
    outside the bundle). A framework's step lines in ``logs/`` and its scalars become ``trainer_*``
    series (:mod:`perfkit.sources.trainer_series`), kept in :attr:`Bundle.trainer` and merged into
    the store.

    Raises :class:`~perfkit.errors.BundleError` for a missing folder, a missing, malformed or
    refused ``incident.yaml`` and a malformed metrics file. Anything else that cannot or may not
    be read (see the module docstring) is listed in :attr:`Bundle.missing`.
    """
    root = Path(path)
    if not root.is_dir():
        raise BundleError("bundle folder not found", path=str(root))
    if incident is None:
        where = outside(root / "incident.yaml", root)
        if where is not None:
            raise BundleError(
                f"resolves outside the bundle (to {where}); refused", path=str(root / "incident.yaml")
            )
    inc = incident or read_incident(root / "incident.yaml")
    missing: list[str] = []
    notes: list[str] = []
    files: dict[str, list[str]] = {}

    entries = survey(root, missing)
    if not (root / "metrics").is_dir():
        missing.append("metrics: the bundle has no metrics/ folder")
    elif not entries and not any(m.startswith("metrics: ") for m in missing):
        missing.append("metrics: metrics/ holds no metrics files")
    scope = scope if scope is not None else incident_scope(inc)
    report = None
    if scope:
        skip, select, reports = _scope_rules(scope)
        store, read, notes = read_metrics(entries, root, families=families, skip=skip, select=select)
        report = reports[0]
    elif entries:
        store, read, notes = read_metrics(entries, root, families=families)
    else:
        store, read, notes = MetricStore(), [], []
    missing.extend(notes)
    files["metrics"] = read

    from perfkit.sources.events import read_events

    events_path = root / "events.csv"
    events = pl.DataFrame(schema=EVENTS_SCHEMA)
    if os.path.lexists(events_path):
        refused = refusal(events_path, root)
        if refused is None and events_path.stat().st_size > MAX_EVENTS_BYTES:
            refused = f"over the {size_text(MAX_EVENTS_BYTES)} limit, not read"
        if refused is None:
            events = read_events(events_path)
        else:
            missing.append(f"events: events.csv {refused}")
    else:
        missing.append("events: no events.csv (deploy history unknown)")

    log_paths = _members(root, "logs", "*", missing)
    files["logs"] = [_rel(p, root) for p in log_paths]
    logs = pl.DataFrame(schema=LOG_SCHEMA)
    stats = pl.DataFrame(schema=STATS_SCHEMA)
    unknown = 0
    trainer = None
    if log_paths:
        from perfkit.sources.logs import read_logs

        result = read_logs(log_paths, window=inc.window, root=root)
        logs, stats, unknown = result.records, result.stats, result.unknown
        missing.extend(f"logs: {err}" for err in result.errors)
        notes.extend(f"logs: {note}" for note in result.notes)  # lines placed by their neighbours
    elif not any(m.startswith("logs: ") for m in missing):
        missing.append("logs: the bundle has no logs/")
    scalars = _tensorboard(root, missing, Path(tensorboard) if tensorboard else None)
    # a training framework's own step lines and scalars: the training rows read them as series
    if log_paths or scalars is not None:
        where = f"tensorboard {Path(tensorboard).name}" if tensorboard else "tensorboard"
        trainer = trainer_store(logs, mtimes=_mtimes(log_paths), scalars=scalars, scalars_from=where)
        if trainer.store.frames:
            store = store.merge(trainer.store)
            missing.extend(f"logs: {note}" for note in trainer.missing)
    traces = _trace_members(root, missing)
    if traces:
        files["traces"] = [_rel(p, root) for p in traces]
    return Bundle(
        root, inc, store, events, logs, stats, unknown, files, missing, report, traces, trainer, notes
    )


def _tensorboard(root: Path, missing: list[str], given: Path | None = None) -> pl.DataFrame | None:
    """The scalars of the event files under ``given``, else the bundle's ``tensorboard/`` (None
    when there is no such folder)."""
    folder = given or root / "tensorboard"
    if given is None and not os.path.lexists(folder):
        return None
    refused = None if given is not None else _refusal_dir(folder, root)
    if refused is not None:
        missing.append(f"tensorboard: tensorboard/ {refused}")
        return None
    from perfkit.sources.tensorboard import read_scalars

    try:
        return read_scalars(folder)
    except BundleError as err:
        missing.append(f"tensorboard: {err}")
        return None


def _mtimes(paths: list[Path]) -> dict[str, float]:
    """Each log file's modification time by the name :func:`perfkit.sources.logs.read_logs` gives
    it (the time of its last line: framework lines without a time are placed back from it)."""
    from perfkit.sources.logs import expand, source_names

    files = expand(paths)
    out: dict[str, float] = {}
    for path, name in zip(files, source_names(files), strict=True):
        try:
            out[name] = path.stat().st_mtime
        except OSError:
            continue
    return out


def read_scoped(
    paths: Iterable[str | Path], scope: Scope, *, families: openmetrics.Families = None
) -> tuple[MetricStore, ScopeReport]:
    """:func:`~perfkit.sources.openmetrics.read_files` narrowed to ``scope`` while reading. The
    result equals ``scope_store(read_files(paths, families=families), scope)``
    (:func:`perfkit.engine.scope.scope_store`), but a workload series the matchers refuse is
    dropped as it is read, GPU/host series are kept compact until the workload's hosts are known,
    and the rule runs once per series (on one row each), not on every sample.

    Raises :class:`~perfkit.engine.scope.ScopeMatchesNothing` when the matchers keep no series.
    """
    skip, select, reports = _scope_rules(scope)
    store = openmetrics.read_files(paths, families=families, skip=skip, select=select)
    return store, reports[0]


def _scope_rules(scope: Scope) -> tuple[openmetrics.Skip, Select, list[ScopeReport]]:
    """The ``skip`` and ``select`` rules of a read narrowed to ``scope``, and the list its report
    goes into."""
    reports: list[ScopeReport] = []

    def select(series: MetricStore) -> MetricStore:
        kept, report = scope_store(series, scope)
        reports.append(report)
        return kept

    return partial(_out_of_scope, scope), select, reports


def _out_of_scope(scope: Scope, family: str, labels: dict[str, str]) -> bool:
    """Whether ``scope`` drops this series whatever else is read: a workload series that carries a
    label the scope selects on and that the matchers refuse, or (with ``--hosts``) a GPU/host series
    naming only other hosts. (Whether a series without the scope's labels is kept depends on its
    family's other series and on the workload's hosts: it is judged at the end.)"""
    if is_infrastructure(family) or not scope.matchers:
        hosts, wanted = host_keys(labels), scope.hosts or frozenset()
        return bool(wanted) and bool(hosts) and not hosts & wanted
    return bool(scope.labels & labels.keys()) and not scope.matches(labels)


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _members(root: Path, folder: str, pattern: str, missing: list[str]) -> list[Path]:
    """The readable files ``folder/pattern`` of the bundle, sorted; every refusal goes to ``missing``
    (as ``"<folder>: <path> <why>"``), and so does every sub-folder (not read)."""
    where = root / folder
    if not where.is_dir():
        return []
    outside_to = outside(where, root)
    if outside_to is not None:
        missing.append(f"{folder}: {folder}/ resolves outside the bundle (to {outside_to}), not read")
        return []
    found: list[Path] = []
    for p in sorted(where.glob(pattern)):
        if p.is_dir():
            missing.append(
                f"{folder}: {_rel(p, root)}/ not read: a folder (perfkit reads the files in {folder}/)"
            )
            continue
        refused = refusal(p, root)
        if refused is None:
            found.append(p)
        else:
            missing.append(f"{folder}: {_rel(p, root)} {refused}")
    return found


def _trace_members(root: Path, missing: list[str]) -> list[Path]:
    """The readable trace files of ``traces/`` and of its sub-folders (one level), bounded by
    :data:`MAX_TRACE_FILES` and :data:`MAX_TRACE_RUNS`; refusals and what is left out go to
    ``missing``. No ``traces/`` is not a gap: most bundles have none."""
    where = root / "traces"
    if not where.is_dir():
        return []
    outside_to = outside(where, root)
    if outside_to is not None:
        missing.append(f"traces: traces/ resolves outside the bundle (to {outside_to}), not read")
        return []
    found: list[Path] = []
    runs = 0
    for p in sorted(where.iterdir()):
        if p.is_dir():
            runs += 1
            if runs > MAX_TRACE_RUNS:
                missing.append(
                    f"traces: more than {MAX_TRACE_RUNS} sub-folders; {_rel(p, root)} and later not read"
                )
                break
            refused = _refusal_dir(p, root)
            if refused is not None:
                missing.append(f"traces: {_rel(p, root)} {refused}")
                continue
            for q in sorted(p.iterdir()):
                if q.is_dir():
                    missing.append(f"traces: {_rel(q, root)} is nested two folders deep, not read")
                elif q.name.endswith(TRACE_SUFFIXES):
                    found.append(q)
                else:
                    missing.append(f"traces: {_rel(q, root)} not read: {NOT_A_TRACE}")
        elif p.name.endswith(TRACE_SUFFIXES):
            found.append(p)
        else:
            missing.append(f"traces: {_rel(p, root)} not read: {NOT_A_TRACE}")
    kept: list[Path] = []
    for p in found:
        refused = refusal(p, root)
        if refused is not None:
            missing.append(f"traces: {_rel(p, root)} {refused}")
        elif len(kept) == MAX_TRACE_FILES:
            missing.append(
                f"traces: more than {MAX_TRACE_FILES} trace files; {_rel(p, root)} and later not read"
            )
            break
        else:
            kept.append(p)
    return kept


def _refusal_dir(path: Path, root: Path) -> str | None:
    where = outside(path, root)
    return None if where is None else f"resolves outside the bundle (to {where}), not read"
