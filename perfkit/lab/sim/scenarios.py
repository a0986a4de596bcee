"""The embedded incidents (``data/scenarios/<id>``), as scenario specs.

Each is a story told through physics, not through its symptoms: traffic, the engine's cost
model and what each deploy changed. The analyses never see these specs; they read the bundle.
"""

from __future__ import annotations

from datetime import UTC, datetime

from perfkit.lab.sim.model import EngineConfig, LengthMix, Phase, Release, ScenarioSpec

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


INCIDENTS = {s().id: s for s in (p95_prefill_interference, release_regression, queueing_traffic_surge)}


# -- the triage library (issue 4): at least two incidents per inference row, confounders, controls --
# Shorter (45 min) so the library stays small: baseline 15 min, incident 22 min.
SHORT = {"duration_s": 2700, "baseline": (120, 1020), "window": (1260, 2580)}
QWEN32B_TP2 = EngineConfig(
    max_num_seqs=256,
    max_num_batched_tokens=2048,
    max_prefill_tokens=32768,
    chunked_prefill=True,
    kv_capacity_tokens=300_000,
    overhead_s=0.011,
    prefill_s_per_token=0.00009,
    decode_s_per_seq=0.00016,
    kv_read_s_per_token=2.0e-8,
)


def _short(**kw) -> ScenarioSpec:
    base = {
        "service": "assist-api",
        "model": "qwen3-32b",
        "prompt": CHAT_PROMPT,
        "long_prompt": LONG_PROMPT,
        "base_long_prompt_frac": 0.0,
        "output": CHAT_OUTPUT,
        "engine": QWEN32B_TP2,
        "gpu_count": 2,
        "slo": SLO,
        "vllm_version": "0.10.1",
        **SHORT,
    }
    return ScenarioSpec(**{**base, **kw})


def tail_interference_batch_tenant() -> ScenarioSpec:
    """Long RAG prompts from a batch tenant on a server without chunked prefill; a decoy deploy mid-incident."""
    return _short(
        id="tail-interference-batch-tenant",
        title="Some chat replies freeze for seconds",
        brief="Support tickets say replies sometimes freeze mid-sentence; dashboards' averages look normal.",
        start=datetime(2026, 11, 3, 9, 0, tzinfo=UTC),
        seed=20261103,
        base_rps=3.5,
        long_prompt=LengthMix(median=18000, sigma=0.15, cap=24000, floor=9000),
        base_long_prompt_frac=0.0002,
        engine=EngineConfig(
            **{**QWEN32B_TP2.__dict__, "chunked_prefill": False, "prefill_s_per_token": 0.00013}
        ),
        initial_version="v5.1.2",
        phases=(Phase(1150, 2700, long_prompt_frac=0.006),),
        releases=(Release(1800, "v5.1.3", "raise log level of the router to debug"),),
        difficulty="hard",
        answer={
            "direction": "prefill_decode_interference",
            "symptom": "tail_latency_divergence",
            "suspect_version": None,
            "evidence": [
                "P50 near the baseline, P95 TTFT several times it",
                "ITL stalls follow long-prompt arrivals; the v5.1.3 deploy changes nothing",
            ],
            "fix": "enable chunked prefill with a bounded prefill budget",
        },
    )


def release_regression_prefill() -> ScenarioSpec:
    """A deploy makes prefill 2.2x slower (attention backend fallback); a config change later is a decoy."""
    return _short(
        id="release-regression-prefill",
        title="First tokens slow since the morning release",
        brief="Time to first token roughly doubled this morning; nothing else obvious changed.",
        start=datetime(2026, 11, 5, 7, 0, tzinfo=UTC),
        seed=20261105,
        base_rps=2.5,
        prompt=LengthMix(median=1200, sigma=0.6, cap=8000, floor=64),
        initial_version="v2.9.4",
        releases=(
            Release(
                1320,
                "v3.0.0",
                "upgrade inference image; attention backend falls back to the slow path",
                engine_changes={"prefill_s_per_token": 0.00017},
            ),
        ),
        notes=((2000, "config", "rotate TLS certificates on the gateway"),),
        difficulty="medium",
        answer={
            "direction": "release_regression",
            "symptom": "post_deploy_shift",
            "suspect_version": "v3.0.0",
            "evidence": [
                "TTFT and prefill time step up at v3.0.0",
                "the later config change moves nothing",
                "KV cache calm: the slow prefill is compute, not allocation",
            ],
            "fix": "roll back to v2.9.4; pin the attention backend",
        },
    )


def surge_overlapping_deploy() -> ScenarioSpec:
    """A traffic surge starts a minute after an unrelated deploy: the deploy is not the cause."""
    return _short(
        id="surge-overlapping-deploy",
        title="Latency spike right after the 14:20 release",
        brief="Latency spiked right after the afternoon release; the release owner is being paged.",
        start=datetime(2026, 11, 9, 14, 0, tzinfo=UTC),
        seed=20261109,
        base_rps=3.0,
        engine=EngineConfig(
            **{
                **QWEN32B_TP2.__dict__,
                "kv_capacity_tokens": 140_000,
                "decode_s_per_seq": 0.0004,
                "overhead_s": 0.022,
            }
        ),
        initial_version="v8.1.9",
        releases=(Release(1260, "v8.2.0", "new prompt templates for the search product"),),
        phases=(Phase(1320, 2500, rate_mult=1.6),),
        difficulty="hard",
        answer={
            "direction": "scheduler_queueing",
            "symptom": "latency_surge_under_load",
            "suspect_version": None,
            "evidence": [
                "request rate up 1.6x from a minute after the deploy",
                "queue time dominates TTFT",
                "the deploy lines up in time but the traffic moved at the same minute",
            ],
            "fix": "scale out; rate-limit the tenant that surged",
        },
    )


def decode_thermal_throttle() -> ScenarioSpec:
    """The GPUs throttle (power/thermal): the decode step gets 45 % slower with no deploy."""
    return _short(
        id="decode-thermal-throttle",
        title="Streaming output got choppy",
        brief="Users say streamed answers come out slower than yesterday; no release today.",
        start=datetime(2026, 11, 14, 16, 0, tzinfo=UTC),
        seed=20261114,
        base_rps=3.0,
        initial_version="v4.4.0",
        releases=(
            Release(
                1230,
                "v4.4.0",
                "datacenter cooling fault: GPUs throttle",
                kind="",
                restart=False,
                engine_changes={"decode_s_per_seq": 0.00024, "overhead_s": 0.016, "sm_clock_mhz": 1290.0},
            ),
        ),
        difficulty="medium",
        answer={
            "direction": "decode_efficiency",
            "symptom": "tpot_high",
            "suspect_version": None,
            "evidence": [
                "TPOT p50 about doubles at the same request rate",
                "DCGM SM clock down from 1980 to ~1290 MHz",
                "no deploy in the window",
            ],
            "fix": "move traffic off the throttled hosts; fix cooling / power capping",
        },
    )


def decode_slow_node_swap() -> ScenarioSpec:
    """Pods rescheduled onto older GPUs (a note, not a deploy): every decode step is slower."""
    return _short(
        id="decode-slow-node-swap",
        title="Token rate dropped overnight",
        brief="Tokens per second per replica dropped overnight; the on-call note mentions node maintenance.",
        start=datetime(2026, 11, 16, 2, 0, tzinfo=UTC),
        seed=20261116,
        base_rps=2.5,
        initial_version="v4.4.1",
        releases=(
            Release(
                1240,
                "v4.4.1",
                "node maintenance: pods rescheduled onto the A100 pool",
                kind="note",
                engine_changes={
                    "decode_s_per_seq": 0.00029,
                    "overhead_s": 0.019,
                    "prefill_s_per_token": 0.00015,
                },
            ),
        ),
        gpu="NVIDIA A100-SXM4-80GB",
        difficulty="medium",
        answer={
            "direction": "decode_efficiency",
            "symptom": "tpot_high",
            "suspect_version": None,
            "evidence": ["TPOT p50 up at the same load", "the change is a node move, not a release"],
            "fix": "pin the deployment to the H100 pool or re-size batching for A100",
        },
    )


def kv_pressure_shared_gpu() -> ScenarioSpec:
    """After a restart onto a shared node the KV cache is a fifth of its size: the prefix cache no longer
    holds the long shared system prompt, so every prompt is computed again."""
    return _short(
        id="kv-pressure-shared-gpu",
        title="First tokens slow after the pod moved",
        brief="Time to first token went up after the pod was rescheduled; traffic is normal.",
        start=datetime(2026, 11, 20, 11, 0, tzinfo=UTC),
        seed=20261120,
        base_rps=1.6,
        prompt=LengthMix(median=2400, sigma=0.35, cap=8000, floor=512),
        output=LengthMix(median=260, sigma=0.5, cap=2048, floor=8),
        engine=EngineConfig(**{**QWEN32B_TP2.__dict__, "prefix_cache_hit_frac": 0.72}),
        initial_version="v6.0.3",
        releases=(
            Release(
                1230,
                "v6.0.3",
                "pod rescheduled onto a node shared with an embedding job",
                kind="note",
                engine_changes={"kv_capacity_tokens": 60_000, "prefix_cache_hit_frac": 0.12},
            ),
        ),
        difficulty="hard",
        answer={
            "direction": "kv_cache_allocation",
            "symptom": "ttft_high_prefill_slow",
            "suspect_version": None,
            "evidence": [
                "prefix-cache hit rate falls from ~70 % to ~10 % with the smaller KV cache",
                "prefill dominates TTFT and grew; request rate unchanged",
            ],
            "fix": "give vLLM its GPU memory back (num_gpu_blocks at startup); keep the prefix cache warm",
        },
    )


def kv_prefix_cache_thrash() -> ScenarioSpec:
    """A new tenant with unique long prefixes evicts the shared system prompt from the prefix cache."""
    return _short(
        id="kv-prefix-cache-thrash",
        title="Chat slow to start answering since lunch",
        brief="Time to first token is up across the board since lunch; no release today.",
        start=datetime(2026, 11, 22, 12, 0, tzinfo=UTC),
        seed=20261122,
        base_rps=1.7,
        prompt=LengthMix(median=2200, sigma=0.35, cap=8000, floor=512),
        output=LengthMix(median=240, sigma=0.5, cap=2048, floor=8),
        engine=EngineConfig(**{**QWEN32B_TP2.__dict__, "prefix_cache_hit_frac": 0.7}),
        initial_version="v6.1.0",
        releases=(
            Release(
                1200, "v6.1.0", "", kind="", restart=False, engine_changes={"prefix_cache_hit_frac": 0.18}
            ),
        ),
        phases=(Phase(1200, 2700, rate_mult=1.08),),
        notes=((1150, "note", "tenant legal-review onboarded (per-document system prompts)"),),
        difficulty="hard",
        answer={
            "direction": "kv_cache_allocation",
            "symptom": "ttft_high_prefill_slow",
            "suspect_version": None,
            "evidence": [
                "prefix-cache hit rate falls from ~70 % to under 20 %",
                "prefill time and its share of TTFT grow; traffic up only 8 %",
            ],
            "fix": "isolate the tenant or raise KV capacity; pin the shared system prompt blocks",
        },
    )


def oom_sampler_kv_full() -> ScenarioSpec:
    """Requests with many samples per prompt blow the sampler's memory: CUDA OOM crashes; KV also full."""
    crashes = tuple(
        Release(at, "v7.3.0", "", kind="", oom=True, restart_pause_s=25.0)
        for at in (1400, 1650, 1900, 2150, 2400)
    )
    return _short(
        id="oom-sampler-kv-full",
        title="Replica keeps restarting",
        brief="A replica restarts every few minutes; requests fail during the restarts.",
        start=datetime(2026, 11, 25, 13, 0, tzinfo=UTC),
        seed=20261125,
        base_rps=3.4,
        engine=EngineConfig(**{**QWEN32B_TP2.__dict__, "kv_capacity_tokens": 110_000}),
        initial_version="v7.3.0",
        releases=crashes,
        phases=(Phase(1300, 2700, output_mult=1.4),),
        difficulty="medium",
        answer={
            "direction": "memory_oversubscription",
            "symptom": "oom",
            "suspect_version": None,
            "evidence": [
                "CUDA out-of-memory tracebacks before each restart",
                "the KV cache is near full too, but vLLM preallocates it: the OOM is the sampler's",
            ],
            "fix": "cap n/best_of and logprobs per request; leave headroom (gpu_memory_utilization 0.85)",
        },
    )


def healthy_with_decoy_deploy() -> ScenarioSpec:
    """A control: an ordinary afternoon with a deploy that changes nothing. Nothing may be confirmed."""
    return _short(
        id="healthy-decoy-deploy",
        title="Was the 15:20 release bad?",
        brief="A release went out at 15:20; someone asks whether it hurt latency.",
        start=datetime(2026, 11, 26, 15, 0, tzinfo=UTC),
        seed=20261126,
        base_rps=3.0,
        initial_version="v9.0.0",
        releases=(Release(1200, "v9.0.1", "copy changes in the system prompt"),),
        difficulty="easy",
        answer={
            "direction": "none",
            "symptom": None,
            "suspect_version": None,
            "evidence": ["no series shifts; the deploy is cleared"],
            "fix": "nothing to fix",
        },
    )


def healthy_busy_evening() -> ScenarioSpec:
    """A control: a busier but healthy evening (traffic +15 %, well within capacity)."""
    return _short(
        id="healthy-busy-evening",
        title="Evening traffic check",
        brief="Routine check of the evening peak; no complaint.",
        start=datetime(2026, 11, 27, 18, 0, tzinfo=UTC),
        seed=20261127,
        base_rps=2.6,
        initial_version="v9.0.1",
        phases=(Phase(1100, 2700, rate_mult=1.15),),
        difficulty="easy",
        answer={
            "direction": "none",
            "symptom": None,
            "suspect_version": None,
            "evidence": ["latency within normal variation at 15 % more traffic"],
            "fix": "nothing to fix",
        },
    )


INCIDENTS.update(
    {
        s().id: s
        for s in (
            tail_interference_batch_tenant,
            release_regression_prefill,
            surge_overlapping_deploy,
            decode_thermal_throttle,
            decode_slow_node_swap,
            kv_pressure_shared_gpu,
            kv_prefix_cache_thrash,
            oom_sampler_kv_full,
            healthy_with_decoy_deploy,
            healthy_busy_evening,
        )
    }
)
