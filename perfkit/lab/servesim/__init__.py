"""A live serving-engine simulator (issue 11): a vLLM-like engine core stepped in virtual time
(:mod:`.core`), its step-time roofline (:mod:`.roofline`), its configuration (:mod:`.config`), and
the OpenAI-compatible server, metrics and faults in front of it. docs/simulator.md has the model.

Public API: see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "SimConfig": "perfkit.lab.servesim.config",
    "SETTABLE": "perfkit.lab.servesim.config",
    "load_config": "perfkit.lab.servesim.config",
    "config_from_dict": "perfkit.lab.servesim.config",
    "with_changes": "perfkit.lab.servesim.config",
    "EngineCore": "perfkit.lab.servesim.core",
    "Faults": "perfkit.lab.servesim.core",
    "StepResult": "perfkit.lab.servesim.core",
    "Output": "perfkit.lab.servesim.core",
    "Finished": "perfkit.lab.servesim.core",
    "RequestRejected": "perfkit.lab.servesim.core",
    "Roofline": "perfkit.lab.servesim.roofline",
    "StepWork": "perfkit.lab.servesim.roofline",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
