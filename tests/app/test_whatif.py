"""`perfkit lab whatif` as a user meets it: the demo incident replayed as it happened and with the
fix, request logs with an engine config, SLOs, prices, the JSON contract, the figure, and one-line
errors for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.whatif.replay import MAX_CONFIGS, mark_best, parse_sets, parse_slo
from perfkit.errors import ConfigError

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
DEMO = SCENARIOS / "p95-prefill-interference"
ROW_KEYS = {
    "set", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "output_throughput", "goodput",
    "usd_per_million_tokens", "best",
}  # fmt: skip


def invoke(*args: str):
    return CliRunner().invoke(cli, ["lab", "whatif", *args])


def as_json(*args: str) -> dict:
    res = invoke(*args, "--format", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def row(doc: dict, **want) -> dict:
    (found,) = [r for r in doc["configs"] if all(r["set"][k] == v for k, v in want.items())]
    return found


# -- the seed's §5.3 case, on the demo bundle -------------------------------------------------------


@pytest.fixture(scope="module")
def fix_sweep() -> dict:
    return as_json(
        "--replay", str(DEMO),
        "--set", "enable_chunked_prefill=false,true", "--set", "long_prefill_token_threshold=0,512",
    )  # fmt: skip


@pytest.mark.slow
def test_the_bundle_supplies_the_engine_and_says_where_each_field_came_from(fix_sweep):
    base = fix_sweep["base"]
    # incident.yaml: llama-3.1-70b-instruct on "NVIDIA H100 80GB HBM3" (aliases of the tables' keys)
    assert base["model"] == {"value": "llama-3.1-70b", "origin": "incident.yaml model"}
    assert base["gpu"] == {"value": "h100-sxm", "origin": "incident.yaml hardware.gpu"}
    # vllm.log: the V1 engine's config line and the non-default args; the cache info metric
    assert base["tensor_parallel_size"]["value"] == 4 and base["tensor_parallel_size"]["origin"].startswith("log line vllm.log:")  # fmt: skip
    assert base["enable_chunked_prefill"]["value"] is False
    assert base["max_num_batched_tokens"]["value"] == 32768 and base["max_model_len"]["value"] == 32768
    assert base["block_size"] == {"value": 16, "origin": "metric vllm:cache_config_info"}
    assert base["gpu_memory_utilization"]["value"] == 0.9
    assert base["compute_efficiency"]["origin"] == "default"
    # SLOs and price from incident.yaml (ttft_p95_s 1.5, tpot_p95_s 0.08, $2.5 a GPU-hour)
    assert fix_sweep["slo_ms"] == {"ttft": 1500.0, "tpot": 80.0}
    assert fix_sweep["usd_per_gpu_hour"] == 2.5


@pytest.mark.slow
def test_the_json_contract(fix_sweep):
    assert len(fix_sweep["configs"]) == 4 and len(fix_sweep["runs"]) == 4
    for r in fix_sweep["configs"]:
        assert set(r) == ROW_KEYS
        assert set(r["set"]) == {"enable_chunked_prefill", "long_prefill_token_threshold"}
    assert sum(r["best"] for r in fix_sweep["configs"]) == 1


@pytest.mark.slow
def test_chunked_prefill_alone_keeps_the_tail_and_the_threshold_cuts_it(fix_sweep):
    """Physics of the §5.3 case on Llama-3.1-70B / 4x H100: 1 % of the demo's prompts are 20k-40k
    tokens, whose whole prefill is 2 * 70e9 * 30e3 FLOPs at 50 % of 4 x 989 TFLOP/s = ~2 s; a short
    prompt arriving behind one waits that long. Chunked prefill with vLLM's 8,192-token budget gives
    the running long prompt the whole budget first, step after step, so it waits about as long; a
    512-token cap per request and step leaves room for it in the next step (~50 ms). The rows run
    on the engine calibrated to the incident (its replay within the issue's tolerances)."""
    off = row(fix_sweep, enable_chunked_prefill=False, long_prefill_token_threshold=0)
    chunked = row(fix_sweep, enable_chunked_prefill=True, long_prefill_token_threshold=0)
    fixed = row(fix_sweep, enable_chunked_prefill=True, long_prefill_token_threshold=512)
    assert off["ttft_p95_ms"] > 3 * off["ttft_p50_ms"]  # the incident's shape: the tail, not the median
    assert chunked["ttft_p95_ms"] > 0.8 * off["ttft_p95_ms"]  # chunked prefill alone: no fix
    assert fixed["ttft_p95_ms"] < 0.5 * off["ttft_p95_ms"]  # the threshold: at least halved
    assert fixed["best"] and fixed["goodput"] > off["goodput"]
    # the engine keeps up with the same traffic either way: throughput and cost within 2 %
    assert fixed["output_throughput"] == pytest.approx(off["output_throughput"], rel=0.02)
    assert fixed["usd_per_million_tokens"] == pytest.approx(off["usd_per_million_tokens"], rel=0.02)
    assert fixed["tpot_p95_ms"] <= off["tpot_p95_ms"] * 1.05  # decodes no longer wait out long prefills


@pytest.mark.slow
def test_cost_is_the_gpu_hours_over_the_tokens(fix_sweep):
    """$2.5 x 4 GPUs per hour over the output tokens of an hour at the run's throughput."""
    for r in fix_sweep["configs"]:
        per_hour = 2.5 * 4
        assert r["usd_per_million_tokens"] == pytest.approx(per_hour / (r["output_throughput"] * 3600) * 1e6)


@pytest.mark.slow
def test_runs_are_faster_than_real_time(fix_sweep):
    """The issue's target: 8 configs x 10 simulated minutes in under 60 s, i.e. 80x real time; each
    run here must clear it alone with room for a slower machine (benchmarks/whatif_bench.py times it)."""
    for run in fix_sweep["runs"]:
        assert run["simulated_s"] >= 600
        assert run["speedup"] > 80, run


# -- request logs, SLOs, prices -----------------------------------------------------------------------


@pytest.fixture
def log_and_engine(tmp_path):
    log = tmp_path / "requests.jsonl"
    lines = [{"arrival_s": 0.5 * i, "prompt_tokens": 200 + 10 * i, "output_tokens": 50} for i in range(40)]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    engine = tmp_path / "engine.yaml"
    engine.write_text("model: llama-3.1-8b\ngpu: h200\nmax_num_seqs: 64\n")
    return log, engine


def test_a_request_log_needs_an_engine_config(log_and_engine):
    log, engine = log_and_engine
    res = invoke("--replay", str(log))
    assert res.exit_code == 2 and "--engine-config" in res.output
    doc = as_json("--replay", str(log), "--engine-config", str(engine), "--minutes", "1")
    assert doc["base"]["max_num_seqs"] == {"value": 64, "origin": str(engine)}
    assert doc["base"]["block_size"]["origin"] == "default"
    assert doc["runs"][0]["completed"] == 40 and doc["runs"][0]["output_tokens"] == 40 * 50
    # no SLO given and none in a log: no goodput, nothing marked best, said so
    assert doc["configs"][0]["goodput"] is None and not doc["configs"][0]["best"]
    # the H200 has no public list price in data/hardware/gpus.yaml: no cost, said so
    assert doc["configs"][0]["usd_per_million_tokens"] is None
    assert any("no SLO" in n for n in doc["notes"]) and any("no price" in n for n in doc["notes"])


def test_minutes_and_time_scale_choose_the_traffic(log_and_engine):
    """The log holds 40 requests 0.5 s apart (0 to 19.5 s): its first 15 s hold 30 of them; at twice
    the rate all 40 arrive within 9.75 s."""
    log, engine = log_and_engine
    base = ("--replay", str(log), "--engine-config", str(engine), "--minutes", "0.25")
    assert as_json(*base)["runs"][0]["requests"] == 30
    doubled = as_json(*base, "--time-scale", "2")
    assert doubled["runs"][0]["requests"] == 40 and doubled["traffic"]["time_scale"] == 2
    assert invoke(*base, "--time-scale", "0").exit_code == 2


def test_goodput_counts_the_requests_within_the_slos(log_and_engine):
    log, engine = log_and_engine
    base = ("--replay", str(log), "--engine-config", str(engine), "--usd-per-gpu-hour", "3")
    # every step costs 2 ms of CPU overhead: no first token can come within 1 ms
    tight = as_json(*base, "--slo", "ttft=1,tpot=1000")
    assert tight["configs"][0]["goodput"] == 0 and tight["runs"][0]["met_slo"] == 0
    # 8B on an H200 at 2 req/s: ~15 ms prefills, ~6 ms decode steps, far inside a minute and 1 s
    loose = as_json(*base, "--slo", "ttft=60000,tpot=1000")
    assert loose["runs"][0]["met_slo"] == 40 and loose["configs"][0]["best"]
    assert loose["slo_origin"] == "--slo" and loose["price_origin"] == "--usd-per-gpu-hour"
    assert loose["configs"][0]["usd_per_million_tokens"] > 0


# -- the figure and the table --------------------------------------------------------------------------


def test_table_and_plots(tmp_path, log_and_engine):
    log, engine = log_and_engine
    html, png = tmp_path / "w.html", tmp_path / "w.png"
    args = ("--replay", str(log), "--engine-config", str(engine), "--slo", "ttft=500,tpot=50")
    res = invoke(*args, "--set", "max_num_seqs=2,64", "--speedup-info", "--plot", str(html))
    assert res.exit_code == 0, res.output
    assert "★" in res.output and "speed-up" in res.output and "max_num_seqs=64" in res.output
    text = html.read_text()
    assert "Plotly.newPlot" in text and '<script src="http' not in text  # plotly.js embedded, nothing fetched
    assert invoke(*args, "--plot", str(png)).exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert invoke(*args, "--plot", str(tmp_path / "w.svg")).exit_code == 2
    # a file that exists is the user's: kept unless --force
    res = invoke(*args, "--plot", str(html))
    assert res.exit_code == 2 and "exists" in res.output and html.read_text() == text
    assert invoke(*args, "--plot", str(html), "--force").exit_code == 0


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "pattern"),
    [
        (["model=llama-3.1-8b"], "model: cannot be swept"),
        (["max_num_seqs=128,abc"], "max_num_seqs: expected a positive integer, got 'abc'"),
        (["gpu_memory_utilization=0.3"], "gpu_memory_utilization=0.3: model: weights"),  # 35 GB/GPU > 24 GB
        (["block_size=24"], "block_size: 24 is not one of"),
        (["max_num_seqs"], "expected key=v1,v2"),
    ],
)
def test_a_bad_set_is_one_line_naming_the_field_and_value(sets, pattern):
    args = ["--replay", str(DEMO)]
    for s in sets:
        args += ["--set", s]
    res = invoke(*args)
    assert res.exit_code == 2
    assert pattern in res.output and "Traceback" not in res.output


def test_a_configuration_that_cannot_run_is_a_row_with_its_reason_not_the_end_of_the_sweep():
    doc = as_json("--replay", str(DEMO), "--minutes", "1", "--set", "gpu_memory_utilization=0.3,0.9")
    bad, good = row(doc, gpu_memory_utilization=0.3), row(doc, gpu_memory_utilization=0.9)
    assert "model: weights" in bad["error"] and bad["ttft_p95_ms"] is None and not bad["best"]
    assert good["ttft_p95_ms"] > 0 and "error" not in good
    assert any(n.startswith("not run: --set gpu_memory_utilization=0.3") for n in doc["notes"])
    res = invoke("--replay", str(DEMO), "--minutes", "1", "--set", "gpu_memory_utilization=0.3,0.9")
    assert res.exit_code == 0 and "cannot run" in res.output


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [("model", "gpt-5-turbo", "incident.yaml: model: unknown model 'gpt-5-turbo'"),
     ("gpu", "NVIDIA GeForce RTX 4090", "hardware.gpu: unknown GPU 'NVIDIA GeForce RTX 4090'")],
)  # fmt: skip
def test_a_bundle_naming_hardware_the_tables_lack_suggests_an_engine_config(tmp_path, field, value, pattern):
    bundle = tmp_path / "bundle"
    shutil.copytree(DEMO, bundle, ignore=shutil.ignore_patterns("*.om", "*.log"))
    text = (bundle / "incident.yaml").read_text()
    old = "llama-3.1-70b-instruct" if field == "model" else "NVIDIA H100 80GB HBM3"
    (bundle / "incident.yaml").write_text(text.replace(old, value))
    res = invoke("--replay", str(bundle))
    assert res.exit_code == 2 and pattern in res.output and "--engine-config" in res.output


def test_parse_sets_and_slo_refuse_what_they_cannot_take():
    assert parse_sets(["max-num-seqs=128, 256"]) == {"max_num_seqs": ["128", "256"]}
    with pytest.raises(ConfigError, match="given twice"):
        parse_sets(["max_num_seqs=1", "max_num_seqs=2"])
    with pytest.raises(ConfigError, match="listed twice"):
        parse_sets(["max_num_seqs=1,1"])
    many = [
        f"{k}={','.join(str(v) for v in range(1, 5))}"
        for k in ("max_num_seqs", "block_size", "max_model_len")
    ]
    assert len(parse_sets(many)) == 3  # 4 x 4 x 4 = 64 configurations: the cap
    with pytest.raises(ConfigError, match=f"128 configurations, more than the {MAX_CONFIGS}"):
        parse_sets([*many, "kv_cache_dtype=auto,fp8"])
    assert parse_slo("ttft=1500, tpot=80") == {"ttft": 1500.0, "tpot": 80.0}
    for bad in ("itl=5", "ttft=-1", "ttft=nan", "ttft"):
        with pytest.raises(ConfigError, match="--slo"):
            parse_slo(bad)


def test_best_is_most_requests_within_the_slos_then_the_cheapest():
    rows = [{"usd_per_million_tokens": c, "best": False} for c in (2.0, 1.0, None, 0.5)]
    runs = [{"met_slo": m} for m in (90, 90, 95, 80)]
    assert mark_best(rows, runs) == 2  # most requests within the SLOs, though its cost is unknown
    runs[2]["met_slo"] = 90
    for r in rows:
        r["best"] = False
    assert mark_best(rows, runs) == 1 and [r["best"] for r in rows] == [False, True, False, False]
    assert mark_best(rows, [{"met_slo": None}] * 4) is None


def test_lengths_drawn_past_the_recorded_limit_are_cut_to_it():
    from perfkit.app.whatif.replay import fit_recorded
    from perfkit.loadgen.shapes import Plan

    plan = Plan(np.array([0.0, 1.0, 2.0]), np.array([100, 9000, 20000]), np.array([50, 50, 9000]), "replay")
    fitted, cut = fit_recorded(plan, 8192)
    assert cut == 2
    assert fitted.prompt_tokens.tolist() == [100, 8142, 1]
    assert fitted.output_tokens.tolist() == [50, 50, 8191]
    assert (fitted.prompt_tokens + fitted.output_tokens).max() <= 8192
    assert fit_recorded(plan, 100_000) == (plan, 0)


def test_turning_chunked_prefill_on_takes_vllms_budget_for_it_unless_one_is_set():
    """With chunked prefill off vLLM forces max_num_batched_tokens >= max_model_len (32768 on the demo);
    an operator who adds --enable-chunked-prefill gets vLLM's budget for it (8192 on an H100, 2048
    on an A100: EngineArgs.get_batch_defaults), not a 32k step that chunks nothing."""
    from dataclasses import replace

    from perfkit.app.whatif.base import config_from_bundle
    from perfkit.app.whatif.replay import _grid_configs
    from perfkit.core import hardware

    base = config_from_bundle(str(DEMO)).cfg
    assert not base.enable_chunked_prefill and base.max_num_batched_tokens == base.max_model_len == 32768
    (_, off), (_, on) = _grid_configs(base, {"enable_chunked_prefill": ["false", "true"]})
    assert off.max_num_batched_tokens == 32768 and on.max_num_batched_tokens == 8192
    ((_, own),) = _grid_configs(
        base, {"enable_chunked_prefill": ["true"], "max_num_batched_tokens": ["4096"]}
    )
    assert own.max_num_batched_tokens == 4096
    a100 = replace(base, gpu=hardware.gpu("a100-sxm"))
    ((_, on_a100),) = _grid_configs(a100, {"enable_chunked_prefill": ["true"]})
    assert on_a100.max_num_batched_tokens == 2048


def test_the_issues_sweep_marks_chunked_prefill_on_best():
    """Issue 26's done-when: ``--set enable_chunked_prefill=false,true`` on the demo marks "on" best
    (it had marked "off": chunked prefill ran with the 32k budget chunked prefill off forces), on
    the calibrated engine, whose replay of the incident is trusted."""
    doc = as_json("--replay", str(DEMO), "--set", "enable_chunked_prefill=false,true", "--minutes", "5")
    assert doc["reproduction"]["trusted"]
    off, on = row(doc, enable_chunked_prefill=False), row(doc, enable_chunked_prefill=True)
    assert on["best"] and not off["best"]
    assert on["goodput"] > off["goodput"] and on["tpot_p95_ms"] < off["tpot_p95_ms"]
    assert any("vLLM's own max_num_batched_tokens for chunked prefill, 8192" in n for n in doc["notes"])
