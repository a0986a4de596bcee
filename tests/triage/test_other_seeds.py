"""Triage on the embedded stories told with seeds nobody tuned a threshold on.

The thresholds were set looking at the embedded bundles (their specs' own seeds). Here each run draws
fresh seeds at random (``secrets``: a different draw every run), simulates a few scenarios with them
into a temporary folder, and grades triage against the answer key the simulator wrote from the spec:

* an incident: rank 1 is the answer's direction, and it is confirmed;
* a healthy control: nothing is confirmed at all.

A failure names the scenario and seed; re-run exactly that draw with
``PERFKIT_OTHER_SEEDS="name=seed,name=seed" pytest tests/triage/test_other_seeds.py``. With
``PERFKIT_SEED_BASE=TEXT`` the draw follows from that text: ``.ci/run`` passes the day's date, so CI
draws fresh seeds every day and a day's draw can be repeated.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
from dataclasses import replace
from pathlib import Path

import pytest

from perfkit.app.drills.grading import read_answer
from perfkit.app.runner.embedded import base_specs
from perfkit.lab.sim.model import ScenarioSpec
from perfkit.triage.table import triage_bundle

EMBEDDED = Path(__file__).resolve().parents[2] / "data" / "scenarios"
SPECS = base_specs()


def _direction(name: str) -> str:
    """The embedded answer key's direction (``none`` for a healthy control)."""
    return str(read_answer(EMBEDDED / name)["direction"])


def _draw() -> list[tuple[str, int]]:
    """Four incidents (two inference, two training) and two controls (one of each), fresh seeds."""
    given = os.environ.get("PERFKIT_OTHER_SEEDS", "").strip()
    if given:
        pairs = [item.split("=", 1) for item in given.split(",") if item.strip()]
        return [(name.strip(), int(seed)) for name, seed in pairs]
    base = os.environ.get("PERFKIT_SEED_BASE", "").strip()
    # CI (.ci/run) draws from the day's date: fresh every day, and a failing draw can be re-run
    pick = random.Random(hashlib.sha256(base.encode()).digest()) if base else secrets.SystemRandom()
    pools: dict[tuple[bool, bool], list[str]] = {}
    for name, (factory, _) in SPECS.items():
        inference = isinstance(factory(), ScenarioSpec)
        pools.setdefault((inference, _direction(name) == "none"), []).append(name)
    chosen = [*pick.sample(sorted(pools[True, False]), 2), *pick.sample(sorted(pools[False, False]), 2)]
    chosen += [pick.choice(sorted(pools[True, True])), pick.choice(sorted(pools[False, True]))]
    own = {SPECS[name][0]().seed for name in chosen}
    draw = []
    for name in chosen:
        seed = pick.randrange(1, 2_000_000_000)
        while seed in own:  # never one of the tuned seeds
            seed = pick.randrange(1, 2_000_000_000)
        draw.append((name, seed))
    return draw


# issue 27: "CI's slow job runs a small fresh-seed sweep": six bundles simulated, ~40 s
pytestmark = pytest.mark.slow
DRAW = _draw()
RERUN = "PERFKIT_OTHER_SEEDS=" + ",".join(f"{n}={s}" for n, s in DRAW)


@pytest.mark.parametrize(("name", "seed"), DRAW, ids=[f"{n}-seed{s}" for n, s in DRAW])
def test_a_story_told_with_an_untuned_seed_gets_the_same_answer(tmp_path, name, seed):
    factory, generate = SPECS[name]
    spec = factory()
    assert spec.seed != seed
    generate(replace(spec, seed=seed), tmp_path / name)
    answer = read_answer(tmp_path / name)
    want = str(answer["direction"])
    assert want == _direction(name)  # the simulator's key for this story, whatever the seed
    result = triage_bundle(tmp_path / name)
    confirmed = [r.row.direction for r in result.confirmed()]
    where = f"{name} seed {seed} (re-run: {RERUN})"
    if want == "none":
        assert confirmed == [], f"{where}: healthy control, yet confirmed {confirmed}"
        return
    top = result.top
    assert top is not None, f"{where}: nothing ranked"
    got = (top.row.direction, top.verification.verdict)
    assert got == (want, "confirmed"), f"{where}: rank 1 {got}, want {want} confirmed; confirmed {confirmed}"
    if want == "release_regression":
        assert result.suspect_version == answer.get("suspect_version"), where
