"""Issue 35: rows on every engine's signals. Embedded incidents told by engines that lack a row's
preferred signal (Hugging Face TGI: no TTFT or inter-token histogram; Dynamo's frontend alone: no
queue-time histogram, no KV usage, no engine log): each row falls back to what the engine exports and
says which signal it judged on, or says it cannot check and why; nothing is confirmed that the
evidence cannot tell apart, and a serving incident never ranks a training row first."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfkit.app.runner.embedded import base_specs
from perfkit.lab.sim.bundle import generate
from perfkit.triage.table import triage_bundle

pytestmark = pytest.mark.slow


def told(tmp_path_factory, scenario: str, dialect: str, seed: int | None = None):
    factory, _ = base_specs()[scenario]
    out = tmp_path_factory.mktemp(f"{scenario}-{dialect}") / "b"
    spec = replace(factory(), dialect=dialect)
    generate(replace(spec, seed=seed) if seed is not None else spec, out)
    result = triage_bundle(out)
    assert result.top is not None and result.top.row.workload in ("serving", "any"), result.top.row.direction
    return result


def row(result, direction: str):
    return next(r for r in result.results if r.row.direction == direction)


def test_a_surge_on_tgi_is_judged_on_its_queue_and_the_e2e_median(tmp_path_factory):
    """TGI exports no TTFT histogram: the queue's share is read on queue time + the prefill forward
    pass (the step that gives a request its first token), the latency jump on the E2E median."""
    result = told(tmp_path_factory, "queueing-traffic-surge", "tgi")
    queueing = row(result, "scheduler_queueing")
    assert queueing.verification.verdict == "confirmed" and result.top is queueing, queueing.verification.why
    assert queueing.detection.evidence["judged_on"] == "E2E p50"
    judged = queueing.verification.numbers["judged_on"]
    assert judged["queue_share"].startswith("TTFT = queue time + the mean prefill forward pass")
    assert judged["waiting"] == "the engine's gauge of requests waiting"  # tgi_queue_size
    tail = row(result, "prefill_decode_interference")
    assert tail.verification.why.startswith("cannot check on Hugging Face TGI: it exports no TTFT histogram")


def test_interference_on_the_dynamo_frontend_counts_the_gaps_past_its_last_inter_token_bound(
    tmp_path_factory,
):
    """Dynamo's inter-token buckets stop at 2 s, under twice the baseline's p99.9: the stalls are the
    gaps past that bound, said in their label; long prompts from its input-sequence histogram."""
    result = told(tmp_path_factory, "p95-prefill-interference", "dynamo-frontend")
    tail = row(result, "prefill_decode_interference")
    assert tail.verification.verdict == "confirmed" and result.top is tail, tail.verification.why
    assert tail.verification.numbers["stall_threshold_s"] == 2.0


def test_kv_pressure_seen_only_by_the_dynamo_frontend_is_no_slower_decode(tmp_path_factory):
    """The frontend shows tokens slower at the same offered work but no KV cache: the decode row cannot
    rule a full cache's preemptions out, so it confirms nothing, and says where the KV usage is."""
    result = told(tmp_path_factory, "kv-pressure-shared-gpu", "dynamo-frontend")
    assert result.confirmed() == []
    decode = row(result, "decode_efficiency")
    assert decode.verification.why.startswith("cannot check on NVIDIA Dynamo (frontend)")
    assert "so a full KV cache is not ruled out" in decode.verification.why


def test_an_oom_behind_the_dynamo_frontend_is_not_ruled_out_by_the_frontends_logs(tmp_path_factory):
    result = told(tmp_path_factory, "oom-sampler-kv-full", "dynamo-frontend")
    oom = row(result, "memory_oversubscription")
    assert oom.verification.verdict == "inconclusive"
    assert "their out-of-memory errors are in the workers' logs" in oom.verification.why


def test_a_lost_prefix_cache_on_tgi_is_not_ruled_out_by_a_calm_kv_cache(tmp_path_factory):
    """TGI counts no prefix-cache hits: a thrashed prefix cache slows prefill with the KV cache far
    from full, so a calm cache no longer clears the row there."""
    result = told(tmp_path_factory, "kv-prefix-cache-thrash", "tgi")
    kv = row(result, "kv_cache_allocation")
    assert kv.verification.verdict == "inconclusive"
    assert kv.verification.why.startswith(
        "cannot check on Hugging Face TGI: it exports no prefix-cache hit counter"
    )
    assert result.confirmed() == []


def test_a_release_regression_on_tgi_shows_in_the_medians_it_has(tmp_path_factory):
    """TGI has no TTFT or inter-token histogram: release correlation watches its per-request TPOT and
    E2E medians, so a slower median request still blames the deploy (not only an E2E p95 shift, which
    alone is within a p95's wander)."""
    result = told(tmp_path_factory, "release-regression", "tgi")
    deploy = row(result, "release_regression")
    assert deploy.verification.verdict == "confirmed" and result.top is deploy, deploy.verification.why
    assert result.suspect_version == "v2.4.0"
    assert {"TPOT p50", "E2E p50"} & set(result.to_json()["directions"][0]["verification"]["why"].split(", "))


def test_a_deploy_on_triton_is_not_blamed_on_a_mean_the_new_mix_moved(tmp_path_factory):
    """Triton's latencies are means from its counters: a mean moves with a new tenant's long prompts as
    much as with a regression, so the decoy deploy that coincides with the tenant is not confirmed (seed
    1963930171 at ``--seed-base 1739570715``: the deploy was confirmed on its E2E mean alone). Its
    token histograms show the mix grew at the deploy: the prompt tokens per request rose past the cut."""
    result = told(tmp_path_factory, "tail-interference-batch-tenant", "triton", seed=1963930171)
    assert result.confirmed() == []
    deploy = row(result, "release_regression")
    assert deploy.verification.why.startswith(
        "cannot check on Triton (TensorRT-LLM backend): it exports no latency histogram, only means"
    )
    mix = deploy.verification.numbers["mix_at_deploy"]
    assert mix["prompt tokens per request"] > 0.07  # the tenant's long prompts
    assert "the requests' mix moved with it" in deploy.verification.why


def test_a_release_regression_on_triton_is_blamed_on_its_mean_where_the_mix_held(tmp_path_factory):
    """The same E2E-mean shift at a deploy with the tokens per request unchanged: no new mix moved it,
    so the deploy is confirmed, judged on means and saying so."""
    result = told(tmp_path_factory, "release-regression", "triton")
    deploy = row(result, "release_regression")
    assert deploy.verification.verdict == "confirmed" and result.top is deploy, deploy.verification.why
    assert result.suspect_version == "v2.4.0"
    assert "judged on means" in deploy.verification.why
    mix = deploy.verification.numbers["mix_at_deploy"]
    assert set(mix) == {"prompt tokens per request", "output tokens per request"}
    assert all(abs(v) < 0.07 for v in mix.values()), mix
