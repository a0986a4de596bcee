"""A tiny hand-made vLLM-like store whose window quantiles and means can be worked out by hand.

Scrapes every 15 s at ``B + 15 k`` for k = 0..120. Scrape k > 0 ends interval k, which belongs
to the baseline phase (k <= 40), the middle phase (41..80) or the incident phase (81..120).
The baseline window [B, B+600] and the incident window [B+1200, B+1800] each span 40 whole
intervals and have a scrape on both edges, so ``increase`` over a window is exactly
last - first (no extrapolation): 40 x the per-interval increments of that phase.
"""

from __future__ import annotations

from datetime import UTC, datetime

from perfkit.core.frames import Window
from perfkit.engine.local import LocalEngine
from perfkit.sources.openmetrics import parse_text

B = 1_795_996_800
LE = ("0.1", "0.5", "1", "5", "+Inf")
BASELINE = Window(datetime.fromtimestamp(B, UTC), datetime.fromtimestamp(B + 600, UTC))
INCIDENT = Window(datetime.fromtimestamp(B + 1200, UTC), datetime.fromtimestamp(B + 1800, UTC))

#: histogram base name -> {phase: (observations per interval in each bucket, non-cumulative,
#: the last one above 5 s; sum of those observations in seconds)}; the middle phase repeats
#: the incident's
Hist = dict[str, tuple[tuple[int, ...], float]]


def phase(k: int) -> str:
    return "baseline" if k <= 40 else ("middle" if k <= 80 else "incident")


def build(
    histograms: dict[str, Hist],
    counters: dict[str, dict[str, float]] | None = None,
    gauges: dict[str, dict[str, float]] | None = None,
    spikes: dict[str, dict[int, float]] | None = None,
) -> LocalEngine:
    """``counters``: sample name (with labels) -> per-interval increment by phase;
    ``gauges``: sample name -> value by phase of the scrape (scrape 0 is baseline);
    ``spikes``: sample name -> {scrape k: value} overriding a gauge."""
    lines: list[str] = []
    for base, spec in histograms.items():
        lines.append(f"# TYPE {base} histogram")
        cum = [0.0] * len(LE)
        total = 0.0
        for k in range(121):
            if k:
                per_bucket, obs_sum = spec.get(phase(k), spec["incident"])
                running = 0.0
                for i, n in enumerate(per_bucket):
                    running += n
                    cum[i] += running
                total += obs_sum
            t = B + 15 * k
            for le, c in zip(LE, cum, strict=True):
                lines.append(f'{base}_bucket{{model_name="m",le="{le}"}} {c!r} {t}')
            lines.append(f'{base}_count{{model_name="m"}} {cum[-1]!r} {t}')
            lines.append(f'{base}_sum{{model_name="m"}} {total!r} {t}')
    for name, by_phase in (counters or {}).items():
        family = name.split("{")[0].removesuffix("_total")
        lines.append(f"# TYPE {family} counter")
        value = 0.0
        for k in range(121):
            if k:
                value += by_phase.get(phase(k), by_phase["incident"])
            lines.append(f"{name} {value!r} {B + 15 * k}")
    for name, by_phase in (gauges or {}).items():
        lines.append(f"# TYPE {name.split('{')[0]} gauge")
        for k in range(121):
            value = (spikes or {}).get(name, {}).get(k, by_phase.get(phase(k), by_phase["incident"]))
            lines.append(f"{name} {value!r} {B + 15 * k}")
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n", require_eof=True))


# The scenario the baseline and stage tests share: 4 requests per interval in both windows;
# in the incident half the requests queue for 1-5 s and prefill moves to (0.1, 0.5].
HISTOGRAMS: dict[str, Hist] = {
    "vllm:request_queue_time_seconds": {
        "baseline": ((4, 0, 0, 0, 0), 0.1),
        "incident": ((2, 0, 0, 2, 0), 6.1),
    },
    "vllm:request_prefill_time_seconds": {
        "baseline": ((4, 0, 0, 0, 0), 0.2),
        "incident": ((0, 4, 0, 0, 0), 1.0),
    },
    "vllm:request_decode_time_seconds": {
        "baseline": ((0, 0, 4, 0, 0), 3.2),
        "incident": ((0, 0, 4, 0, 0), 3.2),
    },
    "vllm:request_inference_time_seconds": {
        "baseline": ((0, 0, 4, 0, 0), 3.4),
        "incident": ((0, 0, 2, 2, 0), 4.2),
    },
    "vllm:time_to_first_token_seconds": {
        "baseline": ((4, 0, 0, 0, 0), 0.3),
        "incident": ((0, 2, 0, 2, 0), 7.0),
    },
    "vllm:e2e_request_latency_seconds": {
        "baseline": ((0, 0, 4, 0, 0), 3.6),
        "incident": ((0, 0, 2, 2, 0), 11.0),
    },
    "vllm:request_time_per_output_token_seconds": {
        "baseline": ((4, 0, 0, 0, 0), 0.08),
        "incident": ((4, 0, 0, 0, 0), 0.08),
    },
}
COUNTERS = {
    'vllm:generation_tokens_total{model_name="m"}': {"baseline": 3000.0, "incident": 1500.0},
    'vllm:prompt_tokens_total{model_name="m"}': {"baseline": 6000.0, "incident": 6000.0},
    'vllm:request_success_total{model_name="m",finished_reason="stop"}': {"baseline": 4.0, "incident": 4.0},
    'vllm:request_success_total{model_name="m",finished_reason="abort"}': {"baseline": 0.0, "incident": 1.0},
}
GAUGES = {
    'vllm:num_requests_running{model_name="m"}': {"baseline": 4.0, "middle": 6.0, "incident": 10.0},
    'vllm:num_requests_waiting{model_name="m"}': {"baseline": 0.0, "middle": 1.0, "incident": 3.0},
    'vllm:kv_cache_usage_perc{model_name="m"}': {"baseline": 0.3, "middle": 0.5, "incident": 0.9},
}
SPIKES = {'vllm:num_requests_waiting{model_name="m"}': {100: 12.0}}


def scenario() -> LocalEngine:
    return build(HISTOGRAMS, COUNTERS, GAUGES, SPIKES)
