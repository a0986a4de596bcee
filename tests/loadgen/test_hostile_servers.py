"""perfkit bench against servers that are not vLLM: no per-chunk usage, an echo of the API key,
a gzip gateway, NaN in /metrics, and hostile ones (issue 22): a key echoed whole past the cut of the
error detail, a /version that is deep, endless or a gzip bomb, SSE without event boundaries, a stream
that never stops, a usage that lies, a redirect loop. Each is a small aiohttp app on 127.0.0.1 (a
real server, in a thread); every hostile answer is synthetic, written here."""

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
def _serve(handler, metrics=None, version=None) -> Iterator[str]:
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    if metrics:
        app.router.add_get("/metrics", metrics)
    if version:
        app.router.add_get("/version", version)
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


# -- hostile servers (issue 22) -----------------------------------------------------------------

LONG_KEY = (
    "eyJhbGciOiJIUzI1NiJ9." + "QmVhcmVyVG9rZW5QYXlsb2Fk" * 12 + ".c2lnbmF0dXJlc2lnbmF0dXJl"
)  # a JWT's shape, 330 chars


def _records(tmp_path: Path):
    import pyarrow.parquet as pq

    return pq.read_table(tmp_path / "r.requests.parquet").to_pylist()


def _no_piece_of(key: str, tmp_path: Path) -> None:
    """Neither the key nor any 24-character piece of it is in the result or in any record's detail."""
    texts = [(tmp_path / "r.json").read_text()] + [str(r["detail"]) for r in _records(tmp_path)]
    for text in texts:
        for k in range(0, len(key) - 24, 8):
            assert key[k : k + 24] not in text, text[:300]


def _ok_stream(n: int) -> bytes:
    return b"".join(_chunk("w ", {"prompt_tokens": 4, "completion_tokens": i + 1}) for i in range(n)) + (
        b"data: [DONE]\n\n"
    )


async def _good(request: web.Request) -> web.Response:
    body = await request.json()
    return web.Response(body=_ok_stream(body["max_tokens"]), headers={"Content-Type": "text/event-stream"})


async def _echo_long_key_401(request: web.Request) -> web.Response:
    return web.json_response(
        {"error": {"message": f"invalid credentials {request.headers.get('Authorization')}"}}, status=401
    )


async def _echo_long_key_sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    err = {
        "error": {"message": f"upstream refused header Authorization: {request.headers.get('Authorization')}"}
    }
    await resp.write(f"data: {json.dumps(err)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.mark.parametrize("handler", [_echo_long_key_401, _echo_long_key_sse], ids=["401", "sse-error"])
def test_a_long_key_echoed_is_scrubbed_before_the_detail_is_cut(tmp_path, handler):
    """S3: a 330-character key (a JWT) echoed in a 401 body or an SSE error event: cut to 160/120
    characters before scrubbing, its head landed in the records."""
    with _serve(handler) as url:
        doc = _bench(url, tmp_path, metrics_url="", api_key=LONG_KEY)
    assert doc["failed"] == 8
    details = {r["detail"] for r in _records(tmp_path)}
    assert all("<api key>" in d or "[redacted]" in d for d in details), details
    _no_piece_of(LONG_KEY, tmp_path)


def _deep_version(request: web.Request) -> web.Response:
    return web.Response(body=b"[" * 200_000 + b"]" * 200_000, content_type="application/json")


async def _endless_version(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(b'{"version": "')
    block = b"x" * 65536
    while True:  # until the client hangs up
        await resp.write(block)


_BOMB = gzip.compress(b'{"version": "' + b"0" * (64 * 2**20) + b'"}', 9)  # 64 MB in ~64 KB


async def _bomb_version(request: web.Request) -> web.Response:
    return web.Response(body=_BOMB, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})


async def _deep_version_async(request: web.Request) -> web.Response:
    return _deep_version(request)


@pytest.mark.parametrize(
    "version", [_deep_version_async, _endless_version, _bomb_version], ids=["deep", "endless", "gzip-bomb"]
)
def test_a_hostile_version_answer_never_loses_the_run(tmp_path, version):
    """D1, M2: /version nested 200,000 deep (RecursionError after the whole run: no RESULT.json),
    endless, or a 64 MB gzip bomb: read with a cap after decompression, the run's result is written."""
    import resource
    import time

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with _serve(_good, version=version) as url:
        doc = _bench(url, tmp_path, metrics_url="")
    assert time.perf_counter() - t0 < 30
    assert doc["completed"] == 8 and doc["meta"]["server_version"] is None
    assert json.loads((tmp_path / "r.json").read_text())["completed"] == 8
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, grown_mb  # the bomb whole is 64 MB, the endless body unbounded


async def _version_ok(request: web.Request) -> web.Response:
    return web.json_response({"version": "0.11.0"})


def test_a_plain_version_is_recorded(tmp_path):
    with _serve(_good, version=_version_ok) as url:
        doc = _bench(url, tmp_path, metrics_url="")
    assert doc["meta"]["server_version"] == "0.11.0"


async def _endless_line(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'data: {"choices": [{"text": "')
    while True:
        await resp.write(b"w" * 16384)
        await asyncio.sleep(0)


async def _endless_data_lines(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    while True:  # data: lines with no blank line between them: one event that never ends
        await resp.write(b'data: {"choices": [{"text": "w"}]}\n' * 256)
        await asyncio.sleep(0)


async def _past_max_tokens(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    while True:  # one token a chunk, never [DONE]
        await resp.write(_chunk("w ") * 64)
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    "handler", [_endless_line, _endless_data_lines, _past_max_tokens], ids=["line", "data-lines", "past-max"]
)
def test_a_stream_that_never_ends_is_a_counted_failure_in_bounded_time(tmp_path, handler):
    """M3, M4: an SSE line or event without end, or a stream past max_tokens, grew the client's
    buffers until --timeout (405 MB in 30 s; ~1 GB per worker): now a malformed failure, closed."""
    import time

    t0 = time.perf_counter()
    with _serve(handler) as url:
        doc = _bench(url, tmp_path, metrics_url="", timeout_s=60.0)
    assert time.perf_counter() - t0 < 20  # not the 60 s timeout
    assert doc["errors"]["by_kind"] == {"malformed": 8}
    assert all(r["error"] == "malformed" for r in _records(tmp_path))


async def _lying_usage(request: web.Request) -> web.Response:
    body = await request.json()
    n = body["max_tokens"]
    data = b"".join(_chunk("w ") for _ in range(n))
    data += _chunk("", {"prompt_tokens": 4, "completion_tokens": 10_000_000}, choices=False)
    return web.Response(body=data + b"data: [DONE]\n\n", headers={"Content-Type": "text/event-stream"})


def test_usage_claiming_more_than_was_asked_is_a_protocol_failure(tmp_path):
    """W2: 10 M completion tokens for a 16-token request made a valid run at 106 M tok/s."""
    with _serve(_lying_usage) as url:
        doc = _bench(url, tmp_path, metrics_url="")
    assert doc["errors"]["by_kind"] == {"malformed": 8}
    assert doc["total_output_tokens"] == 0 and not doc["validity"]["valid"]
    assert "10,000,000" in _records(tmp_path)[0]["detail"]


async def _redirect_loop(request: web.Request) -> web.Response:
    raise web.HTTPTemporaryRedirect("/v1/completions")


def test_a_redirect_loop_is_named(tmp_path):
    """U: reported as "Can not write request body"."""
    with _serve(_redirect_loop) as url:
        _bench(url, tmp_path, metrics_url="")
    details = {r["detail"] for r in _records(tmp_path)}
    assert details == {f"redirect loop at {url}/v1/completions (10 redirects)"}


async def _split_metrics(request: web.Request) -> web.StreamResponse:
    """A /metrics page in two TCP writes 50 ms apart: the second holds the histogram's count."""
    name = "vllm:time_to_first_token_seconds"
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    await resp.write(f'# TYPE {name} histogram\n{name}_bucket{{le="+Inf"}} 3\n'.encode())
    await asyncio.sleep(0.05)
    await resp.write(f"{name}_sum 0.3\n{name}_count 3\nvllm:num_requests_running 2\n".encode())
    return resp


async def _endless_metrics(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    while True:
        await resp.write(b"# padding " + b"x" * 65536 + b"\n")


def _scrape(url: str):
    import aiohttp

    from perfkit.loadgen.server_view import ServerView

    async def once():
        view = ServerView(url + "/metrics")
        async with aiohttp.ClientSession() as session:
            await view.scrape(session)
        return view

    return asyncio.run(once())


def test_a_metrics_page_in_two_writes_is_read_whole():
    """W1: content.read(n) returned what was buffered: the page was cut after its first write."""
    with _serve(_good, metrics=_split_metrics) as url:
        view = _scrape(url)
    assert view.errors == [] and view.samples["running"] == [2.0]
    assert view.last is not None and view.last.get("vllm:time_to_first_token_seconds_count") is not None


def test_an_endless_metrics_page_stops_at_the_cap():
    import time

    t0 = time.perf_counter()
    with _serve(_good, metrics=_endless_metrics) as url:
        view = _scrape(url)
    assert time.perf_counter() - t0 < 10
    assert view.scrapes == 0 and "over 16,777,216 bytes" in view.errors[0]
