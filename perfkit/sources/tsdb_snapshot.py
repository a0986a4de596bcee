"""Read a Prometheus TSDB snapshot (or a folder of its blocks) from a bundle's ``metrics/``.

A snapshot (``POST /api/v1/admin/tsdb/snapshot`` writes ``<data>/snapshots/<name>/``) is a folder
of block folders, each named by a ULID and holding ``meta.json``, ``index``, ``chunks/000001``...
and ``tombstones``. Its format is Prometheus's own, so perfkit does not parse it: the system's
``promtool tsdb dump`` does, on a *copy* (promtool opens the folder as a database and writes into
it: ``chunks_head/``, and its WAL), and its output streams into the reader with
:data:`perfkit.sources.promdump.DUMP`'s syntax. Nothing of the bundle is run; the bundle is never
written.

Bounded, as everything read from a bundle:

* only block files are copied (``meta.json``, ``index``, ``tombstones``, ``chunks/NNNNNN``): each a
  regular file inside the bundle (a symlink out of it is refused), :data:`MAX_TSDB_BYTES` in all
  and :data:`MAX_BLOCKS` blocks at most;
* promtool runs at most :data:`DUMP_TIMEOUT_S` seconds and its output is read up to
  :data:`perfkit.sources.openmetrics.MAX_FILE_BYTES`; past either it is stopped by its PID;
* whatever goes wrong (no promtool, a refused file, promtool failing) is a note for
  :attr:`perfkit.sources.bundle.Bundle.missing` naming the snapshot and why, never an error of the
  whole bundle. Without promtool, the note gives the commands that would read it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from perfkit.errors import BundleError
from perfkit.sources.openmetrics import MAX_FILE_BYTES, FileRead, Reader
from perfkit.sources.promdump import DUMP, infer_type, skipped_note
from perfkit.sources.safeio import RefusedFile, open_regular, outside, size_text

MAX_TSDB_BYTES = 2 * 2**30
"""Largest snapshot copied: a TSDB holds ~1-2 bytes a sample, so this is far more samples than the
dump's text (:data:`~perfkit.sources.openmetrics.MAX_FILE_BYTES`) can carry."""
MAX_FILES = 100_000
"""Files copied at most (a block holds a chunk file per 512 MiB of chunks, and three others)."""
MAX_BLOCKS = 1000
"""Blocks read at most: Prometheus compacts to blocks of up to 31 days (10% of retention), so a
year's snapshot holds tens; a thousand is a hostile folder."""
MAX_NAMED = 10
"""Files of a snapshot that are no part of a block named one by one in ``missing``; the rest counted."""
DUMP_TIMEOUT_S = 300.0
"""promtool's time to dump a snapshot (2 GiB of text takes about a minute)."""
INSTALL = "apt-get install -y --no-install-recommends prometheus"
_BLOCK = re.compile(r"[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}")
_CHUNK = re.compile(r"[0-9]{6}")
_COPY_PIECE = 8 * 2**20


def is_block(folder: Path) -> bool:
    """Whether ``folder`` is a TSDB block: named by a ULID, holding ``meta.json``."""
    return bool(_BLOCK.fullmatch(folder.name)) and os.path.lexists(folder / "meta.json")


def blocks_in(folder: Path) -> list[Path]:
    """The block folders directly in ``folder``, sorted (none: it is not a snapshot)."""
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and is_block(p))
    except OSError:
        return []


def read_tsdb(reader: Reader, blocks: list[Path], root: Path, shown: str) -> tuple[bool, list[str]]:
    """Read the TSDB made of ``blocks`` (in the bundle ``root``) into ``reader`` with ``promtool tsdb
    dump`` on a copy: whether it was read, and the notes for ``missing`` (``shown`` names the
    snapshot in them)."""
    notes = _read_tsdb(reader, blocks, root, shown)
    return not any(note.startswith(f"{shown} not read: ") for note in notes), notes


def _read_tsdb(reader: Reader, blocks: list[Path], root: Path, shown: str) -> list[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        return [
            f"{shown} not read: a Prometheus TSDB snapshot, and promtool is not installed ({INSTALL}); "
            f"or dump it yourself: cp -r {shown} COPY && mkdir -p COPY/wal && "
            f"promtool tsdb dump COPY > {shown.rstrip('/')}.dump.txt"
        ]
    if len(blocks) > MAX_BLOCKS:
        return [f"{shown} not read: {len(blocks)} TSDB blocks, more than the {MAX_BLOCKS} read at most"]
    with tempfile.TemporaryDirectory(prefix="perfkit-tsdb-") as tmp:
        db = Path(tmp) / "db"
        notes: list[str] = []
        try:
            copied = _copy_blocks(blocks, root, db, notes)
        except _Refused as why:
            return [*notes, f"{shown} not read: {why}"]
        if not copied:
            return [*notes, f"{shown} not read: no block with its meta.json, index and chunks"]
        (db / "wal").mkdir()  # promtool 2.x opens the WAL too (an empty one: a snapshot has none)
        return notes + _dump(reader, promtool, db, Path(tmp), shown)


class _Refused(Exception):
    """A snapshot not copied, and why."""


def _copy_blocks(blocks: list[Path], root: Path, db: Path, notes: list[str]) -> int:
    """Copy the block files of ``blocks`` to ``db`` within the bounds; the blocks copied. Files that
    belong to no block are named in ``notes``."""
    budget = [MAX_TSDB_BYTES, MAX_FILES]
    copied = 0
    others: list[str] = []
    for block in blocks:
        where = outside(block, root)
        if where is not None:
            raise _Refused(f"{block.name} resolves outside the bundle (to {where})")
        files = {"meta.json", "index", "tombstones"}
        if not (block / "index").exists() or not (block / "chunks").is_dir():
            notes.append(f"{_rel(block, root)}: a block without index or chunks/, not read")
            continue
        (db / block.name / "chunks").mkdir(parents=True)
        for entry in sorted(block.iterdir()):
            if entry.name in files:
                _copy(entry, db / block.name / entry.name, root, budget)
            elif entry.name != "chunks":
                others.append(f"{_rel(entry, root)} is no part of a TSDB block, not read")
        for chunk in sorted((block / "chunks").iterdir()):
            if _CHUNK.fullmatch(chunk.name):
                _copy(chunk, db / block.name / "chunks" / chunk.name, root, budget)
            else:
                others.append(f"{_rel(chunk, root)} is no chunk file of a TSDB block, not read")
        copied += 1
    notes.extend(others[:MAX_NAMED])
    if len(others) > MAX_NAMED:
        notes.append(f"and {len(others) - MAX_NAMED} more files that are no part of a TSDB block, not read")
    return copied


def _copy(src: Path, dst: Path, root: Path, budget: list[int]) -> None:
    """Copy the regular file ``src`` (inside ``root``) to ``dst``, taking its size and one file from ``budget``."""
    where = outside(src, root)
    budget[1] -= 1
    if budget[1] < 0:
        raise _Refused(f"more than {MAX_FILES:,} files")
    if where is not None:
        raise _Refused(f"{_rel(src, root)} resolves outside the bundle (to {where})")
    try:
        with open_regular(src) as fh, dst.open("wb") as out:
            while piece := fh.read(min(_COPY_PIECE, budget[0] + 1)):
                budget[0] -= len(piece)
                if budget[0] < 0:
                    raise _Refused(f"over the {size_text(MAX_TSDB_BYTES)} limit of a snapshot")
                out.write(piece)
    except RefusedFile as exc:
        raise _Refused(f"{_rel(src, root)} is {exc.reason}") from None
    except OSError as exc:
        raise _Refused(f"{_rel(src, root)} cannot be read ({exc.strerror or type(exc).__name__})") from None


def _dump(reader: Reader, promtool: str, db: Path, tmp: Path, shown: str) -> list[str]:
    """Run ``promtool tsdb dump db``, its output read into ``reader``; the notes."""
    f = FileRead(f"{shown} (promtool tsdb dump)", None, False, DUMP, infer_type)
    with (tmp / "stderr").open("w+b") as err:
        proc = subprocess.Popen(
            [promtool, "tsdb", "dump", str(db)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=tmp,
        )
        fired = threading.Event()

        def stop() -> None:
            fired.set()
            proc.kill()  # by its PID, through the Popen handle

        timer = threading.Timer(DUMP_TIMEOUT_S, stop)
        timer.start()
        problem = None
        try:
            assert proc.stdout is not None
            reader.read_pieces(proc.stdout, f, MAX_FILE_BYTES)
        except BundleError as exc:
            problem = str(exc)
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
        err.seek(max(0, err.seek(0, os.SEEK_END) - 400))
        said = " ".join(err.read().decode("utf-8", "replace").split())[-300:]
    if problem is not None:
        return [f"{shown} not read: {problem}"]
    if fired.is_set():
        return [f"{shown} not read: promtool tsdb dump ran over {DUMP_TIMEOUT_S:g} s and was stopped"]
    if proc.returncode != 0:
        return [
            f"{shown} not read: promtool tsdb dump failed (exit {proc.returncode}): {said or 'no message'}"
        ]
    try:
        reader.end(f)
    except BundleError as exc:  # promtool wrote something the dump's reader does not know
        return [f"{shown} not read: {exc}"]
    return [f"{shown}: {note}" for note in skipped_note(f)]


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
