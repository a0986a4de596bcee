"""The plain data every layer shares: frames, incidents, findings, secret references and scrubbing.

Public API (``from perfkit.core import Incident``): see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "Window": "perfkit.core.frames",
    "Incident": "perfkit.core.incident",
    "Hardware": "perfkit.core.incident",
    "make_window": "perfkit.core.incident",
    "Finding": "perfkit.core.findings",
    "record": "perfkit.core.findings",
    "check_parameters": "perfkit.core.secrets",
    "redact_parameters": "perfkit.core.secrets",
    "known_secrets": "perfkit.core.scrub",
    "scrub": "perfkit.core.scrub",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
