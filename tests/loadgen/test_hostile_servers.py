"""perfkit bench against servers that are not vLLM: no per-chunk usage, an echo of the API key,
a gzip gateway, NaN in /metrics. Each is a small aiohttp app on 127.0.0.1 (a real server, in a thread)."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from perfkit.loadgen.bench import BenchOptions, run_bench
from perfkit.loadgen.shapes import concurrency_plan

KEY = "sk-test-SECRET-4f9a2c"


def _chunk(text: str, usage: dict | None = None, choices: bool = True) -> bytes:
    obj: dict = {"object": "text_completion", "choices": [{"index": 0, "text": text}] if choices else []}
    if usage:
        obj["usage"] = usage
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _no_continuous_usage(request: web.Request) -> web.StreamResponse:
    """OpenAI-style: one token a chunk every 10 ms, usage only in a final chunk with no choices."""
    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await asyncio.sleep(0.03)
    n = body["max_tokens"]
    for i in range(n):
        await resp.write(_chunk("w "))
        if i < n - 1:
            await asyncio.sleep(0.01)
    await resp.write(_chunk("", {"prompt_tokens": 4, "completion_tokens": n}, choices=False))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _echo_key(request: web.Request) -> web.Response:
    return web.json_response(
        {"error": {"message": f"bad key: {request.headers.get('Authorization')}"}}, status=401
    )


async def _gzip(request: web.Request) -> web.Response:
    data = gzip.compress(_chunk("w ") + b"data: [DONE]\n\n")
    return web.Response(body=data, headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})


async def _nan_metrics(request: web.Request) -> web.Response:
    name = "vllm:time_to_first_token_seconds"
    text = f'# TYPE {name} histogram\n{name}_bucket{{le="+Inf"}} 1\n{name}_sum NaN\n{name}_count 1\n'
    return web.Response(text=text, content_type="text/plain")


@contextmanager
def _serve(handler, metrics=None) -> Iterator[str]:
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    if metrics:
        app.router.add_get("/metrics", metrics)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def _bench(url: str, tmp_path: Path, **kw):
    plan = concurrency_plan(8, 4, 16, 4)
    opts = BenchOptions(url=url, model="m", plan=plan, out=tmp_path / "r.json", concurrency=4, **kw)
    return run_bench(opts)


def test_usage_only_in_the_last_chunk_is_a_total_not_a_chunk(tmp_path):
    with _serve(_no_continuous_usage) as url:
        doc = _bench(url, tmp_path, metrics_url="")
    assert doc["completed"] == 8 and doc["total_output_tokens"] == 8 * 16
    assert 9.0 <= doc["median_itl_ms"] <= 13.0  # not 0: the usage chunk carries no token of its own
    assert doc["tokens_per_chunk"]["mean"] == pytest.approx(1.0)
    assert doc["token_mismatches"] == 0


def test_an_api_key_the_server_echoes_is_not_written(tmp_path, monkeypatch):
    with _serve(_echo_key) as url:
        doc = _bench(url, tmp_path, metrics_url="", api_key=KEY)
    assert doc["errors"]["by_kind"] == {"http_4xx": 8}
    for f in tmp_path.iterdir():
        assert KEY.encode() not in f.read_bytes(), f.name


def test_a_compressed_stream_is_named_not_a_disconnect(tmp_path):
    with _serve(_gzip) as url:
        doc = _bench(url, tmp_path, metrics_url="")
    assert doc["errors"]["by_kind"] == {"malformed": 8}


def test_nan_in_the_servers_metrics_does_not_lose_the_result(tmp_path):
    with _serve(_no_continuous_usage, _nan_metrics) as url:
        doc = _bench(url, tmp_path)
    assert doc["completed"] == 8
    assert json.loads((tmp_path / "r.json").read_text())["completed"] == 8
