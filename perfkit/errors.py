"""perfkit's errors, in one place.

::

    PerfkitError                 base of everything perfkit raises on purpose
    ├── BundleError              an incident bundle is unreadable: names the file and, where there is one, the line
    ├── ConfigError              a parameter, option or YAML file is invalid (unknown parameter, inverted window ...)
    ├── SecretLeak               a secret-looking value was passed where only a reference (env var name) belongs
    ├── SourceError              a live source failed: names the URL and status (never a token)
    ├── QueryError               a metric operation cannot be evaluated as written
    └── RunbookError             papermill could not execute a runbook; carries the cell and the error

Every message is one line a person can act on; the CLI prints ``str(err)`` and exits non-zero.
"""

from __future__ import annotations

import re


class PerfkitError(Exception):
    """Base class: an error perfkit raises with a message meant for the user."""


class BundleError(PerfkitError):
    """An incident bundle (or one file of it) is malformed or missing."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = path or ""
        if path and line is not None:
            where = f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message)


class ConfigError(PerfkitError):
    """A parameter, option or configuration file is invalid."""


class ResultError(ConfigError):
    """A load-test result file that cannot be used: names the file and the key
    (``perfkit.loadgen.result`` and the importers of other tools' results both raise it)."""


class SecretLeak(PerfkitError):
    """A value that looks like a secret was given where a reference belongs."""


class SourceError(PerfkitError):
    """A live source (HTTP API, NVML ...) failed; the message names the URL and status."""

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None) -> None:
        self.url = url
        self.status = status
        super().__init__(message)


class QueryError(PerfkitError):
    """A metric operation cannot be evaluated (unknown function, bad window ...)."""


class RunbookError(PerfkitError):
    """A runbook failed to execute. ``cell`` is the failing cell's execution count (the ``In [N]``
    JupyterLab shows beside it), ``source`` the line that raised (or the cell's first line), and
    ``ename``/``evalue`` the exception's name and value."""

    def __init__(
        self, message: str, *, cell: int | None = None, source: str = "", ename: str = "", evalue: str = ""
    ) -> None:
        self.cell = cell
        self.source = source
        self.ename = ename
        self.evalue = evalue
        super().__init__(message)

    @classmethod
    def from_cell(
        cls, cell: int | None, source: str, ename: str, evalue: str, traceback: list[str] | None = None
    ) -> RunbookError:
        """``cell In [7] (rb.triage(ctx)): ZeroDivisionError: division by zero``: what `perfkit run` prints.

        The excerpt is the cell's line the traceback points at (``---->``), else its first line."""
        excerpt = _raising_line(traceback or []) or next(
            (
                ln.strip()
                for ln in str(source or "").splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")
            ),
            "",
        )
        if len(excerpt) > 60:
            excerpt = excerpt[:57] + "..."
        value = " ".join(str(evalue or "").split())
        if len(value) > 300:
            value = value[:297] + "..."
        where = f"cell In [{cell}]" if cell is not None else "a cell"
        message = f"{where}{f' ({excerpt})' if excerpt else ''}: {ename}{f': {value}' if value else ''}"
        return cls(message, cell=cell, source=excerpt, ename=str(ename), evalue=value)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _raising_line(traceback: list[str]) -> str:
    """The ``----> N code`` line of the cell's own frame in an IPython traceback (ANSI colours removed)."""
    in_cell = False
    for block in traceback:
        for line in _ANSI.sub("", str(block)).splitlines():
            if line.lstrip().startswith("Cell In["):
                in_cell = True
            elif in_cell and line.lstrip().startswith("---->"):
                return re.sub(r"^\s*---->\s*\d+\s*", "", line).strip()
            elif line.startswith("File ") or line.lstrip().startswith("File "):
                in_cell = False
    return ""
