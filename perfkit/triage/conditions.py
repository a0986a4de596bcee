"""The named conditions several triage rows share, each defined once on the named quantities
(:mod:`perfkit.triage.quantities`) and the thresholds (:mod:`perfkit.triage.thresholds`).

A condition is a :class:`~perfkit.triage.row_types.Test`: its truth and the cuts it hung on. Two rows
that ask "is the KV cache full?" ask it here, so they cannot answer differently.
"""

from __future__ import annotations

from perfkit.triage.evidence import Evidence
from perfkit.triage.quantities import value
from perfkit.triage.row_types import Test, all_of, any_of, at_least

#: the yes/no facts a row's verdict may depend on, recorded with the verdict (a row declares the ones
#: it reads in :attr:`~perfkit.triage.row_types.Row.preconditions`)
PRECONDITIONS: dict[str, str] = {
    "chunked_prefill_off": "the engine runs a whole prompt's prefill in one step: chunked prefill is off, "
    "by the engine's own settings",
}


def stalls_new(ev: Evidence) -> Test:
    """Decode stalls (inter-token gaps past the stall threshold) frequent, and new against the baseline."""
    return all_of(
        at_least(value(ev, "stalls_per_min"), "STALLS_PER_MIN"),
        at_least(value(ev, "stall_rise"), "STALL_RISE"),
    )


def long_rose(ev: Evidence) -> Test:
    """Long prompts a real share of the traffic, and more of it than in the baseline (where the
    baseline's share is known)."""
    mixed = at_least(value(ev, "long_share"), "LONG_PROMPT_SHARE")
    if value(ev, "long_share_baseline") is None:
        return mixed
    return all_of(mixed, at_least(value(ev, "long_share_rise"), "LONG_SHARE_RISE"))


def kv_high(ev: Evidence) -> Test:
    """The KV cache's water level: its peak (outside restart backlogs) at or past ``KV_FULL_FRAC``,
    where vLLM starts preempting. A level, not yet a cause: see :func:`kv_saturated`."""
    return at_least(value(ev, "kv_max"), "KV_FULL_FRAC")


def kv_saturated(ev: Evidence) -> Test:
    """The KV cache full enough to stall running requests: high (:func:`kv_high`) and, where the
    engine counts preemptions, preempting. A peak that preempted nothing (a few long prompts at once)
    stalled no decode; where preemptions go uncounted, the level is the evidence there is."""
    high = kv_high(ev)
    pre = value(ev, "preemptions_per_s")
    return high if pre is None else all_of(high, at_least(pre, "PREEMPTIONS_PER_S"))


def saturated(ev: Evidence) -> Test:
    """The server saturated, which by itself stalls and queues requests: a standing queue, offered load
    up, or the KV cache saturated (:func:`kv_saturated`)."""
    return any_of(
        at_least(value(ev, "waiting_avg"), "QUEUED_AVG"),
        at_least(value(ev, "request_rate_ratio"), "LOAD_RATIO"),
        kv_saturated(ev),
    )
