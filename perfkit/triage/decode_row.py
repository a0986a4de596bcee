"""The decode row of the triage table (docs/bundle.md): TPOT high, output stutters → decode efficiency.

A token takes longer when each engine step does more work (more sequences in the batch, more prompt
tokens prefilled in the same steps) or when the same work runs slower (a throttled or degraded GPU, a
config that lost CUDA graphs or a quantized kernel). The verification separates the two: only a
slowdown at the same offered work is a less efficient decode. Decode's share of its HBM roofline is
reported beside the verdict (no verdict hangs on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfkit.analyses.roofline import SERVING_RATES, describe, lookup, serving_roofline
from perfkit.errors import ConfigError
from perfkit.triage import thresholds as T
from perfkit.triage.conditions import kv_saturated
from perfkit.triage.evidence import Evidence
from perfkit.triage.gaps import absent, cannot
from perfkit.triage.quantities import value
from perfkit.triage.row_types import (
    NO_GPU_COUNT,
    Detection,
    Test,
    Verification,
    _r,
    at_least,
    cuts_of,
    negate,
)

# -- tpot_high → decode_efficiency ------------------------------------------------------------


def detect_tpot(ev: Evidence) -> Detection:
    """TPOT high: the median token (TPOT, else ITL) 25 % slower than in the baseline."""
    tok = value(ev, "per_token")
    p50, p95 = value(ev, "per_token_p50_ratio"), value(ev, "per_token_p95_ratio")
    facts = {"per_token_signal": tok, f"{tok}_p50_ratio": _r(p50), f"{tok}_p95_ratio": _r(p95)}
    if p50 is None:
        return Detection(
            False, 0.0, facts, [cannot(ev, "tpot", "itl") or "TPOT/ITL histogram in both windows"]
        )
    slower = at_least(p50, "TPOT_MEDIAN_RATIO")
    strength = T.tpot_strength(p50) if slower else 0.0
    return Detection(slower.ok, strength, facts, cuts=cuts_of(slower))


def _decode_share(ev: Evidence) -> tuple[str, dict[str, Any]]:
    """Decode's share of its HBM roofline in each window (analyses/roofline.py); tp = the GPU count."""
    spec, gpu, why_not = lookup(ev.incident.model, ev.incident.hardware.gpu)
    if spec is None or gpu is None:
        return "", {"unavailable": why_not}
    if not ev.incident.hardware.count_known:
        return "", {"unavailable": NO_GPU_COUNT}
    tp, tok = ev.incident.hardware.count, ev.per_token()
    try:
        sides = {
            side: serving_roofline(
                spec,
                gpu,
                tp,
                running=ev.rate(side, "running_avg"),
                tpot_s=ev.q(side, tok, 0.5),
                **{k: ev.rate(side, k) for k in SERVING_RATES},
            )
            for side in ("baseline", "incident")
        }
    except ConfigError as exc:
        return "", {"unavailable": str(exc)}
    numbers = {"tp_assumed": tp, **{s: r.as_dict() for s, r in sides.items() if r is not None}}
    now = sides["incident"]
    return (describe(now, sides["baseline"], "tp assumed = the GPU count") if now else ""), numbers


def verify_tpot(ev: Evidence) -> Verification:
    """The decode row's verdict (:func:`_verify_tpot`), with decode's share of its roofline added to
    the numbers and the why (reported only: no verdict hangs on it)."""
    out = _verify_tpot(ev)
    text, numbers = _decode_share(ev)
    out.numbers["decode_roofline"] = numbers
    if text:
        out.why += f"; {text}"
    return out


@dataclass(frozen=True)
class _Speculation:
    """Speculative decoding's acceptance in both windows (:func:`perfkit.analyses.baseline.side_numbers`)."""

    numbers: dict[str, Any]
    fell: Test  # the drop in tokens per step alone slows a token as much as the row's own cut
    text: str
    k: float | None


def _speculation(ev: Evidence) -> _Speculation | None:
    """Tokens a verification step emits, 1 + accepted draft tokens per draft: at the same step time a
    token takes 1/that, so the baseline's over the incident's is the TPOT ratio acceptance alone
    explains. None where the engine does not draft (no ``spec_decode`` counters in both windows)."""
    rate = {s: ev.rate(s, "spec_acceptance_rate") for s in ("baseline", "incident")}
    if None in rate.values():
        return None
    length = {s: ev.rate(s, "spec_accept_length") for s in ("baseline", "incident")}
    k = ev.rate("incident", "spec_tokens_per_draft")
    lb, li = length["baseline"], length["incident"]
    expected = value(ev, "spec_expected_tpot_ratio")
    numbers = {
        "acceptance_rate": {s: _r(v, 4) for s, v in rate.items()},
        "accept_length": {s: _r(v, 3) for s, v in length.items()},
        "tokens_per_draft": _r(k, 3),
        "expected_tpot_ratio": _r(expected, 4),
    }
    moved = f"{100 * rate['baseline']:.0f}% to {100 * rate['incident']:.0f}%"  # type: ignore[operator]
    if expected is None:
        return _Speculation(
            numbers,
            Test(False),
            f"speculative decoding's draft acceptance went from {moved} (no drafts counter: the "
            "tokens per step, and so what acceptance alone explains, are unknown)",
            k,
        )
    fell = at_least(expected, "TPOT_MEDIAN_RATIO")
    steps = f"mean acceptance length {lb:.2f} to {li:.2f} tokens a step"
    verb = "fell" if fell else "held"
    return _Speculation(
        numbers,
        fell,
        f"speculative decoding's draft acceptance {verb} ({moved}, {steps}; that alone makes a token "
        f"{expected:.2f}x as long)",
        k,
    )


def _verify_tpot(ev: Evidence) -> Verification:
    tok = value(ev, "per_token")
    p50 = value(ev, "per_token_p50_ratio")
    # Offered decode load: more requests, or more tokens asked per request, both grow the batch.
    rate = value(ev, "request_rate_ratio")
    tokens = value(ev, "generated_tokens_ratio")
    load = value(ev, "offered_load_ratio")
    batch = value(ev, "running_ratio")
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
    slower = at_least(p50, "TPOT_MEDIAN_RATIO")
    spec = _speculation(ev)
    if spec is not None:
        numbers["spec_decode"] = spec.numbers
        if slower and spec.fell:
            return Verification(
                "confirmed",
                f"the median token takes {p50:.2f}x as long and {spec.text}: fewer tokens come out of "
                "each verification step, so each takes longer however fast the step runs. Revert what "
                "changed the drafts' agreement (a draft-model swap, a sampling change such as a higher "
                "temperature, a new prompt mix), or lower num_speculative_tokens"
                f"{f' (now {spec.k:.0f})' if spec.k else ''} or turn speculation off for that traffic "
                "while acceptance stays low",
                numbers,
                cuts_of(slower, spec.fell),
            )
    more_load = at_least(load, "LOAD_RATIO")
    if more_load:
        return Verification(
            "ruled_out",
            f"offered load (requests or generated tokens per second) rose {load:.2f}x and the batch "
            f"{batch or 0:.2f}x: the "
            "slower tokens are the cost of a bigger batch, not a less efficient decode",
            numbers,
            cuts_of(more_load),
        )
    prompt = value(ev, "prompt_tokens_ratio")
    numbers["prompt_tokens_ratio"] = _r(prompt)
    more_prefill = at_least(prompt, "PROMPT_LOAD_RATIO") if prompt is not None else Test(False)
    # More work in each step (requests, generated or prompt tokens per second) lengthens a token at
    # most in proportion; a token slower than that per unit of offered work is the same work run slower.
    work = max(x for x in (load, prompt) if x is not None)
    per_work = p50 / work
    numbers["tpot_per_offered_work_ratio"] = _r(per_work)
    beyond = at_least(per_work, "TPOT_MEDIAN_RATIO")
    # A KV cache full enough to preempt slows every token at the same offered work too (preempted
    # requests wait and recompute): a less efficient decode is confirmed only where that is ruled out
    full = kv_saturated(ev)
    numbers["kv_cache_usage_max"] = _r(value(ev, "kv_max"))
    numbers["preemptions_per_s"] = _r(value(ev, "preemptions_per_s"), 4)
    unseen = value(ev, "kv_max") is None
    if slower and (full or unseen):
        slowed = f"the median token takes {p50:.2f}x as long at {work:.2f}x the offered work"
        why = (
            f"{slowed}, but the KV cache peaked at {value(ev, 'kv_max'):.0%}"
            if full
            else f"{absent(ev, 'kv_cache_usage')}, so a full KV cache is not ruled out: {slowed}"
        )
        return Verification(
            "inconclusive",
            f"{why}; requests preempted or held back by a full cache wait and recompute, so every token "
            "takes longer, and a less efficient decode cannot be told apart from it",
            numbers,
            cuts_of(negate(more_load), slower, full),
        )
    if slower and beyond:
        held = f"; {spec.text}: not the cause" if spec is not None else ""
        return Verification(
            "confirmed",
            f"the median token takes {p50:.2f}x as long while the offered work "
            + (
                f"rose at most {work:.2f}x "
                if work > 1
                else f"was at most {work:.2f}x the baseline's (it did not rise) "
            )
            + f"(requests, generated and prompt tokens per second): {per_work:.2f}x per unit of work, more "
            "than a bigger batch or more prefill in the steps can explain; the same work runs slower"
            f"{held}",
            numbers,
            cuts_of(negate(more_load), slower, beyond, negate(full)),
        )
    if slower and more_prefill:
        return Verification(
            "inconclusive",
            f"the median token takes {p50:.2f}x as long at the same request rate, but prompt tokens "
            f"per second rose {prompt:.2f}x (longer prompts): each step carries more prefill work, so "
            "every token waits longer; a less efficient decode cannot be told apart from it",
            numbers,
            cuts_of(negate(more_load), slower, more_prefill),
        )
    if slower:
        held = f"; {spec.text}: not the cause" if spec is not None else ""
        return Verification(
            "confirmed",
            f"at the same offered load ({load:.2f}x) the median token takes "
            f"{p50:.2f}x as long; the batch grew {batch or 0:.2f}x only because requests stay "
            f"longer (Little's law){held}",
            numbers,
            cuts_of(negate(more_load), slower, negate(more_prefill), negate(full)),
        )
    return Verification(
        "ruled_out",
        f"median {tok} within {p50:.2f}x of the baseline",
        numbers,
        cuts_of(negate(more_load), slower),
    )
