"""The out-of-memory row of the triage table (docs/bundle.md): CUDA out-of-memory lines in the logs →
memory oversubscription, verified by a component-by-component memory estimate against the GPUs'
capacity (:mod:`perfkit.analyses.memory` for a server, :mod:`perfkit.analyses.memory_peak` for a
training job). It applies to both workloads.
"""

from __future__ import annotations

from typing import Any

from perfkit.analyses.memory import MIB, inference_memory
from perfkit.analyses.memory_peak import states_vs_peak
from perfkit.analyses.roofline import SERVING_RATES, lookup, mean_context
from perfkit.engine.dialects import BY_NAME
from perfkit.errors import ConfigError
from perfkit.triage import thresholds as T
from perfkit.triage.conditions import kv_high
from perfkit.triage.evidence import Evidence
from perfkit.triage.gaps import CANNOT, MODEL_ELSEWHERE
from perfkit.triage.quantities import value
from perfkit.triage.row_types import NO_GPU_COUNT, Detection, Verification, _r, above, cuts_of

# -- oom → memory_oversubscription ---------------------------------------------------------------


def detect_oom(ev: Evidence) -> Detection:
    """Out-of-memory: any CUDA out-of-memory line in the logs (inconclusive without logs)."""
    n = value(ev, "cuda_oom_lines")
    facts = {"cuda_oom_lines": n}
    if not ev.logs:
        return Detection(False, 0.0, facts, ["logs (CUDA out-of-memory messages)"])
    elsewhere = MODEL_ELSEWHERE.get(ev.serving_engine or "")
    if elsewhere and not n:  # a router's logs: the model's errors are not in them
        d = BY_NAME[ev.serving_engine or ""]
        return Detection(False, 0.0, facts, [f"{CANNOT}{d.title}: {elsewhere}"])
    seen = above(n, "OOM_LINES")
    return Detection(seen.ok, T.oom_strength(n) if seen else 0.0, facts, cuts=cuts_of(seen))


def verify_oom(ev: Evidence) -> Verification:
    """The crash, explained: the allocation that failed, GPU memory's peak, the deploy it started with
    and a component-by-component memory estimate against capacity."""
    n = value(ev, "cuda_oom_lines")
    kv = value(ev, "kv_max")
    peak = value(ev, "fb_used_peak_frac")
    numbers = {
        "cuda_oom_lines": n,
        "kv_cache_usage_max": _r(kv),
        "oom_request_vs_free_gib": ev.oom,
        "fb_used_peak_frac": _r(peak),
    }
    seen = above(n, "OOM_LINES")
    if not seen:
        return Verification("ruled_out", "no out-of-memory messages in the logs", numbers, cuts_of(seen))
    parts = [f"{n} CUDA out-of-memory messages"]
    if ev.oom:
        parts.append(f"an allocation of {ev.oom['asked_gib']:.2f} GiB met {ev.oom['free_gib']:.2f} GiB free")
    if peak is not None:
        parts.append(f"GPU memory peaked at {peak:.0%} of capacity")
    if kv_high(ev):
        parts.append(f"the KV cache at {kv:.0%} is preallocated, so it is not what ran out")
    if ev.release.suspect:
        s = ev.release.suspect
        parts.append(f"it started with the {s['kind']} {s['version'] or s['detail']} at {s['ts']}")
        numbers["trigger"] = s
    estimate, numbers["memory_estimate"] = _memory_estimate(ev)
    parts.append(estimate)
    return Verification("confirmed", "; ".join(parts), numbers, cuts_of(seen))


def _memory_estimate(ev: Evidence) -> tuple[str, dict[str, Any]]:
    """The row's component-by-component estimate (analyses/memory.py) from the incident's model
    and GPUs, or a plain sentence saying why there is none."""
    spec, gpu, why_not = lookup(ev.incident.model, ev.incident.hardware.gpu)
    if spec is None:
        return f"no component estimate: {why_not}", {"unavailable": why_not}
    if not ev.incident.hardware.count_known:
        return f"no component estimate: {NO_GPU_COUNT}", {"unavailable": NO_GPU_COUNT}
    used, count = ev.gpu.get("fb_used_max_incident"), ev.incident.hardware.count
    if ev.train is not None and ev.train.present:
        if used is None:
            return "no component estimate: no DCGM_FI_DEV_FB_USED peak to split", {"unavailable": "FB_USED"}
        split = states_vs_peak(spec, count, used * MIB, gpu.memory_gib * 2**30 if gpu else None)
        text = split.summary() + (f"; first try: {split.first_try}" if split.first_try else "")
        return (
            text + " (micro-batch, sequence length and recomputation are not in incident.yaml)",
            split.as_dict(),
        )
    cfg = {k: v.get("value") for k, v in ev.engine_config.items()}
    context = mean_context(*(ev.rate("incident", k) for k in SERVING_RATES))
    util, tokens, seqs = (
        cfg.get(k) for k in ("gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs")
    )
    try:
        est = inference_memory(
            spec,
            gpu,
            tp=count,
            batch=ev.rate("incident", "running_avg") or 0.0,
            context=context or 0.0,
            max_num_batched_tokens=tokens if isinstance(tokens, int) else None,
            max_num_seqs=seqs if isinstance(seqs, int) else None,
            gpu_memory_utilization=util if isinstance(util, float) else None,
            observed_bytes=used * MIB if used is not None else None,
        )
    except ConfigError as exc:
        return f"no component estimate: {exc}", {"unavailable": str(exc)}
    return est.summary(), est.as_dict()
