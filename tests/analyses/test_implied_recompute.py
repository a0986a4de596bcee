"""Recomputation implied by the memory peak (issue 36, item 4): HFU from what the job must be doing.

The peaks are computed here by hand from the model's shape (Korthikanti's 34·h·L bytes a token stored,
2·h·L with full recomputation) and the model states (16 B a parameter over the GPUs under ZeRO-3), not
taken from perfkit's output.
"""

from __future__ import annotations

from perfkit.analyses.memory_peak import implied_recompute, states_vs_peak
from perfkit.core import hardware

GIB = 2**30


def _peak(name: str, gpus: int, stored_tokens: float, recomputed_tokens: float = 0.0) -> float:
    m = hardware.model(name)
    states = 16.0 * m.params / gpus  # ZeRO-3: weights, gradients, Adam all sharded
    return (
        states
        + 2 * GIB
        + stored_tokens * 34 * m.hidden * m.layers
        + recomputed_tokens * 2 * m.hidden * m.layers
    )


def test_a_peak_too_small_for_one_stored_sequence_implies_full_recomputation() -> None:
    m = hardware.model("llama-3.1-70b")
    # 64 GPUs, one 4,096-token sequence per micro-batch, full recomputation: ~1.3 MiB a token per GPU
    peak = states_vs_peak(m, 64, _peak("llama-3.1-70b", 64, 0, 4096), 80 * GIB)
    setting, why = implied_recompute(peak, 4096)
    assert setting == "full", why
    assert "recomputes" in why


def test_a_peak_that_holds_the_stored_activations_implies_nothing() -> None:
    m = hardware.model("llama-3.1-8b")
    peak = states_vs_peak(m, 8, _peak("llama-3.1-8b", 8, 4096), 80 * GIB)
    setting, why = implied_recompute(peak, 4096)
    assert setting is None and "needs no recomputation" in why


def test_the_margin_keeps_a_near_case_undecided() -> None:
    # room for 60 % of a sequence stored: within the 2x the 34·h·L estimate can be off by, no verdict
    m = hardware.model("llama-3.1-8b")
    peak = states_vs_peak(m, 8, _peak("llama-3.1-8b", 8, 0.6 * 4096), 80 * GIB)
    assert implied_recompute(peak, 4096)[0] is None


def test_tensor_parallel_ranks_each_hold_a_share() -> None:
    m = hardware.model("llama-3.1-70b")
    peak = states_vs_peak(m, 64, _peak("llama-3.1-70b", 64, 4096 / 8), 80 * GIB)
    assert implied_recompute(peak, 4096, tp=1)[0] == "full"  # seen as one whole GPU's
    assert implied_recompute(peak, 4096, tp=8)[0] is None  # a tp-8 rank stores 1/8 of each token
