"""The decode row (perfkit/triage/decode_row.py): a slower token is a less efficient decode only at
the same offered work. Longer prompts at the same request rate put more prefill work in the steps
(issue 27: a healthy window after chunked prefill was enabled, with a long-prompt tenant arriving,
was confirmed as a decode problem)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from perfkit.triage.decode_row import _verify_tpot


def evidence(tpot: float, prompt: float, requests: float = 1.0) -> SimpleNamespace:
    """Evidence with TPOT p50 ``tpot``x its baseline and ``prompt``x the prompt tokens per second."""
    quantiles = {("baseline", "tpot", 0.5): 0.020, ("incident", "tpot", 0.5): 0.020 * tpot}
    rates = {
        ("baseline", "requests_per_s"): 4.0,
        ("incident", "requests_per_s"): 4.0 * requests,
        ("baseline", "generated_tokens_per_s"): 800.0,
        ("incident", "generated_tokens_per_s"): 800.0 * requests,
        ("baseline", "running_avg"): 20.0,
        ("incident", "running_avg"): 20.0 * tpot,
        ("baseline", "prompt_tokens_per_s"): 4000.0,
        ("incident", "prompt_tokens_per_s"): 4000.0 * prompt,
    }
    ev = SimpleNamespace(per_token=lambda: "tpot", kv_max=lambda: 0.5, serving_engine="vllm")
    ev.q = lambda side, signal, q: quantiles.get((side, signal, q))
    ev.ratio = lambda signal, q: ev.q("incident", signal, q) / ev.q("baseline", signal, q)
    ev.rate = lambda side, name: rates.get((side, name))
    ev.rate_ratio = lambda name: ev.rate("incident", name) / ev.rate("baseline", name)
    return ev


@pytest.mark.parametrize(
    ("tpot", "prompt", "verdict"),
    [
        (2.0, 1.05, "confirmed"),  # a throttled GPU: the same work, twice the time
        (1.35, 1.34, "inconclusive"),  # longer prompts: more prefill in every step
        (1.1, 1.5, "ruled_out"),  # the token is not slower
    ],
)
def test_slower_tokens_with_more_prefill_work_are_not_a_decode_problem(tpot, prompt, verdict):
    out = _verify_tpot(evidence(tpot, prompt))
    assert out.verdict == verdict, out.why
    assert out.numbers["prompt_tokens_ratio"] == pytest.approx(prompt, rel=1e-3)
    if verdict == "inconclusive":
        assert "prompt tokens per second rose 1.34x" in out.why
        assert {c.name for c in out.cuts} >= {"PROMPT_LOAD_RATIO", "TPOT_MEDIAN_RATIO"}


def test_without_prompt_token_counters_a_slower_decode_still_confirms():
    ev = evidence(2.0, 1.0)
    rate = ev.rate
    ev.rate = lambda side, name: None if name == "prompt_tokens_per_s" else rate(side, name)
    ev.rate_ratio = lambda name: (
        None if name == "prompt_tokens_per_s" else rate("incident", name) / rate("baseline", name)
    )
    out = _verify_tpot(ev)
    assert out.verdict == "confirmed" and out.numbers["prompt_tokens_ratio"] is None


def test_a_token_slower_per_unit_of_offered_work_is_the_same_work_run_slower():
    """Issue 27: prompt tokens 1.16x and requests 1.11x explain at most 1.16x; a median token 2.08x as
    long is 1.8x per unit of work (a throttled GPU at seed 1339400151): confirmed, not 'leading' on
    how close the prompt ratio came to its own cut."""
    out = _verify_tpot(evidence(2.08, 1.157, requests=1.113))
    assert out.verdict == "confirmed", out.why
    assert out.numbers["tpot_per_offered_work_ratio"] == pytest.approx(2.08 / 1.157, rel=1e-3)
    assert "PROMPT_LOAD_RATIO" not in {c.name for c in out.cuts}


def test_a_slower_token_beside_a_saturated_kv_cache_is_not_confirmed_a_slower_decode():
    """Issue 35: a KV cache full enough to preempt slows every token at the same offered work (the
    preempted requests wait and recompute); on an engine without preemption counts, its fill alone."""
    ev = evidence(2.0, 1.0)
    ev.kv_max = lambda: 0.96
    ev.serving_engine = "tgi"  # TGI: a KV fill, no preemption counter
    out = _verify_tpot(ev)
    assert out.verdict == "inconclusive" and "the KV cache peaked at 96%" in out.why, out.why
    assert "KV_FULL_FRAC" in {c.name for c in out.cuts}
    ev = evidence(2.0, 1.0)
    ev.kv_max, ev.serving_engine = (lambda: 0.5), "tgi"  # room in the cache: the same work runs slower
    assert _verify_tpot(ev).verdict == "confirmed"


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ("dynamo", "cannot check on NVIDIA Dynamo (frontend): the Dynamo frontend exports no KV usage"),
        ("vllm", "no KV-cache usage in the evidence"),  # exports it, but this window holds none
    ],
)
def test_evidence_without_the_kv_cache_cannot_rule_its_pressure_out(engine, said):
    ev = evidence(2.0, 1.0)
    ev.kv_max, ev.serving_engine = (lambda: None), engine
    out = _verify_tpot(ev)
    assert out.verdict == "inconclusive" and said in out.why, out.why
    assert "so a full KV cache is not ruled out" in out.why
