"""Triage on incidents told by other serving engines (issue 24): the embedded stories simulated with
SGLang's or TensorRT-LLM's own metric names, buckets and log lines (perfkit.lab.sim.dialects, only
the signals each exports), graded against the answer key the simulator wrote from the spec."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from perfkit.analyses.workloads import find_workloads
from perfkit.app.drills.grading import read_answer
from perfkit.app.runner.embedded import base_specs
from perfkit.engine.dialects import OnlyEngine
from perfkit.engine.local import LocalEngine
from perfkit.sources.bundle import load_bundle
from perfkit.triage.table import triage_bundle

SPECS = base_specs()


def told(name: str, dialect: str, out: Path, **changes: object) -> Path:
    factory, generate = SPECS[name]
    generate(replace(factory(), dialect=dialect, **changes), out)
    return out


def test_sglang_long_prompt_tenant_is_read_from_its_prefill_batches(tmp_path):
    """SGLang exports no prompt-length histogram by default: its log's prefill batches show the long
    prompts, and the fix is said in SGLang's own flag."""
    bundle = told("tail-interference-batch-tenant", "sglang", tmp_path / "b")
    assert not list((bundle / "metrics").glob("vllm*.om"))  # told in SGLang's words only
    result = triage_bundle(bundle)
    top = result.top
    assert top is not None and top.row.direction == read_answer(bundle)["direction"]
    assert top.verification.verdict == "confirmed"
    why = top.verification.why
    assert "SGLang's log" in why and "--chunked-prefill-size" in why and "chunked_prefill_size=-1" in why
    assert result.engine == {"name": "sglang", "title": "SGLang", "version": None}


@pytest.mark.slow
def test_trtllm_without_queue_gauges_confirms_a_surge_by_littles_law(tmp_path):
    """TensorRT-LLM 1.1 exports five metrics and no waiting gauge: the mean number waiting is the
    arrival rate times the mean queue time."""
    bundle = told("queueing-traffic-surge", "trtllm-1.1", tmp_path / "b")
    result = triage_bundle(bundle)
    assert result.top is not None and result.top.row.direction == "scheduler_queueing"
    assert result.top.verification.verdict == "confirmed"
    assert any("Little's law" in m for m in result.missing)


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["sglang", "trtllm", "trtllm-1.1"])
def test_a_healthy_service_confirms_nothing_in_any_engine(tmp_path, dialect):
    result = triage_bundle(told("healthy-busy-evening", dialect, tmp_path / "b"))
    assert result.confirmed() == []


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
def test_two_engines_in_one_prometheus_are_two_workloads_and_engine_chooses(tmp_path):
    """A fleet serving one model on vLLM (healthy) and one on SGLang (the long-prompt tenant): two
    workloads, each with its engine; ``--engine sglang`` judges the SGLang one in its own names."""
    sick = told("tail-interference-batch-tenant", "sglang", tmp_path / "sick")
    start = SPECS["tail-interference-batch-tenant"][0]().start
    calm = told("healthy-busy-evening", "vllm", tmp_path / "calm", start=start, model="other/model-7b")
    fleet = tmp_path / "fleet"
    shutil.copytree(sick, fleet)
    shutil.copy(calm / "metrics" / "vllm.om", fleet / "metrics" / "vllm.om")
    shutil.copy(calm / "logs" / "vllm.log", fleet / "logs" / "vllm.log")
    b = load_bundle(fleet)
    engines = {(w.engine, w.value) for w in find_workloads(LocalEngine(b.store), b.incident.window)}
    assert {e for e, _ in engines} == {"vllm", "sglang"} and len(engines) == 2
    plain = triage_bundle(fleet)
    assert plain.engine is not None and plain.engine["name"] == "vllm"  # the first engine found
    assert any("2 workloads" in m for m in plain.missing)
    chosen = triage_bundle(fleet, serving="sglang")
    assert chosen.engine is not None and chosen.engine["name"] == "sglang"
    assert chosen.top is not None and chosen.top.row.direction == "prefill_decode_interference"
    assert chosen.top.verification.verdict == "confirmed"


def test_only_engine_hides_the_other_engines_series():
    class Has:
        name = "fake"

        def has(self, metric: str) -> bool:
            return True

    only = OnlyEngine(Has(), "sglang")
    assert only.has("sglang:time_to_first_token_seconds_bucket")
    assert not only.has("vllm:time_to_first_token_seconds_bucket")
    assert only.has("DCGM_FI_DEV_GPU_UTIL") and only.name == "fake"
    with pytest.raises(ValueError, match="unknown serving engine"):
        OnlyEngine(Has(), "ollama")


@pytest.mark.slow
def test_the_runbook_and_postmortem_name_the_engine_and_its_fix(tmp_path):
    """The inference runbook, executed on an incident SGLang served: the Scope section and the
    postmortem's header say SGLang, and the root cause gives SGLang's own flag."""
    from click.testing import CliRunner

    from perfkit.app.cli.main import cli

    bundle = told("p95-prefill-interference", "sglang", tmp_path / "b")
    res = CliRunner().invoke(
        cli, ["run", "inference_latency", "--bundle", str(bundle), "-o", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "postmortem.md").read_text(encoding="utf-8")
    assert "**Serving engine:** SGLang" in md
    assert "--chunked-prefill-size 4096" in md and "chunked_prefill_size=-1" in md
    assert "Serving engine</dt><dd>SGLang" in (tmp_path / "o" / "postmortem.html").read_text(encoding="utf-8")
    nb = (tmp_path / "o" / "inference_latency.ipynb").read_text(encoding="utf-8")
    assert "serving engine" in nb and "SGLang (version not in the logs)" in nb
