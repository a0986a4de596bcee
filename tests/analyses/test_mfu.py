"""MFU/HFU (PaLM App. B, torchtitan's parameter count) and training throughput from the ranks that
export, checked against numbers worked out by hand in the comments and against the training
simulator's own physics (perfkit/lab/sim/training_physics.py) and bundles."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from perfkit.analyses.mfu import (
    hardware_flops_per_token,
    matmul_params,
    mfu,
    training_flops_per_token,
    training_mfu,
    training_throughput,
)
from perfkit.core import hardware
from perfkit.core.frames import Window
from perfkit.core.hardware import ModelSpec
from perfkit.engine.local import LocalEngine
from perfkit.errors import ConfigError
from perfkit.lab.sim import training_physics as P
from perfkit.lab.sim.training_model import ModelShape
from perfkit.lab.sim.training_scenarios import TRAINING_SCENARIOS
from perfkit.sources.bundle import load_bundle
from perfkit.sources.openmetrics import parse_text

LLAMA_8B = hardware.model("llama-3.1-8b")
H100 = hardware.gpu("h100")


def test_llama_8b_on_8_h100_worked_example():
    # N (matmul) = 8,030,261,248 params - 128,256 x 4,096 input table (525,336,576) = 7,504,924,672
    assert matmul_params(LLAMA_8B) == 7_504_924_672
    # F = 6 N + 12 L H Q T = 45,029,548,032 + 12 * 32 * (32 * 128) * 8192 (12,884,901,888)
    #   = 57,914,449,920 FLOPs per token
    assert training_flops_per_token(LLAMA_8B, 8192) == 57_914_449_920
    # 48,000 tok/s on 8 GPUs = 6,000 tok/s/GPU; 6,000 * 57.914e9 / 989.4e12 = 0.35121 -> MFU 35.1 %
    u = mfu(48_000, LLAMA_8B, H100, 8, 8192)
    assert u.tokens_per_s_per_gpu == 6000
    assert u.mfu == pytest.approx(0.351210, abs=1e-6)
    assert u.hfu == u.mfu  # no recomputation
    assert u.model_tflops_per_gpu == pytest.approx(347.49, abs=0.01)
    # nanoGPT's count (every parameter): 6 * 8,030,261,248 + 12,884,901,888 = 61,066,469,376
    # -> 6,000 * 61.066e9 / 989.4e12 = 37.03 % (the reference's §4.1 example says 37.0 %)
    whole = mfu(48_000, LLAMA_8B, H100, 8, 8192, include_embedding=True)
    assert whole.model_flops_per_token == 61_066_469_376
    assert whole.mfu == pytest.approx(0.37032, abs=1e-5)


def test_hfu_adds_what_recomputation_runs():
    lhqt = 32 * 4096 * 8192  # L * H * Q * T = 1,073,741,824
    n = 7_504_924_672
    # full recomputation: one more forward pass, 2N + 4 LHQT: 8N + 16 LHQT = 77,219,266,560
    full = hardware_flops_per_token(LLAMA_8B, 8192, recompute="full")
    assert full == 8 * n + 16 * lhqt == 77_219_266_560
    assert full / training_flops_per_token(LLAMA_8B, 8192) == pytest.approx(4 / 3, rel=1e-12)
    # selective (Korthikanti §4): the attention core again, + 4 LHQT
    assert hardware_flops_per_token(LLAMA_8B, 8192, recompute="selective") == 6 * n + 16 * lhqt
    # FlashAttention's backward recomputes QK^T: + 2 LHQT
    assert hardware_flops_per_token(LLAMA_8B, 8192, flash_attention_recompute=True) == 6 * n + 14 * lhqt
    # HFU at 6,000 tok/s/GPU with full recomputation: 6000 * 77.219e9 / 989.4e12 = 46.83 %
    u = mfu(48_000, LLAMA_8B, H100, 8, 8192, recompute="full")
    assert u.hfu == pytest.approx(0.46828, abs=1e-5)
    assert u.mfu == pytest.approx(0.351210, abs=1e-6)


def test_attention_width_is_heads_times_head_dim_not_hidden():
    qwen = hardware.model("qwen3-32b")  # 64 heads x 128 = 8192 wide on a 5120 hidden
    n = qwen.params - qwen.vocab * qwen.hidden  # untied: the input table is looked up
    assert training_flops_per_token(qwen, 4096) == 6 * n + 12 * 64 * 8192 * 4096


def test_bad_inputs_are_config_errors():
    with pytest.raises(ConfigError, match="tokens_per_s"):
        mfu(-1.0, LLAMA_8B, H100, 8, 8192)
    with pytest.raises(ConfigError, match="tokens_per_s"):
        mfu(float("nan"), LLAMA_8B, H100, 8, 8192)
    with pytest.raises(ConfigError, match="gpus"):
        mfu(1000.0, LLAMA_8B, H100, 0, 8192)
    with pytest.raises(ConfigError, match="seq_len"):
        training_flops_per_token(LLAMA_8B, 0)
    with pytest.raises(ConfigError, match="recompute"):
        hardware_flops_per_token(LLAMA_8B, 8192, recompute="some")
    with pytest.raises(ConfigError, match="no dense fp8"):  # Ampere has no FP8 tensor cores
        mfu(1000.0, LLAMA_8B, hardware.gpu("a100"), 8, 8192, dtype="fp8")


# -- throughput from the ranks that export ------------------------------------------------------

B = 1_796_000_000


def _ranks(per_scrape: dict[str, tuple[int, int]]) -> LocalEngine:
    """train_tokens_total / train_samples_total of the given ranks, +tokens/+samples every 15 s."""
    lines = ["# TYPE train_tokens counter", "# TYPE train_samples counter"]
    for rank, (tok, smp) in per_scrape.items():
        for k in range(0, 49):  # B - 60 s ... B + 660 s
            ts = B - 60 + 15 * k
            lines.append(f'train_tokens_total{{job="j",rank="{rank}"}} {tok * k} {ts}')
            lines.append(f'train_samples_total{{job="j",rank="{rank}"}} {smp * k} {ts}')
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n"))


WINDOW = Window(datetime.fromtimestamp(B, UTC), datetime.fromtimestamp(B + 600, UTC))


def test_two_of_eight_ranks_scaled_to_the_job():
    # rank 0: 15,000 tokens / 15 samples a 15 s scrape = 1,000 tok/s, 1.0 samples/s; rank 1: 1,200, 1.2
    eng = _ranks({"0": (15_000, 15), "1": (18_000, 18)})
    t = training_throughput(eng, WINDOW, world_size=8)
    assert t is not None and t.ranks_reporting == 2 and t.scaled
    assert t.tokens_per_s_reported == pytest.approx(2200, rel=1e-9)
    assert t.tokens_per_s_per_gpu == pytest.approx(1100, rel=1e-9)  # their mean
    assert t.tokens_per_s == pytest.approx(8800, rel=1e-9)  # 1,100 x 8 ranks
    assert t.samples_per_s == pytest.approx(8.8, rel=1e-9)
    assert t.tokens_per_sample == pytest.approx(1000, rel=1e-9)
    assert "2 of 8 ranks export" in t.note
    # a tensor-parallel pair counts the same tokens twice: per GPU is half, the job 4,400
    tp2 = training_throughput(eng, WINDOW, world_size=8, model_parallel=2)
    assert tp2 is not None and tp2.tokens_per_s == pytest.approx(4400, rel=1e-9)


def test_without_a_world_size_the_highest_rank_is_a_lower_bound():
    eng = _ranks({"0": (15_000, 15), "5": (15_000, 15)})
    t = training_throughput(eng, WINDOW)
    assert t is not None and t.world_size == 6 and t.scaled
    assert t.world_size_source.startswith("lower bound")
    assert "lower bound" in t.note and t.tokens_per_s == pytest.approx(6000, rel=1e-9)
    with pytest.raises(ConfigError, match="fewer than the 2 ranks"):
        training_throughput(eng, WINDOW, world_size=1)
    with pytest.raises(ConfigError, match="world_size"):
        training_throughput(eng, WINDOW, world_size=0)


def test_no_tokens_no_throughput():
    eng = LocalEngine(parse_text("# TYPE x gauge\nx 1 1796000000\n# EOF\n"))
    assert training_throughput(eng, WINDOW, world_size=8) is None
    assert training_mfu(eng, WINDOW, LLAMA_8B, H100, world_size=8) is None


def test_allreduce_scaling_bundle_scales_by_the_ranks_that_report():
    """The 32 -> 64 GPU scenario exports ranks 0-7 plus local rank 0 of every other node: 11 ranks at
    32 GPUs, 15 at 64. Summing them reads 0.98x (issue 12); scaling each window by its world size
    gives the scenario's own ~1.5x."""
    b = load_bundle("data/scenarios/allreduce-scaling-64gpu")
    eng, inc = LocalEngine(b.store), b.incident
    assert inc.baseline is not None
    before = training_throughput(eng, inc.baseline, world_size=32)
    after = training_throughput(eng, inc.window, world_size=64)
    assert before is not None and after is not None
    assert (before.ranks_reporting, after.ranks_reporting) == (11, 15)
    assert after.tokens_per_s_reported / before.tokens_per_s_reported == pytest.approx(0.98, abs=0.02)
    speedup = after.tokens_per_s / before.tokens_per_s
    assert 1.35 <= speedup <= 1.6
    # against the simulator's steady state for the same spec: the window starts ~30 s before the
    # relaunched job's first step (2.5 % of it) and steps jitter, so within 5 %
    spec = TRAINING_SCENARIOS["allreduce-scaling-64gpu"]()
    for t, gpus in ((before, 32), (after, 64)):
        budget = P.step_budget(spec.model, replace(spec.setup, gpus=gpus), spec.cluster)
        assert t.tokens_per_s_per_gpu == pytest.approx(budget["tokens_per_s_per_gpu"], rel=0.05)
        u = training_mfu(
            eng,
            inc.baseline if gpus == 32 else inc.window,
            hardware.model("llama-3.1-70b"),
            H100,
            world_size=gpus,
            recompute="full",
            include_embedding=True,  # the simulator counts every parameter
        )
        assert u is not None and u.seq_len == 4096  # tokens per sample: packed 4,096-token sequences
        assert u.mfu == pytest.approx(budget["mfu"], rel=0.05)
        assert u.hfu / u.mfu == pytest.approx(4 / 3, rel=0.01)
        assert f"of {gpus} ranks export" in u.notes[0]


def _spec_of(m: ModelShape) -> ModelSpec:
    """The simulator's shape as a ModelSpec: 32 heads of hidden/32 (H x Q = hidden, as it assumes)."""
    return ModelSpec(m.name, m.name, m.params, m.layers, m.hidden, 32, 8, m.hidden // 32, m.vocab)


@pytest.mark.parametrize("name", sorted(TRAINING_SCENARIOS))
def test_mfu_equals_the_simulators_on_its_scenarios(name):
    """The simulator computes MFU as tokens x (6 N_all + 12 L h T) / step / peak; at its own
    tokens/s the analysis gives the same number with every parameter counted (to float rounding),
    and 6 * embedding / F less with torchtitan's count."""
    spec = TRAINING_SCENARIOS[name]()
    m, s, c = spec.model, spec.setup, spec.cluster
    budget = P.step_budget(m, s, c)
    model = _spec_of(m)
    got = mfu(budget["tokens_per_s_per_gpu"] * s.gpus, model, H100, s.gpus, m.seq_len, include_embedding=True)
    assert got.mfu == pytest.approx(budget["mfu"], rel=1e-9)
    assert got.model_flops_per_token == pytest.approx(P.flops_per_token(m), rel=1e-12)
    default = mfu(budget["tokens_per_s_per_gpu"] * s.gpus, model, H100, s.gpus, m.seq_len)
    gap = 6 * m.vocab * m.hidden / P.flops_per_token(m)
    assert default.mfu == pytest.approx(budget["mfu"] * (1 - gap), rel=1e-9)
    assert gap < 0.06  # at most 5.2 % (Llama-3.1-8B's 128k vocabulary at 8k tokens)
