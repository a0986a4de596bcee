"""The triage table's row types (:class:`Detection`, :class:`Verification`, :class:`Row`) and the
small helpers every row's detector and verification share. :mod:`perfkit.triage.rows` re-exports
the types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfkit.triage.evidence import Evidence


@dataclass
class Detection:
    detected: bool
    strength: float  # 0-1
    evidence: dict[str, Any]
    missing: list[str] = field(default_factory=list)


@dataclass
class Verification:
    verdict: str  # confirmed | ruled_out | inconclusive
    why: str
    numbers: dict[str, Any]


@dataclass(frozen=True)
class Row:
    symptom: str
    seen_as: str
    direction: str
    check: str
    next_step: str
    detect: Callable[[Evidence], Detection]
    verify: Callable[[Evidence], Verification]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _clamp(x: float) -> float:
    return max(0.0, min(1.0, x))


def _missing(ev_names: dict[str, Any]) -> list[str]:
    return [k for k, v in ev_names.items() if v is None]
