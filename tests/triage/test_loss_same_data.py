"""The loss row compares the same data when step numbers allow, and says when it cannot (issue 12
item 7). The evidence is gathered from the embedded bundles as triage does; the step-numbered loss
(``TrainingEvidence.loss_by_step``: rank-mean loss by optimizer step, before the incident window
and in it) comes from the simulator run that wrote each bundle (same spec, same seed), as a
trainer's ``step N | loss X`` log lines give it at every step (the bundles' logs give every 10th,
which ``gather`` reads: :func:`perfkit.analyses.training_evidence.loss_by_step`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfkit.engine.local import LocalEngine
from perfkit.lab.sim.training_engine import simulate
from perfkit.lab.sim.training_model import Change
from perfkit.lab.sim.training_scenarios import TRAINING_SCENARIOS
from perfkit.sources.bundle import load_bundle
from perfkit.triage.evidence import gather
from perfkit.triage.training_rows import same_step_loss, verify_loss

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def _evidence(name: str):
    b = load_bundle(SCENARIOS / name)
    return gather(LocalEngine(b.store), b.incident, events=b.events, logs=b.logs)


def _loss_by_step(spec) -> dict[str, dict[int, float]]:
    """Loss by step before the incident window (the previous launch) and inside it: a relaunch
    from a checkpoint replays the steps since the checkpoint, on the same batches."""
    run = simulate(spec)
    w0, w1 = spec.window
    before = {
        int(s): float(v) for s, v, t in zip(run.step, run.loss_global, run.t_end, strict=True) if t <= w0
    }
    during = {
        int(s): float(v)
        for s, v, t in zip(run.step, run.loss_global, run.t_start, strict=True)
        if w0 <= t < w1
    }
    return {"baseline": before, "incident": during}


@pytest.mark.parametrize("name", ["loss-spikes-no-warmup", "loss-oscillation-data-order"])
def test_the_same_steps_confirm_a_changed_optimisation(name):
    ev = _evidence(name)
    ev.train.loss_by_step = _loss_by_step(TRAINING_SCENARIOS[name]())
    ratio, shared = same_step_loss(ev)
    assert shared > 50  # the steps since the last checkpoint, replayed after the deploy's relaunch
    assert ratio is not None and ratio > 3.0
    v = verify_loss(ev)
    assert v.verdict == "confirmed"
    assert f"on the same {shared} steps" in v.why and v.numbers["compared_on"] == "same steps"


def test_the_same_steps_rule_out_a_healthy_replay():
    # a plain restart of the healthy run: the replayed steps see the same batches at the same LR,
    # so their loss is the first run's; the row rules the optimisation out on the same data
    spec = replace(TRAINING_SCENARIOS["train-healthy"](), changes=(Change(1080.0, "config", "restart"),))
    ev = _evidence("train-healthy")
    ev.train.loss_by_step = _loss_by_step(spec)
    ratio, shared = same_step_loss(ev)
    assert shared > 50 and ratio == pytest.approx(0.0, abs=0.05)
    v = verify_loss(ev)
    assert v.verdict == "ruled_out" and "matches the baseline run's" in v.why


@pytest.mark.parametrize("name", ["loss-spikes-no-warmup", "loss-oscillation-data-order"])
def test_the_trainers_own_step_lines_give_the_same_steps(name):
    # the bundle's log holds the trainer's "step N | loss X" lines, every 10th step; the relaunch
    # after the deploy replays the steps since the checkpoint, and gather reads them from the log
    log = (SCENARIOS / name / "logs" / "train.log").read_text()
    assert "| loss " in log
    ev = _evidence(name)
    ratio, shared = same_step_loss(ev)
    assert shared >= 8 and ratio is not None and ratio > 3.0
    v = verify_loss(ev)
    assert v.verdict == "confirmed" and v.numbers["compared_on"] == "same steps"


@pytest.mark.parametrize("name", ["loss-spikes-no-warmup", "loss-oscillation-data-order"])
def test_without_step_numbers_the_trend_confirms_it(name):
    # a trainer that logs no step numbers: the loss curve's scatter around its trend decides
    ev = _evidence(name)
    ev.train.loss_by_step = None
    v = verify_loss(ev)
    assert v.verdict == "confirmed" and v.numbers["compared_on"] == "trend", v.why


def test_without_step_numbers_it_says_it_compared_the_trend():
    ev = _evidence("loss-spikes-no-warmup")
    ev.train.loss_by_step = None  # a trainer that logs no step numbers
    v = verify_loss(ev)
    assert v.verdict == "confirmed" and v.numbers["compared_on"] == "trend"
    assert "no step numbers to compare the same steps" in v.why
    ev = _evidence("train-loss-spike-healthy")  # step lines, but no relaunch: no step run twice
    v = verify_loss(ev)
    assert v.verdict == "ruled_out" and "only 0 step(s) logged in both windows" in v.why
    # too few shared steps: the trend decides, and the count is reported
    ev.train.loss_by_step = {"baseline": {1: 2.0, 2: 2.0}, "incident": {1: 2.5, 2: 2.5}}
    assert same_step_loss(ev) == (None, 2)
    assert verify_loss(ev).numbers["compared_on"] == "trend"
