"""The loss-shape measures the loss row reads (analyses.training_evidence): a roughness one spike
does not move, spikes counted as episodes, and a frozen loss that has no spikes."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.analyses.training_evidence import loss_roughness, loss_spikes, step_jitter


def noisy(
    n: int = 80, sd: float = 0.01, level: float = 2.0, slope: float = -0.002, seed: int = 1
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level + slope * np.arange(n) + sd * rng.standard_normal(n)


def test_roughness_is_the_scatter_around_the_trend_relative_to_the_level():
    v = noisy(n=400, sd=0.01, level=2.0, slope=-0.0004)
    # normal noise of SD 0.01 on a level of ~1.92: ~0.0052, whatever the downward trend
    assert loss_roughness(v) == pytest.approx(0.01 / float(np.median(v)), rel=0.15)
    flat = noisy(n=400, sd=0.01, slope=0.0, seed=2)
    assert loss_roughness(flat) == pytest.approx(0.01 / float(np.median(flat)), rel=0.15)


def test_one_spike_neither_roughens_the_loss_nor_counts_twice():
    v = noisy()
    spiked = v.copy()
    spiked[40:42] += [0.6, 0.2]  # a bad batch and the decay of its clipped update: one episode
    assert loss_roughness(spiked) == pytest.approx(loss_roughness(v), rel=0.1)
    assert loss_spikes(v) == 0
    assert loss_spikes(spiked) == 1


def test_an_oscillation_is_rough_and_recurring_spikes_count():
    v = noisy()
    wave = v + 0.1 * np.sign(np.sin(np.arange(v.size) / 3.0))  # sources taking turns
    assert loss_roughness(wave) > 5 * loss_roughness(v)
    spiky = v.copy()
    spiky[[10, 30, 50, 70]] += 0.5
    assert loss_spikes(spiky) == 4


def test_a_frozen_loss_has_no_spikes_against_the_baselines_scale():
    flat = noisy(sd=1e-6, slope=0.0)  # a gauge that stopped moving (a hung job) ...
    flat[[20, 60]] += 1e-4  # ... and two wiggles of its last digit
    assert loss_spikes(flat) == 2  # against its own (zero) scatter every wiggle is a spike ...
    assert loss_spikes(flat, floor=0.005) == 0  # ... against the baseline's batch noise, none is


def test_too_few_points_give_no_shape():
    assert loss_roughness(noisy(n=7)) is None and loss_spikes(noisy(n=7)) == 0


def test_step_jitter_reads_scrape_to_scrape_jumps():
    import polars as pl

    steady = pl.DataFrame({"rank": ["0"] * 40, "ts": range(40), "value": 2.0 + 0.002 * np.sin(np.arange(40))})
    starved = pl.DataFrame({"rank": ["0"] * 40, "ts": range(40), "value": [2.0, 3.0] * 20})
    assert step_jitter(steady) < 0.01
    assert step_jitter(starved) == pytest.approx(1.0 / 2.5)
