"""cost: dollars per million generated tokens."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from perfkit.analyses.cost import cost, usd_per_million_tokens
from perfkit.core.frames import Window
from perfkit.core.incident import Hardware
from perfkit.engine.local import LocalEngine
from perfkit.sources.openmetrics import parse_text

B = 1_795_996_800


def at(offset: float) -> datetime:
    return datetime.fromtimestamp(B + offset, UTC)


def test_reference_example():
    # 8 GPUs x $2.5/h = $20/h; 20k tok/s x 3600 = 72M tok/h; 20 / 72 = $0.2778 per M
    assert usd_per_million_tokens(2.5, 8, 20_000) == pytest.approx(20 / 72, rel=1e-12)
    assert round(usd_per_million_tokens(2.5, 8, 20_000), 4) == 0.2778


def test_no_tokens_no_cost():
    assert usd_per_million_tokens(2.5, 8, 0) is None
    assert usd_per_million_tokens(2.5, 8, -1.0) is None


def test_scales_with_gpus_and_inversely_with_throughput():
    one = usd_per_million_tokens(3.0, 1, 1000)
    # $3/h over 3.6M tok/h = $0.8333 per M
    assert one == pytest.approx(3.0 / 3.6, rel=1e-12)
    assert usd_per_million_tokens(3.0, 4, 1000) == pytest.approx(4 * one, rel=1e-12)
    assert usd_per_million_tokens(3.0, 1, 2000) == pytest.approx(one / 2, rel=1e-12)


def _store(per_scrape_baseline: float, per_scrape_incident: float) -> LocalEngine:
    # generation_tokens_total every 15 s from B to B+1800; baseline [B, B+600], incident
    # [B+1200, B+1800]; scrape k adds the increment of the phase it ends
    lines, value = ["# TYPE vllm:generation_tokens counter"], 1000.0
    for k in range(121):
        if k:
            value += per_scrape_baseline if k <= 40 else per_scrape_incident
        lines.append(f'vllm:generation_tokens_total{{model_name="m"}} {value!r} {B + 15 * k}')
    return LocalEngine(parse_text("\n".join(lines) + "\n# EOF\n"))


def test_cost_from_a_store():
    engine = _store(per_scrape_baseline=3000, per_scrape_incident=1000)
    hw = Hardware(gpu="H100", count=8, usd_per_gpu_hour=2.5)
    result = cost(engine, hw, Window(at(1200), at(1800)), Window(at(0), at(600)))
    # samples sit on both window edges, so rate = increase / 600 with no extrapolation:
    # incident 40 x 1000 / 600 = 66.67 tok/s -> 240k tok/h -> $20 / 0.24M = $83.33 per M
    # baseline 40 x 3000 / 600 = 200 tok/s -> 720k tok/h -> $20 / 0.72M = $27.78 per M
    assert result.tokens_per_s["incident"] == pytest.approx(40_000 / 600, rel=1e-9)
    assert result.tokens_per_s["baseline"] == pytest.approx(120_000 / 600, rel=1e-9)
    assert result.usd_per_million["incident"] == pytest.approx(20 / 0.24, rel=1e-9)
    assert result.usd_per_million["baseline"] == pytest.approx(20 / 0.72, rel=1e-9)
    assert result.missing == []
    assert result.queries == ["sum (rate(vllm:generation_tokens_total[10m]))"]
    # 83.33 / 27.78 = 3.00x
    assert result.summary() == (
        "$83.33 per million generated tokens in the incident window vs $27.78 in the baseline (3.00x)"
    )


def test_cost_says_what_is_missing():
    engine = _store(3000, 1000)
    result = cost(engine, Hardware(count=8), Window(at(1200), at(1800)), None)
    assert result.usd_per_million == {"incident": None}
    assert result.missing == ["cost: incident.yaml has no hardware.usd_per_gpu_hour"]
    assert result.summary().startswith("cost per million tokens unknown")

    empty = LocalEngine(parse_text("# TYPE g gauge\ng 1 1\n# EOF\n"))
    result = cost(empty, Hardware(count=8, usd_per_gpu_hour=2.5), Window(at(0), at(600)), None)
    assert result.tokens_per_s == {"incident": None}
    assert "cost: no vllm:generation_tokens_total counter" in result.missing
