"""Computations over an incident's evidence (an engine and frames in, plain results out): data
completeness, change points and release correlation, baseline vs now, per-stage latency, cost, GPU
state. No I/O, no display.

Public API: see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "completeness": "perfkit.analyses.completeness",
    "correlate": "perfkit.analyses.release",
    "compare": "perfkit.analyses.baseline",
    "breakdown": "perfkit.analyses.stages",
    "cost": "perfkit.analyses.cost",
    "gpu_state": "perfkit.analyses.gpu",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
