"""Triage on every embedded scenario, graded against its answer key (answer.yaml is read only here).

Each incident: the right direction is rank 1 and confirmed (with the suspect version for a release
regression). Each healthy control: nothing confirmed at all. And no outcome on an embedded bundle
hangs on a threshold by a hair: every comparison that decided a row's detection or verdict is at
least 5 % (relative) away from its cut-off."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.app.drills.grading import read_answer
from perfkit.app.runner.embedded import scenario_dirs
from perfkit.triage import thresholds as T
from perfkit.triage.rows import ROWS
from perfkit.triage.table import triage_bundle

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
BUNDLES = scenario_dirs(SCENARIOS)
MIN_MARGIN = 0.05


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_triage_matches_the_answer_key_with_margin(bundle):
    result = triage_bundle(bundle)
    answer = read_answer(bundle)
    confirmed = [r.row.direction for r in result.confirmed()]
    if answer["direction"] == "none":
        assert confirmed == [], f"false confirmation on a healthy control: {confirmed}"
    else:
        top = result.top
        got = top.row.direction if top and top.verification.verdict == "confirmed" else None
        assert got == answer["direction"], f"rank 1 confirmed: {got}; confirmed: {confirmed}"
        if answer["direction"] == "release_regression":
            assert result.suspect_version == answer.get("suspect_version")
    close = [
        f"{r.row.symptom} {part}: {c.name} {c.value:.4g} vs {c.cutoff:.4g} ({c.margin:.1%})"
        for r in result.results
        for part, cuts in (("detection", r.detection.cuts), ("verification", r.verification.cuts))
        for c in cuts
        if c.margin < MIN_MARGIN
    ]
    assert close == [], "decided within 5 % of a cut-off: " + "; ".join(close)
    for r in result.results:
        for c in [*r.detection.cuts, *r.verification.cuts]:
            assert isinstance(getattr(T, c.name), int | float), c.name  # named by a real threshold
            # ... and declared by the row as deciding or confirming it (perfkit/triage/rows.py)
            assert c.name in (*r.row.decides, *r.row.confirms), f"{r.row.direction}: {c.name} undeclared"
        undeclared = [q for q in r.reads if q not in r.row.reads]
        assert undeclared == [], f"{r.row.direction} read quantities it does not declare: {undeclared}"
        gates = [g.name for g in r.gates if g.name not in r.row.preconditions]
        assert gates == [], f"{r.row.direction} checked preconditions it does not declare: {gates}"


def test_every_row_has_two_incidents_and_there_are_controls():
    directions = [read_answer(b)["direction"] for b in BUNDLES]
    for row in ROWS:
        assert directions.count(row.direction) >= 2, row.direction
    assert directions.count("none") >= 4  # inference and training controls
