"""The face, in five rooms (docs/architecture.md): ``cli`` (the command line), ``runbooks`` (the notebook
API the runbooks call), ``runner`` (papermill, batch, records, ``perfkit open``, the embedded
scenarios), ``drills`` (recorded and live drills, grading) and ``whatif`` (replays on the simulator).

Public API (``from perfkit.app import execute``): see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "main": "perfkit.app.cli.main",
    "execute": "perfkit.app.runner.run",
    "RunResult": "perfkit.app.runner.run",
    "load_batch": "perfkit.app.runner.batch",
    "run_batch": "perfkit.app.runner.batch",
    "open_runbook": "perfkit.app.runner.lab_open",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
