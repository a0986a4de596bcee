"""Issue 26: speculative decoding's acceptance read in triage (vLLM's ``vllm:spec_decode_*`` counters,
vllm/v1/spec_decode/metrics.py). A client that raises its sampling temperature, or a weaker draft
model, makes fewer draft tokens accepted: every verification step then emits fewer tokens, and the
per-request TPOT rises at the same load while the step (and ITL) stays as it was. The decode row
names that cause, and says when acceptance held and so is not it.

The bundles are simulated (perfkit/lab/sim) with speculative decoding on: each decoding sequence
drafts ``spec_tokens`` tokens per step and each is accepted with probability ``spec_acceptance``
until the first rejection, so a step emits 1 + A tokens, E[A] = a + a^2 + ... + a^k.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from perfkit.engine.local import LocalEngine
from perfkit.lab.sim.bundle import generate
from perfkit.lab.sim.model import Release
from perfkit.lab.sim.scenarios import QWEN32B_TP2, _short
from perfkit.sources.bundle import load_bundle
from perfkit.triage.evidence import gather
from perfkit.triage.table import run

K = 3
BEFORE, AFTER = 0.8, 0.45


def expected_accepted(a: float, k: int = K) -> float:
    """Mean accepted draft tokens per draft: P(the first j all accepted) summed over j."""
    return sum(a**j for j in range(1, k + 1))


def spec(change: dict[str, float], seed: int = 20261203):
    engine = replace(
        QWEN32B_TP2, spec_tokens=K, spec_acceptance=BEFORE, draft_overhead_s=0.0015, draft_s_per_seq=0.00002
    )
    return _short(
        id="spec-decode-acceptance",
        title="Streaming slower for one tenant's traffic",
        brief="Replies stream more slowly since the afternoon; no release today.",
        start=datetime(2026, 11, 20, 14, 0, tzinfo=UTC),
        seed=seed,
        base_rps=3.0,
        engine=engine,
        initial_version="v6.0.0",
        releases=(
            Release(1200, "v6.0.0", "nobody announced it", kind="", restart=False, engine_changes=change),
        ),
        notes=((1190, "note", "tenant writer-app switched its requests to temperature 1.0"),),
    )


def triage(tmp_path, change):
    out = tmp_path / "b"
    generate(spec(change), out)
    b = load_bundle(out)
    ev = gather(LocalEngine(b.store), b.incident, events=b.events, logs=b.logs)
    return ev, run(ev)


@pytest.fixture(scope="module")
def dropped(tmp_path_factory):
    return triage(tmp_path_factory.mktemp("drop"), {"spec_acceptance": AFTER})


def test_the_counters_give_the_acceptance_the_simulator_drew(dropped):
    ev, _ = dropped
    for side, a in (("baseline", BEFORE), ("incident", AFTER)):
        # vLLM's acceptance rate: accepted / drafted tokens = E[A] / k
        assert ev.rate(side, "spec_acceptance_rate") == pytest.approx(expected_accepted(a) / K, rel=0.05)
        assert ev.rate(side, "spec_tokens_per_draft") == pytest.approx(K, rel=1e-6)


def test_an_acceptance_drop_is_named_as_the_decode_rows_cause(dropped):
    ev, result = dropped
    decode = next(r for r in result.results if r.row.direction == "decode_efficiency")
    assert decode.verification.verdict == "confirmed", decode.verification.why
    assert result.confirmed()[0].row.direction == "decode_efficiency"
    spec_numbers = decode.verification.numbers["spec_decode"]
    # the slowdown acceptance alone explains: tokens per step before / after, (1 + E[A]) each
    physics = (1 + expected_accepted(BEFORE)) / (1 + expected_accepted(AFTER))
    assert spec_numbers["expected_tpot_ratio"] == pytest.approx(physics, rel=0.06)
    observed = ev.ratio("tpot", 0.5)
    # the TPOT the bundle shows moved at least as much (more: requests stay longer, the batch grows,
    # and each step verifies more sequences' drafts)
    assert observed >= 0.9 * physics
    why = decode.verification.why
    assert "acceptance fell" in why and "num_speculative_tokens" in why


def test_held_acceptance_is_not_blamed_for_a_slower_gpu(tmp_path):
    ev, result = triage(
        tmp_path, {"decode_s_per_seq": 0.00034, "overhead_s": 0.02, "draft_overhead_s": 0.003}
    )
    decode = next(r for r in result.results if r.row.direction == "decode_efficiency")
    assert decode.verification.verdict == "confirmed", decode.verification.why
    assert "acceptance held" in decode.verification.why
    assert decode.verification.numbers["spec_decode"]["expected_tpot_ratio"] == pytest.approx(1.0, abs=0.08)


def test_unchanged_acceptance_confirms_nothing(tmp_path):
    _, result = triage(tmp_path, {})
    assert result.confirmed() == [], [(r.row.direction, r.verification.why) for r in result.confirmed()]
