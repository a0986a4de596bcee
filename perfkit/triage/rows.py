"""The seed's triage table as one declaration: phenomenon → direction → verification (docs/bundle.md).

Each row (:class:`~perfkit.triage.row_types.Row`): a symptom detector (does the evidence show the
phenomenon, how strongly, 0-1), a verification that runs the row's quick check and returns
``confirmed`` / ``ruled_out`` / ``inconclusive`` with the numbers behind it, the next step for the
engineer, and everything else perfkit reads about the row: its workload, the named quantities it
reads, which thresholds decide it, which only confirm it and which only its why reads, the
preconditions it records, the directions it explains, its evidence figure, the postmortem's alert to
add and the what-if's remedy. The ranking, the postmortem, the figures, the remedies and the docs'
rows table all read these declarations; nothing keys a table of its own by direction.

A row whose evidence is missing is inconclusive and says what is missing; it never fires on
absence. The detectors and verifications live in :mod:`perfkit.triage.inference_rows`,
:mod:`perfkit.triage.decode_row`, :mod:`perfkit.triage.oom_row` and
:mod:`perfkit.triage.training_rows`. :func:`check_rows` runs at import: a threshold, quantity,
precondition or direction a row names that does not exist fails it.
"""

from __future__ import annotations

from perfkit.analyses import evidence_series as series
from perfkit.engine.dialects import WORDS
from perfkit.triage import thresholds as T
from perfkit.triage.decode_row import detect_tpot, verify_tpot
from perfkit.triage.inference_rows import (
    detect_deploy,
    detect_load,
    detect_prefill,
    detect_tail,
    verify_deploy,
    verify_load,
    verify_prefill,
    verify_tail,
)
from perfkit.triage.oom_row import detect_oom, verify_oom
from perfkit.triage.quantities import QUANTITIES
from perfkit.triage.row_types import ABOUT, PLACEHOLDER, Figure
from perfkit.triage.row_types import Cut as Cut  # re-exported: the triage table's row types
from perfkit.triage.row_types import Detection as Detection
from perfkit.triage.row_types import Row as Row
from perfkit.triage.row_types import Verification as Verification
from perfkit.triage.training_rows import (
    detect_gpu_cpu,
    detect_gpu_net,
    detect_loss,
    verify_gpu_cpu,
    verify_gpu_net,
    verify_loss,
)

_GPU_LOW = ("GPU_LOW_UTIL_PCT", "TENSOR_LOW_RATIO")
_DATA_WAIT = ("DATA_WAIT_SHARE", "DATA_WAIT_RISE")
_UNSTEADY = ("STEP_JITTER", "UTIL_SWING_PCT", "UNSTEADY_RISE")
_HOST_BUSY = ("CPU_BUSY_FRAC", "BUSIEST_CPU_FRAC", "IOWAIT_FRAC")
_DATA_READS = (
    "gpu_util_pct",
    "tensor_active_ratio",
    "cpu_busy_frac",
    "busiest_cpu_frac",
    "iowait_frac",
    "data_wait_share",
    "data_wait_share_baseline",
    "data_wait_rise",
    "step_jitter",
    "step_jitter_rise",
    "util_swing_pct",
    "util_swing_rise",
)
_LONG_ROSE = ("LONG_PROMPT_SHARE", "LONG_SHARE_RISE")
_LONG_READS = ("long_share", "long_share_baseline", "long_share_rise")
_SATURATED = ("QUEUED_AVG", "LOAD_RATIO", "KV_FULL_FRAC", "PREEMPTIONS_PER_S")

ROWS: tuple[Row, ...] = (
    Row(
        "gpu_low_cpu_busy",
        "GPU utilisation low, host CPU busy",
        "data_pipeline",
        "CPU use and per-step data-wait share",
        "profile one step (PyTorch profiler): DataLoader __next__ share; raise num_workers/prefetch_factor, "
        "persistent_workers, pin_memory; pre-tokenize",
        detect_gpu_cpu,
        verify_gpu_cpu,
        workload="training",
        reads=_DATA_READS,
        decides=(*_DATA_WAIT, *_GPU_LOW, *_HOST_BUSY, *_UNSTEADY),
        explains=("network_communication",),
        figure=Figure(
            "Data wait of the slowest rank vs step time, and the busiest CPU",
            "seconds",
            series.data_wait_series,
        ),
        action=f"alert when the slowest rank's data wait (max by rank of train_data_wait_seconds) passes "
        f"{T.DATA_WAIT_SHARE:.0%} of the step (train_step_duration_seconds)",
    ),
    Row(
        "gpu_low_network_busy",
        "GPU utilisation low, network busy",
        "network_communication",
        "NCCL log lines, network throughput, comm share of step",
        "read NCCL INFO transport lines (IB vs Socket fallback), measure comm/compute overlap, revisit the "
        "parallel layout (more TP inside a node, less DP across)",
        detect_gpu_net,
        verify_gpu_net,
        workload="training",
        # its verification asks the data-pipeline row's detector whether the host is busy feeding the GPUs
        reads=(
            *_DATA_READS,
            "network_ratio",
            "ib_ratio",
            "nccl_lines",
            "comm_share",
            "comm_share_baseline",
            "comm_rise",
            "wait_over_comm",
        ),
        decides=(
            "COMM_SHARE",
            "COMM_RISE",
            "NCCL_LINES",
            "NET_RATIO",
            "COMM_EXPLAINED_BY_WAIT",
            *_GPU_LOW,
            "DATA_WAIT_SHARE",
        ),  # fmt: skip
        figure=Figure("Exposed communication vs step time", "seconds", series.comm_series),
        action=f"alert when exposed communication (train_comm_seconds) passes {T.COMM_SHARE:.0%} "
        "of the step, and on tokens/s per GPU after every resize",
    ),
    Row(
        "ttft_high_prefill_slow",
        "TTFT high, prefill slow",
        "kv_cache_allocation",
        "prefill share of TTFT, KV-cache usage, preemptions",
        "check {kv_knobs}",
        detect_prefill,
        verify_prefill,
        workload="serving",
        reads=(
            "ttft_p95_ratio",
            "prefill_p95_ratio",
            "prefill_mean_ratio",
            "ttft_mean_ratio",
            "ttft_slo_s",
            "ttft_p95_s",
            "ttft_p95_slo_ratio",
            "prefill_share",
            "queue_share",
            "kv_max",
            "preemptions_per_s",
            "prefix_hit_drop",
        ),
        decides=(
            "TTFT_RATIO",
            "SLO_BREACH_RATIO",
            "PREFILL_RATIO",
            "PREFILL_SHARE_RULE_OUT",
            "PREFIX_HIT_DROP",
            "KV_FULL_FRAC",
            "PREEMPTIONS_PER_S",
            "KV_CALM_FRAC",
        ),  # fmt: skip
        figure=Figure(
            "Prefill time, prefix-cache hits and KV-cache usage", "percent / s x100", series.kv_series
        ),
        action="alert on KV-cache usage > 90 % with preemptions",
        remedy="kv_headroom",
        remedy_target="ttft_p95_ms",
    ),
    Row(
        "tpot_high",
        "TPOT high, output stutters",
        "decode_efficiency",
        "TPOT against batch size (running requests), quantization/config",
        "compare TPOT at equal batch sizes in a replayed load test; check CUDA graphs, attention backend, "
        "quantization, speculative decoding settings",
        detect_tpot,
        verify_tpot,
        workload="serving",
        reads=(
            "per_token",
            "per_token_p50_ratio",
            "per_token_p95_ratio",
            "request_rate_ratio",
            "generated_tokens_ratio",
            "offered_load_ratio",
            "running_ratio",
            "prompt_tokens_ratio",
            "spec_expected_tpot_ratio",
            "kv_max",
            "preemptions_per_s",
        ),
        decides=("TPOT_MEDIAN_RATIO", "LOAD_RATIO", "PROMPT_LOAD_RATIO"),
        # a KV cache not saturated rules out the other cause of slower tokens at the same offered work
        confirms=("KV_FULL_FRAC", "PREEMPTIONS_PER_S"),
        # decode's share of its roofline, in the why only
        context=("NEAR_BOUND_SHARE", "SAME_BATCH_RATIO", "SHARE_DROP_RATIO"),
        figure=Figure("Time per output token vs batch size", series=series.decode_series, scatter=True),
        action="track TPOT p50 per release and per batch size on a dashboard",
        remedy="baseline_engine",
        remedy_target="tpot_p50_ms",
        doc="TPOT against batch size (running requests), quantization/config; with speculative decoding, "
        "the draft acceptance (`vllm:spec_decode_*`)",
    ),
    Row(
        "latency_surge_under_load",
        "latency jumps with concurrency",
        "scheduler_queueing",
        "queue length and queue time, KV-cache water level",
        "add capacity (replicas) or admission control; set alerts on {waiting}; revisit {batch_knobs} for the "
        "traffic mix",
        detect_load,
        verify_load,
        workload="serving",
        reads=(
            "request_rate_ratio",
            "running_ratio",
            "waiting_avg",
            "latency_p50_ratio",
            "latency_p50_signal",
            "ttft_p50_ratio",
            "queue_share_basis",
            "waiting_basis",
            "queue_share",
            "waiting_max",
            "kv_max",
            "queue_p95_s",
        ),
        decides=("LATENCY_MEDIAN_RATIO", "QUEUE_SHARE_CONFIRM", "QUEUED_CONFIRM_MIN", "QUEUE_SHARE_RULE_OUT"),
        context=("KV_FULL_FRAC",),
        explains=("kv_cache_allocation", "decode_efficiency", "prefill_decode_interference"),
        figure=Figure("Queue length vs running batch", "requests", series.queue_series),
        action="alert on {waiting} > 0 for 5 min and on queue-time p95",
        remedy="replicas",
        remedy_target="ttft_p95_ms",
    ),
    Row(
        "oom",
        "out-of-memory",
        "memory_oversubscription",
        "component-by-component memory estimate against capacity",
        "estimate weights + activations + KV cache per GPU; {oom_knobs}",
        detect_oom,
        verify_oom,
        workload="any",
        reads=("cuda_oom_lines", "kv_max", "fb_used_peak_frac"),
        decides=("OOM_LINES",),
        context=("KV_FULL_FRAC",),
        # A crash is what must be fixed first: the deploy that raised memory use is named as its trigger
        # (see verify_oom), and the deploy row ranks below it.
        explains=("release_regression", "decode_efficiency", "kv_cache_allocation"),
        figure=Figure(
            "KV-cache usage and GPU memory around the out-of-memory crashes", "percent", series.memory_series
        ),
        action="alert on CUDA OOM log lines and FB free < 5 %",
    ),
    Row(
        "loss_oscillation",
        "training loss oscillates",
        "training_instability",
        "comparison with the baseline on the same data",
        "replay the same data order against the baseline run; check LR schedule, warmup, grad clipping, "
        "gradient sync",
        detect_loss,
        verify_loss,
        workload="training",
        reads=("loss_roughness_ratio", "loss_spikes", "loss_spikes_more", "step_time_ratio"),
        decides=("LOSS_ROUGHNESS_RATIO", "LOSS_SPIKE_ALERT", "LOSS_SPIKES", "STEP_SLOWDOWN_RATIO"),
        figure=Figure("Training loss against the baseline", "loss", series.loss_series),
        action="alert on loss spikes against the run's own noise, and keep the data order seeded so a "
        "bad stretch can be replayed",
    ),
    Row(
        "tail_latency_divergence",
        "P50 fine, P95/P99 bad, long prompts mixed in",
        "prefill_decode_interference",
        "long-prompt arrivals against ITL/TPOT spikes; chunked prefill",
        "enable chunked prefill with a bounded prefill budget, so one long prompt cannot take a whole step "
        "({chunking}); confirm in a replayed load test that P95 TTFT and ITL stalls drop",
        detect_tail,
        verify_tail,
        workload="serving",
        reads=(
            "per_token",
            "ttft_p95_ratio",
            "ttft_p99_ratio",
            "ttft_p50_ratio",
            "ttft_p50_unheld_ratio",
            "held_back_share",
            "per_token_p99_ratio",
            "ttft_p95_delta_s",
            *_LONG_READS,
            "stalls_per_min",
            "stall_rise",
            "chunked_prefill",
            "request_rate_ratio",
            "waiting_avg",
            "kv_max",
            "preemptions_per_s",
            "corr_long_vs_stalls",
            "corr_band_90",
        ),
        decides=(
            "TAIL_RATIO",
            "MIN_TAIL_DELTA_S",
            "STALLS_PER_MIN",
            "STALL_RISE",
            *_LONG_ROSE,
            "CORR_CONFIRM",
            "CORR_RULE_OUT",
        ),  # fmt: skip
        # the median as usual and a server not saturated rule out the other explanations of a bad tail
        confirms=("MEDIAN_FINE_RATIO", *_SATURATED),
        preconditions=("chunked_prefill_off", "whole_prompt_prefills"),
        figure=Figure("Long-prompt arrivals vs ITL stalls (per 2 min)"),
        action="alert on ITL stalls (>1 s gaps per minute) and TTFT p99, not only p50/p95 means",
        remedy="chunked_prefill",
        remedy_target="ttft_p95_ms",
        explains=("kv_cache_allocation", "decode_efficiency", "scheduler_queueing"),
    ),
    Row(
        "post_deploy_shift",
        "a metric shifts at a deploy",
        "release_regression",
        "change point aligned with the deploy; suspect version",
        "roll back the suspect version (or canary it) and diff its changes that touch the serving path",
        detect_deploy,
        verify_deploy,
        workload="any",
        reads=(*_LONG_READS, "mix_rise_at_deploy"),
        decides=(
            "SHIFT_SCORE",
            "MIN_REL_CHANGE",
            "PRE_DEPLOY_DRIFT",
            "PERSIST_SHARE",
            "LOAD_SHIFT_AT_DEPLOY",
            *_LONG_ROSE,
            "MEDIAN_FINE_RATIO",
            "DEPLOY_TAIL_VIEWS",
            "MIX_STEADY",
        ),  # fmt: skip
        explains=("decode_efficiency", "kv_cache_allocation", "scheduler_queueing"),
        figure=Figure("Shift at the suspect deploy"),
        action="gate releases on a replayed load test: TTFT/TPOT p95 within 10 % of the baseline",
        remedy="baseline_engine",
        remedy_target="tpot_p50_ms",
    ),
)

BY_DIRECTION: dict[str, Row] = {r.direction: r for r in ROWS}

#: a confirmed cause explains these directions (their scores are discounted): cause over effect
EXPLAINS: dict[str, tuple[str, ...]] = {r.direction: r.explains for r in ROWS if r.explains}


def check_rows(rows: tuple[Row, ...]) -> None:
    """Fail on a row that names what does not exist: a threshold (a numeric constant of
    :mod:`perfkit.triage.thresholds`), a quantity (:mod:`perfkit.triage.quantities`), a precondition
    (:data:`perfkit.triage.conditions.PRECONDITIONS`), a direction it explains, or a workload; or on two
    rows with one symptom or direction."""
    from perfkit.triage.conditions import PRECONDITIONS

    problems: list[str] = []
    directions = [r.direction for r in rows]
    for dup in {d for d in directions if directions.count(d) > 1} | {
        s for s in (r.symptom for r in rows) if [x.symptom for x in rows].count(s) > 1
    }:
        problems.append(f"{dup!r} declared twice")
    for r in rows:
        for name in r.thresholds:
            v = getattr(T, name, None)
            if isinstance(v, bool) or not isinstance(v, int | float):
                problems.append(f"{r.direction}: no threshold {name!r} in perfkit.triage.thresholds")
        problems += [f"{r.direction}: no quantity {q!r}" for q in r.reads if q not in QUANTITIES]
        problems += [
            f"{r.direction}: no precondition {g!r}" for g in r.preconditions if g not in PRECONDITIONS
        ]
        problems += [f"{r.direction}: explains unknown {d!r}" for d in r.explains if d not in directions]
        if r.workload not in ABOUT:
            problems.append(f"{r.direction}: workload {r.workload!r} is none of {ABOUT}")
        if r.remedy_target and not r.remedy:
            problems.append(f"{r.direction}: a remedy target without a remedy")
        for text in (r.next_step, r.action):  # every {key} is an engine's word perfkit knows
            problems += [
                f"{r.direction}: no engine word {{{k}}} in perfkit.engine.dialects.WORDS"
                for k in PLACEHOLDER.findall(text)
                if k not in WORDS and k != "waiting"
            ]
    if problems:
        raise RuntimeError("perfkit.triage.rows: " + "; ".join(problems))


check_rows(ROWS)
