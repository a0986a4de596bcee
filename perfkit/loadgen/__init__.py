"""Load tests that give the baseline, and the release gate: ``perfkit bench``, ``baseline``, ``gate``.

Beside ``sources`` (it may import core, engine and sources): it talks to an OpenAI-compatible server
under test, keeps results as plain files, and judges a new result against its history.

Public API: see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "BenchOptions": "perfkit.loadgen.bench",
    "run_bench": "perfkit.loadgen.bench",
    "read_result": "perfkit.loadgen.result",
    "write_json": "perfkit.loadgen.result",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
