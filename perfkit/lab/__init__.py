"""The lab: simulators of an LLM serving engine and a training job that write incident bundles
(``lab.sim``), and local Prometheus/VictoriaMetrics servers loaded with a bundle (``perfkit lab
up/down``). It knows the physics, never the detectors.

Public API: see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "LabServer": "perfkit.lab.servers",
    "start": "perfkit.lab.servers",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
