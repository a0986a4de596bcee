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
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


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
