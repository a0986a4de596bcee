"""All I/O: incident bundles, OpenMetrics, logs, events and releases, the live HTTP sources
(Prometheus/VictoriaMetrics, Alertmanager, Loki), NVML, capture into a bundle, and the exporter a
training loop uses. Everything read from outside is bounded and never executed.

Public API (``from perfkit.sources import load_bundle, TrainMetrics``): see ``__all__``.
"""

from perfkit.core.exports import lazy_exports

_NAMES = {
    "Bundle": "perfkit.sources.bundle",
    "load_bundle": "perfkit.sources.bundle",
    "read_incident": "perfkit.sources.incident_file",
    "read_logs": "perfkit.sources.logs",
    "LiveConfig": "perfkit.sources.live",
    "live_incident": "perfkit.sources.live",
    "open_live": "perfkit.sources.live",
    "capture": "perfkit.sources.capture",
    "engine_config": "perfkit.sources.engine_config",
    "TrainMetrics": "perfkit.sources.train_exporter",
    "load_json_bounded": "perfkit.sources.safejson",
    "check_json_bounds": "perfkit.sources.safejson",
    "UnsafeJson": "perfkit.sources.safejson",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
