"""Release history as an events frame (:data:`~perfkit.core.frames.EVENTS_SCHEMA`) from three kinds of source.

* **files**: :func:`read_release_file` reads ``events.csv`` (the bundle format), or a JSON or
  YAML list of objects with the same keys (``ts`` required; ``kind`` defaults to ``deploy``)::

      - {ts: 2026-11-30T02:04:00Z, service: vllm-chat, version: v0.33.0, detail: rollout 3/3}

* **git**: :func:`git_releases` gives a ``deploy`` row per tag dated in the window (the tagger
  date of an annotated tag, the commit date of a lightweight one) and, on request, a ``note``
  row per commit of the window;
* **an info metric**: :func:`info_metric_releases` gives a ``deploy`` row where the version label
  of a metric such as ``build_info{version=...}`` changes.

:func:`merge_releases` combines them. Every time is UTC.

>>> window = Window("2026-11-30T00:00:00Z", "2026-11-30T06:00:00Z")
>>> merge_releases(read_release_file("deploys.yaml"), git_releases(".", window))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol, cast

import polars as pl
import yaml

from perfkit.core.frames import EVENTS_SCHEMA, Window, utc
from perfkit.engine import ops
from perfkit.errors import BundleError, SourceError
from perfkit.sources.events import KINDS, empty_events, parse_ts, read_events
from perfkit.sources.safeio import RefusedFile, open_regular, read_capped
from perfkit.sources.safeyaml import MAX_YAML_BYTES, YamlError, loads_yaml

FIELDS = ("ts", "kind", "service", "version", "detail")
MAX_RELEASE_BYTES = MAX_YAML_BYTES  # a deploy history of ~50,000 entries; larger is not a release file
_SEP = "\x1f"  # unit separator between git's output fields: never in a ref name or a subject line


class RangeEngine(Protocol):
    """Anything that evaluates a :mod:`perfkit.engine.ops` expression over a time range
    (:class:`~perfkit.engine.local.LocalEngine`, :class:`~perfkit.sources.prometheus.PrometheusEngine`)."""

    def range(self, expr: ops.Expr, start: datetime, end: datetime, step_s: float) -> pl.DataFrame: ...


# -- files -----------------------------------------------------------------------------------------


class _PlainLoader(yaml.SafeLoader):
    """SafeLoader reading every plain scalar as text except null: ``version: 1.10`` stays ``"1.10"``
    and a timestamp stays the string it was written as (parsed as UTC, like events.csv)."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag == "tag:yaml.org,2002:null"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_release_file(path: str | Path) -> pl.DataFrame:
    """Release events from ``path`` by suffix: ``.csv`` (events.csv), ``.json``, ``.yaml``/``.yml``.

    Returns an EVENTS_SCHEMA frame sorted by ``ts``. Raises :class:`~perfkit.errors.BundleError`
    naming the file (and the line for CSV and for JSON/YAML syntax errors, the item otherwise)
    for a missing file, an unknown suffix or any bad entry.
    """
    path = Path(path)
    name = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".json", ".yaml", ".yml"):
        raise BundleError(
            f"unknown release file type {suffix or '(none)'!r} (want .csv, .json, .yaml)", path=name
        )
    if not path.exists():
        raise BundleError("no such release file", path=name)
    try:  # regular files only (not a FIFO, not /dev/zero), and at most MAX_RELEASE_BYTES
        if suffix == ".csv":
            open_regular(path, max_bytes=MAX_RELEASE_BYTES).close()
            return read_events(path)
        data = read_capped(path, MAX_RELEASE_BYTES)
    except RefusedFile as err:
        raise BundleError(f"release file refused: {err.reason}", path=name) from None
    except OSError as err:
        raise BundleError(f"cannot read release file ({err.strerror or err})", path=name) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise BundleError(f"cannot read release file ({err})", path=name) from None
    items = _load_json(text, name) if suffix == ".json" else _load_yaml(text, name)
    rows = [_release_row(item, i, name) for i, item in enumerate(items, 1)]
    return _frame(rows)


def _load_json(text: str, name: str) -> list[Any]:
    try:
        # numbers as written: version 1.10 must not become "1.1"; epoch ts is parsed later
        data = json.loads(text, parse_float=str, parse_int=str)
    except json.JSONDecodeError as err:
        raise BundleError(f"invalid JSON: {err.msg}", path=name, line=err.lineno) from None
    except RecursionError:
        raise BundleError("invalid JSON: nested too deeply", path=name) from None
    return _items(data, name)


def _load_yaml(text: str, name: str) -> list[Any]:
    try:
        # safe (no objects), capped (no alias bombs), every plain scalar kept as text
        data = loads_yaml(text, source=name, loader=_PlainLoader)
    except YamlError as err:
        raise BundleError(err.problem, path=name, line=err.line) from None
    if data is None:
        return []
    return _items(data, name)


def _items(data: Any, name: str) -> list[Any]:
    if not isinstance(data, list):
        raise BundleError(f"want a list of release objects, found {type(data).__name__}", path=name)
    return data


def _release_row(item: Any, index: int, name: str) -> dict[str, Any]:
    where = f"item {index}"
    if not isinstance(item, dict):
        raise BundleError(f"{where}: want an object with {', '.join(FIELDS)}", path=name)
    unknown = sorted(str(k) for k in item if k not in FIELDS)
    if unknown:
        raise BundleError(
            f"{where}: unknown key(s) {', '.join(unknown)} (keys: {', '.join(FIELDS)})", path=name
        )
    raw_ts = item.get("ts")
    if raw_ts is None or raw_ts == "":
        raise BundleError(f"{where}: no ts", path=name)
    try:
        ts = _item_ts(raw_ts)
    except (ValueError, OverflowError, OSError, TypeError):
        raise BundleError(
            f"{where}: unparseable ts {raw_ts!r} (want ISO 8601 or epoch seconds)", path=name
        ) from None
    kind = _text(item.get("kind"), where, "kind", name) or "deploy"
    kind = kind.lower()
    if kind not in KINDS:
        raise BundleError(f"{where}: unknown kind {kind!r} (one of {', '.join(sorted(KINDS))})", path=name)
    return {
        "ts": ts,
        "kind": kind,
        "service": _text(item.get("service"), where, "service", name),
        "version": _text(item.get("version"), where, "version", name),
        "detail": _text(item.get("detail"), where, "detail", name),
    }


def _item_ts(value: Any) -> datetime:
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, date | bool) or not isinstance(value, str | int | float):
        raise TypeError(value)
    return parse_ts(str(value))


def _text(value: Any, where: str, key: str, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise BundleError(f"{where}: {key} must be text, found {type(value).__name__}", path=name)
    text = str(value).strip()
    return text or None


def _frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    if not rows:
        return empty_events()
    return pl.DataFrame(list(rows), schema=EVENTS_SCHEMA).sort("ts", maintain_order=True)


# -- git -------------------------------------------------------------------------------------------

Runner = Callable[..., subprocess.CompletedProcess]


def git_releases(
    repo_path: str | Path,
    window: Window,
    *,
    runner: Runner = subprocess.run,
    include_commits: bool = False,
    rev: str = "HEAD",
    service: str | None = None,
) -> pl.DataFrame:
    """Tags (``deploy``: version = tag name, detail = tag subject) and optionally commits of ``rev``
    (``note``: version = short sha, detail = subject) dated inside the closed ``window``.

    An annotated tag is dated by its tagger, a lightweight tag by its commit's committer.
    ``runner`` has :func:`subprocess.run`'s signature (tests may pass a fake). Raises
    :class:`~perfkit.errors.SourceError` when ``repo_path`` is missing or not a git repository,
    or git is not installed.
    """
    repo = Path(repo_path)
    if not repo.is_dir():
        raise SourceError(f"{repo}: no such directory (want a git repository)")
    git = _Git(repo, runner)
    git.run("rev-parse", "--git-dir", what="not a git repository")
    rows: list[dict[str, Any]] = []
    fmt = _SEP.join(
        [
            "%(refname:strip=2)",
            "%(taggerdate:iso-strict)",
            "%(committerdate:iso-strict)",
            "%(*committerdate:iso-strict)",
            "%(contents:subject)",
        ]
    )
    for line in git.run("for-each-ref", f"--format={fmt}", "refs/tags").splitlines():
        if not line.strip():
            continue
        tag, tagger, committer, target_committer, subject = (line.split(_SEP) + [""] * 5)[:5]
        stamp = tagger or committer or target_committer
        if not stamp:
            continue  # a tag of a tree or blob: no date
        ts = utc(stamp)
        if window.contains(ts):
            rows.append(
                {"ts": ts, "kind": "deploy", "service": service, "version": tag, "detail": subject or None}
            )
    if include_commits and git.has_commits(rev):
        fmt = _SEP.join(["%h", "%cI", "%s"])
        out = git.run(
            "log",
            "--no-show-signature",
            f"--since={window.start.isoformat()}",
            f"--until={window.end.isoformat()}",
            f"--format={fmt}",
            rev,
            "--",
        )
        for line in out.splitlines():
            if not line.strip():
                continue
            short, stamp, subject = (line.split(_SEP) + [""] * 3)[:3]
            ts = utc(stamp)
            if window.contains(ts):  # git's --since/--until walk heuristics aside, the window decides
                rows.append(
                    {
                        "ts": ts,
                        "kind": "note",
                        "service": service,
                        "version": short,
                        "detail": subject or None,
                    }
                )
    return _frame(rows)


class _Git:
    def __init__(self, repo: Path, runner: Runner) -> None:
        self.repo = repo
        self.runner = runner
        # fixed output: UTC, C locale, no pager, no user/system config changing formats
        self.env = {**os.environ, "TZ": "UTC", "LC_ALL": "C", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}

    def _call(self, *args: str) -> subprocess.CompletedProcess:
        cmd = ["git", "-C", str(self.repo), *args]
        try:
            return self.runner(cmd, capture_output=True, text=True, env=self.env, check=False, timeout=120)
        except FileNotFoundError:
            raise SourceError("git is not installed (needed to read release tags)") from None
        except subprocess.TimeoutExpired:
            raise SourceError(f"{self.repo}: git {args[0]} timed out after 120 s") from None

    def run(self, *args: str, what: str = "") -> str:
        done = self._call(*args)
        if done.returncode != 0:
            first = (done.stderr or "").strip().splitlines()
            reason = first[0] if first else f"exit status {done.returncode}"
            raise SourceError(f"{self.repo}: {what or 'git ' + args[0] + ' failed'} ({reason})")
        return done.stdout or ""

    def has_commits(self, rev: str) -> bool:
        return self._call("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode == 0


# -- info metric -----------------------------------------------------------------------------------


def info_metric_releases(
    engine: RangeEngine,
    metric: str,
    label: str,
    window: Window,
    *,
    step_s: float = 60,
    service: str | None = None,
) -> pl.DataFrame:
    """``deploy`` rows where the ``label`` value of ``metric`` changes, to ``step_s`` precision.

    Evaluates ``max by (label) (metric)`` every ``step_s`` over ``window``. A value that was not
    present at the previous step with data gives a row at the first step it is seen
    (version = that value, detail = ``"<label> <old values> -> <new> (<metric>)"``). The values
    seen at the first step are the starting point, not a change: a series that first appears
    inside the window gives no row until its value changes. Empty frame when the metric or the
    label is absent.
    """
    frame = engine.range(ops.aggregate("max", ops.Selector(metric), label), window.start, window.end, step_s)
    if label not in frame.columns or not frame.height:
        return empty_events()
    steps = (
        frame.filter(pl.col(label).is_not_null() & (pl.col(label) != ""))
        .group_by("ts")
        .agg(pl.col(label).unique().sort())
        .sort("ts")
    )
    rows: list[dict[str, Any]] = []
    previous: set[str] | None = None
    for ts, values in steps.iter_rows():
        current = set(values)
        if previous is not None:
            for version in sorted(current - previous):
                old = ", ".join(sorted(previous))
                rows.append(
                    {
                        "ts": ts,
                        "kind": "deploy",
                        "service": service,
                        "version": version,
                        "detail": f"{label} {old} -> {version} ({metric})",
                    }
                )
        previous = current
    return _frame(rows)


# -- merging ---------------------------------------------------------------------------------------


def merge_releases(*frames: pl.DataFrame) -> pl.DataFrame:
    """One EVENTS_SCHEMA frame sorted by ``ts``; rows with the same ts, kind and version are kept once
    (the first given wins, so pass the most detailed source first)."""
    # DataFrame.cast takes a Mapping keyed by names, selectors or dtypes (keys are invariant); ours are names.
    schema = cast(Mapping[Any, Any], EVENTS_SCHEMA)
    parts = [f.select(list(EVENTS_SCHEMA)).cast(schema) for f in frames if f.height]
    if not parts:
        return empty_events()
    merged = pl.concat(parts).unique(subset=["ts", "kind", "version"], keep="first", maintain_order=True)
    return merged.sort("ts", maintain_order=True)
