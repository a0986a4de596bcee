"""The engine core run offline (perfkit.lab.servesim.offline): the discrete-event loop's timing
rules, its bounds, and its speed against real time.

Expected times are worked out here from datasheet numbers (H100 SXM: 989.4 TFLOP/s dense bf16,
3.35 TB/s; Llama-3.1-8B: 8,030,261,248 parameters, a 128,256 x 4,096 embedding, untied), never
read back from the code's output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfkit.errors import ConfigError
from perfkit.lab.servesim.config import config_from_dict
from perfkit.lab.servesim.offline import FINISHED, NOT_SENT, REJECTED, UNFINISHED, run_offline

H100_BW, H100_BF16 = 3.35e12, 989.4e12
PARAMS, EMB = 8030261248, 128256 * 4096
OVERHEAD = 0.002  # step_overhead_s default
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16


def cfg(**over):
    return config_from_dict({"model": "llama-3.1-8b", "gpu": "h100-sxm", "step_jitter": 0, **over}, "test")


def prefill_s(n: int) -> float:
    """One step computing an n-token prompt alone: GEMMs at 50 % of peak (compute-bound), causal
    attention at 40 %, the KV written at 75 % of HBM, the LM head for the sampled position, + 2 ms."""
    body = PARAMS - 2 * EMB
    gemm = (2 * body * n + 2 * EMB) / (H100_BF16 * 0.5)
    attention = 4 * 32 * 32 * 128 * (n * (n + 1) / 2) / (H100_BF16 * 0.4)
    kv = n * KV_PER_TOKEN / (H100_BW * 0.75)
    return gemm + attention + kv + OVERHEAD


def decode_s(context: int) -> float:
    """One decode step of one sequence: every weight but the embedding read at 75 % of 3.35 TB/s."""
    return ((PARAMS - EMB) * 2 + (context + 1) * KV_PER_TOKEN) / (H100_BW * 0.75) + OVERHEAD


def test_one_request_gets_its_prefill_then_one_decode_step_a_token():
    run = run_offline(cfg(), [5.0], [1000], [4], until_s=60)
    assert run.status.tolist() == [FINISHED] and run.stopped == "drained"
    # the engine idles until the arrival (no step before t=5) and starts the prefill on arrival
    assert run.steps.start_s[0] == pytest.approx(5.0)
    assert run.scheduled_s[0] == pytest.approx(5.0)
    assert run.ttft_s()[0] == pytest.approx(prefill_s(1000), rel=0.03)
    decode = run.last_token_s[0] - run.first_token_s[0]
    assert decode == pytest.approx(sum(decode_s(1000 + k) for k in range(3)), rel=0.03)
    tpot, multi = run.tpot_s()
    assert multi.tolist() == [True] and tpot[0] == pytest.approx(decode / 3)
    assert len(run.steps) == 4 and run.steps.generation_tokens.sum() == 4


def test_a_request_arriving_mid_step_waits_for_the_step_to_end():
    """vLLM schedules between steps: B, arriving 10 ms into A's ~120 ms prefill, is first scheduled at
    that step's end, which is A's first token."""
    run = run_offline(cfg(), [0.0, 0.01], [4000, 100], [2, 2], until_s=60)
    assert prefill_s(4000) > 0.05  # the step B arrives in is long
    assert run.scheduled_s[1] == pytest.approx(run.first_token_s[0])
    assert run.scheduled_s[1] - run.arrival_s[1] == pytest.approx(prefill_s(4000) - 0.01, rel=0.03)


def test_idle_time_is_skipped_not_stepped():
    run = run_offline(cfg(), [0.0, 100.0], [500, 500], [10, 10], until_s=200)
    assert run.status.tolist() == [FINISHED, FINISHED]
    # no step starts while the engine is idle between the first request's end and the second arrival
    idle = (run.steps.start_s > run.last_token_s[0] + 1e-9) & (run.steps.start_s < 100.0)
    assert not idle.any()
    # the same request on an idle engine takes the same time, whenever it comes
    assert run.ttft_s()[1] == pytest.approx(run.ttft_s()[0], rel=1e-9)
    assert run.e2e_s()[1] == pytest.approx(run.e2e_s()[0], rel=1e-9)
    # busy for 2 x (one prefill + 9 decodes) of ~30 + 9 x 8 ms, out of 100+ simulated seconds
    assert run.steps.busy_s() < 1.0 < 100.0 < run.end_s


def test_the_run_stops_at_until_s():
    """Requests of 2,000 tokens at ~8 ms a token need ~16 s: at until_s=3 none has finished, the
    ones arriving at or after 3 s are never sent, and the last step ends within a step of 3 s."""
    at = [0.0, 1.0, 2.0, 3.0, 10.0]
    run = run_offline(cfg(), at, [100] * 5, [2000] * 5, until_s=3.0)
    assert run.status.tolist() == [UNFINISHED] * 3 + [NOT_SENT] * 2
    assert run.stopped == "until_s"
    assert 3.0 <= run.end_s < 3.0 + 0.05
    assert not np.isnan(run.first_token_s[:3]).any()  # they got their first tokens
    assert (run.output_tokens[:3] > 100).all() and (run.output_tokens[:3] < 2000).all()
    assert math.isnan(run.first_token_s[3]) and run.output_tokens[3] == 0
    assert run.ttft_s().size == 0  # percentiles are over finished requests only


def test_a_request_over_max_model_len_is_rejected_and_the_rest_served():
    run = run_offline(cfg(max_model_len=4096), [0.0, 0.0], [4000, 100], [200, 10], until_s=60)
    assert run.status.tolist() == [REJECTED, FINISHED]
    assert "max_model_len 4096" in run.rejections[0]


def test_step_statistics_add_up():
    rng = np.random.default_rng(3)
    n = 300
    at = np.sort(rng.uniform(0, 30, n))
    prompts, outputs = rng.integers(50, 3000, n), rng.integers(1, 400, n)
    run = run_offline(cfg(max_num_seqs=32), at, prompts, outputs, until_s=600, seed=1)
    assert run.stopped == "drained" and run.count(FINISHED) == n
    s = run.steps
    assert s.generation_tokens.sum() == outputs.sum() == run.output_tokens.sum()
    assert s.prefill_tokens.sum() >= prompts.sum()  # every prompt computed at least once
    assert s.num_running.max() <= 32 and s.kv_usage.min() >= 0 and s.kv_usage.max() <= 1
    assert (np.diff(s.start_s) > 0).all()  # steps back to back, never overlapping
    assert (s.start_s[1:] >= (s.start_s + s.duration_s)[:-1] - 1e-9).all()
    assert (run.first_token_s >= run.scheduled_s).all() and (run.scheduled_s >= run.arrival_s).all()
    assert run.end_s == pytest.approx(run.last_token_s.max())


def test_same_seed_same_run_and_jitter_from_the_seed():
    args = ([0.0, 0.5, 1.0], [800, 300, 2000], [50, 80, 20])
    a = run_offline(cfg(step_jitter=0.02), *args, until_s=60, seed=7)
    b = run_offline(cfg(step_jitter=0.02), *args, until_s=60, seed=7)
    c = run_offline(cfg(step_jitter=0.02), *args, until_s=60, seed=8)
    assert np.array_equal(a.last_token_s, b.last_token_s)
    assert not np.array_equal(a.last_token_s, c.last_token_s)


def test_ten_simulated_minutes_run_far_faster_than_real_time():
    """4 req/s of chat-sized requests for 10 minutes (2,400 requests, ~75,000 steps at 8 ms): the
    loop's own cost is ~100 us a step (docs/simulator.md, "Speed"), so ~8 s of CPU at worst against
    600 simulated seconds; 10x is a floor that a shared, slow CI core still clears."""
    rng = np.random.default_rng(0)
    n = 2400
    at = np.sort(rng.uniform(0, 600, n))
    run = run_offline(cfg(), at, rng.integers(100, 2000, n), rng.integers(20, 300, n), until_s=900)
    assert run.count(FINISHED) == n
    assert run.speedup() > 10, run.describe()


@pytest.mark.parametrize(
    ("args", "kwargs", "pattern"),
    [
        (([0.0, 1.0], [10], [10, 10]), {"until_s": 10}, "prompt_tokens"),
        (([0.0], [10], [0]), {"until_s": 10}, "output_tokens"),
        (([-1.0], [10], [10]), {"until_s": 10}, "arrivals"),
        (([math.nan], [10], [10]), {"until_s": 10}, "arrivals"),
        (([0.0], [10.5], [10]), {"until_s": 10}, "prompt_tokens"),
        (([0.0], [10], [10]), {"until_s": -1}, "until_s"),
        (([0.0], [10], [10]), {"until_s": math.inf}, "until_s"),
        (([0.0], [10], [10]), {"until_s": 10, "max_steps": 0}, "max_steps"),
    ],
)
def test_bad_input_names_what_is_wrong(args, kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        run_offline(cfg(), *args, **kwargs)


def test_max_steps_stops_a_run_and_says_so():
    run = run_offline(cfg(), [0.0], [100], [500], until_s=60, max_steps=10)
    assert run.stopped == "max_steps" and len(run.steps) == 10
    assert run.status.tolist() == [UNFINISHED] and run.output_tokens[0] == 10
