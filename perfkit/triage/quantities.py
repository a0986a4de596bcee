"""The named quantities the triage rows read: each defined once, by name, and computed once per
incident.

A row never computes a ratio or a share itself: it reads ``value(ev, "ttft_p95_ratio")``. Every
quantity says in words what it is (:attr:`Quantity.text`: docs/bundle.md's table of quantities is
generated from it, :mod:`perfkit.report.rows_doc`) and is read through :func:`value`, which computes it
the first time and keeps it on the :class:`~perfkit.triage.evidence.Evidence`, so two rows that read
the same number read the same value. Every ratio against the baseline goes through
:func:`perfkit.core.ratios.ratio`: one rule for a zero or missing baseline. Each row declares the
quantities it reads (:attr:`perfkit.triage.row_types.Row.reads`); a name that is not here fails the
import-time check of :mod:`perfkit.triage.rows`, and a quantity a row reads without declaring it fails
``tests/triage/test_scenario_library.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfkit.core.ratios import ratio
from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence


@dataclass(frozen=True)
class Quantity:
    """One number a row reads: its name, what it is in words, and how it is read from the evidence."""

    name: str
    text: str
    read: Callable[[Evidence], Any]


QUANTITIES: dict[str, Quantity] = {}


def _q(name: str, text: str, read: Callable[[Evidence], Any]) -> None:
    if name in QUANTITIES:
        raise ValueError(f"quantity {name!r} defined twice")
    QUANTITIES[name] = Quantity(name, text, read)


def value(ev: Evidence, name: str) -> Any:
    """The quantity ``name`` on this incident's evidence (computed once, then kept)."""
    log = getattr(ev, "read_log", None)
    if log is not None:
        log.append(name)
    cache = getattr(ev, "quantities", None)
    if cache is None:  # evidence built by hand (a test's stand-in): keep them on it all the same
        cache = ev.quantities = {}
    if name not in cache:
        try:
            spec = QUANTITIES[name]
        except KeyError:
            raise KeyError(f"perfkit.triage.quantities has no quantity {name!r}") from None
        cache[name] = spec.read(ev)
    return cache[name]


def _quantile_ratio(signal: str, q: float) -> Callable[[Evidence], float | None]:
    return lambda ev: ev.ratio(signal, q)


def _rate_ratio(name: str) -> Callable[[Evidence], float | None]:
    return lambda ev: ev.rate_ratio(name)


def _sides_ratio(
    sides: Callable[[Evidence], dict[str, float | None] | None], floor: float = 0.0
) -> Callable[[Evidence], float | None]:
    """The incident's value over the baseline's, of a number kept per side (``{"incident": ..,
    "baseline": ..}``), a baseline under ``floor`` read at it."""

    def read(ev: Evidence) -> float | None:
        both = sides(ev) or {}
        return ratio(both.get("incident"), both.get("baseline"), floor)

    return read


def _incident(name: str) -> Callable[[Evidence], float | None]:
    return lambda ev: ev.rate("incident", name)


# -- latency: how much worse, and where -------------------------------------------------------------
_q("ttft_p95_ratio", "TTFT p95, incident over baseline", _quantile_ratio("ttft", 0.95))
_q("ttft_p99_ratio", "TTFT p99, incident over baseline", _quantile_ratio("ttft", 0.99))
_q(
    "ttft_p95_delta_s",
    "TTFT p95 of the incident less the baseline's (seconds)",
    lambda ev: (ev.q("incident", "ttft", 0.95) or 0) - (ev.q("baseline", "ttft", 0.95) or 0),
)
_q("ttft_p95_s", "TTFT p95 in the incident window (seconds)", lambda ev: ev.q("incident", "ttft", 0.95))
_q(
    "ttft_slo_s",
    "the incident's TTFT p95 SLO (incident.yaml slo.ttft_p95_s)",
    lambda ev: ev.incident.slo.get("ttft_p95_s"),
)
_q(
    "ttft_p95_slo_ratio",
    "TTFT p95 in the incident window over its SLO",
    lambda ev: ratio(value(ev, "ttft_p95_s"), value(ev, "ttft_slo_s")) if value(ev, "ttft_slo_s") else None,
)
_q(
    "ttft_p50_ratio",
    "TTFT median, incident over baseline, the incident's read outside the five minutes after each "
    "restart (a restarted server's backlog queues without the engine serving any slower)",
    lambda ev: ev.ttft_median_ratio(),
)
_q(
    "ttft_p50_unheld_ratio",
    "TTFT median of the requests no long prefill held back (the window's 0.5 x (1 - held) quantile), "
    "over the baseline's median",
    lambda ev: ev.ttft_median_ratio(unheld=True),
)
_q(
    "held_back_share",
    "the share of requests held back behind long prefills: the excess share above the baseline's own p99",
    lambda ev: ev.ttft_held_share,
)
_q(
    "per_token",
    "the per-token histogram the server exports: TPOT (per request), else ITL (older vLLM)",
    lambda ev: ev.per_token(),
)
_q(
    "per_token_p50_ratio",
    "the per-token latency's median (TPOT, else ITL), incident over baseline",
    lambda ev: _quantile_ratio(ev.per_token(), 0.5)(ev),
)
_q(
    "per_token_p99_ratio",
    "the per-token latency's p99 (TPOT, else ITL), incident over baseline",
    lambda ev: _quantile_ratio(ev.per_token(), 0.99)(ev),
)
_q(
    "per_token_p95_ratio",
    "the per-token latency's p95 (TPOT, else ITL), incident over baseline",
    lambda ev: _quantile_ratio(ev.per_token(), 0.95)(ev),
)
_q(
    "ttft_mean_ratio",
    "mean TTFT, incident over baseline (where the engine has no TTFT histogram, the stages' stand-in: "
    "queue time + the prefill forward pass)",
    lambda ev: ratio(ev.mean("incident", "ttft"), ev.mean("baseline", "ttft")),
)
_q("prefill_p95_ratio", "prefill time p95, incident over baseline", _quantile_ratio("prefill", 0.95))
_q(
    "prefill_mean_ratio",
    "mean prefill time (TTFT less queue time where the engine has no prefill histogram), incident over baseline",
    lambda ev: ratio(ev.mean("incident", "prefill"), ev.mean("baseline", "prefill")),
)
_q(
    "latency_p50_ratio",
    "the median request's latency, incident over baseline: TTFT p50 (outside restart backlogs), else E2E p50",
    lambda ev: value(ev, "ttft_p50_ratio") or _quantile_ratio("e2e", 0.5)(ev),
)
_q(
    "latency_p50_signal",
    "which median latency_p50_ratio judged on: the TTFT's, else (an engine with no TTFT histogram) the E2E's",
    lambda ev: (
        "TTFT p50" if value(ev, "ttft_p50_ratio") else "E2E p50" if value(ev, "latency_p50_ratio") else None
    ),
)
_q(
    "queue_share_basis",
    "what the queue's share of TTFT was read on: both histograms, or a stand-in for the one the engine lacks",
    lambda ev: (
        "; ".join(ev.stages.stand_ins)
        or "queue time over TTFT, their histograms' means in the typical minute"
    ),
)
_q(
    "waiting_basis",
    "what the requests waiting were read on: the engine's gauge, or Little's law where it exports none",
    lambda ev: (
        "request rate x mean queue time (Little's law: the engine exports no gauge of requests waiting)"
        if any("Little's law" in m for m in ev.baseline.missing)
        else "the engine's gauge of requests waiting"
    ),
)
_q(
    "prefill_share",
    "prefill's share of TTFT in the incident's typical minute",
    lambda ev: ev.share("prefill"),
)
_q("queue_share", "queue time's share of TTFT in the incident's typical minute", lambda ev: ev.share("queue"))
_q(
    "queue_p95_s",
    "queue time p95 in the incident window (seconds)",
    lambda ev: ev.q("incident", "queue", 0.95),
)

# -- load and the engine's state ---------------------------------------------------------------------
_q("request_rate_ratio", "requests per second, incident over baseline", _rate_ratio("requests_per_s"))
_q(
    "generated_tokens_ratio",
    "generated tokens per second, incident over baseline",
    _rate_ratio("generated_tokens_per_s"),
)
_q(
    "prompt_tokens_ratio",
    "prompt tokens per second, incident over baseline",
    _rate_ratio("prompt_tokens_per_s"),
)
_q(
    "running_ratio",
    "requests running (the batch), average, incident over baseline",
    _rate_ratio("running_avg"),
)
_q(
    "offered_load_ratio",
    "offered decode load, incident over baseline: the larger of the request and generated-token rates",
    lambda ev: max(
        (x for x in (value(ev, "request_rate_ratio"), value(ev, "generated_tokens_ratio")) if x is not None),
        default=None,
    ),
)
_q(
    "spec_expected_tpot_ratio",
    "the TPOT ratio speculative decoding's acceptance alone explains: the baseline's mean acceptance "
    "length (tokens a verification step emits) over the incident's",
    lambda ev: ratio(ev.rate("baseline", "spec_accept_length"), ev.rate("incident", "spec_accept_length")),
)
_q("waiting_avg", "requests waiting, average over the incident window", _incident("waiting_avg"))
_q("waiting_max", "requests waiting, most at once in the incident window", _incident("waiting_max"))
_q("preemptions_per_s", "preemptions per second in the incident window", _incident("preemptions_per_s"))
_q(
    "kv_max",
    "the KV cache's peak use in the incident window, outside the five minutes after each restart",
    lambda ev: ev.kv_max(),
)
_q(
    "prefix_hit_drop",
    "the prefix-cache hit rate's fall, baseline less incident (points)",
    lambda ev: (
        b - i
        if (b := ev.rate("baseline", "prefix_cache_hit_frac")) is not None
        and (i := ev.rate("incident", "prefix_cache_hit_frac")) is not None
        else None
    ),
)
_q(
    "chunked_prefill",
    "chunked prefill on (True), off (False) or unknown (None), from the engine's own settings",
    lambda ev: ev.chunked_prefill,
)

# -- prefill/decode interference ---------------------------------------------------------------------
_q(
    "stalls_per_min",
    "inter-token gaps past the stall threshold per minute, in the incident window",
    lambda ev: ev.interference.stalls_per_min.get("incident"),
)
_q(
    "stall_rise",
    f"stalls per minute, incident over baseline (a baseline under {T.STALL_BASELINE_FLOOR_PER_MIN:g}/min read at it)",
    _sides_ratio(lambda ev: ev.interference.stalls_per_min, T.STALL_BASELINE_FLOOR_PER_MIN),
)
_q(
    "long_share",
    "long prompts' share of the incident's requests",
    lambda ev: ev.interference.long_share.get("incident"),
)
_q(
    "long_share_baseline",
    "long prompts' share of the baseline's requests",
    lambda ev: ev.interference.long_share.get("baseline"),
)
_q(
    "long_share_rise",
    f"long prompts' share, incident over baseline (a baseline under {T.LONG_SHARE_FLOOR:.2%} read at it)",
    _sides_ratio(lambda ev: ev.interference.long_share, T.LONG_SHARE_FLOOR),
)
_q(
    "mix_rise_at_deploy",
    "where the suspect deploy is blamed on a mean alone: how much the mean prompt or output tokens per "
    "request rose at it, the larger of the two (0 where both fell: a lighter mix raises no mean; None: not read)",
    lambda ev: max((max(v, 0.0) for v in ev.release.mix.values()), default=None),
)
_q(
    "corr_long_vs_stalls",
    "the correlation of long-prompt arrivals with stalls in two-minute bins",
    lambda ev: ev.interference.correlation,
)


def fisher_band(r: float, n: int) -> tuple[float, float]:
    """The one-sided :data:`~perfkit.triage.thresholds.CORR_Z` band of a correlation of ``n`` pairs
    (Fisher's z): (-1, 1) for three pairs or fewer."""
    if n <= 3:
        return -1.0, 1.0
    z, half = math.atanh(max(-0.999999, min(0.999999, r))), T.CORR_Z / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


_q(
    "corr_band_90",
    "the correlation's 90 % band (Fisher's z over the bins it was read on): (low, high)",
    lambda ev: (
        None
        if ev.interference.correlation is None
        else fisher_band(ev.interference.correlation, ev.interference.minutes)
    ),
)

# -- memory and logs ---------------------------------------------------------------------------------
_q(
    "cuda_oom_lines",
    "CUDA out-of-memory lines in the logs in the window",
    lambda ev: ev.logs.get("cuda_oom", 0),
)
_q(
    "fb_used_peak_frac",
    "GPU framebuffer used at its peak over its capacity (DCGM)",
    lambda ev: ratio(ev.gpu.get("fb_used_max_incident"), ev.gpu.get("fb_total_incident")),
)
_q(
    "nccl_lines",
    "NCCL WARN, timeout and error lines in the logs in the window",
    lambda ev: ev.logs.get("nccl_warn", 0) + ev.logs.get("nccl_timeout", 0) + ev.logs.get("nccl_error", 0),
)

# -- training ----------------------------------------------------------------------------------------


def _train_sides(attr: str) -> Callable[[Evidence], dict[str, float | None] | None]:
    """A training quantity kept per side (``TrainingEvidence.<attr>``: baseline and incident)."""
    return lambda ev: getattr(ev.train, attr, None) if ev.train else None


def _train_side(attr: str, side: str) -> Callable[[Evidence], float | None]:
    return lambda ev: (_train_sides(attr)(ev) or {}).get(side)


_q(
    "gpu_util_pct",
    "DCGM_FI_DEV_GPU_UTIL, average over the incident window (%)",
    lambda ev: ev.gpu.get("util_incident"),
)
_q(
    "tensor_active_ratio",
    "tensor-pipe activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE), incident over baseline",
    lambda ev: ratio(ev.gpu.get("tensor_incident"), ev.gpu.get("tensor_baseline")),
)
_q("cpu_busy_frac", "host CPUs busy, average share", lambda ev: ev.host.get("cpu_busy_incident"))
_q("busiest_cpu_frac", "the busiest CPU's busy share", lambda ev: ev.host.get("cpu_busy_max_incident"))
_q("iowait_frac", "CPU time waiting on I/O, share", lambda ev: ev.host.get("iowait_incident"))
_q(
    "network_ratio",
    "node network bytes per second (eth), incident over baseline",
    lambda ev: ratio(ev.host.get("net_bytes_per_s_incident"), ev.host.get("net_bytes_per_s_baseline")),
)
_q(
    "ib_ratio",
    "InfiniBand port bytes per second, incident over baseline",
    lambda ev: ratio(ev.host.get("ib_bytes_per_s_incident"), ev.host.get("ib_bytes_per_s_baseline")),
)
_q(
    "data_wait_share",
    "the slowest rank's data wait, share of its step",
    _train_side("data_wait_share", "incident"),
)
_q(
    "data_wait_share_baseline",
    "the slowest rank's data wait in the baseline, share of its step",
    _train_side("data_wait_share", "baseline"),
)
_q(
    "data_wait_rise",
    f"the data-wait share, incident over baseline (a baseline under {T.DATA_WAIT_FLOOR:.1%} read at it)",
    lambda ev: ratio(value(ev, "data_wait_share"), value(ev, "data_wait_share_baseline"), T.DATA_WAIT_FLOOR),
)
_q("comm_share", "exposed communication, share of the step", _train_side("comm_share", "incident"))
_q(
    "comm_share_baseline",
    "exposed communication in the baseline, share of the step",
    _train_side("comm_share", "baseline"),
)
_q(
    "comm_rise",
    "the exposed-communication share, incident over baseline",
    lambda ev: ratio(value(ev, "comm_share"), value(ev, "comm_share_baseline")),
)
_q(
    "wait_over_comm",
    "the slowest rank's data wait over the exposed communication (how much of the collective time is "
    "ranks waiting for that rank's batch)",
    lambda ev: (
        ratio(value(ev, "data_wait_share"), value(ev, "comm_share")) if value(ev, "comm_share") else None
    ),
)
_q(
    "step_jitter",
    "the step time's scrape-to-scrape jump, share of itself (median over ranks)",
    _train_side("step_jitter", "incident"),
)
_q(
    "step_jitter_rise",
    f"the step jitter, incident over baseline (a baseline under {T.STEP_JITTER_FLOOR:.1%} read at it)",
    _sides_ratio(_train_sides("step_jitter"), T.STEP_JITTER_FLOOR),
)
_q(
    "util_swing_pct",
    "GPU utilisation's scrape-to-scrape swing (points)",
    _train_side("util_swing_pct", "incident"),
)
_q(
    "util_swing_rise",
    f"the utilisation swing, incident over baseline (a baseline under {T.UTIL_SWING_FLOOR_PCT:g} points read at it)",
    _sides_ratio(_train_sides("util_swing_pct"), T.UTIL_SWING_FLOOR_PCT),
)
_q(
    "loss_roughness_ratio",
    "the loss's robust scatter around its trend, incident over baseline",
    _sides_ratio(_train_sides("loss_roughness")),
)
_q(
    "loss_spikes",
    "loss spike episodes in the incident window",
    lambda ev: _train_side("loss_spikes", "incident")(ev) or 0,
)
_q(
    "loss_spikes_more",
    "loss spike episodes in the incident window beyond the baseline's",
    lambda ev: value(ev, "loss_spikes") - (_train_side("loss_spikes", "baseline")(ev) or 0),
)
_q(
    "step_time_ratio",
    "step time, incident over baseline",
    _sides_ratio(_train_sides("step_s")),
)
