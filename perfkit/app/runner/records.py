"""Output folders of ``perfkit run``: written whole or not at all, never over a user's files.

A run writes into a private staging folder beside the target (``mkdtemp``: mode 0700, so a
secret printed by a cell is never readable by others while it waits to be scrubbed), then moves
it into place with ``rename`` under a lock on the parent folder. What perfkit wrote is listed
with checksums in ``.perfkit-run.json``; that is how a later run knows the folder is its own:

* a missing or empty folder, or one perfkit wrote and nobody changed since: replaced;
* a folder with other files, or perfkit's files edited since (notes in the executed notebook):
  refused, unless ``force`` and every entry is one perfkit writes (then replaced whole, which also
  clears stale figures);
* the folder holding the shipped runbooks (or any folder above them): always refused;
* a failed or interrupted run never replaces a good record: it is put beside it, as
  ``<name>.failed-<UTC time>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from perfkit.errors import ConfigError

MARKER = ".perfkit-run.json"
#: Entries perfkit writes into an output folder (what ``force`` may replace).
OWN_FILES = ("postmortem.md", "postmortem.html", "findings.json", MARKER)
OWN_SUFFIXES = (".ipynb",)  # only when the marker lists it, or an earlier version's executed record
OWN_FOLDERS = {"figures": (".png", ".svg", ".json", ".html")}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())


def write_marker(folder: Path, *, runbook: str, status: str) -> None:
    """Record what perfkit wrote into ``folder`` (relative path → sha256) and how the run ended."""
    files = {str(p.relative_to(folder)): _digest(p) for p in _files(folder) if p.name != MARKER}
    doc = {
        "runbook": runbook,
        "status": status,
        "written": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "files": files,
    }
    (folder / MARKER).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def read_marker(folder: Path) -> dict | None:
    try:
        doc = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("files"), dict) else None


def _changed_by_user(folder: Path, marker: dict) -> list[str]:
    """Entries added or edited since perfkit wrote ``folder`` (empty when it is as perfkit left it)."""
    recorded: dict[str, str] = marker["files"]
    changed = []
    for p in _files(folder):
        rel = str(p.relative_to(folder))
        if rel == MARKER:
            continue
        if p.is_symlink() or rel not in recorded or _digest(p) != recorded[rel]:
            changed.append(rel)
    return changed


def _only_own_entries(folder: Path, marker: dict | None) -> list[str]:
    """Entries of ``folder`` perfkit did not write (empty when ``force`` may replace it).

    perfkit's own: what its marker lists (also if edited since), the postmortem files, and
    figures. A notebook counts only when the marker lists it or it is an earlier perfkit
    version's record (executed by papermill, beside its postmortem): a notebook of
    ``perfkit open``, with an engineer's notes, is never perfkit's to delete.
    """
    listed = set((marker or {}).get("files", {}))
    legacy = marker is None and (folder / "postmortem.md").is_file()
    foreign = []
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink():
            foreign.append(entry.name)
        elif (
            entry.is_file()
            and (entry.name in OWN_FILES or entry.name in listed)
            or entry.is_file()
            and entry.suffix in OWN_SUFFIXES
            and legacy
            and _executed_by_papermill(entry)
        ):
            continue
        elif entry.is_dir() and entry.name in OWN_FOLDERS:
            kinds = OWN_FOLDERS[entry.name]
            foreign.extend(
                str(p.relative_to(folder))
                for p in entry.rglob("*")
                if p.is_symlink() or (p.is_file() and p.suffix not in kinds) or p.is_dir()
            )
        else:
            foreign.append(entry.name)
    return foreign


def _executed_by_papermill(path: Path) -> bool:
    """True for a notebook papermill ran to the end (an executed record, not a working copy)."""
    try:
        if path.stat().st_size > 256 * 2**20:
            return False
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError, AttributeError):
        return False
    papermill = meta.get("papermill") if isinstance(meta, dict) else None
    return isinstance(papermill, dict) and bool(papermill.get("end_time"))


def _protected(folder: Path, protected: Sequence[Path]) -> Path | None:
    target = folder.resolve()
    for p in protected:
        q = p.resolve()
        if target == q or q.is_relative_to(target) or target.is_relative_to(q):
            return q
    return None


def check_target(folder: Path, *, force: bool = False, protected: Sequence[Path] = ()) -> None:
    """Raise :class:`ConfigError` when writing a record into ``folder`` would lose someone's work."""
    hit = _protected(folder, protected)
    if hit is not None:
        raise ConfigError(
            f"{folder}: refusing to write a run there: it holds (or is) {hit}, which perfkit ships; "
            "choose another output folder"
        )
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a folder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    marker = read_marker(folder)
    changed = _changed_by_user(folder, marker) if marker else None
    if changed == []:
        return
    foreign = _only_own_entries(folder, marker)
    if force and not foreign:
        return
    if force:
        raise ConfigError(
            f"{folder}: holds files perfkit does not write ({', '.join(foreign[:3])}"
            f"{' ...' if len(foreign) > 3 else ''}); even with --force perfkit will not delete them: "
            "choose another output folder"
        )
    what = (
        f"changed since perfkit wrote it ({', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''})"
        if changed
        else "not written by perfkit"
    )
    raise ConfigError(
        f"{folder}: folder is not empty and {what}; choose another output folder, "
        "or pass --force to replace perfkit's files there"
    )


def staging_folder(target: Path) -> Path:
    """A private (0700) empty folder beside ``target``, on the same file system (so rename is atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.perfkit-", dir=target.parent))


@contextlib.contextmanager
def _locked(parent: Path) -> Iterator[None]:
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _open_up(folder: Path) -> None:
    """Give the published folder the permissions a new folder would have (mkdtemp made it 0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)


def publish(staging: Path, target: Path, *, ok: bool, force: bool = False) -> Path:
    """Move ``staging`` into place as ``target`` and return where it went.

    A good run replaces ``target`` (checked again under the lock: a run finishing at the same
    moment is serialised, the later one wins). A failed run takes ``target`` only when it holds no
    good record; otherwise it goes beside it as ``<name>.failed-<UTC time>``.
    """
    _open_up(staging)
    with _locked(target.parent):
        if not ok and target.is_dir() and (read_marker(target) or {}).get("status") == "ok":
            return _beside(staging, target, "failed")
        old = None
        if target.is_dir() and not any(target.iterdir()):
            # an empty folder the user made (maybe their shell's current folder): fill it, keep it
            for entry in staging.iterdir():
                os.rename(entry, target / entry.name)
            os.rmdir(staging)
            return target
        if target.exists():
            try:
                check_target(target, force=force)
            except ConfigError:  # changed while this run was working: keep both
                return _beside(staging, target, "new")
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rename(target, old / "x")
        os.rename(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def _beside(staging: Path, target: Path, label: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    beside = target.with_name(f"{target.name}.{label}-{stamp}")
    n = 1
    while beside.exists():
        n += 1
        beside = target.with_name(f"{target.name}.{label}-{stamp}-{n}")
    os.rename(staging, beside)
    return beside


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
