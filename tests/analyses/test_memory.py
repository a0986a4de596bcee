"""The memory breakdown (ZeRO model states, Korthikanti activations, KV cache), the OOM row's split
of an observed peak, and the decode roofline: worked examples checked by hand in the comments,
the simulator's own memory model on its scenarios, and the triage rows on embedded bundles."""

from __future__ import annotations

import dataclasses

import pytest

from perfkit.analyses.memory import (
    GIB,
    OVERHEAD_BYTES,
    TrainingSetup,
    activation_bytes_per_layer,
    inference_memory,
    kv_bytes_per_token_per_gpu,
    training_memory,
    zero_states,
)
from perfkit.analyses.memory_peak import states_vs_peak
from perfkit.analyses.roofline import decode_floor_tpot_s, decode_roofline, reading
from perfkit.core import hardware
from perfkit.core.hardware import ModelSpec
from perfkit.engine.local import LocalEngine
from perfkit.errors import ConfigError
from perfkit.lab.sim import training_physics as P
from perfkit.lab.sim.training_scenarios import TRAINING_SCENARIOS
from perfkit.sources.bundle import load_bundle
from perfkit.triage.table import triage_evidence

LLAMA_8B = hardware.model("llama-3.1-8b")
H100 = hardware.gpu("h100")


# -- ZeRO ------------------------------------------------------------------------------------


def test_seven_billion_parameters_with_adam():
    # 16 bytes per parameter (2 weights + 2 gradients + 12 optimizer): 7e9 x 16 = 112 GB
    assert sum(zero_states(7e9, 0, 8).values()) == 112e9
    # ZeRO-3 over 8 GPUs: 112 / 8 = 14 GB each
    assert sum(zero_states(7e9, 3, 8).values()) == 14e9
    # ZeRO-1: 2 + 2 + 12/8 = 5.5 B/param = 38.5 GB; ZeRO-2: 2 + 14/8 = 3.75 B/param = 26.25 GB
    assert sum(zero_states(7e9, 1, 8).values()) == pytest.approx(38.5e9)
    assert sum(zero_states(7e9, 2, 8).values()) == pytest.approx(26.25e9)


def test_the_zero_papers_own_example():
    # ZeRO §1 / Fig. 1: Psi = 7.5B, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per GPU
    got = [sum(zero_states(7.5e9, z, 64).values()) / 1e9 for z in (0, 1, 2, 3)]
    assert got == pytest.approx([120.0, 31.40625, 16.640625, 1.875])


# -- Korthikanti activations -----------------------------------------------------------------

S, H, A = 2048, 12288, 96  # GPT-3 175B: s = 2048, h = 12288, a = 96; b = 1
SBH = S * H  # 25,165,824


def test_gpt3_layer_activations_per_the_papers_table():
    # no parallelism: s b h (34 + 5 a s / h) = 25,165,824 x (34 + 80) = 2,868,903,936 B (2.87 GB)
    assert activation_bytes_per_layer(S, 1, H, A) == 2_868_903_936
    # tensor parallel t = 8: s b h (10 + 24/8 + 80/8) = 25,165,824 x 23 = 578,813,952
    assert activation_bytes_per_layer(S, 1, H, A, tp=8) == 578_813_952
    # + sequence parallel: s b h / 8 x 114 = 358,612,992
    assert activation_bytes_per_layer(S, 1, H, A, tp=8, sequence_parallel=True) == 358_612_992
    # + selective recomputation: 34 s b h / 8 = 106,954,752
    sel = activation_bytes_per_layer(S, 1, H, A, tp=8, sequence_parallel=True, recompute="selective")
    assert sel == 106_954_752
    # full recomputation: 2 s b h = 50,331,648 (/ 8 with sequence parallel: 6,291,456)
    assert activation_bytes_per_layer(S, 1, H, A, recompute="full") == 50_331_648
    assert activation_bytes_per_layer(S, 1, H, A, tp=8, sequence_parallel=True, recompute="full") == 6_291_456
    # FlashAttention stores no s x s scores: 34 s b h = 855,638,016 (the reference's 0.86 GB)
    assert activation_bytes_per_layer(S, 1, H, A, flash_attention=True) == 855_638_016


def test_llama_8b_oom_scenario_micro_batch_two_does_not_fit():
    """train-oom-batch-size: Llama-3.1-8B on 8 H100s, ZeRO-3, full-length 8,192-token samples.

    micro-batch 1: states 16 x 8,030,261,248 / 8 = 16,060,522,496 B (14.96 GiB); activations
    34 x 8192 x 4096 x 32 = 36,507,222,016 B (34.0 GiB); logits 4 x 8192 x 128,256 = 4,202,692,608
    (3.91 GiB); two gathered layers 8 x 8.03e9 / 32 = 2,007,565,312 (1.87 GiB); buffers 2 GiB:
    56.74 GiB, fits in 80. Micro-batch 2 doubles activations and logits: 94.65 GiB, does not."""
    one = training_memory(LLAMA_8B, TrainingSetup(seq_len=8192, micro_batch=1, gpus=8, zero_stage=3), H100)
    assert one.bytes_of("activations") == 36_507_222_016
    assert one.bytes_of("logits") == 4_202_692_608
    assert one.bytes_of("weights") + one.bytes_of("gradients") + one.bytes_of("optimizer") == 16_060_522_496
    assert one.total_bytes / GIB == pytest.approx(56.74, abs=0.01) and one.fits
    two = training_memory(LLAMA_8B, TrainingSetup(seq_len=8192, micro_batch=2, gpus=8, zero_stage=3), H100)
    assert two.total_bytes / GIB == pytest.approx(94.65, abs=0.01) and two.fits is False
    assert two.largest == "activations" and "recomputation" in two.first_try
    assert any("does not fit" in n for n in two.notes)
    # full recomputation at micro-batch 2: 2 s b h L = 4 GiB + one layer's 34 s b h = 2.125 GiB
    full = training_memory(
        LLAMA_8B, TrainingSetup(seq_len=8192, micro_batch=2, gpus=8, zero_stage=3, recompute="full"), H100
    )
    assert full.bytes_of("activations") == 4 * GIB
    assert full.bytes_of("recompute_working_set") == 2.125 * GIB
    assert full.fits


def test_observed_fb_used_is_compared():
    setup = TrainingSetup(seq_len=8192, micro_batch=1, gpus=8, zero_stage=3)
    est = training_memory(LLAMA_8B, setup, H100).total_bytes
    close = training_memory(LLAMA_8B, setup, H100, observed_bytes=est * 1.05)
    assert close.unexplained_bytes == pytest.approx(0.05 * est) and "agrees within 10%" in close.notes[-1]
    # 40 GiB more than the estimate outweighs every item: the allocator's cache or fragmentation
    far = training_memory(LLAMA_8B, setup, H100, observed_bytes=est + 40 * GIB)
    assert far.largest == "unexplained" and "expandable_segments" in far.first_try
    with pytest.raises(ConfigError, match="FB_USED"):
        training_memory(LLAMA_8B, setup, H100, observed_bytes=-1.0)


def test_bad_setups_are_config_errors():
    with pytest.raises(ConfigError, match="not a multiple of tp"):
        TrainingSetup(seq_len=4096, gpus=8, tp=3)
    with pytest.raises(ConfigError, match="zero_stage"):
        TrainingSetup(seq_len=4096, zero_stage=4)
    with pytest.raises(ConfigError, match="recompute"):
        TrainingSetup(seq_len=4096, recompute="half")
    with pytest.raises(ConfigError, match="seq_len"):
        TrainingSetup(seq_len=0)


def _spec_of(m):
    return ModelSpec(m.name, m.name, m.params, m.layers, m.hidden, 32, 8, m.hidden // 32, m.vocab)


@pytest.mark.parametrize("name", sorted(TRAINING_SCENARIOS))
def test_memory_equals_the_simulators_on_its_scenarios(name):
    """The simulator's memory_components (ZeRO states, 34 s b h L or 2 s b h L + one layer, fp32
    logits, 0.75 + 1.25 GiB buffers, FSDP's two gathered layers) follow the same published formulas:
    the analysis gives the same bytes per item, to float rounding, on every training scenario, before
    and after each of its changes (the OOM scenario's micro-batch 2, the 64-GPU resize)."""
    spec = TRAINING_SCENARIOS[name]()
    setups = [spec.setup, *(dataclasses.replace(spec.setup, **c.set) for c in spec.changes if c.set)]
    for s in setups:
        sim = P.memory_components(spec.model, s)
        got = training_memory(
            _spec_of(spec.model),
            TrainingSetup(
                seq_len=spec.model.seq_len,
                micro_batch=s.micro_batch,
                gpus=s.gpus,
                zero_stage=s.zero_stage,
                recompute=s.recompute,
            ),
        )
        assert got.bytes_of("weights") == pytest.approx(sim["weights"], rel=1e-12)
        assert got.bytes_of("gradients") == pytest.approx(sim["grads"], rel=1e-12)
        assert got.bytes_of("optimizer") == pytest.approx(sim["optimizer"], rel=1e-12)
        acts = got.bytes_of("activations") + got.bytes_of("recompute_working_set")
        assert acts == pytest.approx(sim["activations"], rel=1e-12)
        assert got.bytes_of("logits") == pytest.approx(sim["logits"], rel=1e-12)
        overhead = got.bytes_of("overhead") + got.bytes_of("gathered_layers")
        assert overhead == pytest.approx(sim["overhead"], rel=1e-12)
        assert got.total_bytes == pytest.approx(P.peak_bytes(spec.model, s), rel=1e-12)


# -- inference -------------------------------------------------------------------------------


def test_kv_cache_per_token():
    # 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 B = 128 KiB
    assert kv_bytes_per_token_per_gpu(LLAMA_8B) == 131_072
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, tp=2) == 65_536  # 4 KV heads per GPU
    # tp 16 > 8 KV heads: vLLM keeps max(1, 8 // 16) = 1 head per GPU (replicated): 16,384 B, not 8,192
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, tp=16) == 16_384
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, kv_dtype_bytes=1.0) == 65_536  # fp8 KV cache


def test_inference_at_the_configured_batch_and_vllms_pool():
    # batch 64 x 4,096 tokens x 128 KiB = 32 GiB of KV; weights 8,030,261,248 x 2 = 14.96 GiB
    est = inference_memory(LLAMA_8B, H100, batch=64, context=4096)
    assert est.bytes_of("kv_cache") == 32 * GIB
    assert est.bytes_of("weights") == 2 * 8_030_261_248
    assert est.largest == "kv_cache" and "fp8" in est.first_try
    # gpu_memory_utilization 0.9: the pool is 0.9 x 80 GiB - weights - buffers = 72 - 14.96 - 2 GiB
    pool = inference_memory(LLAMA_8B, H100, batch=64, context=4096, gpu_memory_utilization=0.9)
    want = 0.9 * 80 * GIB - 2 * 8_030_261_248 - OVERHEAD_BYTES
    assert pool.bytes_of("kv_cache_pool") == pytest.approx(want)
    assert pool.total_bytes == pytest.approx(0.9 * 80 * GIB)
    assert "gpu_memory_utilization" in pool.first_try
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        inference_memory(LLAMA_8B, H100, gpu_memory_utilization=1.5)


# -- an observed peak without the setup (the OOM row) ------------------------------------------


def test_states_vs_peak_names_activations_only_where_the_arithmetic_says_so():
    peak = 79 * GIB
    split = states_vs_peak(LLAMA_8B, 8, peak, 80 * GIB)
    # ZeRO-0: 16 x 8.03e9 = 119.7 GiB > 80: cannot be what ran
    assert split.fits[0] is False and 0 not in split.rest_bytes
    # ZeRO-1: 4 x 8.03e9 + 12 x 8.03e9 / 8 = 41.1 GiB of states, 79 - 41.1 - 2 = 35.9 GiB of rest:
    # the states outweigh it; ZeRO-2 (28.0) and ZeRO-3 (15.0) leave 49.0 and 62.0 GiB of rest
    assert split.states_bytes[1] / GIB == pytest.approx(41.13, abs=0.01)
    assert split.rest_bytes[3] / GIB == pytest.approx(79 - 14.96 - 2, abs=0.01)
    assert split.activations_largest is False  # not under ZeRO-1
    assert "largest item under ZeRO-2/ZeRO-3" in split.summary() and "recomputation" in split.first_try
    # 70B over 64 GPUs at a 70 GiB peak: only ZeRO-3 fits (16.4 GiB), the rest is 51.6 GiB
    big = states_vs_peak(hardware.model("llama-3.1-70b"), 64, 70 * GIB, 80 * GIB)
    assert list(big.rest_bytes) == [3] and big.activations_largest is True
    # 34 h L = 34 x 8192 x 80 = 22,282,240 B per token: 51.6 GiB hold ~2,485 tokens
    assert big.activation_bytes_per_token == 22_282_240
    assert "whatever the ZeRO stage" in big.summary()


# -- the decode roofline ---------------------------------------------------------------------


def test_decode_floor_of_llama_8b_on_h100():
    # weights read per step: the 7,504,924,672 matmul params x 2 B = 15,009,849,344 B (the untied
    # input table is looked up, not read); / 3.35e12 B/s = 4.4806 ms -> at most 223.2 tok/s at batch 1
    assert decode_floor_tpot_s(LLAMA_8B, H100, 1, 0) == pytest.approx(15_009_849_344 / 3.35e12, rel=1e-12)
    assert 1 / decode_floor_tpot_s(LLAMA_8B, H100, 1, 0) == pytest.approx(223.19, abs=0.01)
    # batch 64 at 4,096 tokens: + 64 x 4096 x 131,072 = 34,359,738,368 B of KV: 14.737 ms, 4,342.8 tok/s
    r = decode_roofline(LLAMA_8B, H100, 64, 4096)
    assert r.bytes_per_step == 15_009_849_344 + 34_359_738_368
    assert r.floor_tpot_s == pytest.approx(0.0147372, rel=1e-5) and r.bound == "memory"
    assert r.max_tokens_per_s == pytest.approx(4342.75, abs=0.01)
    # tp 2: each GPU reads half the weights and half the KV heads
    assert decode_floor_tpot_s(LLAMA_8B, H100, 64, 4096, tp=2) == pytest.approx(r.floor_tpot_s / 2, rel=1e-12)
    # batch 4,096 at no context: 4096 x 2 x 7.505e9 / 989.4e12 = 62.1 ms of FLOPs > 4.5 ms of bytes
    big = decode_roofline(LLAMA_8B, H100, 4096, 0)
    assert big.bound == "compute" and big.floor_tpot_s == pytest.approx(0.062137, rel=1e-4)
    # H200's 4.8 TB/s: 15.01e9 / 4.8e12 = 3.127 ms
    assert decode_floor_tpot_s(LLAMA_8B, hardware.gpu("h200"), 1, 0) == pytest.approx(3.1271e-3, rel=1e-4)


def test_share_of_the_floor_and_its_reading():
    r = decode_roofline(LLAMA_8B, H100, 64, 4096, observed_tpot_s=0.0147372 / 0.7)
    assert r.share == pytest.approx(0.7, rel=1e-5)
    assert "fell from 70% to 40%" in reading(0.4, 0.7, batch_ratio=1.0)
    assert "equal batch" in reading(0.4, 0.7, batch_ratio=2.0)  # the batch changed: not comparable
    assert "bandwidth bound" in reading(0.95)
    assert reading(0.6, 0.65, 1.0) == ""
    fast = decode_roofline(LLAMA_8B, H100, 1, 0, observed_tpot_s=0.001)  # under the floor
    assert fast.share is not None and fast.share > 1 and "not what ran" in fast.notes[0]
    with pytest.raises(ConfigError, match="batch"):
        decode_roofline(LLAMA_8B, H100, 0, 100)
    with pytest.raises(ConfigError, match="tp"):
        decode_roofline(LLAMA_8B, H100, 1, 100, tp=0)


# -- the rows ------------------------------------------------------------------------------------


def _triage(path, **incident_changes):
    b = load_bundle(path)
    inc = dataclasses.replace(b.incident, **incident_changes)
    res = triage_evidence(LocalEngine(b.store), inc, events=b.events, logs=b.logs, missing=b.missing)
    return {r.row.symptom: r for r in res.results}


def test_the_oom_row_estimates_components_and_says_when_it_cannot():
    rows = _triage("data/scenarios/train-oom-batch-size")
    oom = rows["oom"].verification
    assert oom.verdict == "confirmed"
    assert "model states per GPU (llama-3.1-8b over 8 GPUs" in oom.why
    assert "first try: activation recomputation" in oom.why
    assert oom.numbers["memory_estimate"]["rest_bytes"]
    rows = _triage("data/scenarios/train-oom-batch-size", model="gpt-5")
    oom = rows["oom"].verification
    assert oom.verdict == "confirmed"
    assert "no component estimate: no model description for 'gpt-5'" in oom.why


def test_the_decode_row_reports_its_share_of_the_roofline_without_changing_its_verdict():
    rows = _triage("data/scenarios/decode-thermal-throttle")
    tpot = rows["tpot_high"].verification
    assert tpot.verdict == "confirmed"  # the embedded answer, unchanged
    roof = tpot.numbers["decode_roofline"]
    assert roof["tp_assumed"] == 2 and 0 < roof["incident"]["share"] < roof["baseline"]["share"]
    assert "of its HBM roofline" in tpot.why
