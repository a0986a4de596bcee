"""Opening files that come from outside (bundles, configs, logs) without trusting them.

* :func:`open_regular` opens a path for reading bytes only if it is a regular file: a FIFO, a
  device (``/dev/zero``, ``/dev/urandom``), a socket or a folder is refused with
  :class:`RefusedFile` (an :class:`OSError`, so ``except OSError`` handlers keep working). It opens
  with ``O_NONBLOCK`` and checks the open descriptor, so a FIFO never blocks the open and a path
  swapped between a check and the open cannot slip through.
* :func:`read_capped` reads at most ``max_bytes`` and refuses a file that holds more (it reads
  ``max_bytes + 1`` bytes, never the whole of a file that grows or lies about its size).
* :func:`outside` says whether a path (a symlink, or under a symlinked folder) resolves outside
  a root folder, e.g. a bundle's ``logs/`` linking to ``/var/log``.
* :func:`long_line`, :func:`last_line` and :func:`rest_of_line` look at lines of text read in
  pieces without trusting their length (a 50 MB "line" costs one piece of memory, never a copy).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_SCAN_CHUNK = 16 * 2**20


class RefusedFile(OSError):
    """A file perfkit will not read: not a regular file, too large, or outside its root.

    ``reason`` (also ``strerror``) is a short phrase for messages: ``"not a regular file (a FIFO)"``.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(errno.EPERM, reason, str(path))
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.filename}: {self.reason}"


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, for messages (``"a FIFO"``, ``"a character device"`` ...)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def not_regular(mode: int) -> str:
    """The refusal reason for a non-regular file of mode ``mode``."""
    return f"not a regular file ({file_kind(mode)})"


def size_text(n: int) -> str:
    """``n`` bytes as a short human size: ``2 GiB``, ``64 KiB``, ``1.5 MiB``, ``12 bytes``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def open_regular(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> BinaryIO:
    """Open ``path`` for reading bytes if it is a regular file (symlinks are followed).

    Raises :class:`RefusedFile` for a FIFO, device, socket or folder, and for a file whose size
    is over ``max_bytes`` (when given); other :class:`OSError` (``FileNotFoundError``,
    ``PermissionError``) as :func:`open` does.
    """
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | _BINARY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(path, not_regular(st.st_mode))
        if max_bytes is not None and st.st_size > max_bytes:
            raise RefusedFile(path, f"file is {size_text(st.st_size)}, over the {size_text(max_bytes)} limit")
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """All bytes of the regular file ``path``, refusing (:class:`RefusedFile`) one over ``max_bytes``."""
    with open_regular(path, max_bytes=max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew after the size check
        raise RefusedFile(path, f"file is over the {size_text(max_bytes)} limit")
    return data


def outside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str | None:
    """Where ``path`` really is, if that is outside ``root`` (after resolving every symlink); else None.

    A path that does not exist resolves as far as it can; ``..`` segments count too.
    """
    real = Path(os.path.realpath(path))
    base = Path(os.path.realpath(root))
    return None if real == base or real.is_relative_to(base) else str(real)


def refusal(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str | None:
    """Why ``path`` (in ``root``) may not be read: it resolves outside ``root``, it is gone (a
    broken link) or it is not a regular file; None when it may."""
    where = outside(path, root)
    if where is not None:
        return f"resolves outside the bundle (to {where}), not read"
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        return f"cannot be read ({err.strerror or type(err).__name__})"
    if not stat.S_ISREG(mode):
        return f"is {not_regular(mode)}, not read"
    return None


def long_line(data: bytes | str, limit: int) -> tuple[int, int] | None:
    """(1-based line number, length in bytes) of the first line of ``data`` longer than ``limit``
    bytes (newline excluded), or None. Vectorised (numpy) and chunked: memory stays at ~16 MiB
    beyond ``data`` itself, whatever the line lengths."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) <= limit:
        return None
    arr = np.frombuffer(raw, dtype=np.uint8)
    prev, lines = -1, 0  # offset of the last newline seen, newlines seen
    for off in range(0, arr.size, _SCAN_CHUNK):
        newlines = np.flatnonzero(arr[off : off + _SCAN_CHUNK] == 10) + off
        if not newlines.size:
            continue
        lengths = np.diff(newlines, prepend=prev) - 1
        over = np.flatnonzero(lengths > limit)
        if over.size:
            return lines + int(over[0]) + 1, int(lengths[over[0]])
        lines, prev = lines + newlines.size, int(newlines[-1])
    tail = arr.size - prev - 1
    return (lines + 1, tail) if tail > limit else None


def last_line(data: bytes, window: int) -> str | None:
    """The last line of ``data`` with something besides whitespace (stripped), or None; looked for
    ``window`` bytes at a time from the end."""
    end = len(data)
    while end > 0:
        lo = max(0, end - window)
        kept = data[lo:end].rstrip()
        if kept:
            stop = lo + len(kept)
            start = data.rfind(b"\n", 0, stop) + 1
            return data[start:stop].decode("utf-8", "replace").strip()
        end = lo
    return None


def rest_of_line(fh: IO[bytes], chunk: int) -> int:
    """Bytes up to the next newline (or the end), read and dropped ``chunk`` bytes at a time."""
    n = cut = 0
    while (data := fh.read(chunk)) and (cut := data.find(b"\n")) < 0:
        n += len(data)
    return n + (cut if data else 0)
