"""Grade triage against the answer keys of the embedded scenarios (used by benchmarks and drills).

An answer key may carry ``scope:`` (a shared-fleet bundle holds a second, healthy workload): the
matchers that name the affected workload, which an engineer knows before triage starts. Grading
passes it to triage; it says which workload, never which direction.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.errors import BundleError
from perfkit.sources.safeyaml import YamlError, load_yaml


@dataclass
class Graded:
    scenario: str
    want: str
    want_version: str | None
    got: str | None  # rank-1 direction if confirmed, else None
    got_version: str | None
    confirmed: list[str]
    seconds: float
    variant: str | None = None  # loose-window, shared-fleet, restart (perfkit.lab.sim.variants)
    scope: str | None = None  # the answer key's scope, passed to triage
    cuts: list[dict[str, Any]] | None = None  # every threshold cut the rows report; None: rows report none
    #: the answer's row saying the engine exports no signal it needs ("cannot check on TGI: ..."), if so
    engine_gap: str | None = None
    #: the rank-1 row's workload against the incident's ("training" on "serving": the wrong table)
    top_about: tuple[str, str] | None = None

    @property
    def control(self) -> bool:
        return self.want == "none"

    @property
    def correct(self) -> bool:
        if self.control:
            return not self.confirmed
        if self.want == "release_regression":
            return self.got == self.want and self.got_version == self.want_version
        return self.got == self.want  # a version in other answer keys names the trigger, not the direction

    @property
    def false_confirmations(self) -> list[str]:
        """Directions confirmed that the answer key does not name (on controls: every confirmation)."""
        return [d for d in self.confirmed if d != self.want]


def read_answer(bundle: Path) -> dict[str, Any]:
    path = bundle / "answer.yaml"
    try:
        data = load_yaml(path)
    except FileNotFoundError:
        raise BundleError(
            "no answer.yaml (only drills and embedded scenarios carry one)", path=str(path)
        ) from None
    except YamlError as exc:
        raise BundleError(exc.problem, path=str(path), line=exc.line) from None
    if not isinstance(data, dict) or "direction" not in data:
        raise BundleError("answer.yaml needs a 'direction'", path=str(path))
    return data


def grade_bundle(bundle: Path) -> Graded:
    """Run triage on ``bundle`` (reading only the answer's ``scope:`` first) and compare with answer.yaml."""
    import time

    from perfkit.triage.table import triage_bundle

    answer = read_answer(bundle)
    scope = answer.get("scope")
    if scope is not None and not isinstance(scope, str):
        raise BundleError(
            "answer.yaml: 'scope' must be a string of label matchers", path=str(bundle / "answer.yaml")
        )
    kwargs = {"scope": scope} if scope and "scope" in inspect.signature(triage_bundle).parameters else {}
    t = time.perf_counter()
    result = triage_bundle(bundle, **kwargs)
    seconds = time.perf_counter() - t
    confirmed = [r.row.direction for r in result.confirmed()]
    top = result.top
    got = top.row.direction if top and top.verification.verdict == "confirmed" else None
    variant = answer.get("variant")
    want = next((r for r in result.results if r.row.direction == answer["direction"]), None)
    gap = want.verification.why if want is not None and want.verification.verdict == "inconclusive" else ""
    return Graded(
        bundle.name,
        str(answer["direction"]),
        answer.get("suspect_version"),
        got,
        result.suspect_version if got == "release_regression" else None,
        confirmed,
        seconds,
        str(variant) if variant else None,
        scope if kwargs else None,
        row_cuts(result),
        gap if gap.startswith("cannot check on ") else None,
        (top.row.workload, result.workload) if top is not None else None,
    )


def row_cuts(result: Any) -> list[dict[str, Any]] | None:
    """Every threshold cut behind the row verdicts: the ``cuts`` of each row's detection and
    verification (name, measured value, cut-off, passed, margin = relative distance from the
    cut-off). None when the rows report no cuts at all."""
    out: list[dict[str, Any]] = []
    reported = False
    for r in result.results:
        for stage, part in (("detect", r.detection), ("verify", r.verification)):
            cuts = getattr(part, "cuts", None)
            if cuts is None:
                continue
            reported = True
            for c in cuts:
                margin = getattr(c, "margin", None)
                if margin is None or not isinstance(margin, int | float) or math.isnan(margin):
                    continue
                out.append(
                    {
                        "row": r.row.direction,
                        "stage": stage,
                        "name": str(getattr(c, "name", "?")),
                        "value": getattr(c, "value", None),
                        "cutoff": getattr(c, "cutoff", None),
                        "passed": bool(getattr(c, "passed", False)),
                        "margin": abs(float(margin)),
                    }
                )
    return out if reported else None
