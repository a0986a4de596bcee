"""The inference-serving rows of the triage table (DESIGN.md §5): tail-latency divergence,
slow prefill, high TPOT, latency surge under load, a post-deploy shift and out-of-memory, each as a
detector and a verification. :mod:`perfkit.triage.rows` puts them in :data:`~perfkit.triage.rows.ROWS`.
"""

from __future__ import annotations

from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence
from perfkit.triage.row_types import Detection, Verification, _clamp, _r

# -- tail_latency_divergence → prefill_decode_interference -------------------------------------


def detect_tail(ev: Evidence) -> Detection:
    p95, p50 = ev.ratio("ttft", 0.95), ev.ratio("ttft", 0.5)
    p99_tok = ev.ratio(ev.per_token(), 0.99)
    long_share = ev.interference.long_share.get("incident")
    facts = {
        "ttft_p95_ratio": _r(p95),
        "ttft_p50_ratio": _r(p50),
        f"{ev.per_token()}_p99_ratio": _r(p99_tok),
        "long_prompt_share": _r(long_share, 4),
        "long_prompt_threshold_tokens": ev.interference.long_threshold_tokens,
    }
    if p95 is None or p50 is None:
        return Detection(False, 0.0, facts, ["TTFT histogram in both windows"])
    delta = (ev.q("incident", "ttft", 0.95) or 0) - (ev.q("baseline", "ttft", 0.95) or 0)
    tail_bad = (p95 >= T.TAIL_RATIO or (p99_tok or 0) >= T.TAIL_RATIO) and delta >= T.MIN_TAIL_DELTA_S
    median_fine = p50 <= T.MEDIAN_FINE_RATIO
    long_mixed = long_share is not None and long_share >= T.LONG_PROMPT_SHARE
    missing = [] if long_share is not None else ["prompt-length histogram (vllm:request_prompt_tokens)"]
    detected = tail_bad and median_fine and (long_mixed or long_share is None)
    strength = _clamp((p95 - 1) / 4) * (1.0 if long_mixed else 0.5) if detected else 0.0
    return Detection(detected, strength, facts, missing)


def verify_tail(ev: Evidence) -> Verification:
    it = ev.interference
    load = ev.rate_ratio("requests_per_s")
    waiting = ev.rate("incident", "waiting_avg")
    kv = ev.rate("incident", "kv_cache_usage_max")
    numbers = {
        "corr_long_prompts_vs_itl_stalls": _r(it.correlation),
        "minutes": it.minutes,
        "stall_threshold_s": it.stall_threshold_s,
        "itl_stalls_per_min": {k: _r(v) for k, v in it.stalls_per_min.items()},
        "long_prompt_share": {k: _r(v, 4) for k, v in it.long_share.items()},
        "request_rate_ratio": _r(load),
        "waiting_avg": _r(waiting),
        "kv_cache_usage_max": _r(kv),
        "chunked_prefill": ev.chunked_prefill,
    }
    if it.correlation is None:
        return Verification(
            "inconclusive",
            "cannot line up long-prompt arrivals with ITL stalls (histograms missing or too few minutes)",
            numbers,
        )
    saturated = (waiting or 0) >= T.QUEUED_AVG or (load or 1) >= T.LOAD_RATIO or (kv or 0) >= T.KV_FULL_FRAC
    if it.correlation >= T.CORR_CONFIRM and not saturated:
        why = (
            f"ITL stalls >{it.stall_threshold_s:g}s follow long-prompt (>{it.long_threshold_tokens:g} tok) "
            f"arrivals in two-minute bins (r={it.correlation:.2f}) while load, queue and KV cache are normal"
        )
        if ev.chunked_prefill is False:
            why += "; the engine runs with enable_chunked_prefill=False"
        return Verification("confirmed", why, numbers)
    if it.correlation < T.CORR_RULE_OUT:
        return Verification(
            "ruled_out", f"ITL stalls do not follow long-prompt arrivals (r={it.correlation:.2f})", numbers
        )
    why = f"long prompts and ITL stalls correlate (r={it.correlation:.2f})"
    why += " but the server is saturated, which also explains stalls" if saturated else ", but weakly"
    return Verification("inconclusive", why, numbers)


# -- ttft_high_prefill_slow → kv_cache_allocation -----------------------------------------------


def detect_prefill(ev: Evidence) -> Detection:
    ttft, prefill = ev.ratio("ttft", 0.95), ev.ratio("prefill", 0.95)
    slo = ev.incident.slo.get("ttft_p95_s")
    ttft_now = ev.q("incident", "ttft", 0.95)
    facts = {
        "ttft_p95_ratio": _r(ttft),
        "prefill_p95_ratio": _r(prefill),
        "ttft_p95_s": _r(ttft_now),
        "ttft_slo_s": slo,
    }
    if ttft is None or prefill is None:
        return Detection(False, 0.0, facts, ["TTFT and prefill-time histograms in both windows"])
    ttft_high = ttft >= T.TTFT_RATIO or (slo is not None and ttft_now is not None and ttft_now > slo)
    detected = ttft_high and prefill >= T.PREFILL_RATIO
    return Detection(detected, _clamp((prefill - 1) / 3) if detected else 0.0, facts)


def verify_prefill(ev: Evidence) -> Verification:
    prefill, ttft, queue = (
        ev.mean("incident", "prefill"),
        ev.mean("incident", "ttft"),
        ev.mean("incident", "queue"),
    )
    kv = ev.rate("incident", "kv_cache_usage_max")
    pre = ev.rate("incident", "preemptions_per_s")
    hit_b, hit_i = ev.rate("baseline", "prefix_cache_hit_frac"), ev.rate("incident", "prefix_cache_hit_frac")
    hit_drop = hit_b - hit_i if hit_b is not None and hit_i is not None else None
    share = prefill / ttft if prefill is not None and ttft else None
    numbers = {
        "prefill_share_of_ttft": _r(share),
        "queue_share_of_ttft": _r(queue / ttft if queue is not None and ttft else None),
        "kv_cache_usage_max": _r(kv),
        "preemptions_per_s": _r(pre, 4),
        "prefix_cache_hit_frac": {"baseline": _r(hit_b), "incident": _r(hit_i)},
    }
    if share is None or kv is None:
        return Verification("inconclusive", "prefill share of TTFT or KV-cache usage unknown", numbers)
    if share < 0.5:
        return Verification(
            "ruled_out",
            f"prefill is only {share:.0%} of mean TTFT: the first token waits elsewhere (queue)",
            numbers,
        )
    reasons = []
    if hit_drop is not None and hit_drop >= T.PREFIX_HIT_DROP:
        reasons.append(
            f"the prefix-cache hit rate fell from {hit_b:.0%} to {hit_i:.0%}, so prompts are recomputed"
        )
    if kv >= T.KV_FULL_FRAC:
        reasons.append(f"the KV cache peaks at {kv:.0%}")
    if (pre or 0) >= T.PREEMPTIONS_PER_S:
        reasons.append(f"{pre:.3f} preemptions/s recompute prompts")
    if reasons:
        return Verification("confirmed", f"prefill is {share:.0%} of TTFT and " + "; ".join(reasons), numbers)
    if kv < T.KV_CALM_FRAC:
        return Verification(
            "ruled_out",
            f"prefill is slow ({share:.0%} of TTFT) but the KV cache is calm "
            f"(max {kv:.0%}, no preemptions, prefix hits steady): allocation is not the problem",
            numbers,
        )
    return Verification("inconclusive", f"prefill {share:.0%} of TTFT, KV max {kv:.0%}", numbers)


# -- tpot_high → decode_efficiency ------------------------------------------------------------


def detect_tpot(ev: Evidence) -> Detection:
    tok = ev.per_token()
    p50, p95 = ev.ratio(tok, 0.5), ev.ratio(tok, 0.95)
    facts = {"per_token_signal": tok, f"{tok}_p50_ratio": _r(p50), f"{tok}_p95_ratio": _r(p95)}
    if p50 is None:
        return Detection(False, 0.0, facts, ["TPOT/ITL histogram in both windows"])
    detected = p50 >= T.TPOT_MEDIAN_RATIO
    return Detection(detected, _clamp((p50 - 1) / 1.5) if detected else 0.0, facts)


def verify_tpot(ev: Evidence) -> Verification:
    tok = ev.per_token()
    p50 = ev.ratio(tok, 0.5)
    # Offered decode load: more requests, or more tokens asked per request, both grow the batch.
    rate = ev.rate_ratio("requests_per_s")
    tokens = ev.rate_ratio("generated_tokens_per_s")
    load = max((x for x in (rate, tokens) if x is not None), default=None)
    batch = ev.rate_ratio("running_avg")
    numbers = {
        f"{tok}_p50_ratio": _r(p50),
        "request_rate_ratio": _r(rate),
        "generated_tokens_ratio": _r(tokens),
        "batch_ratio": _r(batch),
        f"{tok}_p50_s": {
            "baseline": _r(ev.q("baseline", tok, 0.5), 4),
            "incident": _r(ev.q("incident", tok, 0.5), 4),
        },
    }
    if p50 is None or load is None:
        return Verification("inconclusive", "need TPOT and request rate in both windows", numbers)
    if load >= T.LOAD_RATIO:
        return Verification(
            "ruled_out",
            f"offered load (requests or generated tokens per second) rose {load:.2f}x and the batch "
            f"{batch or 0:.2f}x: the "
            "slower tokens are the cost of a bigger batch, not a less efficient decode",
            numbers,
        )
    if p50 >= T.TPOT_MEDIAN_RATIO:
        return Verification(
            "confirmed",
            f"at the same offered load ({load:.2f}x) the median token takes "
            f"{p50:.2f}x as long; the batch grew {batch or 0:.2f}x only because requests stay "
            "longer (Little's law)",
            numbers,
        )
    return Verification("ruled_out", f"median {tok} within {p50:.2f}x of the baseline", numbers)


# -- latency_surge_under_load → scheduler_queueing ----------------------------------------------


def detect_load(ev: Evidence) -> Detection:
    load, conc = ev.rate_ratio("requests_per_s"), ev.rate_ratio("running_avg")
    waiting = ev.rate("incident", "waiting_avg")
    lat = ev.ratio("ttft", 0.5) or ev.ratio("e2e", 0.5)
    facts = {
        "request_rate_ratio": _r(load),
        "concurrency_ratio": _r(conc),
        "waiting_avg": _r(waiting),
        "ttft_p50_ratio": _r(lat),
    }
    if lat is None or (load is None and conc is None):
        return Detection(False, 0.0, facts, ["request rate or concurrency, and TTFT, in both windows"])
    # "with concurrency": more offered load or more requests in flight. A queue with neither is lost
    # capacity (a smaller KV cache, a slower step), which other rows explain.
    more_load = (load or 0) >= T.LOAD_RATIO or (conc or 0) >= T.CONCURRENCY_RATIO
    detected = more_load and lat >= T.LATENCY_MEDIAN_RATIO
    return Detection(detected, _clamp(lat / 10) if detected else 0.0, facts)


def verify_load(ev: Evidence) -> Verification:
    queue, ttft = ev.mean("incident", "queue"), ev.mean("incident", "ttft")
    waiting = ev.rate("incident", "waiting_avg")
    wmax = ev.rate("incident", "waiting_max")
    kv = ev.rate("incident", "kv_cache_usage_max")
    share = queue / ttft if queue is not None and ttft else None
    numbers = {
        "queue_share_of_ttft": _r(share),
        "waiting_avg": _r(waiting),
        "waiting_max": _r(wmax),
        "kv_cache_usage_max": _r(kv),
        "queue_p95_s": _r(ev.q("incident", "queue", 0.95)),
    }
    if share is None or waiting is None:
        return Verification("inconclusive", "queue time or queue length unknown", numbers)
    if share >= T.QUEUE_SHARE_CONFIRM and waiting >= 1:
        why = f"requests wait in the scheduler queue: {share:.0%} of TTFT, {waiting:.0f} waiting on average"
        if kv is not None and kv >= T.KV_FULL_FRAC:
            why += f"; the KV cache is at {kv:.0%}, so new requests cannot be admitted (a consequence of the batch)"
        return Verification("confirmed", why, numbers)
    if share < T.QUEUE_SHARE_RULE_OUT:
        return Verification("ruled_out", f"queue time is only {share:.0%} of TTFT", numbers)
    return Verification(
        "inconclusive", f"queue is {share:.0%} of TTFT with {waiting:.1f} waiting on average", numbers
    )


# -- post_deploy_shift → release_regression ------------------------------------------------------


def detect_deploy(ev: Evidence) -> Detection:
    rel = ev.release
    facts = {"suspect": rel.suspect, "cleared": [c.get("version") or c.get("detail") for c in rel.cleared]}
    if not rel.events and not rel.suspect:
        return Detection(False, 0.0, facts, ["deploy events (events.csv)"])
    if rel.suspect is None:
        return Detection(False, 0.0, facts)
    return Detection(True, _clamp(rel.suspect.get("score", 0) / 1.5 + 0.3), facts)


def verify_deploy(ev: Evidence) -> Verification:
    rel = ev.release
    s = rel.suspect
    numbers = {
        "suspect_version": rel.suspect_version,
        "shifts": [x.as_dict() for x in rel.shifts if x.aligned_event],
        "cleared": rel.cleared,
    }
    if s is None:
        return Verification("ruled_out", "no shift starts at any deploy", numbers)
    # A traffic change at the same minute muddies the blame.
    load_shift = next(
        (
            x
            for x in rel.shifts
            if x.series == "requests/s"
            and x.aligned_event
            and x.aligned_event["ts"] == s["ts"]
            and abs(x.rel_change) >= T.LOAD_SHIFT_AT_DEPLOY
        ),
        None,
    )
    if load_shift:
        return Verification(
            "inconclusive",
            f"{s['version']} lines up with the shift, but request rate moved "
            f"{load_shift.rel_change:+.0%} at the same time",
            numbers,
        )
    cleared = ", ".join(c.get("version") or c.get("detail") or "?" for c in rel.cleared)
    why = f"{', '.join(s['series'])} shifted at the {s['kind']} of {s['version'] or s['detail']} ({s['ts']})"
    if cleared:
        why += f"; cleared: {cleared}"
    return Verification("confirmed", why, numbers)


# -- oom → memory_oversubscription ---------------------------------------------------------------


def detect_oom(ev: Evidence) -> Detection:
    n = ev.logs.get("cuda_oom", 0)
    facts = {"cuda_oom_lines": n}
    if not ev.logs:
        return Detection(False, 0.0, facts, ["logs (CUDA out-of-memory messages)"])
    return Detection(n > 0, _clamp(0.6 + n / 10) if n else 0.0, facts)


def verify_oom(ev: Evidence) -> Verification:
    n = ev.logs.get("cuda_oom", 0)
    kv = ev.rate("incident", "kv_cache_usage_max")
    used = ev.gpu.get("fb_used_max_incident")
    total = ev.gpu.get("fb_total_incident")
    numbers = {
        "cuda_oom_lines": n,
        "kv_cache_usage_max": _r(kv),
        "oom_request_vs_free_gib": ev.oom,
        "fb_used_peak_frac": _r(used / total if used is not None and total else None),
    }
    if not n:
        return Verification("ruled_out", "no out-of-memory messages in the logs", numbers)
    parts = [f"{n} CUDA out-of-memory messages"]
    if ev.oom:
        parts.append(f"an allocation of {ev.oom['asked_gib']:.2f} GiB met {ev.oom['free_gib']:.2f} GiB free")
    if used is not None and total:
        parts.append(f"GPU memory peaked at {used / total:.0%} of capacity")
    if kv is not None and kv >= T.KV_FULL_FRAC:
        parts.append(f"the KV cache at {kv:.0%} is preallocated, so it is not what ran out")
    if ev.release.suspect:
        s = ev.release.suspect
        parts.append(f"it started with the {s['kind']} {s['version'] or s['detail']} at {s['ts']}")
        numbers["trigger"] = s
    return Verification("confirmed", "; ".join(parts), numbers)
