"""The embedded incidents (``data/scenarios/<id>``), as scenario specs.

Each is a story told through physics, not through its symptoms: traffic, the engine's cost
model and what each deploy changed. The analyses never see these specs; they read the bundle.
"""

from __future__ import annotations

from datetime import UTC, datetime

from perfkit.sim.model import EngineConfig, LengthMix, Phase, Release, ScenarioSpec

CHAT_PROMPT = LengthMix(median=650, sigma=0.75, cap=8000, floor=16)
LONG_PROMPT = LengthMix(median=26000, sigma=0.12, cap=32000, floor=12000)
CHAT_OUTPUT = LengthMix(median=220, sigma=0.6, cap=2048, floor=2)
# A 70B model on 4 x H100 (TP=4): ~9k prompt tokens/s of prefill, ~15 ms decode step at small batch.
LLAMA70B_TP4 = EngineConfig(
    max_num_seqs=256,
    max_num_batched_tokens=2048,
    max_prefill_tokens=32768,
    chunked_prefill=True,
    kv_capacity_tokens=420_000,
    overhead_s=0.014,
    prefill_s_per_token=0.00011,
    decode_s_per_seq=0.0002,
    kv_read_s_per_token=2.0e-8,
)
SLO = {"ttft_p95_s": 1.5, "tpot_p95_s": 0.08, "itl_p95_s": 0.1, "e2e_p99_s": 20.0}


def p95_prefill_interference() -> ScenarioSpec:
    """The seed's §5.3 case: long prompts' prefill stalls running decodes; P50 fine, P95 TTFT 3-4 s."""
    return ScenarioSpec(
        id="p95-prefill-interference",
        title="Chat P95 TTFT at 3-4 s while P50 looks fine",
        brief="Users of the chat service report replies that sometimes hang for seconds; the median looks healthy.",
        service="chat-api",
        model="llama-3.1-70b-instruct",
        start=datetime(2026, 11, 12, 1, 0, tzinfo=UTC),
        duration_s=6000,
        baseline=(300, 2700),
        window=(3300, 5700),
        seed=20261112,
        base_rps=3.0,
        prompt=CHAT_PROMPT,
        long_prompt=LONG_PROMPT,
        base_long_prompt_frac=0.0003,
        output=CHAT_OUTPUT,
        engine=EngineConfig(
            **{**LLAMA70B_TP4.__dict__, "chunked_prefill": False, "prefill_s_per_token": 0.00014}
        ),
        initial_version="v3.2.0",
        phases=(Phase(3000, 6000, long_prompt_frac=0.01),),
        notes=((2950, "note", "tenant docs-assistant moved its traffic to chat-api"),),
        slo=SLO,
        vllm_version="0.10.1",
        difficulty="hard",
        answer={
            "direction": "prefill_decode_interference",
            "symptom": "tail_latency_divergence",
            "suspect_version": None,
            "evidence": [
                "P50 TTFT and ITL stay near the baseline while P95/P99 TTFT reach 3-4 s",
                "long prompts (>10k tokens) start arriving at 01:50 and ITL stalls >1 s follow them minute by minute",
                "queue short, KV cache far from full, no deploy: the engine runs with enable_chunked_prefill=False",
            ],
            "fix": "enable chunked prefill with a bounded prefill budget (--enable-chunked-prefill "
            "--max-num-batched-tokens 2048 --long-prefill-token-threshold 512)",
        },
    )


def release_regression() -> ScenarioSpec:
    """A deploy slows decode by ~60 %; two other deploys in the day changed nothing."""
    return ScenarioSpec(
        id="release-regression",
        title="Token latency up after the afternoon releases",
        brief="Streaming replies feel slower since this afternoon; three releases went out today.",
        service="assist-api",
        model="qwen3-32b",
        start=datetime(2026, 11, 18, 13, 0, tzinfo=UTC),
        duration_s=6000,
        baseline=(300, 2700),
        window=(3000, 5700),
        seed=20261118,
        base_rps=3.5,
        prompt=CHAT_PROMPT,
        long_prompt=LONG_PROMPT,
        base_long_prompt_frac=0.0,
        output=CHAT_OUTPUT,
        engine=LLAMA70B_TP4,
        initial_version="v2.3.0",
        releases=(
            Release(1500, "v2.3.1", "bump tokenizer dependency"),
            Release(
                3300,
                "v2.4.0",
                "new sampling pipeline; CUDA graph capture disabled by a default change",
                engine_changes={"overhead_s": 0.022, "decode_s_per_seq": 0.00031},
            ),
            Release(4500, "v2.4.1", "log format change"),
        ),
        notes=((4200, "config", "raise gateway timeout 60s -> 90s"),),
        slo=SLO,
        vllm_version="0.8.5",
        legacy_metric_names=True,
        difficulty="medium",
        answer={
            "direction": "release_regression",
            "symptom": "post_deploy_shift",
            "suspect_version": "v2.4.0",
            "evidence": [
                "ITL/TPOT P50 and P95 step up ~60 % at 13:55, the minute v2.4.0 rolled out",
                "v2.3.1 (14:25 earlier) and v2.4.1 (15:15) leave the series where they were",
                "traffic, prompt mix and KV usage unchanged across the shift",
            ],
            "fix": "roll back to v2.3.1 and find which change in v2.4.0 slowed the decode step (CUDA graphs)",
        },
    )


def queueing_traffic_surge() -> ScenarioSpec:
    """Traffic 1.55x for 30 min on a server near capacity: requests queue; KV fills as a consequence."""
    return ScenarioSpec(
        id="queueing-traffic-surge",
        title="TTFT explodes during the evening peak",
        brief="Time to first token jumped to tens of seconds for half an hour, then recovered on its own.",
        service="search-summarize",
        model="mixtral-8x22b-instruct",
        start=datetime(2026, 11, 24, 18, 0, tzinfo=UTC),
        duration_s=6000,
        baseline=(300, 2700),
        window=(3000, 5400),
        seed=20261124,
        base_rps=3.0,
        prompt=CHAT_PROMPT,
        long_prompt=LONG_PROMPT,
        base_long_prompt_frac=0.0,
        output=CHAT_OUTPUT,
        engine=EngineConfig(
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            chunked_prefill=True,
            kv_capacity_tokens=150_000,
            overhead_s=0.025,
            prefill_s_per_token=0.00008,
            decode_s_per_seq=0.0004,
            kv_read_s_per_token=2.0e-8,
        ),
        initial_version="v1.9.2",
        phases=(Phase(3200, 5000, rate_mult=1.55),),
        slo=SLO,
        vllm_version="0.10.1",
        difficulty="easy",
        answer={
            "direction": "scheduler_queueing",
            "symptom": "latency_surge_under_load",
            "suspect_version": None,
            "evidence": [
                "request rate 1.55x the baseline from 18:53 to 19:23",
                "waiting requests climb into the hundreds and queue time dominates TTFT",
                "KV cache near full is a consequence of the larger batch, not the cause",
            ],
            "fix": "scale out replicas (or admission-control the batch client); alert on num_requests_waiting",
        },
    )


SCENARIOS = {s().id: s for s in (p95_prefill_interference, release_regression, queueing_traffic_surge)}
