"""Metric semantics: operations defined once (``ops``), evaluated locally with polars (``local``) or
written as PromQL (``promql``), and the catalogue of signals the analyses read (``signals``).

Public API: see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "LocalEngine": "perfkit.engine.local",
    "histogram_quantile_frame": "perfkit.engine.local",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
