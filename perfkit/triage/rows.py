"""The seed's triage table as code: phenomenon → direction → verification (docs/bundle.md).

Each row: a symptom detector (does the evidence show the phenomenon, how strongly, 0-1), a
verification that runs the row's quick check and returns ``confirmed`` / ``ruled_out`` /
``inconclusive`` with the numbers behind it, and the next step for the engineer. A row whose
evidence is missing is inconclusive and says what is missing; it never fires on absence.

The rows' detectors and verifications live in :mod:`perfkit.triage.inference_rows` and
:mod:`perfkit.triage.training_rows`, their types in :mod:`perfkit.triage.row_types`. Every
threshold they compare with is in :mod:`perfkit.triage.thresholds`, and each Detection and
Verification lists in ``cuts`` the comparisons its outcome hung on (:class:`Cut`: value, cut-off,
relative margin).
"""

from __future__ import annotations

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
    ),
    Row(
        "ttft_high_prefill_slow",
        "TTFT high, prefill slow",
        "kv_cache_allocation",
        "prefill share of TTFT, KV-cache usage, preemptions",
        "check gpu_memory_utilization / num_gpu_blocks, prefix caching, KV-cache dtype (fp8); cut max_num_seqs "
        "if preemptions recompute prompts",
        detect_prefill,
        verify_prefill,
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
    ),
    Row(
        "latency_surge_under_load",
        "latency jumps with concurrency",
        "scheduler_queueing",
        "queue length and queue time, KV-cache water level",
        "add capacity (replicas) or admission control; set alerts on num_requests_waiting; revisit "
        "max_num_seqs / max_num_batched_tokens for the traffic mix",
        detect_load,
        verify_load,
    ),
    Row(
        "oom",
        "out-of-memory",
        "memory_oversubscription",
        "component-by-component memory estimate against capacity",
        "estimate weights + activations + KV cache per GPU; lower gpu_memory_utilization or max_model_len, "
        "quantize, or shard wider",
        detect_oom,
        verify_oom,
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
    ),
    Row(
        "tail_latency_divergence",
        "P50 fine, P95/P99 bad, long prompts mixed in",
        "prefill_decode_interference",
        "long-prompt arrivals against ITL/TPOT spikes; chunked prefill",
        "enable chunked prefill with a bounded prefill budget, so one long prompt cannot take a whole step "
        "(vLLM: --enable-chunked-prefill --max-num-batched-tokens 2048 --long-prefill-token-threshold 512; "
        "SGLang: --chunked-prefill-size 4096; trtllm-serve: --enable_chunked_prefill; the verification names "
        "the engine's); confirm in a replayed load test that P95 TTFT and ITL stalls drop",
        detect_tail,
        verify_tail,
    ),
    Row(
        "post_deploy_shift",
        "a metric shifts at a deploy",
        "release_regression",
        "change point aligned with the deploy; suspect version",
        "roll back the suspect version (or canary it) and diff its changes that touch the serving path",
        detect_deploy,
        verify_deploy,
    ),
)

#: a confirmed cause explains these directions (their scores are discounted): cause over effect
EXPLAINS: dict[str, tuple[str, ...]] = {
    "scheduler_queueing": ("kv_cache_allocation", "decode_efficiency", "prefill_decode_interference"),
    "release_regression": ("decode_efficiency", "kv_cache_allocation", "scheduler_queueing"),
    "prefill_decode_interference": ("kv_cache_allocation", "decode_efficiency", "scheduler_queueing"),
    "data_pipeline": ("network_communication",),
    # A crash is what must be fixed first: the deploy that raised memory use is named as its trigger
    # (see verify_oom), and the deploy row ranks below it.
    "memory_oversubscription": ("release_regression", "decode_efficiency", "kv_cache_allocation"),
}
