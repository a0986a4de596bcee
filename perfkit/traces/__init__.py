"""Profiler-trace analysis: PyTorch profiler (Kineto) traces, one file per rank, read in one
streamed pass (:mod:`perfkit.traces.read`) and broken down the way Holistic Trace Analysis does
(:mod:`perfkit.traces.breakdown`, :mod:`perfkit.traces.steps`), much faster. See docs/traces.md.

Public API: see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "analyze": "perfkit.traces.analysis",
    "analyze_traces": "perfkit.traces.analysis",
    "analyze_phases": "perfkit.traces.analysis",
    "TraceReport": "perfkit.traces.analysis",
    "RankReport": "perfkit.traces.analysis",
    "read_trace": "perfkit.traces.read",
    "read_traces": "perfkit.traces.read",
    "RankTrace": "perfkit.traces.read",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
