"""The named conditions several triage rows share, each defined once on the named quantities
(:mod:`perfkit.triage.quantities`) and the thresholds (:mod:`perfkit.triage.thresholds`).

A condition is a :class:`~perfkit.triage.row_types.Test`: its truth and the cuts it hung on. Two rows
that ask "is the KV cache full?" ask it here, so they cannot answer differently.
"""

from __future__ import annotations

from perfkit.triage.evidence import Evidence
from perfkit.triage.quantities import value
from perfkit.triage.row_types import Gate, Test, all_of, any_of, at_least

#: the yes/no facts a row's verdict may depend on, recorded with the verdict (a row declares the ones
#: it reads in :attr:`~perfkit.triage.row_types.Row.preconditions`)
PRECONDITIONS: dict[str, str] = {
    "chunked_prefill_off": "chunked prefill is off, by the engine's own settings (its start-up lines, "
    "its info metric, its command line): a whole prompt's prefill takes whole engine steps",
    "whole_prompt_prefills": "long prompts' prefills take whole engine steps: chunked prefill known off, "
    "or, where the engine's settings are unknown, new decode stalls (ten times the usual inter-token gap) "
    "that follow long-prompt arrivals (r at or past CORR_CONFIRM), which only a prefill that holds the "
    "whole step leaves",
}


def precondition(ev: Evidence, name: str, holds: bool | None, how: str) -> Test:
    """A yes/no fact, recorded on the evidence for the row that asked (``Evidence.gate_log``, which the
    table keeps with the row's verdict): true only when it holds."""
    if name not in PRECONDITIONS:
        raise KeyError(f"perfkit.triage.conditions has no precondition {name!r}")
    log = getattr(ev, "gate_log", None)
    gate = Gate(name, holds, how)
    if log is not None and gate not in log:
        log.append(gate)
    return Test(holds is True)


def chunked_prefill_off(ev: Evidence) -> Test:
    """Chunked prefill off by the engine's own settings (unknown is not off)."""
    on = value(ev, "chunked_prefill")
    how = (
        "unknown: no engine setting read" if on is None else f"enable_chunked_prefill={on} (engine settings)"
    )
    return precondition(ev, "chunked_prefill_off", None if on is None else on is False, how)


def whole_prompt_prefills(ev: Evidence) -> Test:
    """Long prompts' prefills take whole engine steps (:data:`PRECONDITIONS`): then they hold back
    every request that arrives during them, and the TTFT median moves with the share held back.

    Known from the engine's settings where they were read (the test then carries no cut). Where they
    were not: decode stalls that are new (:func:`stalls_new`: gaps of 10x the median inter-token time
    and more, frequent, and 3x the baseline's) and follow long-prompt arrivals (their correlation at
    least ``CORR_CONFIRM``) are what a prefill that holds the whole step does; a chunked prefill bounds
    every step by its token budget (2,048 tokens take a fraction of a second), so it leaves no gap ten
    times the usual one behind each long prompt. Told that way, the test carries the stalls' and the
    correlation's cuts, so a reading near them shows in the verdict's margin."""
    on = value(ev, "chunked_prefill")
    if on is not None:
        return precondition(
            ev, "whole_prompt_prefills", on is False, f"enable_chunked_prefill={on} (engine settings)"
        )
    r = value(ev, "corr_long_vs_stalls")
    tracked = all_of(stalls_new(ev), at_least(r, "CORR_CONFIRM"))
    how = "engine settings unknown; " + (
        f"new stalls follow long prompts (r={r:.2f})"
        if tracked
        else "no new stalls that follow long prompts" + (f" (r={r:.2f})" if r is not None else "")
    )
    precondition(ev, "whole_prompt_prefills", True if tracked else None, how)
    return tracked  # told by the evidence: its cuts go with what it decides


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
