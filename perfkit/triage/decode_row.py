"""The decode row of the triage table (docs/bundle.md): TPOT high, output stutters → decode efficiency.

A token takes longer when each engine step does more work (more sequences in the batch, more prompt
tokens prefilled in the same steps) or when the same work runs slower (a throttled or degraded GPU, a
config that lost CUDA graphs or a quantized kernel). The verification separates the two: only a
slowdown at the same offered work is a less efficient decode. Decode's share of its HBM roofline is
reported beside the verdict (no verdict hangs on it).
"""

from __future__ import annotations

from typing import Any

from perfkit.analyses.roofline import SERVING_RATES, describe, lookup, serving_roofline
from perfkit.errors import ConfigError
from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence
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
    tok = ev.per_token()
    p50, p95 = ev.ratio(tok, 0.5), ev.ratio(tok, 0.95)
    facts = {"per_token_signal": tok, f"{tok}_p50_ratio": _r(p50), f"{tok}_p95_ratio": _r(p95)}
    if p50 is None:
        return Detection(False, 0.0, facts, ["TPOT/ITL histogram in both windows"])
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


def _verify_tpot(ev: Evidence) -> Verification:
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
    slower = at_least(p50, "TPOT_MEDIAN_RATIO")
    prompt = ev.rate_ratio("prompt_tokens_per_s")
    numbers["prompt_tokens_ratio"] = _r(prompt)
    more_prefill = at_least(prompt, "PROMPT_LOAD_RATIO") if prompt is not None else Test(False)
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
        return Verification(
            "confirmed",
            f"at the same offered load ({load:.2f}x) the median token takes "
            f"{p50:.2f}x as long; the batch grew {batch or 0:.2f}x only because requests stay "
            "longer (Little's law)",
            numbers,
            cuts_of(negate(more_load), slower, negate(more_prefill)),
        )
    return Verification(
        "ruled_out",
        f"median {tok} within {p50:.2f}x of the baseline",
        numbers,
        cuts_of(negate(more_load), slower),
    )
