"""Drills for new SREs: embedded incidents served as if live, graded against their answer keys."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.app.grading import read_answer, scenario_dirs
from perfkit.core.resources import SCENARIOS
from perfkit.errors import ConfigError
from perfkit.triage.rows import ROWS

# SCENARIOS: a checkout's; an installed wheel lists its specs instead
DIRECTIONS = tuple(r.direction for r in ROWS)


@dataclass
class Drill:
    name: str
    difficulty: str
    brief: str
    path: Path


def drills(root: Path = SCENARIOS) -> list[Drill]:
    """Every drill with its difficulty and brief: from the bundles' answer keys under ``root``, or,
    where there are none (an installed wheel), from the embedded scenarios' specs; their bundles
    are simulated into the user cache when a drill starts."""
    out = []
    dirs = scenario_dirs(root)
    if dirs:
        for d in dirs:
            a = read_answer(d)
            out.append(Drill(d.name, str(a.get("difficulty", "medium")), str(a.get("brief", "")), d))
    elif root == SCENARIOS:
        from perfkit.app.embedded import cache_root, specs

        for name, (spec, _) in specs().items():
            s = spec()
            out.append(Drill(name, str(s.difficulty), str(s.brief), cache_root() / name))
    order = {"easy": 0, "medium": 1, "hard": 2}
    return sorted(out, key=lambda x: (order.get(x.difficulty, 3), x.name))


def find(name: str, root: Path = SCENARIOS) -> Drill:
    for d in drills(root):
        if d.name == name:
            if not (d.path / "answer.yaml").is_file():
                from perfkit.app.embedded import embedded_bundle

                d.path = embedded_bundle(name)
            return d
    raise ConfigError(f"no drill named {name!r}: see `perfkit drill list`")


def start(
    name: str, out: Path, *, root: Path = SCENARIOS, scope: dict[str, str] | None = None
) -> tuple[Path, Path]:
    """Copy the incident (without its answer) into ``out`` and write a runbook parameterized for it
    (``scope``: the ``scope``/``hosts`` runbook parameters; by default the scope a fleet drill's
    answer key names, the workload the page was about).

    Returns (bundle copy, runbook path)."""
    drill = find(name, root)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out}: not empty (a drill starts in a fresh folder)")
    bundle = out / "evidence"
    shutil.copytree(drill.path, bundle, ignore=shutil.ignore_patterns("answer.yaml"))
    from perfkit.app.lab_open import write_parameterized

    given = {k: v for k, v in (scope or {}).items() if v}
    if not given:  # a fleet drill: the workload in trouble is part of the page, not of the answer
        from perfkit.app.grading import read_answer

        answer_scope = read_answer(drill.path).get("scope")
        given = {"scope": str(answer_scope)} if answer_scope else {}
    params = {"bundle": str(bundle.resolve()), **given}
    runbook = write_parameterized(runbook_for(bundle), out, params)
    return bundle, runbook


def runbook_for(bundle: Path) -> str:
    """training_step for a training job's bundle (its loop exports train_*), else inference_latency."""
    for om in sorted((bundle / "metrics").glob("*.om")):
        with om.open("r", encoding="utf-8", errors="replace") as fh:
            if "train_step_duration_seconds" in fh.read(1 << 20):
                return "training_step"
    return "inference_latency"


@dataclass
class Grade:
    correct: bool
    version_correct: bool | None
    answer: dict[str, Any]
    found: dict[str, Any]  # what perfkit's triage found (rank 1 and its verification)


def check(name: str, direction: str, version: str | None = None, *, root: Path = SCENARIOS) -> Grade:
    if direction not in (*DIRECTIONS, "none"):
        raise ConfigError(f"unknown direction {direction!r}: one of {', '.join(DIRECTIONS)} or none")
    drill = find(name, root)
    answer = read_answer(drill.path)
    correct = direction == answer["direction"]
    want_version = answer.get("suspect_version")
    version_correct = None if want_version is None else (version == want_version)
    from perfkit.triage.table import triage_bundle

    result = triage_bundle(drill.path)
    top = result.top
    found = {
        "direction": top.row.direction if top else None,
        "verdict": top.verification.verdict if top else None,
        "why": top.verification.why if top else "",
        "check": top.row.check if top else "",
        "suspect_version": result.suspect_version,
    }
    return Grade(correct and version_correct is not False, version_correct, answer, found)
