"""``perfkit lab serve --engine-config``: the simulated engine behind an OpenAI-compatible server.

Every test talks to a real server subprocess (:func:`perfkit.lab.serve.serving` with
``engine_config=``) over real HTTP with a plain aiohttp client, and reads ``/metrics`` with
prometheus_client's parser. Expected names and bucket bounds are copied from vLLM's source
(vllm/v1/metrics/loggers.py), not from the code under test. Timing checks compare ratios measured
in one run (before/after a fault), so a busy 2-core machine shifts both sides alike.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from perfkit.core.frames import Window
from perfkit.lab.serve import serving
from perfkit.lab.servesim.config import load_config
from perfkit.lab.servesim.faults import FaultBoard, FaultError
from perfkit.lab.servesim.server import banner
from perfkit.sources.engine_config import engine_config_from_logs
from perfkit.sources.logs import parse_lines

MODEL = "sim-llama"
TOKEN = "test-admin-token-0123456789"
# vLLM's bounds, copied from vllm/v1/metrics/loggers.py
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
VLLM_TTFT += [20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
VLLM_ITL += [20.0, 40.0, 80.0]
VLLM_REQUEST = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0]
VLLM_REQUEST += [240.0, 480.0, 960.0, 1920.0, 7680.0]
VLLM_ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
HOUR = timedelta(hours=1)
DCGM_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}


def engine_yaml(tmp: Path, **overrides: Any) -> Path:
    settings: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "served_model_name": MODEL,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 2048,
        "max_model_len": 8192,
    }
    settings.update(overrides)
    path = tmp / f"engine-{len(list(tmp.glob('engine-*.yaml')))}.yaml"
    path.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items()))
    return path


@pytest.fixture
def admin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFKIT_LAB_ADMIN_TOKEN", TOKEN)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory):
    """A shared server for tests that change nothing (no faults, no config)."""
    with serving(engine_config=engine_yaml(tmp_path_factory.mktemp("sim"))) as url:
        yield url


# -- a small client ----------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    events: list[tuple[float, str]] = field(default_factory=list)  # (s since the request was sent, data)
    body: str = ""

    def content(self) -> list[tuple[float, dict[str, Any]]]:
        out = []
        for t, data in self.events:
            if data.startswith("{"):
                event = json.loads(data)
                choices = event.get("choices") or [{}]
                if choices[0].get("text") or choices[0].get("delta", {}).get("content"):
                    out.append((t, event))
        return out

    def ttft(self) -> float:
        return self.content()[0][0]

    def gaps(self) -> list[float]:
        times = [t for t, _ in self.content()]
        return [b - a for a, b in zip(times, times[1:], strict=False)]


async def _post(
    session: aiohttp.ClientSession, url: str, body: Any, path: str, cut_after: int | None
) -> Reply:
    t0 = time.perf_counter()
    async with session.post(url + path, json=body) as resp:
        reply = Reply(resp.status)
        if not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            reply.body = (await resp.text())[:100_000]
            return reply
        async for line in resp.content:
            if line.startswith(b"data: "):
                reply.events.append((time.perf_counter() - t0, line[6:].decode().rstrip("\n")))
                if cut_after is not None and len(reply.events) >= cut_after:
                    resp.close()  # the client goes away mid-stream
                    break
    return reply


def post(url: str, *bodies: Any, path: str = "/v1/completions", cut_after: int | None = None) -> list[Reply]:
    """Send ``bodies`` all at once on one session."""

    async def go() -> list[Reply]:
        async with aiohttp.ClientSession() as session:
            return list(await asyncio.gather(*(_post(session, url, b, path, cut_after) for b in bodies)))

    return asyncio.run(go())


def completion(max_tokens: int, prompt_words: int = 8, **extra: Any) -> dict[str, Any]:
    prompt = " ".join(f"w{i}" for i in range(prompt_words))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    return {**body, "stream_options": {"include_usage": True}, **extra}


def admin(url: str, path: str, body: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="GET" if data is None else "POST")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def metrics(url: str) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    text = opener.open(url + "/metrics", timeout=10).read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample_name: str, **labels: str) -> float:
    name = sample_name.removesuffix("_total").removesuffix("_count").removesuffix("_sum")
    found = [
        s.value
        for s in families[name].samples
        if s.name == sample_name and labels.items() <= s.labels.items()
    ]
    assert len(found) == 1, (sample_name, labels, found)
    return found[0]


def bounds(families: dict[str, Any], name: str) -> list[float]:
    return [float(s.labels["le"]) for s in families[name].samples if s.name == f"{name}_bucket"][:-1]


# -- the wire format ----------------------------------------------------------------------------


def test_streams_completions_and_chat_as_vllm(base):
    (plain,) = post(base, completion(5))
    assert plain.status == 200 and plain.events[-1][1] == "[DONE]"
    events = [json.loads(d) for _, d in plain.events[:-1]]
    assert [e["choices"][0]["finish_reason"] for e in events[:-1]] == [None] * 4 + ["length"]
    assert events[-1]["usage"] == {"prompt_tokens": 8, "completion_tokens": 5, "total_tokens": 13}
    assert len("".join(e["choices"][0]["text"] for e in events[:-1]).split()) == 5
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say four words"}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 4, "stream": True}
    (chat,) = post(base, body, path="/v1/chat/completions")
    events = [json.loads(d) for _, d in chat.events[:-1]]
    assert events[0]["object"] == "chat.completion.chunk"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len("".join(e["choices"][0]["delta"].get("content", "") for e in events).split()) == 4
    (whole,) = post(base, {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 3})
    answer = json.loads(whole.body)
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_refuses_what_vllm_refuses(base):
    too_long, wrong_model = post(base, completion(8190, prompt_words=8), {**completion(2), "model": "x"})
    assert too_long.status == 400 and "maximum context length is 8192" in too_long.body
    assert wrong_model.status == 404
    models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=5).read())
    assert models["data"][0]["id"] == MODEL and models["data"][0]["max_model_len"] == 8192


# -- /metrics -----------------------------------------------------------------------------------


def test_metrics_have_vllm_names_buckets_and_counts(base):
    before = metrics(base)
    n0 = value(before, "vllm:e2e_request_latency_seconds_count", model_name=MODEL, engine="0")
    bodies = [completion(6 + i, prompt_words=20 + i) for i in range(6)]
    replies = post(base, *bodies)
    assert all(r.status == 200 and r.events[-1][1] == "[DONE]" for r in replies)
    m = metrics(base)
    labels = {"model_name": MODEL, "engine": "0"}
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ):
        assert m[name].type == "histogram"
        assert value(m, f"{name}_count", **labels) - value(before, f"{name}_count", **labels) == 6, name
    assert bounds(m, "vllm:time_to_first_token_seconds") == VLLM_TTFT
    assert bounds(m, "vllm:inter_token_latency_seconds") == VLLM_ITL
    assert bounds(m, "vllm:request_time_per_output_token_seconds") == VLLM_ITL
    for name in ("e2e_request_latency", "request_queue_time", "request_prefill_time", "request_decode_time"):
        assert bounds(m, f"vllm:{name}_seconds") == VLLM_REQUEST
    assert bounds(m, "vllm:iteration_tokens_total") == VLLM_ITERATION
    assert bounds(m, "vllm:request_prompt_tokens") == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    delta = {
        name: value(m, name, **labels) - value(before, name, **labels)
        for name in (
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:inter_token_latency_seconds_count",
            "vllm:e2e_request_latency_seconds_count",
        )
    }
    assert delta["vllm:prompt_tokens_total"] == sum(20 + i for i in range(6))
    assert delta["vllm:generation_tokens_total"] == sum(6 + i for i in range(6))
    assert delta["vllm:inter_token_latency_seconds_count"] == sum(
        5 + i for i in range(6)
    )  # one per later token
    assert value(m, "vllm:request_success_total", finished_reason="length", **labels) == n0 + 6
    for name, kind in (
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:num_preemptions", "counter"),
        ("vllm:prefix_cache_queries", "counter"),
        ("vllm:prefix_cache_hits", "counter"),
        ("vllm:request_success", "counter"),
        ("vllm:cache_config_info", "gauge"),
        ("build_info", "gauge"),
    ):
        assert m[name].type == kind, name
    (info,) = m["vllm:cache_config_info"].samples
    assert info.labels["block_size"] == "16" and info.labels["enable_prefix_caching"] == "False"
    assert int(info.labels["num_gpu_blocks"]) > 0 and info.labels["gpu_memory_utilization"] == "0.9"
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
    ):
        (gpu,) = m[name].samples
        assert set(gpu.labels) == DCGM_LABELS and gpu.labels["gpu"] == "0", name
    used, free = m["DCGM_FI_DEV_FB_USED"].samples[0].value, m["DCGM_FI_DEV_FB_FREE"].samples[0].value
    assert used + free == pytest.approx(80 * 1024, abs=2)  # an 80 GB H100, in MiB


def test_disconnect_aborts_the_request(base):
    (cut,) = post(base, completion(4000, prompt_words=4), cut_after=3)
    assert len(cut.events) == 3
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m = metrics(base)
        if value(m, "vllm:num_requests_running", model_name=MODEL, engine="0") == 0:
            break
        time.sleep(0.05)
    assert value(m, "vllm:num_requests_running", model_name=MODEL, engine="0") == 0
    generated = value(m, "vllm:generation_tokens_total", model_name=MODEL, engine="0")
    time.sleep(0.3)  # an aborted request generates nothing more
    assert value(metrics(base), "vllm:generation_tokens_total", model_name=MODEL, engine="0") == generated


# -- admin and faults ---------------------------------------------------------------------------


def test_admin_refuses_without_the_right_token(tmp_path, monkeypatch):
    monkeypatch.delenv("PERFKIT_LAB_ADMIN_TOKEN", raising=False)
    with serving(engine_config=engine_yaml(tmp_path)) as url:
        assert admin(url, "/admin/faults", {"fault": "thermal", "on": True})[0] == 403  # disabled
    monkeypatch.setenv("PERFKIT_LAB_ADMIN_TOKEN", TOKEN)
    with serving(engine_config=engine_yaml(tmp_path)) as url:
        assert admin(url, "/admin/faults", {"fault": "thermal"}, token="wrong")[0] == 401
        assert admin(url, "/admin/faults", {"fault": "thermal"}, token=None)[0] == 401
        assert admin(url, "/admin/config", {"set": {"max_num_seqs": 8}}, token=TOKEN[:-1])[0] == 401
        status, answer = admin(url, "/admin/faults", {"fault": "thermal", "decode_slowdown": 99})
        assert status == 400 and "decode_slowdown" in answer["error"]["message"]
        too_long = {"fault": "long_prompt_tenant", "prompt_tokens": 8192, "max_tokens": 16}
        status, answer = admin(url, "/admin/faults", too_long)
        assert status == 400 and "max_model_len" in answer["error"]["message"]
        status, answer = admin(url, "/admin/faults", {"fault": "surge", "max_tokens": 16384, "rate": 50})
        message = answer["error"]["message"]  # with the default prompt (512) it could never be sent
        assert status == 400 and "surge.max_tokens" in message and "512 (the default)" in message
        assert (
            admin(url, "/admin/faults", {"fault": "surge", "prompt_tokens": 8, "max_tokens": 4000})[0] == 200
        )
        status, answer = admin(url, "/admin/config", {"set": {"max_model_len": 2048}})
        assert status == 409 and "max_model_len" in answer["error"]["message"]
        assert admin(url, "/admin/faults", {"fault": "surge", "on": False})[0] == 200
        status, answer = admin(url, "/admin/faults", {"fault": "meteor"})
        assert status == 400 and "fault" in answer["error"]["message"]
        status, answer = admin(url, "/admin/faults")
        assert status == 200 and not any(f["on"] for f in answer["faults"].values())


def test_thermal_fault_slows_decode_as_the_client_sees(tmp_path, admin_env):
    with serving(engine_config=engine_yaml(tmp_path)) as url:
        (before,) = post(url, completion(60))
        status, _ = admin(url, "/admin/faults", {"fault": "thermal", "on": True, "decode_slowdown": 2.0})
        assert status == 200
        (hot,) = post(url, completion(60))
        m = metrics(url)
    ratio = statistics.median(hot.gaps()) / statistics.median(before.gaps())
    assert 1.5 < ratio < 2.3, ratio  # decode dominates a small batch's step: close to the 2x slowdown
    (clock,) = m["DCGM_FI_DEV_SM_CLOCK"].samples
    assert clock.value == pytest.approx(1980 * 0.8, abs=2)  # H100 SXM under load, 20 % throttled


def test_kv_pressure_takes_blocks_and_shows_in_memory(tmp_path, admin_env):
    # a small KV pool (gpu_memory_utilization 0.3: ~64k tokens after the 15 GiB of weights) that twelve
    # 3,200-token requests fit in, until another tenant takes 90 % of it
    labels = {"model_name": MODEL, "engine": "0"}
    load = [completion(200, prompt_words=3000) for _ in range(12)]
    with serving(engine_config=engine_yaml(tmp_path, gpu_memory_utilization=0.3), speed=20) as url:
        assert all(r.events[-1][1] == "[DONE]" for r in post(url, *load))
        calm = metrics(url)
        assert value(calm, "vllm:num_preemptions_total", **labels) == 0
        assert (
            admin(url, "/admin/faults", {"fault": "kv_pressure", "on": True, "kv_reserved_frac": 0.9})[0]
            == 200
        )
        pressed = metrics(url)
        assert all(r.events[-1][1] == "[DONE]" for r in post(url, *load))
        after = metrics(url)
    used = [m["DCGM_FI_DEV_FB_USED"].samples[0].value for m in (calm, pressed)]
    assert used[1] > used[0] + 4096  # the other tenant's memory (90 % of a ~8 GiB pool) shows on the board
    assert value(after, "vllm:num_preemptions_total", **labels) > 0
    assert value(after, "vllm:kv_cache_usage_perc", **labels) > 0.85  # the tenant's 90 % count as used


def test_deploy_bumps_the_build_version_and_rolls_back(tmp_path, admin_env):
    def version(url: str) -> str:
        (sample,) = metrics(url)["build_info"].samples
        return sample.labels["version"]

    with serving(engine_config=engine_yaml(tmp_path)) as url:
        assert version(url) == "0.10.1"
        assert admin(url, "/admin/faults", {"fault": "deploy", "on": True})[0] == 200
        assert version(url) == "0.10.1+perfkit.1"
        assert json.loads(urllib.request.urlopen(url + "/version", timeout=5).read())["version"] == version(
            url
        )
        assert admin(url, "/admin/faults", {"fault": "deploy", "on": False})[0] == 200
        assert version(url) == "0.10.1"


def test_config_change_applies_live(tmp_path, admin_env):
    log = tmp_path / "vllm.log"
    with serving(engine_config=engine_yaml(tmp_path), log_file=log) as url:
        prompts = [completion(2, prompt_words=200) for _ in range(3)]
        for body in prompts:  # one at a time: the first fills the cache the others hit
            post(url, body)
        labels = {"model_name": MODEL, "engine": "0"}
        assert value(metrics(url), "vllm:prefix_cache_hits_total", **labels) == 0
        status, answer = admin(url, "/admin/config", {"set": {"enable_prefix_caching": True}})
        assert status == 200, answer
        (info,) = metrics(url)["vllm:cache_config_info"].samples
        assert info.labels["enable_prefix_caching"] == "True"
        for body in prompts:
            post(url, body)
        hits = value(metrics(url), "vllm:prefix_cache_hits_total", **labels)
        assert hits >= 2 * 192  # the 2nd and 3rd prompt hit their first 12 whole 16-token blocks
        status, answer = admin(url, "/admin/config", {"set": {"block_size": 7}})
        assert status == 400 and "block_size" in answer["error"]["message"]
    now = datetime.now(UTC)
    records = parse_lines(log.read_text().splitlines(), window=Window(now - HOUR, now + HOUR)).records
    assert (
        engine_config_from_logs(records)["prefix_caching"] is True
    )  # the settings in force, as perfkit reads them


async def _events(resp: aiohttp.ClientResponse, upto: int | None = None) -> list[str]:
    out = []
    async for line in resp.content:
        if line.startswith(b"data: "):
            out.append(line[6:].decode().rstrip("\n"))
            if len(out) == upto:
                break
    return out


def test_a_config_change_drops_what_can_never_fit_and_counts_its_preemptions(tmp_path, admin_env):
    labels = {"model_name": MODEL, "engine": "0"}
    shrink = {"set": {"max_model_len": 1024, "gpu_memory_utilization": 0.212}}

    async def go(url: str) -> tuple[list[str], list[str], Reply]:
        async with aiohttp.ClientSession() as session:
            body = {"model": MODEL, "prompt": "hello world", "max_tokens": 8000, "stream": True}
            async with session.post(url + "/v1/completions", json=body) as resp:
                head = await _events(resp, 3)  # running
                assert (await asyncio.to_thread(admin, url, "/admin/config", shrink))[0] == 200
                dropped = head + await asyncio.wait_for(_events(resp), 10)  # never a silent hang
            async with session.post(url + "/v1/completions", json=completion(900)) as resp:
                head = await _events(resp, 3)  # a new cache restarts it: preempted, recomputed
                on = {"set": {"enable_prefix_caching": True}}
                assert (await asyncio.to_thread(admin, url, "/admin/config", on))[0] == 200
                preempted = head + await asyncio.wait_for(_events(resp), 20)
            later = await asyncio.wait_for(_post(session, url, completion(5), "/v1/completions", None), 10)
        return dropped, preempted, later

    with serving(engine_config=engine_yaml(tmp_path), speed=10) as url:
        dropped, preempted, later = asyncio.run(go(url))
        m = metrics(url)
    assert dropped[-1] == "[DONE]" and len(dropped) < 100
    error = json.loads(dropped[-2])["error"]  # vLLM's streamed error: {"error": {...}}, then [DONE]
    assert error["code"] == 400 and "max_model_len 1024" in error["message"]
    assert preempted[-1] == "[DONE]" and len([e for e in preempted if '"text":"' in e]) == 900
    assert later.events[-1][1] == "[DONE]"
    assert value(m, "vllm:request_success_total", finished_reason="abort", **labels) == 1
    assert value(m, "vllm:num_preemptions_total", **labels) >= 1  # the restart's, not a step's


def _raw(port: int, head: str, *parts: bytes, auth: bytes = b"") -> tuple[int, dict[str, Any]]:
    """One request over a plain socket, its body in ``parts`` sent 50 ms apart (separate TCP segments)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        size = sum(map(len, parts))
        host = (
            f"Host: 127.0.0.1:{port}\r\n"  # HTTP/1.1 requires it (aiohttp >= 3.13 refuses a request without)
        )
        sock.sendall(
            f"{head}\r\n{host}Content-Length: {size}\r\nConnection: close\r\n".encode() + auth + b"\r\n"
        )
        for part in parts:
            time.sleep(0.05)
            sock.sendall(part)
        data = b"".join(iter(lambda: sock.recv(65536), b""))
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def test_split_and_hostile_bodies_get_answers_and_the_banner_names_the_token_variable(tmp_path, admin_env):
    err = tmp_path / "stderr"
    args = ["--engine-config", str(engine_yaml(tmp_path)), "--port", "0", "--log-file", str(tmp_path / "log")]
    with open(err, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "perfkit.app.cli.serve", *args], stdout=subprocess.PIPE, stderr=sink, text=True)  # fmt: skip
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert "admin on, token from $PERFKIT_LAB_ADMIN_TOKEN" in line and TOKEN not in line, line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        bearer = f"Authorization: Bearer {TOKEN}\r\n".encode()
        body = json.dumps({"fault": "thermal", "on": True, "decode_slowdown": 1.5}).encode()
        status, answer = _raw(port, "POST /admin/faults HTTP/1.1", body[:9], body[9:], auth=bearer)
        assert status == 200 and answer["faults"]["thermal"] == {"on": True, "decode_slowdown": 1.5, "clock_drop": 0.2}  # fmt: skip
        for path in ("/v1/completions", "/admin/faults"):
            for hostile in (b'{"max_tokens": ' + b"9" * 5000 + b"}", b"[" * 30000):
                status, answer = _raw(port, f"POST {path} HTTP/1.1", hostile, auth=bearer)
                assert status == 400 and "invalid JSON" in answer["error"]["message"], (path, answer)
                assert answer["error"]["type"] == "BadRequestError"
        status, answer = _raw(
            port, "POST /admin/faults HTTP/1.1", body, auth=b"Authorization: Bearer \xff\xfe\r\n"
        )
        assert status == 401 and answer["error"]["code"] == 401
        sims = metrics(f"http://127.0.0.1:{port}")["perfkit_lab_servesim_speed"].samples
        assert [s.value for s in sims] == [1.0]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "Traceback" not in err.read_text(), err.read_text()[-2000:]


def test_an_admin_token_given_as_the_env_name_is_refused_without_being_echoed(tmp_path):
    secret = "f3a9-41c2-9e8b-SECRET"
    cmd = [sys.executable, "-m", "perfkit.app.cli.serve", "--engine-config", str(engine_yaml(tmp_path))]
    proc = subprocess.run([*cmd, "--port", "0", "--admin-token-env", secret], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (
        proc.returncode == 2
        and "--admin-token-env" in proc.stderr
        and "NAME of the environment" in proc.stderr
    )
    assert secret not in proc.stderr + proc.stdout and "SECRET" not in proc.stderr + proc.stdout
    cfg = load_config(engine_yaml(tmp_path))
    assert banner(cfg, "http://127.0.0.1:1", 1.0, "MY_TOKEN", False).endswith(
        "admin off: $MY_TOKEN is not set"
    )


def test_network_delay_is_seen_by_the_client_only(tmp_path, admin_env):
    labels = {"model_name": MODEL, "engine": "0"}
    with serving(engine_config=engine_yaml(tmp_path)) as url:
        (plain,) = post(url, completion(3))
        before = value(metrics(url), "vllm:time_to_first_token_seconds_sum", **labels)
        assert admin(url, "/admin/faults", {"fault": "network_delay", "on": True, "delay_ms": 300})[0] == 200
        (slow,) = post(url, completion(3))
        after = value(metrics(url), "vllm:time_to_first_token_seconds_sum", **labels)
    assert slow.ttft() - plain.ttft() > 0.25  # the client waits the gateway's 300 ms more
    assert after - before < 0.1  # the server's own TTFT (one short prefill step) does not see it


def test_surge_adds_server_side_traffic(tmp_path, admin_env):
    with serving(engine_config=engine_yaml(tmp_path), speed=10) as url:
        on = {"fault": "surge", "on": True, "rate": 20, "prompt_tokens": 64, "max_tokens": 4}
        assert admin(url, "/admin/faults", on)[0] == 200
        time.sleep(1.0)  # 10 virtual seconds: ~200 arrivals
        assert admin(url, "/admin/faults", {"fault": "surge", "on": False})[0] == 200
        time.sleep(0.3)
        m = metrics(url)
    done = value(m, "vllm:e2e_request_latency_seconds_count", model_name=MODEL, engine="0")
    assert 100 < done < 320, done  # Poisson(200) is within 100..320 with overwhelming probability


# -- virtual time -------------------------------------------------------------------------------


def test_speed_runs_virtual_time_faster_with_metrics_and_logs_in_virtual_seconds(tmp_path):
    log = tmp_path / "vllm.log"
    with serving(engine_config=engine_yaml(tmp_path), speed=10, log_file=log) as url:
        (reply,) = post(url, completion(400))
        m = metrics(url)
        time.sleep(1.2)  # 12 virtual seconds: at least one stats line
    labels = {"model_name": MODEL, "engine": "0"}
    e2e = value(m, "vllm:e2e_request_latency_seconds_sum", **labels)
    ttft = value(m, "vllm:time_to_first_token_seconds_sum", **labels)
    wall = reply.events[-1][0]
    # 10x faster than the virtual time it reports: never faster (virtual time only ever stands still),
    # slower by what the machine adds per step (held back; ~1.3 on a busy 2-core machine), far from 10
    assert 0.95 < wall * 10 / e2e < 2.5, (wall, e2e)
    assert ttft < e2e / 50  # TTFT is one prefill step; e2e is 400 decode steps
    text = log.read_text()
    assert "vLLM API server version 0.10.1" in text
    now = datetime.now(UTC)
    parsed = parse_lines(text.splitlines(), window=Window(now - HOUR, now + HOUR))
    assert parsed.stats.height >= 1
    row = parsed.stats.row(0, named=True)
    assert row["generation_tokens_per_s"] > 0  # the 400 tokens fell in the first 10 virtual seconds
    engine_lines = parsed.records.filter(
        parsed.records["message"].str.contains("Initializing a V1 LLM engine")
    )
    assert engine_lines.height == 1


@pytest.mark.parametrize(
    ("settings", "options", "named"),
    [
        ({"gpu": "h100-pcie-9000"}, [], "gpu"),  # an unknown GPU
        ({"model": "llama-3.1-70b"}, [], "model"),  # 140 GB of weights on one 80 GB GPU
        ({}, ["--speed", "0.5"], "--speed"),  # virtual time slower than the wall clock
        ({}, ["--admin-token-env", "NOT A NAME"], "--admin-token-env"),
    ],
)
def test_bad_engine_config_or_option_names_the_field(tmp_path, settings, options, named):
    bad = engine_yaml(tmp_path, **settings)
    proc = subprocess.run(
        [sys.executable, "-m", "perfkit.app.cli.serve", "--engine-config", str(bad), "--port", "0", *options],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and named in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_fault_board_stacks_deploys_and_rolls_back_one_at_a_time():
    board = FaultBoard("0.10.1")
    board.apply({"fault": "deploy", "on": True, "step_slowdown": 1.5})
    board.apply({"fault": "deploy", "on": True, "step_slowdown": 2.0, "version": "v2"})
    assert (board.version, board.get("deploy", "step_slowdown")) == ("v2", 2.0)
    board.apply({"fault": "deploy", "on": False})
    assert (board.version, board.get("deploy", "step_slowdown")) == ("0.10.1+perfkit.1", 1.5)
    board.apply({"fault": "deploy", "on": False})
    assert (board.version, board.get("deploy", "step_slowdown")) == ("0.10.1", None)
    for body in (
        {"fault": "thermal", "decode_slowdown": "2"},  # a string is not a number
        {"fault": "surge", "max_tokens": 1.5},  # nor a fraction a token count
        {"fault": "thermal", "on": False, "decode_slowdown": 2},
        {"fault": "deploy", "version": 'a"b'},
        ["thermal"],
    ):
        with pytest.raises(FaultError) as err:
            board.apply(body)
        assert err.value.status == 400


def test_the_virtual_clock_stands_at_a_late_steps_end_and_never_runs_backwards():
    """A request that arrives while the engine runs late arrives at the step's end, not past it:
    before, it was stamped past the end and hold() set the clock back, so the next step was scheduled
    before the request arrived, its queue time was negative, and vLLM's queue-time _sum fell
    (Prometheus read a counter reset 45 times in a 25-minute drill window, and increase() tripled
    the mean). The lateness itself is given up, not added to the engine's time."""
    from perfkit.lab.servesim.server import VirtualClock

    clock = VirtualClock(1000.0)  # 1 ms of wall time is a virtual second
    end = clock.now() + 1.0  # a step of one virtual second is in flight
    clock.run_until(end)
    time.sleep(0.02)  # the engine reaches the step's end ~19 virtual seconds late
    arrival = clock.now()  # meanwhile a request arrives
    assert arrival == end
    clock.hold(end)
    assert clock.held > 0.015  # the lateness is given up, and counted
    after = clock.now()  # the next step starts here: not before the arrival, and without the lateness
    assert end <= after < end + 5.0
    stamps = [clock.now() for _ in range(1000)]
    assert stamps == sorted(stamps) and stamps[0] >= after


def test_the_stats_log_waits_for_a_late_engine_instead_of_spinning():
    """While a late step is in flight the clock stands at its end; a stats line due after that end
    (in wall time already past) is not due yet, and the stats task must yield until the engine
    catches up. It spun instead (the due instants were a generator, always truthy), starving the
    event loop, so the engine never delivered its step: /metrics and /admin timed out."""
    import io
    import threading
    import types

    from perfkit.lab.serve_clock import Waker
    from perfkit.lab.servesim.metrics import STATS_INTERVAL_S, StatsLog
    from perfkit.lab.servesim.server import SimServer, VirtualClock

    ran: list[int] = []

    async def scenario() -> None:
        clock = VirtualClock(1000.0)
        clock.run_until(STATS_INTERVAL_S - 1.0)  # a step ending a second before the stats line
        await asyncio.sleep(0.05)  # the engine is late: the line's wall time has passed
        fake = types.SimpleNamespace(
            _waker=Waker(asyncio.get_running_loop()), clock=clock, metrics=None,
            log=StatsLog(io.StringIO(), time.time(), 1),
        )  # fmt: skip
        task = asyncio.create_task(SimServer._stats(fake))  # type: ignore[arg-type]
        for i in range(20):  # the event loop still runs other tasks
            await asyncio.sleep(0.001)
            ran.append(i)
        task.cancel()
        fake._waker.close()

    thread = threading.Thread(target=asyncio.run, args=(scenario(),), daemon=True)
    thread.start()
    thread.join(timeout=10.0)
    assert ran == list(range(20)), "the stats task never yielded while the clock stood still"
