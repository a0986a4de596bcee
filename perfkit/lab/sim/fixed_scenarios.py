"""After-fix scenarios: the seed's cases as they run once the fix is in (issue 11 item 4).

Each is its incident's spec with the fix applied and the same traffic (same seed, same phases), so
``perfkit compare INCIDENT AFTER`` puts the incident window beside the same traffic served by the
fixed engine. They are healthy controls for triage (answer direction ``none``): nothing may be
confirmed on them. Listed with the incidents they fix in :data:`perfkit.lab.sim.catalog.SCENARIOS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from perfkit.lab.sim.model import Release, ScenarioSpec
from perfkit.lab.sim.scenarios import LLAMA70B_TP4, p95_prefill_interference, release_regression

CHUNKED_FLAGS = "--enable-chunked-prefill --max-num-batched-tokens 2048 --long-prefill-token-threshold 512"
"""The fix the §5.3 answer key names (vLLM's engine arguments, ``vllm/engine/arg_utils.py``)."""


def p95_prefill_interference_chunked() -> ScenarioSpec:
    """The seed's §5.3 case with chunked prefill on from the start: the same chat traffic and the same
    docs-assistant tenant's long prompts from 01:50, each prompt prefilled in chunks of at most 512
    tokens a step inside a 2048-token step budget, so running decodes are never stalled for a whole
    26k-token prefill (the seed: "P95 from 3.5 s to 1.2 s, total throughput slightly up")."""
    before = p95_prefill_interference()
    return replace(
        before,
        id="p95-prefill-interference-chunked",
        title="Chat latency after enabling chunked prefill",
        brief="A config change went out on chat-api last night; the on-call wants to know whether the chat tail is where it should be.",
        engine=replace(
            before.engine,
            chunked_prefill=True,
            max_num_batched_tokens=2048,
            long_prefill_token_threshold=512,
        ),
        notes=((60, "config", f"vLLM restarted with {CHUNKED_FLAGS}"), *before.notes),
        difficulty="easy",
        answer={
            "direction": "none",
            "symptom": None,
            "suspect_version": None,
            "evidence": [
                "P95 TTFT stays near the baseline although long prompts arrive from 01:50",
                "the engine runs with enable_chunked_prefill=True and a 512-token per-request chunk",
            ],
            "fix": "nothing to fix: compare with p95-prefill-interference to see the fix work",
        },
    )


ROLLBACK_AT_S = 3720
"""Seven minutes after v2.4.0 went out (3300 s): the time a paged on-call takes to see the shift on
the dashboard and run the rollback; the incident window starts 5 minutes later, after the restart."""


def release_regression_rolled_back() -> ScenarioSpec:
    """``release-regression`` with v2.4.0 rolled back to v2.3.1 seven minutes after it went out: the
    decode step returns to its old cost (CUDA graphs captured again), and the window after the
    rollback serves the same traffic at the baseline's token latency. v2.4.1 never ships."""
    before = release_regression()
    bad = next(r for r in before.releases if r.version == "v2.4.0")
    restored = {k: float(getattr(LLAMA70B_TP4, k)) for k in bad.engine_changes}
    releases = (
        *(r for r in before.releases if r.at_s <= bad.at_s),
        Release(ROLLBACK_AT_S, "v2.3.1", "rollback of v2.4.0 (token latency up)", engine_changes=restored),
    )
    return replace(
        before,
        id="release-regression-rolled-back",
        title="Token latency after rolling back v2.4.0",
        brief="v2.4.0 was rolled back to v2.3.1 after streaming slowed down; is token latency back to normal?",
        window=(ROLLBACK_AT_S + 300, before.window[1]),
        releases=releases,
        difficulty="easy",
        answer={
            "direction": "none",
            "symptom": None,
            "suspect_version": None,
            "evidence": [
                "token latency (ITL, vLLM 0.8.5's time_per_output_token) back at the baseline's level after the rollback",
                "traffic, prompt mix and KV usage as in the baseline",
            ],
            "fix": "nothing to fix: compare with release-regression to see the rollback work",
        },
    )


AFTER_FIX: dict[str, Callable[[], ScenarioSpec]] = {
    "p95-prefill-interference-chunked": p95_prefill_interference_chunked,
    "release-regression-rolled-back": release_regression_rolled_back,
}
"""The after-fix scenarios by id, and the incident each one fixes (:data:`FIXES`)."""

FIXES = {
    "p95-prefill-interference-chunked": "p95-prefill-interference",
    "release-regression-rolled-back": "release-regression",
}
