"""The seed's triage table as code: each row's symptom detector, direction and quick verification,
the evidence they read, their thresholds (``thresholds``, each with its physical reason), and the
ranking (causes over effects).

Public API (``from perfkit.triage import triage_bundle``): see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "ROWS": "perfkit.triage.rows",
    "TriageResult": "perfkit.triage.table",
    "triage_bundle": "perfkit.triage.table",
    "triage_evidence": "perfkit.triage.table",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
