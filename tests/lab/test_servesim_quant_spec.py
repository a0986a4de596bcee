"""Weight quantization and speculative decoding in the serving simulator (issue 26 item 4): the seed's
§3.3 accounts (INT8 "+40-80 % speed and half the weight memory"; speculative decoding "2-3x on long
outputs", less on short ones, a drag when the draft is too close to the target) held against the
roofline's own physics on the demo's Llama-3.1-70B on 4x H100, and the settings vLLM would refuse."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.errors import ConfigError
from perfkit.lab.servesim.config import config_from_dict, with_changes
from perfkit.lab.servesim.roofline import Roofline

BASE = {"model": "llama-3.1-70b", "gpu": "h100", "tensor_parallel_size": 4, "max_model_len": 8192}


def cfg(**over):
    return config_from_dict({**BASE, **over}, "test")


def test_eight_bit_weights_halve_the_weight_memory_and_give_the_kv_cache_the_rest():
    bf16, int8, int4 = cfg(), cfg(quantization="int8"), cfg(quantization="int4")
    assert int8.weight_bytes() == pytest.approx(bf16.weight_bytes() / 2, rel=0.01)
    assert int4.weight_bytes() == pytest.approx(bf16.weight_bytes() * (0.5 + 4 / 128) / 2, rel=0.01)
    # the freed weight memory goes to the KV cache (the profile run's reserve is the same)
    freed = (bf16.weight_bytes() - int8.weight_bytes()) / bf16.tensor_parallel_size
    per_block = bf16.block_size * bf16.kv_bytes_per_token_per_gpu()
    assert int8.num_gpu_blocks() - bf16.num_gpu_blocks() == pytest.approx(freed / per_block, abs=1)


@pytest.mark.parametrize("batch", [1, 8, 32])
def test_eight_bit_decode_is_40_to_80_percent_faster_at_small_and_medium_batches(batch):
    """A decode step streams every weight once: half the bytes, but the KV reads, the all-reduces
    and the CPU's step overhead stay, so the gain lands inside the article's range, not at 2x."""
    before = Roofline(cfg()).decode_tpot_floor_s(batch, 2000)
    after = Roofline(cfg(quantization="int8")).decode_tpot_floor_s(batch, 2000)
    assert 1.4 <= before / after <= 1.8


def test_the_gain_falls_where_the_kv_reads_and_compute_dominate():
    """At 128 sequences of 2,000 tokens the KV cache is read as much as the weights: less to gain;
    W4A16 computes in bf16, so its bigger saving on weights is eaten by the GEMMs there."""
    small = Roofline(cfg()).decode_tpot_floor_s(8, 2000) / Roofline(
        cfg(quantization="int8")
    ).decode_tpot_floor_s(8, 2000)
    big = Roofline(cfg()).decode_tpot_floor_s(128, 2000) / Roofline(
        cfg(quantization="int8")
    ).decode_tpot_floor_s(128, 2000)
    assert big < small
    int4_small = Roofline(cfg()).decode_tpot_floor_s(8, 2000) / Roofline(
        cfg(quantization="int4")
    ).decode_tpot_floor_s(8, 2000)
    assert int4_small > small  # a quarter of the bytes: more than 8-bit at small batches


def test_what_vllm_refuses_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="a100-sxm has no fp8 tensor cores"):
        cfg(gpu="a100", quantization="fp8")
    assert cfg(gpu="a100", quantization="int8").compute_dtype == "int8"  # Ampere has INT8 tensor cores
    with pytest.raises(ConfigError, match="quantization: 'int3'"):
        cfg(quantization="int3")
    with pytest.raises(ConfigError, match="give one of them"):
        cfg(quantization="int4", dtype="fp8")
    assert with_changes(cfg(), {"quantization": "fp8"}, "--set").quantization == "fp8"


# -- speculative decoding: the seed's "2-3x on long outputs, less on short ones, and a draft too close
# to the target makes the verification a drag" -----------------------------------------------------------


def _burst(c, n=8, prompt=100, output=400):
    from perfkit.lab.servesim.offline import run_offline

    return run_offline(c, [0.0] * n, [prompt] * n, [output] * n, until_s=600.0, seed=3)


def test_each_step_emits_the_drafts_accepted_before_the_first_rejection():
    """k drafts accepted independently with probability a: a decode step emits (1 - a^(k+1)) / (1 - a)
    tokens on average (the target's own token plus the accepted run)."""
    k, a = 4, 0.8
    run = _burst(cfg(num_speculative_tokens=k, spec_acceptance_rate=a))
    assert (run.output_tokens == 400).all()  # every request still gets exactly what it asked
    decode_steps = int(run.steps.decode_seqs.sum())
    per_step = (run.output_tokens.sum() - len(run.output_tokens)) / decode_steps
    assert per_step == pytest.approx((1 - a ** (k + 1)) / (1 - a), rel=0.05)


def test_long_outputs_decode_two_to_three_times_faster_with_a_cheap_draft_that_agrees():
    plain = np.median(_burst(cfg()).tpot_s()[0])
    spec = np.median(_burst(cfg(num_speculative_tokens=4, spec_acceptance_rate=0.8)).tpot_s()[0])
    assert 2.0 <= plain / spec <= 3.5


def test_a_draft_that_rarely_agrees_or_costs_as_much_as_the_target_is_a_drag():
    plain = np.median(_burst(cfg()).tpot_s()[0])
    rejected = np.median(_burst(cfg(num_speculative_tokens=4, spec_acceptance_rate=0.05)).tpot_s()[0])
    assert rejected > plain  # drafts and verification paid for, nothing accepted
    # a draft so close to the target that 95 % of its tokens pass is about as big: its k forwards
    # cost more than the accepted tokens save over a cheap draft's 80 %
    cheap = np.median(_burst(cfg(num_speculative_tokens=4, spec_acceptance_rate=0.8)).tpot_s()[0])
    close = np.median(
        _burst(cfg(num_speculative_tokens=4, spec_acceptance_rate=0.95, draft_cost_ratio=0.6)).tpot_s()[0]
    )
    assert close > cheap


def test_speculative_settings_are_bounded():
    with pytest.raises(ConfigError, match="num_speculative_tokens"):
        cfg(num_speculative_tokens=64)
    with pytest.raises(ConfigError, match="spec_acceptance_rate"):
        cfg(spec_acceptance_rate=1.5)


def test_the_live_exposition_counts_drafts_as_vllm_does():
    """vLLM's three spec_decode counters (vllm/v1/spec_decode/metrics.py), only with speculation on:
    accepted / draft tokens is the per-token acceptance's expected run over k, as vLLM's rejection
    sampler keeps drafts up to the first rejection."""
    from perfkit.lab.servesim.core import EngineCore
    from perfkit.lab.servesim.metrics import EngineMetrics, Exposition

    def exposed(c) -> dict[str, float]:
        core, m = EngineCore(c, seed=5), EngineMetrics(c, "v1")
        for i in range(16):
            core.add(f"r{i}", 100, 300, 0.0)
            m.admitted(f"r{i}", 0.0, 100, 300)
        while core.requests:
            m.step(core.step(0.0))
        out = Exposition()
        m.exposition(out)
        return {
            ln.split("{")[0]: float(ln.rsplit(" ", 1)[1])
            for ln in out.text().splitlines()
            if ln.startswith("vllm:spec_decode")
        }

    assert exposed(cfg()) == {}
    k, a = 3, 0.7
    got = exposed(cfg(num_speculative_tokens=k, spec_acceptance_rate=a))
    drafts = got["vllm:spec_decode_num_drafts_total"]
    assert got["vllm:spec_decode_num_draft_tokens_total"] == k * drafts
    assert got["vllm:spec_decode_num_accepted_tokens_total"] / drafts == pytest.approx(
        a + a**2 + a**3, rel=0.05
    )
