"""The face: the command line, the notebook API the runbooks call (``perfkit.app.runbook``), the
papermill runner, batch, ``perfkit open``, drills and their grading, terminal output.

Public API (``from perfkit.app import execute``): see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "cli": "perfkit.app.cli",
    "main": "perfkit.app.cli",
    "execute": "perfkit.app.run",
    "RunResult": "perfkit.app.run",
    "load_batch": "perfkit.app.batch",
    "run_batch": "perfkit.app.batch",
    "open_runbook": "perfkit.app.lab_open",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
