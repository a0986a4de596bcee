"""Triage on every embedded scenario, graded against its answer key (answer.yaml is read only here).

Each incident: the right direction is rank 1 and confirmed (with the suspect version where there is
one). Each healthy control: nothing confirmed at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.accuracy import grade_bundle, read_answer, scenario_dirs

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
BUNDLES = scenario_dirs(SCENARIOS)


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_triage_matches_the_answer_key(bundle):
    g = grade_bundle(bundle)
    if g.control:
        assert g.confirmed == [], f"false confirmation on a healthy control: {g.confirmed}"
    else:
        assert (g.got, g.got_version) == (g.want, g.want_version)


def test_every_inference_row_has_two_incidents_and_there_are_controls():
    directions = [read_answer(b)["direction"] for b in BUNDLES]
    for direction in (
        "prefill_decode_interference",
        "release_regression",
        "scheduler_queueing",
        "decode_efficiency",
        "kv_cache_allocation",
    ):
        assert directions.count(direction) >= 2, direction
    assert directions.count("none") >= 2
