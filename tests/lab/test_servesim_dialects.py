"""The live simulator in each engine dialect (``dialect: sglang | trtllm`` in its engine config): its
/metrics under the engine's own names, types, buckets and labels and no vllm:* family, and its log
lines in the engine's formats, as the recorded simulator's tables (perfkit.lab.sim.dialects) say."""

from __future__ import annotations

import asyncio
import io
import json
import re
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from perfkit.errors import ConfigError
from perfkit.lab.serve import serving
from perfkit.lab.servesim import dialect_metrics
from perfkit.lab.servesim.config import load_config
from perfkit.lab.servesim.server import SimServer
from perfkit.lab.sim import dialects as recorded

MODEL = "sim-llama"
SGLANG_RECORD = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) TP0\] (.*)$")
# SGLang's scheduler_metrics_mixin.py at 01bb3c8 (tests/data/engines/SOURCES.md): a trailing ", "
SGLANG_PREFILL = re.compile(
    r"^Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: \d+, token usage: \d+\.\d\d, "
    r"#running-req: \d+, #queue-req: \d+, $"
)
SGLANG_DECODE = re.compile(
    r"^Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d\d, cuda graph: True, "
    r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+, $"
)
TRTLLM_LAUNCH = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d launcher: exec trtllm-serve serve (\S+) --backend pytorch "
    r"--host 0\.0\.0\.0 --port 8000 --tp_size (\d+) --max_batch_size (\d+) --max_num_tokens (\d+) "
    r"--kv_cache_free_gpu_memory_fraction [0-9.]+( --enable_chunked_prefill)?$"
)


def settings(**overrides: Any) -> dict[str, Any]:
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "served_model_name": MODEL,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 2048,
        "max_model_len": 8192,
        **overrides,
    }


def write_yaml(tmp: Path, **overrides: Any) -> Path:
    path = tmp / "engine.yaml"
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in settings(**overrides).items()))
    return path


def run_engine(tmp: Path, dialect: str, n: int = 4) -> tuple[str, str]:
    """Serve ``n`` requests on the simulator in ``dialect`` (in-process, 500x), let a stats interval
    pass; the /metrics text and the log."""
    cfg = load_config(write_yaml(tmp, dialect=dialect))
    log = io.StringIO()

    async def go() -> str:
        server = SimServer(cfg, speed=500.0, log=log)
        url = await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                body = {"model": MODEL, "prompt": "hello " * 40, "max_tokens": 16, "stream": True}
                posts = [session.post(url + "/v1/completions", json=body) for _ in range(n)]
                for resp in await asyncio.gather(*posts):
                    async with resp:
                        assert resp.status == 200
                        await resp.read()
                while server.clock.now() < 12.0:  # past the first stats line (10 virtual s)
                    await asyncio.sleep(0.01)
                async with session.get(url + "/metrics") as resp:
                    return await resp.text()
        finally:
            await server.stop()

    return asyncio.run(go()), log.getvalue()


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def buckets(family: Any) -> list[float]:
    return [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")][:-1]


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return run_engine(tmp_path_factory.mktemp("sglang"), "sglang")


@pytest.fixture(scope="module")
def trtllm(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return run_engine(tmp_path_factory.mktemp("trtllm"), "trtllm")


def test_sglang_metrics(sglang: tuple[str, str]) -> None:
    fams = families(sglang[0])
    assert not [name for name in fams if name.startswith("vllm:")]
    want_hist = {
        "sglang:time_to_first_token_seconds": recorded.SGLANG_TTFT,
        "sglang:inter_token_latency_seconds": recorded.SGLANG_ITL,
        "sglang:e2e_request_latency_seconds": recorded.SGLANG_E2E,
        "sglang:queue_time_seconds": recorded.SGLANG_QUEUE,
    }
    for name, bounds in want_hist.items():
        assert fams[name].type == "histogram", name
        assert buckets(fams[name]) == [float(b) for b in bounds], name
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"):
        assert fams[name].type == "gauge", name
    counters = ("prompt_tokens", "generation_tokens", "cached_tokens", "num_requests")
    counters += ("num_aborted_requests", "num_retracted_requests")
    for short in counters:  # the parser names a counter's family without _total
        fam = fams[f"sglang:{short}"]
        assert fam.type == "counter" and fam.samples[0].name == f"sglang:{short}_total", short
    labels = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    ttft = fams["sglang:time_to_first_token_seconds"]
    count = next(s for s in ttft.samples if s.name.endswith("_count"))
    assert count.labels == labels and count.value == 4
    assert fams["sglang:num_requests"].samples[0].value == 4
    assert fams["sglang:prompt_tokens"].samples[0].value == 4 * 40
    assert fams["sglang:generation_tokens"].samples[0].value == 4 * 16
    assert "DCGM_FI_DEV_GPU_UTIL" in fams and "build_info" in fams  # the same in every dialect


def test_sglang_log(sglang: tuple[str, str]) -> None:
    lines = sglang[1].splitlines()
    records = [SGLANG_RECORD.match(line) for line in lines]
    assert all(records), lines  # every line is SGLang's record format
    messages = [m.group(2) for m in records if m]
    assert messages[0].startswith("server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', ")
    assert f"served_model_name='{MODEL}'" in messages[0] and "chunked_prefill_size=2048" in messages[0]
    assert messages[1] == "The server is fired up and ready to roll!"
    assert any(SGLANG_PREFILL.match(m) for m in messages), messages
    decodes = [m for m in messages if m.startswith("Decode batch")]
    assert all(SGLANG_DECODE.match(m) for m in decodes), decodes  # one per 40 decode steps, if it ran 40
    assert not any("Engine 000" in line or "pid=" in line for line in lines)


def test_trtllm_metrics(trtllm: tuple[str, str]) -> None:
    fams = families(trtllm[0])
    assert not [name for name in fams if name.startswith(("vllm:", "sglang:"))]
    for own, (name, bounds) in recorded.HISTOGRAMS["trtllm"].items():
        assert fams[name].type == "histogram", name
        default = {
            "vllm:time_to_first_token_seconds": recorded.TTFT_BUCKETS,
        }.get(own, recorded.REQUEST_BUCKETS)
        assert buckets(fams[name]) == [float(b) for b in (bounds or default)], name
    for name in ("trtllm_num_requests_running", "trtllm_num_requests_waiting", "trtllm_kv_cache_utilization"):
        assert fams[name].type == "gauge", name
    for short in ("prompt_tokens", "generation_tokens", "prompt_cached_tokens"):
        assert fams[f"trtllm_{short}"].type == "counter", short
    success = fams["trtllm_request_success"]
    assert success.type == "counter"
    by_reason = {s.labels["finished_reason"]: s.value for s in success.samples}
    assert by_reason == {"stop": 0, "length": 4, "abort": 0}
    info = fams["trtllm_kv_cache_config_info"].samples[0].labels
    assert info["tokens_per_block"] == "16" and info["enable_block_reuse"] == "false"
    ttft = fams["trtllm_time_to_first_token_seconds"]
    count = next(s for s in ttft.samples if s.name.endswith("_count"))
    assert count.labels == {"model_name": MODEL, "engine_type": "trtllm"} and count.value == 4
    assert "DCGM_FI_DEV_GPU_UTIL" in fams and "build_info" in fams


def test_trtllm_log(trtllm: tuple[str, str]) -> None:
    lines = trtllm[1].splitlines()
    assert len(lines) == 1, lines  # the launcher's echo only: no stats lines
    m = TRTLLM_LAUNCH.match(lines[0])
    assert m and m.groups() == (MODEL, "1", "64", "2048", " --enable_chunked_prefill")


def test_batch_lines_are_read_back_as_sglang_stats(sglang: tuple[str, str]) -> None:
    """Every prefill line the live engine wrote is one batch perfkit's SGLang reader reads, its running
    and waiting counts those of the engine after the step."""
    from perfkit.sources.engine_lines import prefill_tokens, sglang_stats

    messages = [m.group(2) for line in sglang[1].splitlines() if (m := SGLANG_RECORD.match(line))]
    prefills = [m for m in messages if m.startswith("Prefill batch")]
    assert prefills
    for m in prefills:
        got = sglang_stats(m)
        assert got is not None and got[0] == "prefill" and got[3] >= 0 and got[4] >= 0
        assert (prefill_tokens(m) or 0) > 0


def test_startup_lines_mirror_the_recorded_simulator() -> None:
    """The same fields in the same order as the recorded simulator's start-up lines."""
    from perfkit.lab.sim.model import EngineConfig

    for dialect in ("sglang", "trtllm"):
        rec = types.SimpleNamespace(
            spec=types.SimpleNamespace(
                dialect=dialect, model="m", gpu_count=1, at=lambda t: datetime(2026, 1, 1, tzinfo=UTC)
            ),
            logs=[],
        )
        recorded.startup_logs(rec, 0.0, "v1", EngineConfig())  # type: ignore[arg-type]
        live = dialect_metrics.startup_lines(load_config_from(dialect=dialect), 0.0)
        assert len(live) == len(rec.logs)
        for (_, old), new in zip(rec.logs, live, strict=True):
            keys = re.compile(r"(\w+)=|(--\w+)")
            assert keys.findall(new) == keys.findall(old), (old, new)


def load_config_from(**overrides: Any) -> Any:
    from perfkit.lab.servesim.config import config_from_dict

    return config_from_dict(settings(**overrides), "test")


def test_dialect_is_validated(tmp_path: Path) -> None:
    assert load_config(write_yaml(tmp_path)).dialect == "vllm"
    with pytest.raises(ConfigError, match=r"engine\.yaml: dialect: 'tgi' is not one of vllm, sglang, trtllm"):
        load_config(write_yaml(tmp_path, dialect="tgi"))
    with pytest.raises(ConfigError, match="dialect: expected a short string"):
        load_config(write_yaml(tmp_path, dialect=3))


def test_subprocess_serves_its_dialect(tmp_path: Path) -> None:
    """``perfkit lab serve --engine-config`` with ``dialect: sglang`` in the YAML file."""
    import urllib.request

    log = tmp_path / "engine.log"
    with (
        serving(engine_config=write_yaml(tmp_path, dialect="sglang"), log_file=log) as url,
        urllib.request.urlopen(url + "/metrics", timeout=10) as resp,
    ):
        names = set(families(resp.read().decode()))
    assert "sglang:time_to_first_token_seconds" in names
    assert not [n for n in names if n.startswith("vllm:")]
    assert SGLANG_RECORD.match(log.read_text().splitlines()[0])


def test_live_drill_engines() -> None:
    from perfkit.app.cli.main import cli
    from perfkit.app.drills.live_specs import SPECS, spec_for

    name = next(iter(SPECS))
    assert spec_for(name) is SPECS[name]  # vLLM: the engine config as it was
    spec = spec_for(name, engine="trtllm")
    assert spec.engine == {**SPECS[name].engine, "dialect": "trtllm"}
    assert load_config_from(**spec.engine).dialect == "trtllm"
    with pytest.raises(ConfigError, match="--engine"):
        spec_for(name, engine="tgi")
    got = CliRunner().invoke(cli, ["drill", "start", "drill-01", "--engine", "sglang"])
    assert got.exit_code == 2 and "--engine are for --live drills" in got.output
    got = CliRunner().invoke(cli, ["drill", "start", "drill-01", "--live", "--engine", "tgi"])
    assert got.exit_code == 2 and "'tgi' is not one of" in got.output
