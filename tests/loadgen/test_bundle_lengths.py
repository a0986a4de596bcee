"""Request lengths where the engine exports no length histogram (issue 36 item 3: the fix predicted on
SGLang without --collect-tokens-histogram and on trtllm-serve): the token counters' mean, the prompt
mix from SGLang's own prefill lines when they count the window's requests, else an assumed spread,
said so (perfkit.loadgen.bundle_lengths)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from perfkit.core.frames import Window
from perfkit.engine import ops
from perfkit.engine.local import LocalEngine
from perfkit.errors import BundleError
from perfkit.lab.sim.bundle import generate
from perfkit.lab.sim.catalog import SCENARIOS
from perfkit.loadgen.bundle_lengths import LOGNORMAL_SIGMA, _prompts_from_lines
from perfkit.loadgen.shapes import replay_bundle
from perfkit.sources.bundle import load_bundle
from perfkit.sources.logs import parse_lines


def _without(bundle, *families: str) -> None:
    for path in (bundle / "metrics").glob("*.om"):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        path.write_text("".join(ln for ln in lines if not any(f in ln for f in families)), encoding="utf-8")


def _per_request(bundle, tokens: str, finished: str) -> float:
    """The window's tokens per finished request, read here from the two counters."""
    b = load_bundle(bundle)
    engine, w = LocalEngine(b.store), b.incident.window
    got = [
        float(engine.instant(ops.sum_by(ops.increase(ops.Selector(m), w.seconds)), w.end)["value"][0])
        for m in (tokens, finished)
    ]
    return got[0] / got[1]


def test_without_length_histograms_the_counters_mean_is_kept_and_the_spread_is_said(scenario_copy):
    bundle = scenario_copy("release-regression")
    _without(bundle, "vllm:request_prompt_tokens", "vllm:request_generation_tokens")
    plan = replay_bundle(bundle, seed=2)
    for lengths, counter in ((plan.prompt_tokens, "prompt"), (plan.output_tokens, "generation")):
        mean = _per_request(bundle, f"vllm:{counter}_tokens_total", "vllm:e2e_request_latency_seconds_count")
        assert lengths.mean() == pytest.approx(mean, rel=0.06), counter  # a lognormal's mean, sampled
        cv = lengths.std() / lengths.mean()
        assert cv == pytest.approx(np.sqrt(np.exp(LOGNORMAL_SIGMA**2) - 1), rel=0.25)
    said = [n for n in plan.replay["notes"] if "no length histogram" in n]
    assert len(said) == 2 and all("lognormal" in n and "assumed" in n for n in said)
    _without(bundle, "vllm:prompt_tokens_total")
    with pytest.raises(
        BundleError, match="no vllm:request_prompt_tokens histogram.*vllm:prompt_tokens_total"
    ):
        replay_bundle(bundle)


@pytest.fixture(scope="module")
def sglang_demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo-sglang")
    generate(replace(SCENARIOS["p95-prefill-interference"](), dialect="sglang"), folder, duration_s=600)
    return folder


def test_sglangs_prefill_lines_give_the_prompt_mix_the_counters_scale(sglang_demo):
    plan = replay_bundle(sglang_demo, seed=4)
    said = " ".join(plan.replay["notes"])
    assert "prefill lines" in said and "lognormal" in said  # prompts from the lines, outputs assumed
    mean = _per_request(sglang_demo, "sglang:prompt_tokens_total", "sglang:e2e_request_latency_seconds_count")
    assert plan.prompt_tokens.mean() == pytest.approx(mean, rel=0.1)
    # the demo's mix: mostly chat-sized prompts, a few whole documents: a tail no lognormal has
    p50, p999 = np.percentile(plan.prompt_tokens, [50, 99.9])
    assert p999 > 10 * p50


def test_prefill_lines_that_count_chunks_are_not_taken_for_prompts(sglang_demo, tmp_path):
    import shutil

    bundle = tmp_path / "chunked"
    shutil.copytree(sglang_demo, bundle)
    log = bundle / "logs" / "sglang.log"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    # every prefill logged twice, as a prompt chunked in two would be: twice the requests finished
    log.write_text("".join(ln * (2 if "Prefill batch" in ln else 1) for ln in lines), encoding="utf-8")
    said = " ".join(replay_bundle(bundle, seed=4).replay["notes"])
    assert "not used" in said and "prompt_tokens: no length histogram" in said and "lognormal" in said


def test_a_batch_of_several_prompts_keeps_its_long_one():
    start = datetime(2026, 11, 12, 1, 0, tzinfo=UTC)
    window = Window(start, start + timedelta(minutes=5))

    def line(s: int, seqs: int, new: int, cached: int) -> str:
        stamp = (start + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S")
        return (
            f"[{stamp} TP0] Prefill batch, #new-seq: {seqs}, #new-token: {new}, #cached-token: {cached}, "
            "token usage: 0.10, #running-req: 4, #queue-req: 0, "
        )

    text = [line(i, 1, 400, 100) for i in range(1, 8)] + [line(20, 3, 20_800, 200), line(400, 1, 9, 0)]
    text.append(line(30, 10**6, 5_000_000, 0))  # no batch holds a million requests: skipped, not expanded
    records = parse_lines(text, window=window).records
    got = sorted(_prompts_from_lines(records, window).tolist())
    # seven 500-token prompts, then the batch of three: two usual ones and the 20,000-token one; the
    # line past the window's end is not read
    assert got == [500.0] * 9 + [20_000.0]


def test_an_engine_that_does_not_say_its_context_is_replayed_with_the_models(sglang_demo, tmp_path):
    """SGLang's context_length=None, trtllm-serve without --max_seq_len: both serve the model's whole
    context (without chunked prefill, up to the step's token budget); 8,192 would cut the demo's long
    documents away and the replay could not reproduce the incident."""
    from perfkit.app.whatif.base import config_from_bundle

    base = config_from_bundle(sglang_demo)
    assert base.cfg.max_model_len == 131_072 and "max_position_embeddings" in base.origin["max_model_len"]
    trtllm = tmp_path / "trtllm"
    generate(replace(SCENARIOS["p95-prefill-interference"](), dialect="trtllm"), trtllm, duration_s=240)
    base = config_from_bundle(trtllm)
    assert base.cfg.max_model_len == base.cfg.max_num_batched_tokens == 32_768  # --max_num_tokens, unchunked
    assert "step's token budget" in base.origin["max_model_len"]
