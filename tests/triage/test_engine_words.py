"""Issue 36 item 3: the engine's own words everywhere. An incident served by SGLang, trtllm-serve or TGI
gets remedies, next steps, alerts and missing-evidence lines in that engine's knobs and metric names,
never vLLM's (tellings from perfkit.lab.sim, compressed as in test_sim_tellings)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from runbook_calls import section_calls

import perfkit.app.runbooks.inference as rb
from perfkit.app.whatif.remedy import command
from perfkit.engine import dialects
from perfkit.lab.sim.bundle import generate
from perfkit.lab.sim.catalog import SCENARIOS
from perfkit.triage.rows import ROWS

#: what only vLLM says: its metric prefix, its engine arguments, its name
VLLM_WORDS = re.compile(
    r"vllm:|gpu_memory_utilization|max_num_seqs|max_num_batched_tokens|--max-num-batched-tokens|"
    r"--enable-chunked-prefill|--long-prefill-token-threshold|--gpu-memory-utilization|\bvLLM\b"
)
ENGINES = ("sglang", "trtllm", "tgi")


@pytest.mark.parametrize("engine", ENGINES)
def test_every_rows_advice_is_in_the_engines_words(engine):
    for row in ROWS:
        for text in (row.next_step_for(engine, "serving"), row.action_for(engine, "serving")):
            assert "{" not in text, (row.direction, text)
            assert not VLLM_WORDS.search(text), (engine, row.direction, text)
    mine, vllms, everyones = dialects.words(engine), dialects.words("vllm"), dialects.words(None)
    assert all(mine[k] not in (vllms[k], everyones[k]) for k in dialects.WORDS if k != "oom_knobs" or engine)


def test_without_an_engine_every_engine_is_named_and_vllm_keeps_its_own():
    interference = next(r for r in ROWS if r.direction == "prefill_decode_interference")
    both = interference.next_step_for(None)
    assert "vLLM: --enable-chunked-prefill" in both and "SGLang: --chunked-prefill-size" in both
    assert "SGLang" not in interference.next_step_for("vllm")
    queueing = next(r for r in ROWS if r.direction == "scheduler_queueing")
    assert queueing.action_for("vllm") == queueing.action_for(None)  # vLLM's name where none is known
    assert "sglang:num_queue_reqs" in queueing.action_for("sglang")
    assert "tgi_queue_size" in queueing.action_for("tgi")


def test_a_training_oom_gets_training_advice():
    oom = next(r for r in ROWS if r.direction == "memory_oversubscription")
    text = oom.next_step_for(None, "training")
    assert "micro-batch" in text and not VLLM_WORDS.search(text)


def test_the_replayed_setting_is_said_with_each_engines_nearest_flag():
    chunk = {
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": 2048,
        "long_prefill_token_threshold": 128,
    }
    assert command(chunk) == (
        "vLLM: --enable-chunked-prefill --max-num-batched-tokens 2048 --long-prefill-token-threshold 128"
    )
    sglang = command(chunk, "sglang")
    assert (
        sglang.startswith("SGLang: --chunked-prefill-size 2048") and "long_prefill_token_threshold" in sglang
    )
    assert command({"gpu_memory_utilization": 0.95}, "tgi") == "Hugging Face TGI: --cuda-memory-fraction 0.95"
    assert command({"max_num_seqs": 64}, "trtllm") == "TensorRT-LLM: --max_batch_size 64"


def test_a_signal_the_engine_cannot_export_is_said_in_its_words():
    assert dialects.absent("sglang", "histograms", "decode").startswith("SGLang exports no per-request")
    assert dialects.absent("tgi", "histograms", "queue") == "no tgi_request_queue_duration histogram"
    assert dialects.absent(None, "histograms", "ttft") == "no vllm:time_to_first_token_seconds histogram"


@pytest.fixture(scope="module")
def tellings(tmp_path_factory):
    out = {}
    for scenario in ("queueing-traffic-surge", "kv-pressure-shared-gpu"):
        for engine in ENGINES:
            folder = tmp_path_factory.mktemp(f"{scenario}-{engine}")
            generate(replace(SCENARIOS[scenario](), dialect=engine), folder, duration_s=240)
            out[(scenario, engine)] = folder
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("scenario", ["queueing-traffic-surge", "kv-pressure-shared-gpu"])
def test_the_postmortem_of_another_engine_names_nothing_of_vllms(tellings, scenario, engine):
    """Every section's summary, table and missing evidence, the triage JSON's next steps and the
    postmortem model (the fix is not replayed here: test_whatif_remedy covers its words)."""
    ctx = rb.open_incident(str(tellings[(scenario, engine)]))
    ctx.params["predict_fix"] = False
    said = []
    for module, name in section_calls("inference_latency"):
        f = getattr(module, name)(ctx).finding
        said.append(json.dumps({"summary": f.summary, "table": f.table, "missing": f.missing,
                                "caption": f.figure_caption}, default=str))  # fmt: skip
    triage = ctx.results["triage"]
    assert triage.engine_name == engine
    said += [d["next_step"] for d in triage.to_json()["directions"]]
    model = rb.findings(ctx).finding.data
    said.append(
        json.dumps({k: model[k] for k in ("summary", "root_cause", "action_items", "missing", "detection")})
    )
    hits = {m.group(0) for text in said for m in VLLM_WORDS.finditer(text)}
    assert not hits, (scenario, engine, hits)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_the_fix_is_predicted_on_an_engine_without_length_histograms_in_its_words(tmp_path, engine):
    """The demo told by SGLang (no --collect-tokens-histogram) and trtllm-serve: the fix section runs
    (lengths from the token counters, said so), predicts only settings the engine has a flag for, and
    the postmortem names nothing of vLLM's."""
    folder = tmp_path / engine
    generate(replace(SCENARIOS["p95-prefill-interference"](), dialect=engine), folder)
    ctx = rb.open_incident(str(folder))
    said = []
    calls = [(m, n) for m, n in section_calls("inference_latency") if n != "findings"]
    for module, name in [*calls, (rb, "predicted_fix"), (rb, "findings")]:
        f = getattr(module, name)(ctx).finding
        said.append(json.dumps({"summary": f.summary, "table": f.table, "missing": f.missing,
                                "caption": f.figure_caption}, default=str))  # fmt: skip
    pred = ctx.results["predicted_fix"]
    assert pred.tried and pred.engine == engine
    assert all("long_prefill_token_threshold" not in t["set"] for t in pred.tried)
    assert any("no length histogram" in n for n in pred.notes)
    model = rb.findings(ctx).finding.data
    said.append(json.dumps(model, default=str))
    hits = {m.group(0) for text in said for m in VLLM_WORDS.finditer(text)}
    assert not hits, (engine, hits)
    p0 = next(a["action"] for a in model["action_items"] if a["priority"] == "P0")
    if pred.recommended is None:  # the row's own advice stays the action, with the replay's word on it
        assert "enable chunked prefill" in p0 and "found no setting that helps" in p0
    else:
        assert p0.startswith("prefill_decode_interference: predicted by the calibrated replay")
