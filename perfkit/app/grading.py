"""Grade triage against the answer keys of the embedded scenarios (used by benchmarks and drills)."""

from __future__ import annotations

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
    """Run triage on ``bundle`` (never reading its answer) and compare with answer.yaml."""
    import time

    from perfkit.triage.table import triage_bundle

    t = time.perf_counter()
    result = triage_bundle(bundle)
    seconds = time.perf_counter() - t
    answer = read_answer(bundle)
    confirmed = [r.row.direction for r in result.confirmed()]
    top = result.top
    got = top.row.direction if top and top.verification.verdict == "confirmed" else None
    return Graded(
        bundle.name,
        str(answer["direction"]),
        answer.get("suspect_version"),
        got,
        result.suspect_version if got == "release_regression" else None,
        confirmed,
        seconds,
    )


def scenario_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/answer.yaml"))
