"""The baseline store: bench results kept as plain files a git repository can hold.

::

    <store>/baselines/<id>.json               the result document plus a ``baseline`` block
    <store>/baselines/<id>.requests.parquet   its per-request records, when the result had them

``id`` is ``<UTC yyyymmddThhmmssZ>-<model slug>-<8 hex of the content hash>``: the time the run
started (``meta.started``; the time it was added when the run does not say), the model, and the
first 8 hex digits of the SHA-256 of the result document (canonical JSON, without any earlier
``baseline`` block or the records file name). The same run added twice has the same id and is refused, so it cannot count
twice in the gate's history.

* :func:`add` validates labels (``version=``, ``config=``, ``hardware=`` and free ``k=v``),
  refuses an invalid or interrupted run unless ``force`` (``--allow-invalid``), never overwrites a file and writes
  each file atomically (a temporary file in the same folder, then a hard link to the final name,
  which fails rather than replace a file that appeared meanwhile).
* :func:`list_baselines` returns the store newest first; :func:`show` one baseline.
* A file of the store that cannot be read (bad JSON, another schema, a symlink out of the store,
  a folder or FIFO named ``*.json``, over 16 MiB, nesting too deep, an integer beyond 64 bits, NaN:
  read by :mod:`perfkit.sources.safejson`) or that holds no measurement (a negative latency, a rate
  no network carries, a start in the future: :mod:`perfkit.loadgen.plausible`) is skipped: one line
  names the file and why (:class:`Skipped`; :func:`scan_store` returns them, :func:`iter_store`
  warns), the file is left where it is, untouched, and the rest is used. A result given to ``add``
  or ``gate`` that holds no measurement is refused the same way.

Labels are read and checked by :mod:`perfkit.loadgen.labels` (``parse_labels``, ``validate_labels``,
``effective_labels`` are importable from here too).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, PerfkitError
from perfkit.loadgen.labels import KNOWN_LABELS as KNOWN_LABELS  # the labels' names, read from here too
from perfkit.loadgen.labels import effective_labels, validate_labels
from perfkit.loadgen.labels import parse_labels as parse_labels
from perfkit.loadgen.plausible import implausible
from perfkit.sources.safeio import RefusedFile, open_regular, outside, read_capped
from perfkit.sources.safejson import UnsafeJson, load_json_bounded

SCHEMA = "perfkit.bench/1"
MAX_DOCUMENT_BYTES = 16 * 2**20
"""Largest result document read: a summary with a server-side view is tens of KiB; 16 MiB is ample."""
MAX_RECORDS_BYTES = 4 * 2**30
"""Largest records file copied (a million requests in Parquet is well under 1 GiB)."""
MAX_STORE_FILES = 100_000
"""Most documents a store folder may hold; more is not a baseline history but a mistake."""
_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[a-z0-9][a-z0-9-]{0,47}-[0-9a-f]{8}$")
_ID_PREFIX = re.compile(r"^[0-9A-Za-z-]{1,80}$")
_PARQUET_MAGIC = b"PAR1"

Warn = Callable[[str], None]


class StoreError(PerfkitError):
    """A store or result file perfkit refuses; the message names the file (and line)."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, line: int | None = None):
        self.path = str(path) if path is not None else None
        self.line = line
        self.reason = message
        where = self.path or ""
        if where and line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}" if where else message)


class StoreWarning(UserWarning):
    """A file in the store was skipped (unreadable, another schema); the message names it."""


@dataclass(frozen=True)
class Skipped:
    """A file of the store left out, and why: ``str()`` is the one line that says so."""

    file: str
    why: str
    line: int | None = None

    def __str__(self) -> str:
        return f"skipped {self.file}{'' if self.line is None else f':{self.line}'}: {self.why}"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "why": self.why}


@dataclass(frozen=True)
class Baseline:
    """One stored result: its ``id``, document (with its ``baseline`` block) and where it lies."""

    id: str
    doc: dict[str, Any]
    path: Path | None = None
    labels: dict[str, str] = field(default_factory=dict)
    """Effective labels: the run's ``meta.labels`` with the labels given when it was added over them."""

    @property
    def model(self) -> str | None:
        model = _dict(self.doc.get("meta")).get("model")
        return model if isinstance(model, str) else None

    @property
    def started(self) -> str | None:
        started = _dict(self.doc.get("meta")).get("started")
        return started if isinstance(started, str) else None

    @property
    def added(self) -> str | None:
        added = _dict(self.doc.get("baseline")).get("added")
        return added if isinstance(added, str) else None

    @property
    def sha256(self) -> str:
        return content_hash(self.doc)

    def sort_key(self) -> tuple[str, str, str]:
        """Newest last: by the run's start time, then when it was added, then id."""
        when = _parse_time(self.started) or _parse_time(self.added)
        return (when.strftime("%Y%m%dT%H%M%S.%f") if when else "", self.added or "", self.id)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], path: Path | None = None) -> Baseline:
        """A baseline from a document (a stored one, or a result given directly to the gate)."""
        block = _dict(doc.get("baseline"))
        ident = block.get("id") if isinstance(block.get("id"), str) else None
        return cls(
            id=ident or make_id(doc),
            doc=dict(doc),
            path=path,
            labels=effective_labels(doc),
        )


def content_hash(doc: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of ``doc`` as canonical JSON, without its ``baseline`` block and ``records``
    name (which differ between the result file and its stored copy, not in what was measured)."""
    body = {k: v for k, v in doc.items() if k not in ("baseline", "records")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_slug(model: Any) -> str:
    """The model name as an id part: lower case, ``[a-z0-9-]``, at most 48 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", str(model or "").lower()).strip("-")[:48].strip("-")
    return slug or "model"


def make_id(doc: Mapping[str, Any], *, now: datetime | None = None) -> str:
    """``<UTC yyyymmddThhmmssZ>-<model slug>-<8 hex>`` for ``doc`` (time: ``meta.started``, else ``now``)."""
    meta = _dict(doc.get("meta"))
    when = _parse_time(meta.get("started")) or (now or datetime.now(UTC)).astimezone(UTC)
    return f"{when:%Y%m%dT%H%M%SZ}-{model_slug(meta.get('model'))}-{content_hash(doc)[:8]}"


def load_signature(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two runs the same load: shape, concurrency, rate and its arrival process (Poisson,
    gamma with its burstiness, constant: the same mean rate in bursts queues more), lengths, endpoint
    (and, for a replay, the trace's file name and time scale: two different traces are not the same load)."""
    load = _dict(doc.get("load"))
    keys = (
        "shape",
        "concurrency",
        "rate",
        "arrival",
        "burstiness",
        "prompt_tokens",
        "output_tokens",
        "endpoint",
    )
    sig = {key: load.get(key) for key in keys}
    if load.get("shape") == "replay":
        replay = _dict(load.get("replay"))
        source = replay.get("source")
        sig["replay.source"] = re.split(r"[\\/]", source)[-1] if isinstance(source, str) else None
        sig["replay.time_scale"] = replay.get("time_scale")
    return sig


def add(
    result_path: str | os.PathLike[str],
    store: str | os.PathLike[str],
    labels: Mapping[str, Any] | None = None,
    *,
    force: bool = False,
    now: datetime | None = None,
    warn: Warn | None = None,
    index: int | None = None,
    require_calibration: bool = False,
) -> str:
    """Store the result at ``result_path`` (and its records) in ``store``; returns the new id.

    ``require_calibration`` (``perfkit baseline add``) refuses a perfkit run whose client overhead
    was not measured (``--no-calibrate``); imported results (vLLM, guidellm) carry none and pass.
    Raises :class:`StoreError` for an invalid or interrupted run (unless ``force``), a run already
    stored, a file that exists, or an unreadable result; :class:`~perfkit.errors.ConfigError` for bad
    labels.
    """
    warn = warn or _warn
    given = validate_labels(labels or {})
    result_path = Path(result_path)
    doc = read_input(result_path, index)
    doc.pop("baseline", None)
    validity = _dict(doc.get("validity"))
    if validity.get("valid") is False and not force:
        reasons = "; ".join(str(r) for r in validity.get("reasons") or []) or "no reason given"
        raise StoreError(
            f"the run is marked invalid ({_short(reasons, 300)}); fix the run, or add it with --allow-invalid",
            path=result_path,
        )
    uncalibrated = validity.get("calibration") is None and not doc.get("source")  # a perfkit run
    if require_calibration and uncalibrated and not force:
        raise StoreError(
            "the run was not calibrated (--no-calibrate): a baseline needs the client's own overhead "
            "measured at its load; rerun without --no-calibrate, or add it with --allow-invalid",
            path=result_path,
        )
    if doc.get("interrupted") is True and not force:
        raise StoreError(
            "the run was interrupted before it finished; rerun it, or add it with --allow-invalid",
            path=result_path,
        )
    run_labels = effective_labels(doc)
    for key, value in given.items():
        if key in run_labels and run_labels[key] != value:
            raise ConfigError(
                f"--label {key}={value} contradicts the run's own label {key}={_short(run_labels[key])}"
            )
    folder = Path(store) / "baselines"
    folder.mkdir(parents=True, exist_ok=True)
    ident = make_id(doc, now=now)
    if not _ID.match(ident):  # cannot happen: every part is built from a safe alphabet
        raise StoreError(f"cannot form a safe id from this run ({ident!r})", path=result_path)
    digest = content_hash(doc)
    for existing in sorted(folder.glob(f"*-{digest[:8]}.json")):
        if _same_content(existing, digest):
            raise StoreError(f"this run is already in the store as {existing.stem}", path=result_path)
    target = folder / f"{ident}.json"
    if target.exists() or target.is_symlink():
        raise StoreError("exists already; the store never overwrites a file", path=target)

    records_target: Path | None = None
    records = _records_source(doc, result_path, warn)
    stored = dict(doc)
    stored["records"] = None
    if records is not None:
        records_target = folder / f"{ident}.requests.parquet"
        if records_target.exists():
            raise StoreError(
                "exists without its summary (an add that did not finish?): remove it, then add again",
                path=records_target,
            )
        _copy_exclusive(records, records_target)
        stored["records"] = records_target.name
    stored["baseline"] = {
        "id": ident,
        "added": (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "labels": given,
        "sha256": digest,
    }
    try:
        write_json_atomic(stored, target, overwrite=False)
    except BaseException:
        if records_target is not None:
            with contextlib.suppress(OSError):
                records_target.unlink()
        raise
    return ident


def list_baselines(
    store: str | os.PathLike[str],
    *,
    model: str | None = None,
    labels: Mapping[str, str] | None = None,
    warn: Warn | None = None,
) -> list[Baseline]:
    """The baselines in ``store``, newest first, keeping those of ``model`` and with all ``labels``.

    A file that cannot be read is skipped with a warning (``warn``, else a :class:`StoreWarning`).
    Raises :class:`StoreError` when ``store`` is not a folder.
    """
    found = [
        b
        for b in iter_store(store, warn=warn)
        if (model is None or b.model == model)
        and all(b.labels.get(k) == str(v) for k, v in (labels or {}).items())
    ]
    return sorted(found, key=Baseline.sort_key, reverse=True)


def show(store: str | os.PathLike[str], ident: str) -> Baseline:
    """The baseline ``ident`` (or the only one whose id starts with it) of ``store``."""
    ident = str(ident).strip()
    if not _ID_PREFIX.match(ident):
        raise StoreError(f"{_short(ident)!r} is not a baseline id (see `perfkit baseline list`)")
    folder = _folder(store)
    exact = folder / f"{ident}.json"
    if _ID.match(ident) and (exact.exists() or exact.is_symlink()):
        return _read_baseline(exact, folder)
    matches = sorted(p for p in folder.glob(f"{ident}*.json") if _ID.match(p.stem))
    if not matches:
        raise StoreError(f"no baseline {ident} in the store", path=folder)
    if len(matches) > 1:
        shown = ", ".join(p.stem for p in matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise StoreError(f"{ident} names {len(matches)} baselines ({shown}): give more of the id")
    return _read_baseline(matches[0], folder)


def iter_store(store: str | os.PathLike[str], *, warn: Warn | None = None) -> list[Baseline]:
    """Every usable baseline of ``store`` (in no order), warning about each file skipped."""
    warn = warn or _warn
    found, skipped = scan_store(store)
    for item in skipped:
        warn(str(item))
    return found


def scan_store(store: str | os.PathLike[str]) -> tuple[list[Baseline], list[Skipped]]:
    """(the usable baselines of ``store`` in no order, the files skipped and why); no file is changed.

    Raises :class:`StoreError` when ``store`` is no store folder, or holds more than
    :data:`MAX_STORE_FILES` documents."""
    folder = _folder(store)
    out: list[Baseline] = []
    skipped: list[Skipped] = []
    for count, path in enumerate(sorted(folder.glob("*.json")), start=1):
        if count > MAX_STORE_FILES:
            raise StoreError(f"more than {MAX_STORE_FILES:,} documents: not a baseline store", path=folder)
        if path.name.startswith("."):  # a temporary file of a write in progress
            continue
        try:
            out.append(_read_baseline(path, folder))
        except StoreError as exc:  # its reason may name the file again (a label's): said once
            skipped.append(Skipped(str(path), _one_line(exc.reason).removeprefix(f"{path}: "), exc.line))
        except PerfkitError as exc:  # a ResultError: "<file>: <key>: <problem>"
            skipped.append(Skipped(str(path), _one_line(str(exc)).removeprefix(f"{path}: ")))
        except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:  # one bad file
            skipped.append(Skipped(str(path), f"unreadable ({type(exc).__name__}: {_short(_one_line(exc), 120)})"))  # fmt: skip
    return out, skipped


def stored_records(base: Baseline, warn: Warn | None = None) -> Path | None:
    """The per-request records file of a stored baseline, when it is a regular file inside the
    store and within :data:`MAX_RECORDS_BYTES`; else None (a link out of the store is not followed,
    with a warning)."""
    from perfkit.loadgen.result import records_path

    if base.path is None:
        return None
    path = records_path(base.path, base.doc)
    if path is None or not (path.exists() or path.is_symlink()):
        return None
    why = None
    if outside(path, base.path.parent):
        why = "link outside the store; not read"
    else:
        try:
            open_regular(path, max_bytes=MAX_RECORDS_BYTES).close()
        except RefusedFile as exc:
            why = f"not read ({exc.reason})"
        except OSError as exc:
            why = f"not read ({exc.strerror or type(exc).__name__})"
    if why is None:
        return path
    (warn or _warn)(f"baseline {base.id}: its records {path.name} {why}; its within-run noise is unknown")
    return None


def read_input(path: str | os.PathLike[str], index: int | None = None) -> dict[str, Any]:
    """The result document at ``path``, validated (foreign formats converted) by ``loadgen.result``;
    ``index`` picks one result of a file holding several (a guidellm sweep)."""
    from perfkit.loadgen.result import read_result

    doc = read_result(path, index=index)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise StoreError(f"not a {SCHEMA} document", path=path)
    if why := implausible(doc):
        raise StoreError(f"no measurement: {why}", path=path)
    return doc


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object at ``path``, read within bounds; :class:`StoreError` ``file:line: problem``."""
    try:
        data = read_capped(path, MAX_DOCUMENT_BYTES)
    except FileNotFoundError:
        raise StoreError("no such file", path=path) from None
    except RefusedFile as exc:
        raise StoreError(exc.reason, path=path) from None
    except OSError as exc:
        raise StoreError(f"cannot read ({exc.strerror or type(exc).__name__})", path=path) from None
    try:
        doc = load_json_bounded(data, source=str(path))
    except UnsafeJson as exc:
        where = f"{exc.path}: {exc.reason}" if exc.path else exc.reason
        raise StoreError(where, path=path, line=None if exc.path else exc.line) from None
    if not isinstance(doc, dict):
        raise StoreError(f"expected a JSON object, found {type(doc).__name__}", path=path, line=1)
    return doc


def write_json_atomic(
    doc: Mapping[str, Any], path: str | os.PathLike[str], *, overwrite: bool = True
) -> None:
    """Write ``doc`` as JSON to ``path`` through a temporary file in the same folder.

    With ``overwrite=False`` the file is put in place by a hard link, which fails (StoreError) if
    ``path`` exists, so two writers can never replace each other's file.
    """
    path = Path(path)
    try:
        text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError as exc:
        raise StoreError(f"cannot write a non-finite number as JSON ({exc})", path=path) from None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        _place(Path(tmp), path, overwrite=overwrite)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


# --------------------------------------------------------------------------------------------------


def _read_baseline(path: Path, folder: Path) -> Baseline:
    """A stored baseline, checked: inside the store, our schema, its id matching its file name."""
    if outside(path, folder):
        raise StoreError("a link to a file outside the store; not read", path=path)
    if not _ID.match(path.stem):
        raise StoreError("not a baseline file name (<yyyymmddThhmmssZ>-<model>-<hash>.json)", path=path)
    from perfkit.loadgen.result import check

    doc = check(read_document(path), str(path))
    if why := implausible(doc):
        raise StoreError(f"no measurement: {why}", path=path)
    block = doc.get("baseline")
    if not isinstance(block, dict) or block.get("id") != path.stem:
        raise StoreError("its baseline block is missing or names another id", path=path)
    try:
        labels = validate_labels(_dict(block.get("labels")), where=f"{path}: baseline.labels")
    except ConfigError as exc:
        raise StoreError(str(exc)) from None
    base = Baseline.from_doc(doc, path)
    return Baseline(id=base.id, doc=base.doc, path=path, labels={**base.labels, **labels})


def _same_content(path: Path, digest: str) -> bool:
    try:
        return content_hash(read_document(path)) == digest
    except PerfkitError:
        return False


def _records_source(doc: Mapping[str, Any], result_path: Path, warn: Warn) -> Path | None:
    """The records file beside the result, when the document names one that is really there."""
    name = doc.get("records")
    if name is None:
        return None
    if (
        not isinstance(name, str)
        or not name.endswith(".parquet")
        or name != Path(name).name
        or "\\" in name
        or name.startswith(".")
    ):
        raise StoreError(
            f"'records' must be a Parquet file name beside the result, not {_short(name)!r}", path=result_path
        )
    source = result_path.parent / name
    if not source.exists():
        warn(f"{result_path}: its records {name} are missing; storing the summary only")
        return None
    if outside(source, result_path.parent):
        raise StoreError(f"its records {name} link outside the result's folder; not copied", path=result_path)
    return source


def _copy_exclusive(source: Path, target: Path) -> None:
    """Copy a Parquet file to ``target`` (which must not exist), through a temporary file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                src = open_regular(source, max_bytes=MAX_RECORDS_BYTES)
            except RefusedFile as exc:
                raise StoreError(exc.reason, path=source) from None
            except OSError as exc:
                raise StoreError(f"cannot read ({exc.strerror or type(exc).__name__})", path=source) from None
            with src:
                head = src.read(4)
                if head != _PARQUET_MAGIC:
                    raise StoreError("not a Parquet file (no PAR1 magic)", path=source)
                out.write(head)
                while chunk := src.read(2**20):
                    out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        _place(Path(tmp), target, overwrite=False)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _place(tmp: Path, target: Path, *, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise StoreError("exists already; the store never overwrites a file", path=target) from None
    except OSError:  # a file system without hard links: check, then rename (a narrow race remains)
        if target.exists() or target.is_symlink():
            raise StoreError("exists already; the store never overwrites a file", path=target) from None
        os.replace(tmp, target)


def _folder(store: str | os.PathLike[str]) -> Path:
    root = Path(store)
    if not root.is_dir():
        raise StoreError("no such store folder (create one with `perfkit baseline add`)", path=root)
    folder = root / "baselines"
    if not folder.is_dir():
        raise StoreError("not a baseline store (it has no baselines/ folder)", path=root)
    return folder


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _warn(message: str) -> None:
    warnings.warn(message, StoreWarning, stacklevel=3)


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a bool); else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
