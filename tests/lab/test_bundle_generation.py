"""The seeded generator: deterministic, physically sensible, and in formats real tools accept."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest

from perfkit.lab.sim.bundle import generate
from perfkit.lab.sim.catalog import SCENARIOS
from perfkit.lab.sim.engine import Engine
from perfkit.lab.sim.exporters import Recorder
from perfkit.sources.bundle import load_bundle


def test_same_seed_same_bundle(tmp_path):
    spec = SCENARIOS["release-regression"]()
    generate(spec, tmp_path / "a", duration_s=420)
    generate(spec, tmp_path / "b", duration_s=420)
    for rel in ("metrics/vllm.om", "metrics/dcgm.om", "logs/vllm.log", "events.csv", "incident.yaml"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def _records(spec):
    rng = np.random.default_rng(spec.seed)
    rec = Recorder(spec, rng)
    Engine(spec, rec, rng).run()
    return np.asarray([r[:8] for r in rec.records], dtype=float)


def test_chunked_prefill_bounds_the_stall_that_long_prompts_cause():
    """The physics the demo rests on: without chunked prefill a long prompt stalls decodes for its
    whole prefill; chunked prefill with a bounded per-request budget keeps TTFT's tail short."""
    spec = replace(
        SCENARIOS["p95-prefill-interference"](), duration_s=1500, phases=(), base_long_prompt_frac=0.01
    )
    fixed = replace(spec, engine=replace(spec.engine, chunked_prefill=True, long_prefill_token_threshold=512))
    off, on = _records(spec), _records(fixed)
    ttft_off = np.quantile(off[:, 1] + off[:, 2], 0.95)
    ttft_on = np.quantile(on[:, 1] + on[:, 2], 0.95)
    assert ttft_off > 2.0 * ttft_on
    assert len(off) == pytest.approx(len(on), rel=0.02)  # same traffic served


def test_generated_bundle_loads_with_its_signals(tmp_path):
    generate(SCENARIOS["queueing-traffic-surge"](), tmp_path / "c", duration_s=600)
    b = load_bundle(tmp_path / "c")
    assert b.missing == []
    assert "vllm:kv_cache_usage_perc" in b.store and "DCGM_FI_DEV_GPU_UTIL" in b.store
    assert b.stats.height >= 55  # a stats line every 10 s
    assert b.store.types["vllm:prompt_tokens_total"] == "counter"


@pytest.mark.integration
@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed"
)
def test_promtool_accepts_the_openmetrics(tmp_path):
    generate(SCENARIOS["release-regression"](), tmp_path / "b", duration_s=1800)
    for om in sorted((tmp_path / "b" / "metrics").glob("*.om")):
        out = tmp_path / f"tsdb-{om.stem}"
        res = subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert any(out.iterdir())


@pytest.mark.slow
def test_embedded_bundle_is_the_generators_output(tmp_path):
    """data/scenarios is not hand-edited: regenerating reproduces it byte for byte."""
    from pathlib import Path

    embedded = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "release-regression"
    generate(SCENARIOS["release-regression"](), tmp_path / "r")
    for rel in (
        "metrics/vllm.om",
        "metrics/dcgm.om",
        "metrics/node.om",
        "logs/vllm.log",
        "events.csv",
        "incident.yaml",
        "answer.yaml",
    ):
        assert (tmp_path / "r" / rel).read_bytes() == (embedded / rel).read_bytes(), rel
