"""Where a trace's text comes from: which files a path names (a file, a folder of ranks, a folder
of phases) and a bounded ``read(n)`` of one file's text (gunzipped when gzip).

Everything here treats the path as hostile: a FIFO, a device (``/dev/zero``) or a socket is never
read (it is opened ``O_NONBLOCK`` and checked on the descriptor, as ``perfkit.sources.safeio``
does for bundles: that layer may not be imported from here), the text is capped, and a gzip
stream that inflates far beyond what a profiler trace does is refused early.
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfkit.errors import BundleError, ConfigError

#: decompressed text read from one file at most. Memory does not grow with it (the pass is
#: streamed); this bounds the time a hostile file (a gzip bomb) can take: 64 GiB is ~60x the
#: largest real traces we have seen (about 1 GB).
MAX_BYTES = 64 << 30
#: a gzip stream that inflates more than this many times its compressed size is refused once
#: :data:`RATIO_FLOOR` bytes of text are out. Real Kineto traces inflate 10-20x (HTA's test traces:
#: 8-19x; a 1 GB trace of one job's repeated steps: 11x); deflate's ceiling is ~1030x, which a
#: gzip bomb of repeated bytes reaches. 100x keeps 5x margin over the most repetitive real trace
#: and refuses a bomb after 64 MiB of text (well under a second).
MAX_RATIO = 100
RATIO_FLOOR = 64 << 20
TRACE_SUFFIXES = (".json", ".gz")


def _file_kind(mode: int) -> str:
    """What a path that is not a regular file is, for messages (as perfkit.sources.safeio says it)."""
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _open_regular(path: Path) -> Any:
    """Open ``path`` for bytes only if it is a regular file (after symlinks): a FIFO, a device
    (``/dev/zero``) or a socket is refused without blocking on it (``O_NONBLOCK``; the check is on
    the open descriptor, so a path swapped after a check cannot slip through)."""
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    )
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        why = "no such file" if exc.errno == errno.ENOENT else (exc.strerror or str(exc))
        raise BundleError(f"cannot read the trace: {why}", path=str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BundleError(f"not a regular file ({_file_kind(mode)}): not read as a trace", path=str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_text(path: Path) -> tuple[Callable[[int], bytes], Callable[[], None]]:
    """A ``read(n)`` of the file's text (gunzipped when it starts with gzip's magic) and a closer.

    Bounded: at most :data:`MAX_BYTES` of text, and a gzip stream may not inflate more than
    :data:`MAX_RATIO` times past :data:`RATIO_FLOOR` (a gzip bomb is refused within a second)."""
    raw = _open_regular(path)
    gzipped = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
    total = 0

    def read(n: int) -> bytes:
        nonlocal total
        try:
            piece: bytes = stream.read(n)
        except EOFError:
            raise BundleError(
                f"truncated gzip stream: the compressed data ends early ({total} bytes of text read; an interrupted copy?)",
                path=str(path),
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise BundleError(
                f"corrupt gzip stream ({total} bytes of text read): {exc}", path=str(path)
            ) from None
        total += len(piece)
        if total > MAX_BYTES:
            raise BundleError(f"over {MAX_BYTES >> 30} GiB of text: not read further", path=str(path))
        if gzipped and total > RATIO_FLOOR:
            packed = max(raw.tell(), 1)
            if total > MAX_RATIO * packed:
                raise BundleError(
                    f"the gzip stream inflates {total // packed}x ({total >> 20} MiB of text from "
                    f"{packed >> 10} KiB), over the {MAX_RATIO}x no profiler trace reaches "
                    "(real ones: 10-20x): a gzip bomb? Not read further",
                    path=str(path),
                )
        return piece

    def close() -> None:
        stream.close()
        raw.close()

    return read, close


def _is_trace(f: Path) -> bool:
    return f.name.endswith(TRACE_SUFFIXES) and not f.name.startswith(".")


def trace_phases(path: str | Path) -> dict[str, Path]:
    """The sub-folders of ``path`` that hold trace files, by name, when ``path`` holds none itself:
    a bundle's ``traces/`` with one folder per profiled run (``baseline/``, ``incident/``). Empty
    when ``path`` is not such a folder."""
    p = Path(path)
    if not p.is_dir() or any(_is_trace(f) and f.is_file() for f in p.iterdir()):
        return {}
    return {
        d.name: d
        for d in sorted(p.iterdir())
        if d.is_dir() and not d.name.startswith(".") and any(_is_trace(f) for f in d.iterdir())
    }


def trace_files(path: str | Path) -> list[Path]:
    """The trace files ``path`` names: itself, or the ``.json``/``.gz`` files in the folder.

    Raises :class:`ConfigError` for a missing path, one that is not a regular file or a folder
    (a FIFO, ``/dev/zero``), a folder of phases (say which) and a folder without traces."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise ConfigError(f"{p}: no such trace file or folder") from None
        raise ConfigError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return [p]
    if not stat.S_ISDIR(mode):
        raise ConfigError(f"{p}: not a regular file ({_file_kind(mode)}): not read as a trace")
    found = sorted(f for f in p.iterdir() if _is_trace(f) and f.is_file())
    if not found:
        phases = trace_phases(p)
        if phases:
            listed = ", ".join(f"{name}/" for name in phases)
            raise ConfigError(
                f"{p}: this folder holds phases {listed} (one profiled run each): give one of them, "
                "or use analyze_phases (perfkit trace reads each)"
            )
        raise ConfigError(f"{p}: no trace files (*.json, *.json.gz) in the folder")
    return found
