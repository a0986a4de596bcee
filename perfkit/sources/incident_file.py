"""Reading ``incident.yaml`` from a bundle: safely (size, alias and depth caps), with the file and
line in every error; what an incident *is* lives in :mod:`perfkit.core.incident`."""

from __future__ import annotations

from pathlib import Path

from perfkit.core.incident import Incident, parse_incident
from perfkit.errors import BundleError
from perfkit.sources.safeyaml import YamlError, load_yaml


def read_incident(path: str | Path) -> Incident:
    """Read and check ``incident.yaml`` (safely: :func:`perfkit.sources.safeyaml.load_yaml`'s caps apply).

    Raises :class:`~perfkit.errors.BundleError` naming the file and, where known, the line.
    """
    p = Path(path)
    try:
        data = load_yaml(p)
    except FileNotFoundError:
        raise BundleError("no incident.yaml (every bundle needs one)", path=str(p)) from None
    except YamlError as exc:
        raise BundleError(exc.problem, path=str(p), line=exc.line) from None
    return parse_incident(data, path=str(p))
