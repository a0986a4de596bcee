"""The inference-serving rows of the triage table (docs/bundle.md): tail-latency divergence,
slow prefill, latency surge under load and a post-deploy shift, each as a detector and a
verification (high TPOT: :mod:`perfkit.triage.decode_row`; out-of-memory:
:mod:`perfkit.triage.oom_row`). :mod:`perfkit.triage.rows` declares each row.

A row reads named quantities (:mod:`perfkit.triage.quantities`) and shared conditions
(:mod:`perfkit.triage.conditions`), and every comparison with a threshold goes through
:mod:`perfkit.triage.row_types` (``at_least`` and friends), so each Detection and Verification
carries the cuts its outcome hung on.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from perfkit.analyses.release import (
    ReleaseCorrelation,
    Shift,
    at_deploy,
    blamed_on,
    is_mean,
    is_tail,
    tail_views,
)
from perfkit.analyses.stages import PREFILL_STAND_IN
from perfkit.core.frames import iso, utc
from perfkit.engine import dialects
from perfkit.engine.dialects import BY_NAME
from perfkit.triage import thresholds as T
from perfkit.triage.conditions import (
    chunked_prefill_off,
    kv_high,
    kv_saturated,
    long_rose,
    saturated,
    stalls_new,
    whole_prompt_prefills,
)
from perfkit.triage.evidence import Evidence
from perfkit.triage.gaps import CANNOT, absent, cannot, lacking
from perfkit.triage.quantities import value
from perfkit.triage.row_types import (
    ABSENT,
    Detection,
    Test,
    Verification,
    _r,
    above,
    all_of,
    any_of,
    at_least,
    at_most,
    below,
    calm_text,
    cuts_of,
    negate,
    weigh,
)

# -- tail_latency_divergence → prefill_decode_interference -------------------------------------


def detect_tail(ev: Evidence) -> Detection:
    """P50 fine, P95/P99 bad, long prompts mixed in: the tail (TTFT p95, the per-token p99, or decode
    stalls the baseline did not have) worse while the median request is as usual."""
    tok = value(ev, "per_token")
    p95, p99 = value(ev, "ttft_p95_ratio"), value(ev, "ttft_p99_ratio")
    p50 = value(ev, "ttft_p50_ratio")  # outside a restart's backlog: its queue is no slower median
    # Where long prompts' prefills take whole steps (chunked prefill off, or stalls that follow them
    # closely), newly arrived long prompts hold back the prefills that arrive during theirs: "P50 fine"
    # is then judged on the requests they did not hold back (triage.held_back)
    whole = whole_prompt_prefills(ev)
    held_context = bool(whole) and bool(long_rose(ev))
    p50_judged = value(ev, "ttft_p50_unheld_ratio") if held_context else p50
    tok99 = value(ev, "per_token_p99_ratio")
    it = ev.interference
    long_share = value(ev, "long_share")
    facts = {
        "ttft_p95_ratio": _r(p95),
        "ttft_p99_ratio": _r(p99),
        "ttft_p50_ratio": _r(p50),
        "ttft_p50_unheld_ratio": _r(p50_judged) if held_context else None,
        "held_back_share": _r(value(ev, "held_back_share"), 4) if held_context else None,
        f"{tok}_p99_ratio": _r(tok99),
        "itl_stalls_per_min": {k: _r(v) for k, v in it.stalls_per_min.items()},
        "long_prompt_share": _r(long_share, 4),
        "long_prompt_threshold_tokens": it.long_threshold_tokens,
    }
    if p95 is None or p50 is None:
        return Detection(False, 0.0, facts, [cannot(ev, "ttft") or "TTFT histogram in both windows"])
    delta = value(ev, "ttft_p95_delta_s")
    # The tail is worse: TTFT p95 or the per-token p99 up by TAIL_RATIO (and by a time users feel),
    # or decode stalls the baseline did not have (the "output freezes" users report). TTFT p99 is a
    # fact, not a test: over a 20-minute window it rests on a few dozen requests.
    quantile_tail = all_of(
        any_of(at_least(p95, "TAIL_RATIO"), at_least(tok99, "TAIL_RATIO")),
        at_least(delta, "MIN_TAIL_DELTA_S"),
    )
    tail_bad = any_of(quantile_tail, stalls_new(ev))
    missing = [] if long_share is not None else [_prompt_histogram_missing(ev)]
    long_mixed = at_least(long_share, "LONG_PROMPT_SHARE")
    # Without a prompt-length histogram the row still fires (the mechanism is then unmeasured).
    deciding = all_of(tail_bad, long_mixed if long_share is not None else Test(True))
    # ... while the median request is as usual: a confirmatory cut, weighed within its noise
    median_fine = weigh(at_most(p50_judged, "MEDIAN_FINE_RATIO"), deciding)
    # the median judged on the requests not held back rests on what told the prefills take whole steps
    decided = all_of(deciding, median_fine, whole if held_context else Test(True))
    tail_ratio = max(x for x in (p95, tok99) if x is not None)
    strength = T.tail_strength(tail_ratio, bool(long_mixed)) if decided else 0.0
    return Detection(decided.ok, strength, facts, missing, cuts_of(decided))


def _prompt_histogram_missing(ev: Evidence) -> str:
    """What to say when the engine exports no prompt-length histogram: its own flag, if one turns it on."""
    flag = dialects.lacks(ev.serving_engine or "", "prompt_tokens")
    return (
        f"prompt-length histogram ({flag})"
        if flag
        else "prompt-length histogram (vllm:request_prompt_tokens)"
    )


def _chunked_now(ev: Evidence) -> str:
    """How the engine's own settings say chunked prefill is off (SGLang: its chunk size of -1)."""
    if ev.serving_engine == "sglang":
        return "chunked_prefill_size=-1"
    if ev.serving_engine == "trtllm":
        return "no --enable_chunked_prefill"
    return "enable_chunked_prefill=False"


def _stall_words(it: Any) -> str:
    if it.stall_threshold_s is None:  # trtllm-serve: no inter-token histogram (evidence._from_request_times)
        return "the per-request TPOT p99 (no inter-token histogram)"
    return f"ITL stalls >{it.stall_threshold_s:g}s"


def _long_arrivals(it: Any) -> str:
    if it.proxy and it.proxy.startswith("prefill times"):
        return f"long prefills ({it.arrivals_label})"
    if it.long_threshold_tokens is None:  # read through the prompt-token counter (evidence.interference)
        return "the prompt tokens arriving (no prompt-length histogram: its counter)"
    if it.proxy:  # SGLang's prefill batches in its log
        return f"long prefill batches (>{it.long_threshold_tokens:.0f} tok in one step, from SGLang's log)"
    return f"long-prompt (>{it.long_threshold_tokens:g} tok) arrivals"


def verify_tail(ev: Evidence) -> Verification:
    """Do decode stalls follow long-prompt arrivals, on a server that is not saturated? Confirmed by
    their correlation in two-minute bins, or by the mechanism the whole window shows (stalls and long
    prompts both new, chunked prefill off); ruled out when even the top of the correlation's band is
    under its cut."""
    it = ev.interference
    load = value(ev, "request_rate_ratio")
    waiting = value(ev, "waiting_avg")
    kv = value(ev, "kv_max")
    numbers: dict[str, Any] = {
        "corr_long_prompts_vs_itl_stalls": _r(it.correlation),
        "minutes": it.minutes,
        "stall_threshold_s": it.stall_threshold_s,
        "itl_stalls_per_min": {k: _r(v) for k, v in it.stalls_per_min.items()},
        "long_prompt_share": {k: _r(v, 4) for k, v in it.long_share.items()},
        "request_rate_ratio": _r(load),
        "waiting_avg": _r(waiting),
        "kv_cache_usage_max": _r(kv),
        "chunked_prefill": value(ev, "chunked_prefill"),
    }
    if it.correlation is None:
        return Verification(
            "inconclusive",
            cannot(ev, "itl", "prefill")
            or cannot(ev, "itl", "prompt_tokens")
            or "cannot line up long-prompt arrivals with ITL stalls (histograms missing or too few minutes)",
            numbers,
        )
    low, high = value(ev, "corr_band_90")
    numbers["corr_band_90"] = [_r(low), _r(high)]
    # A nearly full KV cache stalls running decodes by preempting them; one that only holds new
    # requests back shows as requests waiting (conditions.kv_saturated).
    numbers["preemptions_per_s"] = _r(value(ev, "preemptions_per_s"), 4)
    busy = saturated(ev)
    follows = at_least(value(ev, "corr_long_vs_stalls"), "CORR_CONFIRM")
    if it.stall_threshold_s is None:
        # TPOT averages a stall over a request's tokens: a TPOT tail that follows long prefills is a
        # stall only on an engine that runs a whole prompt in one step (chunked prefill known off);
        # with chunks, long prompts slow the shared steps a little and every TPOT with them
        follows = all_of(follows, chunked_prefill_off(ev))
    unrelated = below(high, "CORR_RULE_OUT")  # even the top of its band is under the cut
    # The mechanism shown at the window level: stalls and long prompts both appeared against the
    # baseline, on an engine that lets one prefill take a whole step (chunked prefill off).
    mechanism = all_of(stalls_new(ev), long_rose(ev), chunked_prefill_off(ev))
    shown = all_of(mechanism, negate(unrelated))
    # A server not saturated rules out the other cause of stalls: a confirmatory test, weighed within
    # its noise against the line of evidence that holds
    calm = weigh(negate(busy), any_of(follows, shown))
    if unrelated:
        return Verification(
            "ruled_out",
            f"ITL stalls do not follow long-prompt arrivals (r={it.correlation:.2f}, "
            f"at most {high:.2f} at 90 %)",
            numbers,
            cuts_of(unrelated),
        )
    if calm and (follows or mechanism):
        # Either line of evidence suffices, and the verdict rests on the one further from its cuts: a
        # correlation of a dozen bins that barely clears its cut is no reason to doubt a mechanism
        # the whole window shows
        either = any_of(follows, shown)
        decided = all_of(calm, either)
        if follows and all(c in follows.cuts for c in either.cuts):
            why = (
                f"{_stall_words(it)} follow{'s' if it.stall_threshold_s is None else ''} {_long_arrivals(it)} "
                f"in two-minute bins (r={it.correlation:.2f})"
            )
        else:
            si, li = value(ev, "stalls_per_min") or 0.0, value(ev, "long_share") or 0.0
            bins = "" if follows else ", too few bins to say more"
            why = (
                f"ITL stalls >{it.stall_threshold_s:g}s ({si:.1f}/min) appeared with long prompts "
                f"({_long_arrivals(it)}: {li:.2%} of {'batches' if it.proxy else 'requests'}) against a baseline without "
                f"either (two-minute bins: r={it.correlation:.2f}{bins})"
            )
        why += f" while {calm_text(load, waiting, kv)}"
        if kv_high(ev):
            why += " (its peak preempted nothing)"
        if value(ev, "chunked_prefill") is False:
            now = _chunked_now(ev)
            why += f"; the engine runs without chunked prefill ({now}). Fix: "
            why += dialects.knob("chunked_prefill", ev.serving_engine, now) or "enable chunked prefill"
        return Verification("confirmed", why, numbers, cuts_of(decided))
    why = f"{_long_arrivals(it)} and {_stall_words(it)} correlate (r={it.correlation:.2f})"
    if not calm:
        why += " but the server is saturated, which also explains stalls"
        cuts = cuts_of(busy, negate(unrelated))
    elif it.stall_threshold_s is None and value(ev, "chunked_prefill") is not False:
        on = "on" if value(ev, "chunked_prefill") else "not known to be off"
        why += f", but chunked prefill is {on}: without inter-token gaps a slower shared step looks the same"
        cuts = cuts_of(negate(follows), negate(unrelated))
    else:
        why += ", but weakly, and the window does not show the mechanism"
        cuts = cuts_of(negate(follows), negate(mechanism), negate(unrelated))
    return Verification("inconclusive", why, numbers, cuts)


# -- ttft_high_prefill_slow → kv_cache_allocation -----------------------------------------------


def detect_prefill(ev: Evidence) -> Detection:
    """TTFT high (1.5x the baseline, or over its SLO) and prefill slow (its p95 1.5x, or its mean where
    the engine has no prefill histogram)."""
    ttft, prefill = value(ev, "ttft_p95_ratio"), value(ev, "prefill_p95_ratio")
    slo = value(ev, "ttft_slo_s")
    ttft_now = value(ev, "ttft_p95_s")
    facts: dict[str, Any] = {
        "ttft_p95_ratio": _r(ttft),
        "prefill_p95_ratio": _r(prefill),
        "ttft_p95_s": _r(ttft_now),
        "ttft_slo_s": slo,
    }
    if prefill is None and (dialects.lacks(ev.serving_engine or "", "prefill") or lacking(ev, "prefill")):
        # no prefill histogram: the stages' stand-in (SGLang: TTFT less queue time; TGI: its prefill
        # forward passes, analyses.stages) judged on its mean
        prefill = value(ev, "prefill_mean_ratio")
        facts["prefill_p95_ratio"] = None
        facts["prefill_mean_ratio"] = _r(prefill)
        facts["prefill_stand_in"] = "; ".join(ev.stages.stand_ins) or PREFILL_STAND_IN
    if ttft is None and lacking(ev, "ttft") and ev.stages.stand_ins:
        # no TTFT histogram (TGI): the stages' TTFT stand-in (queue + prefill forward), on its mean
        ttft = value(ev, "ttft_mean_ratio")
        facts["ttft_mean_ratio"], facts["ttft_stand_in"] = _r(ttft), "; ".join(ev.stages.stand_ins)
    if ttft is None or prefill is None:
        gap = (
            cannot(ev, "ttft") or cannot(ev, "prefill") or "TTFT and prefill-time histograms in both windows"
        )
        return Detection(False, 0.0, facts, [gap])
    over_slo = above(value(ev, "ttft_p95_slo_ratio"), "SLO_BREACH_RATIO") if slo else ABSENT
    ttft_high = any_of(at_least(ttft, "TTFT_RATIO"), over_slo)
    decided = all_of(ttft_high, at_least(prefill, "PREFILL_RATIO"))
    strength = T.prefill_strength(prefill) if decided else 0.0
    return Detection(decided.ok, strength, facts, cuts=cuts_of(decided))


def verify_prefill(ev: Evidence) -> Verification:
    """Is the first token's time spent in a prefill that KV-cache pressure lengthens (preemptions
    recomputing prompts, prefix-cache hits lost, the cache full)? Ruled out when prefill is under half
    of TTFT, or when the cache is calm."""
    share, queue_share = value(ev, "prefill_share"), value(ev, "queue_share")
    kv = value(ev, "kv_max")
    pre = value(ev, "preemptions_per_s")
    hit_b, hit_i = ev.rate("baseline", "prefix_cache_hit_frac"), ev.rate("incident", "prefix_cache_hit_frac")
    hit_drop = value(ev, "prefix_hit_drop")
    numbers = {
        "prefill_share_of_ttft": _r(share),
        "queue_share_of_ttft": _r(queue_share),
        "kv_cache_usage_max": _r(kv),
        "preemptions_per_s": _r(pre, 4),
        "prefix_cache_hit_frac": {"baseline": _r(hit_b), "incident": _r(hit_i)},
    }
    if share is None or kv is None:
        gap = absent(ev, "kv_cache_usage") if kv is None else "prefill share of TTFT unknown"
        return Verification("inconclusive", gap, numbers)
    elsewhere = below(share, "PREFILL_SHARE_RULE_OUT")
    if elsewhere:
        return Verification(
            "ruled_out",
            f"prefill is only {share:.0%} of TTFT in the typical minute: the first token waits elsewhere (queue)",
            numbers,
            cuts_of(elsewhere),
        )
    hits = at_least(hit_drop, "PREFIX_HIT_DROP")
    preempting = at_least(pre, "PREEMPTIONS_PER_S")
    # A full cache lengthens prefill by preempting (the recompute) or evicting shared prefixes (the
    # hit rate); a peak that did neither, where the engine counts both, slowed no prompt. Where
    # either goes uncounted, the fill is the evidence there is.
    full = kv_saturated(ev) if hit_drop is not None else kv_high(ev)
    pressure = any_of(hits, full, preempting)
    if pressure:
        reasons = []
        if hits:
            reasons.append(
                f"the prefix-cache hit rate fell from {hit_b:.0%} to {hit_i:.0%}, so prompts are recomputed"
            )
        if full:
            reasons.append(f"the KV cache peaks at {kv:.0%}")
        if preempting:
            reasons.append(f"{pre:.3f} preemptions/s recompute prompts")
        return Verification(
            "confirmed",
            f"prefill is {share:.0%} of TTFT and " + "; ".join(reasons),
            numbers,
            cuts_of(negate(elsewhere), pressure),
        )
    calm = below(kv, "KV_CALM_FRAC")
    if calm and hit_drop is None and ev.engine_config.get("prefix_caching", {}).get("value") is not False:
        # a calm cache clears allocation only with the prefix-cache hit rate seen (or prefix caching
        # off): shared prefixes evicted (a cache thrashed by a new prompt mix) slow every prefill with
        # the cache far from full
        unseen = absent(ev, "prefix_cache_hits")
        return Verification(
            "inconclusive",
            f"{unseen}: prefill is slow ({share:.0%} of TTFT) with the KV cache calm (max {kv:.0%}), "
            "and a prefix cache that lost its hits, which does that, is not ruled out",
            numbers,
            cuts_of(negate(elsewhere), negate(pressure), calm),
        )
    if calm:
        return Verification(
            "ruled_out",
            f"prefill is slow ({share:.0%} of TTFT) but the KV cache is calm "
            f"(max {kv:.0%}, no preemptions, prefix hits steady): allocation is not the problem",
            numbers,
            cuts_of(negate(elsewhere), negate(pressure), calm),
        )
    return Verification(
        "inconclusive",
        f"prefill {share:.0%} of TTFT, KV max {kv:.0%}",
        numbers,
        cuts_of(negate(elsewhere), negate(pressure), negate(calm)),
    )


# -- latency_surge_under_load → scheduler_queueing ----------------------------------------------


def detect_load(ev: Evidence) -> Detection:
    """Latency jumps with concurrency: the median request's latency (TTFT, else E2E) doubled."""
    load, conc = value(ev, "request_rate_ratio"), value(ev, "running_ratio")
    waiting = value(ev, "waiting_avg")
    lat = value(ev, "latency_p50_ratio")
    facts = {
        "judged_on": value(ev, "latency_p50_signal"),
        "request_rate_ratio": _r(load),
        "concurrency_ratio": _r(conc),
        "waiting_avg": _r(waiting),
        "ttft_p50_ratio": _r(lat),
    }
    if lat is None:
        return Detection(
            False, 0.0, facts, [cannot(ev, "ttft", "e2e") or "TTFT (or E2E latency) in both windows"]
        )
    # The symptom is the whole distribution jumping (the median doubled). Concurrency rises with any
    # such jump (Little's law: requests in flight = rate x latency), and a 20 % traffic rise is an
    # ordinary evening; neither can tell a surge from a slower server: the queue verification does.
    surge = at_least(lat, "LATENCY_MEDIAN_RATIO")
    strength = T.load_strength(lat) if surge else 0.0
    return Detection(surge.ok, strength, facts, cuts=cuts_of(surge))


def verify_load(ev: Evidence) -> Verification:
    """Do requests wait in the scheduler's queue? Confirmed when queue time is half of TTFT or more
    with a standing queue; ruled out when it is under a fifth."""
    share = value(ev, "queue_share")
    waiting = value(ev, "waiting_avg")
    wmax = value(ev, "waiting_max")
    kv = value(ev, "kv_max")
    numbers = {
        "queue_share_of_ttft": _r(share),
        "waiting_avg": _r(waiting),
        "waiting_max": _r(wmax),
        "kv_cache_usage_max": _r(kv),
        "queue_p95_s": _r(value(ev, "queue_p95_s")),
        "judged_on": {"queue_share": value(ev, "queue_share_basis"), "waiting": value(ev, "waiting_basis")},
    }
    if share is None or waiting is None:
        gaps = [
            g
            for g, lost in ((cannot(ev, "queue"), share is None), (cannot(ev, "waiting"), waiting is None))
            if g and lost
        ]
        return Verification("inconclusive", "; ".join(gaps) or "queue time or queue length unknown", numbers)
    queued = all_of(at_least(share, "QUEUE_SHARE_CONFIRM"), at_least(waiting, "QUEUED_CONFIRM_MIN"))
    if queued:
        why = f"requests wait in the scheduler queue: {share:.0%} of TTFT, {waiting:.0f} waiting on average"
        if kv_high(ev):
            why += f"; the KV cache is at {kv:.0%}, so new requests cannot be admitted (a consequence of the batch)"
        return Verification("confirmed", why, numbers, cuts_of(queued))
    short = below(share, "QUEUE_SHARE_RULE_OUT")
    if short:
        return Verification("ruled_out", f"queue time is only {share:.0%} of TTFT", numbers, cuts_of(short))
    return Verification(
        "inconclusive",
        f"queue is {share:.0%} of TTFT with {waiting:.1f} waiting on average",
        numbers,
        cuts_of(negate(queued), negate(short)),
    )


# -- post_deploy_shift → release_regression ------------------------------------------------------


def _shift_test(x: Shift) -> Test:
    """A degrading shift that starts at a deploy counts for it when it is a real change point, the
    series was still at its baseline level and the shift is still there in the window (release.py
    decides this; recorded here as cuts)."""
    return all_of(
        at_least(x.score, "SHIFT_SCORE"),
        at_least(abs(x.rel_change), "MIN_REL_CHANGE"),
        below(x.drift_before, "PRE_DEPLOY_DRIFT") if x.drift_before is not None else Test(True),
        at_least(x.persisted, "PERSIST_SHARE") if x.persisted is not None else Test(True),
    )


def detect_deploy(ev: Evidence) -> Detection:
    """A metric shifts at a deploy: release correlation found a suspect deploy (a degrading change
    point at it that counts: :func:`_shift_test`)."""
    rel = ev.release
    facts = {"suspect": rel.suspect, "cleared": [c.get("version") or c.get("detail") for c in rel.cleared]}
    if not rel.events and not rel.suspect:  # read and empty: no deploy to blame; not given: a gap
        return Detection(False, 0.0, facts, [] if ev.history_given else ["deploy events (events.csv)"])
    aligned = [x for x in rel.shifts if x.aligned_event and x.degrading and x.score is not None]
    if rel.suspect is None:
        # decided by the shifts that started at a deploy but did not count (none: nothing to cut)
        return Detection(False, 0.0, facts, cuts=cuts_of(any_of(*(_shift_test(x) for x in aligned))))
    s = rel.suspect
    mine = [x for x in aligned if blamed_on(x, s)]
    # A deploy is a suspect while any one of its shifts counts (analyses.release): the outcome is
    # decided by the shift furthest from its cut-offs, not by one that barely passed beside it
    return Detection(
        True,
        T.deploy_strength(s.get("score", 0)),
        facts,
        cuts=cuts_of(any_of(*(_shift_test(x) for x in mine))),
    )


def _near_blamed(rel: ReleaseCorrelation, suspect: dict[str, Any], x: Shift) -> bool:
    """``x`` starts at the suspect deploy, or from one step before it to the alignment tolerance
    (:data:`~perfkit.analyses.release.ALIGN_AFTER_STEPS` steps, at least ``ALIGN_MIN_S``) after the
    last shift the deploy is blamed for."""
    if at_deploy(x, suspect["ts"]):
        return True
    blamed = [y.ts for y in rel.shifts if blamed_on(y, suspect)]
    if not blamed:
        return False
    tolerance = max(T.ALIGN_AFTER_STEPS * rel.step_s, T.ALIGN_MIN_S)
    start = utc(suspect["ts"]) - timedelta(seconds=T.ALIGN_BEFORE_STEPS * rel.step_s)
    return start <= x.ts <= max(blamed) + timedelta(seconds=tolerance)


def _ttft_median_queued(rel: ReleaseCorrelation, suspect: dict[str, Any]) -> Test | None:
    """Whether the TTFT median is the only median the suspect deploy is blamed for, and moved within
    ``MEDIAN_FINE_RATIO`` (None: another median moved, or none did)."""
    medians = [name for name in suspect.get("series", []) if not is_tail(name)]
    if medians != ["TTFT p50"]:
        return None
    moved = [1 + x.rel_change for x in rel.shifts if x.series == "TTFT p50" and at_deploy(x, suspect["ts"])]
    return at_most(max(moved), "MEDIAN_FINE_RATIO") if moved else None


def verify_deploy(ev: Evidence) -> Verification:
    """Is the shift the deploy's? Not while the request rate moved at the same time, nor where only
    tail quantiles moved that long prompts (or a p95's ordinary wander) explain."""
    rel = ev.release
    s = rel.suspect
    numbers: dict[str, Any] = {
        "suspect_version": rel.suspect_version,
        "shifts": [x.as_dict() for x in rel.shifts if x.aligned_event],
        "cleared": rel.cleared,
    }
    if s is None:
        return Verification("ruled_out", "no shift starts at any deploy", numbers)
    # A traffic change at the same minute muddies the blame: a request-rate shift from the deploy to
    # the alignment tolerance after the last shift blamed on it (the rate's change point lags the
    # latency's by the rate window and the rolling median, as a latency's lags the deploy)
    # (a restart's backlog completing is no traffic: evidence._restart_bursts)
    load_shifts = [
        (x, at_least(abs(x.rel_change), "LOAD_SHIFT_AT_DEPLOY"))
        for x in rel.shifts
        if x.series == "requests/s" and _near_blamed(rel, s, x) and iso(x.ts) not in ev.restart_bursts
    ]
    load_shift = next(((x, t) for x, t in load_shifts if t), None)
    if load_shift:
        x, t = load_shift
        return Verification(
            "inconclusive",
            f"{s['version']} lines up with the shift, but request rate moved "
            f"{x.rel_change:+.0%} at the same time",
            numbers,
            cuts_of(t),
        )
    # Only a mean shifted at the deploy (an engine with no latency histogram: Triton's E2E from its
    # counters): a mean moves with a few slow requests (a new tenant's long prompts) as much as with a
    # slower median request, so alone it cannot blame the deploy; with the requests' mix unchanged at
    # the deploy (tokens per request, where the engine counts them) no new mix moved it
    means = [name for name in s.get("series", []) if is_mean(name)]
    if means and len(means) == len(s.get("series", [])):
        d = BY_NAME.get(ev.serving_engine or "")
        engine = d.title if d is not None else "this engine"
        steady = at_most(value(ev, "mix_rise_at_deploy"), "MIX_STEADY")
        moved = ", ".join(f"{k} {v:+.0%}" for k, v in rel.mix.items())
        what = f"{s['version'] or s['detail']} lines up with a shift of {', '.join(means)} only"
        numbers["mix_at_deploy"] = dict(rel.mix)
        if steady:
            return Verification(
                "confirmed",
                f"{', '.join(means)} shifted at the {s['kind']} of {s['version'] or s['detail']} ({s['ts']}) "
                f"while the requests' mix held ({moved}): judged on means, {engine} exports no latency "
                "histogram",
                numbers,
                cuts_of(steady, *(negate(t) for _, t in load_shifts)),
            )
        because = (
            f"the requests' mix moved with it ({moved})"
            if rel.mix
            else "it counts no tokens per request to show the requests' mix held"
        )
        return Verification(
            "inconclusive",
            f"{CANNOT}{engine}: it exports no latency histogram, only means, and {what}: a mean moves with a "
            f"few slow requests as much as with a slower median request, and {because}",
            numbers,
            cuts_of(steady, *(negate(t) for _, t in load_shifts)),
        )
    # Only tail quantiles shifted at the deploy: no median request moved. While long prompts became
    # a real share of the traffic, a tail shift is what they do to everyone batched with them; and a
    # p95 over one-minute windows rests on a handful of requests, so alone it wanders as much on an
    # ordinary afternoon. A regression in the serving path moves the median request too, or shows in
    # the tail of more than one part of a request (prefill, decode, end to end).
    tails = [name for name in s.get("series", []) if is_tail(name)]
    tail_only = len(tails) == len(s.get("series", []))
    mix = long_rose(ev)
    # Without chunked prefill a long prompt's prefill holds back the prefills of the requests that
    # arrive during it, so while long prompts rose the TTFT median moves with the share of requests
    # caught behind one: within the interference row's "P50 fine" that move is theirs as well
    queued = _ttft_median_queued(rel, s) if mix and not tail_only else None
    views = tail_views(tails)
    corroborated = above(len(views), "DEPLOY_TAIL_VIEWS")
    what = f"{s['version'] or s['detail']} lines up with a shift of {', '.join(s['series'])} only"
    if mix and (tail_only or queued):
        share = ev.interference.long_share
        median = (
            "no median moved at the deploy"
            if tail_only or queued is None
            else f"the TTFT median moved {queued.cuts[0].value:.2f}x, within the {T.MEDIAN_FINE_RATIO:g}x that "
            "prefills queued behind long ones give, and no other median moved"
        )
        return Verification(
            "inconclusive",
            f"{what}, and long prompts went from {share.get('baseline') or 0:.2%} to "
            f"{share.get('incident') or 0:.2%} of requests in the window: a tail shift is what long "
            f"prompts do; {median}",
            numbers,
            cuts_of(mix, *([queued] if queued is not None else [])),
        )
    if tail_only and not corroborated:
        return Verification(
            "inconclusive",
            f"{what}: the {' and '.join(sorted(views))} tail of one-minute windows alone, with no median "
            "moved, is within what a p95 of a few requests a minute wanders on an ordinary day",
            numbers,
            cuts_of(negate(mix), corroborated),
        )
    cleared = ", ".join(c.get("version") or c.get("detail") or "?" for c in rel.cleared)
    why = f"{', '.join(s['series'])} shifted at the {s['kind']} of {s['version'] or s['detail']} ({s['ts']})"
    if cleared:
        why += f"; cleared: {cleared}"
    tail_tests = (negate(mix), corroborated) if tail_only else (negate(queued),) if queued is not None else ()
    return Verification("confirmed", why, numbers, cuts_of(*(negate(t) for _, t in load_shifts), *tail_tests))
