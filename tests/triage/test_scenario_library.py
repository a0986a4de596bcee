"""Triage on every embedded scenario, graded against its answer key (answer.yaml is read only here).

Each incident: the right direction is rank 1 and confirmed (with the suspect version for a release
regression). Each healthy control: nothing confirmed at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.app.grading import grade_bundle, read_answer, scenario_dirs
from perfkit.triage.rows import ROWS

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
BUNDLES = scenario_dirs(SCENARIOS)


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_triage_matches_the_answer_key(bundle):
    g = grade_bundle(bundle)
    if g.control:
        assert g.confirmed == [], f"false confirmation on a healthy control: {g.confirmed}"
    else:
        assert g.got == g.want, f"rank 1 confirmed: {g.got}; confirmed: {g.confirmed}"
        if g.want == "release_regression":
            assert g.got_version == g.want_version


def test_every_row_has_two_incidents_and_there_are_controls():
    directions = [read_answer(b)["direction"] for b in BUNDLES]
    for row in ROWS:
        assert directions.count(row.direction) >= 2, row.direction
    assert directions.count("none") >= 4  # inference and training controls
