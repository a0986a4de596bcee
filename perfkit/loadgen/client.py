"""The load generator: streams requests to an OpenAI-compatible server and times every chunk.

Definitions are ``reference/loadtest.md`` §6 (vLLM's, made chunk-aware):

* A chunk's time is taken when its bytes arrive, before any JSON is parsed: every event of one
  network read shares that read's arrival time.
* TTFT is the first chunk carrying a generated token: text, or a usage delta above zero. Chat's
  opening role-only chunk does not count.
* E2EL is the last chunk carrying a token. The trailing usage chunk and ``[DONE]`` do not count.
* Tokens per chunk come from the server's usage deltas. The client asks for them with
  ``stream_options.continuous_usage_stats``; without them, each chunk counts one token, and the
  final usage's total is spread evenly over the chunks when the two disagree.
* Output tokens are the server's ``usage.completion_tokens`` (``include_usage``). Where the
  client's count differs, the request is counted in ``token_mismatches``.

The plan says when each request goes (:mod:`perfkit.loadgen.shapes`). With ``concurrency`` set,
at most that many requests are in flight: a closed loop when the plan's arrivals are all at zero,
or vLLM's ``--max-concurrency`` cap on an arrival process. Every request sent gets a record
(:mod:`perfkit.loadgen.records`), with its error kind when it failed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np
from aiohttp.client_proto import ResponseHandler

from perfkit.core.secrets import redact_text
from perfkit.loadgen.records import Record, RecordSink

MAX_ERROR_BODY = 2048
MAX_EVENT_BYTES = 2**20
"""Longest SSE event (or line) held waiting for its blank line: a vLLM chunk is a few hundred bytes
(a few KB with logprobs); more without an event boundary is not SSE (it grew until the timeout)."""
TOKEN_SLACK = 16
"""Tokens past ``max_tokens`` still believed (a server counting a stop token or a closing special
token); past ``max_tokens`` + this, a stream or a usage count is a protocol failure."""
BYTES_PER_TOKEN = 4096
"""Most bytes a response may carry per token asked for (plus :data:`BASE_RESPONSE_BYTES`): a
vLLM chunk of one token with continuous usage is ~300 bytes, so this is ten times that and more."""
BASE_RESPONSE_BYTES = 2**18
MAX_IN_FLIGHT = 4096
"""An open-loop run never holds more requests in flight than this. Past it the client is the
bottleneck, and the schedule lag it records says so."""
PROGRESS_EVERY_S = 0.5
RECENT = 2000  # TTFTs kept for the live percentiles
MAX_TOKENS = 10_000_000  # a token count above this in a server's usage is not believed


@dataclass(frozen=True)
class Target:
    url: str  # base URL, e.g. http://127.0.0.1:8000
    model: str
    endpoint: str = "completions"  # or "chat"
    api_key: str | None = None  # the value, resolved from an env var by the caller; never written
    timeout_s: float = 600.0  # one request, start to end
    stall_s: float = 60.0  # no bytes for this long mid-stream: a stall
    ignore_eos: bool = True
    # X-Request-Id: perfkit-<run_id>-<i>. vLLM takes it as the request's id (its logs name it), so a
    # request in the records can be found in the server's logs; the reference server's timing log too
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"


@dataclass
class Live:
    """What the progress line shows, updated as requests finish."""

    sent: int = 0
    done: int = 0
    errors: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)
    recent_ttft: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    errors_by_kind: dict[str, int] = field(default_factory=dict)

    def snapshot(self) -> dict[str, Any]:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        ttft = np.asarray(self.recent_ttft, dtype=float)
        return {
            "elapsed_s": elapsed,
            "sent": self.sent,
            "done": self.done,
            "errors": self.errors,
            "rate": self.done / elapsed,
            "tokens_per_s": self.tokens / elapsed,
            "p50_ttft_ms": float(np.percentile(ttft, 50) * 1000) if ttft.size else None,
            "p99_ttft_ms": float(np.percentile(ttft, 99) * 1000) if ttft.size else None,
            "errors_by_kind": dict(self.errors_by_kind),
        }


def payload(target: Target, prompt: str, output_tokens: int) -> bytes:
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": int(output_tokens),
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "temperature": 0.0,
    }
    if target.ignore_eos:
        body["ignore_eos"] = True  # vLLM's extension: generate exactly max_tokens
    if target.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body).encode()


def _text(obj: dict[str, Any], chat: bool) -> str:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    c = choices[0]
    if chat:
        delta = c.get("delta")
        if not isinstance(delta, dict):
            return ""
        return str(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or "")
    return str(c.get("text") or "")


def scrub(text: str, key: str | None = None) -> str:
    """``text`` (a server's error, whole: scrub BEFORE cutting it) without the API key ``key`` and
    without anything credential-shaped (:func:`~perfkit.core.secrets.redact_text`). A server that
    echoes the Authorization header hands the key back; a body cut at :data:`MAX_ERROR_BODY` may end
    in its first part, which is removed too (8 characters or more)."""
    if key:
        text = text.replace(key, "<api key>")
        for n in range(min(len(key) - 1, len(text)), 7, -1):  # the key's head at the text's end
            if text.endswith(key[:n]):
                text = text[:-n] + "<api key>"
                break
    return redact_text(text)


class _Stream:
    """The SSE parser of one response: events split on blank lines, timed by their read."""

    def __init__(
        self, rec: Record, sent: float, chat: bool, max_tokens: int | None = None, key: str | None = None
    ) -> None:
        self.rec, self.sent, self.chat, self.key = rec, sent, chat, key
        self.buf = bytearray()
        self.scanned = 0  # bytes of buf already searched for an event boundary
        self.last: float | None = None
        self.usage_seen = False
        self.usage_tokens = 0
        self.done = False
        self.max_tokens, self.received, self.stop = max_tokens, 0, False  # stop: close the response
        self.token_limit = None if max_tokens is None else max_tokens + TOKEN_SLACK
        self.byte_limit = None if max_tokens is None else BASE_RESPONSE_BYTES + BYTES_PER_TOKEN * max_tokens

    def _refuse(self, why: str, kind: str = "malformed") -> None:
        self.rec.fail(kind, why)
        self.stop = True

    def feed(self, data: bytes, now: float) -> None:
        """Parse the events ``data`` completes. Each byte is searched once (the buffer holds only
        an unfinished event, at most :data:`MAX_EVENT_BYTES`)."""
        self.received += len(data)
        if self.byte_limit is not None and self.received > self.byte_limit:
            self._refuse(
                f"the response is over {self.byte_limit:,} bytes for max_tokens {self.max_tokens}: "
                "the server does not stop"
            )
            return
        if self.buf.endswith(b"\r") and data.startswith(b"\n"):
            self.buf[-1:] = b""  # a CRLF split between two reads
            self.scanned = max(0, self.scanned - 1)
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        self.buf += data
        start = 0
        while not self.stop:
            idx = self.buf.find(b"\n\n", max(start, self.scanned - 1))
            if idx < 0:
                break
            event = bytes(self.buf[start:idx])
            start, self.scanned = idx + 2, idx + 2
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._data(line[5:].strip(), now)
                    if self.stop:
                        return
        if start:
            del self.buf[:start]
        self.scanned = len(self.buf)
        if len(self.buf) > MAX_EVENT_BYTES:
            self._refuse(f"an SSE event (or line) is over {MAX_EVENT_BYTES:,} bytes without an end")

    def _data(self, raw: bytes, now: float) -> None:
        if raw == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(raw)
        except Exception:  # not JSON, or nested past the parser's depth: hostile or broken
            # scrubbed before it is cut: a secret cut in half is not found afterwards
            self._refuse(f"event is not JSON: {scrub(repr(raw[:MAX_ERROR_BODY]), self.key)[:60]}")
            return
        if not isinstance(obj, dict):
            self._refuse("event is not a JSON object")
            return
        if "error" in obj and not obj.get("choices"):
            error = scrub(str(obj.get("error"))[:MAX_ERROR_BODY], self.key)
            self._refuse(f"error event in stream: {error[:120]}", "http_5xx")
            return
        choices = obj.get("choices")
        tokens = 0
        usage = obj.get("usage")
        if isinstance(usage, dict):
            done_tokens = usage.get("completion_tokens")
            if (
                isinstance(done_tokens, int)
                and self.token_limit is not None
                and done_tokens > self.token_limit
            ):
                self._refuse(
                    f"usage claims {min(done_tokens, MAX_TOKENS * 10):,} completion tokens for max_tokens "
                    f"{self.max_tokens}: the usage is not believed"
                )
                return
            if isinstance(done_tokens, int) and 0 <= done_tokens <= MAX_TOKENS:
                if choices:  # per-chunk usage (continuous_usage_stats): the delta is this chunk's
                    tokens = done_tokens - self.usage_tokens
                    self.usage_tokens = done_tokens
                    self.usage_seen = True
                self.rec.output_tokens = done_tokens  # a usage-only chunk: the total, no token of its own
            prompt = usage.get("prompt_tokens")
            if isinstance(prompt, int) and 0 <= prompt <= MAX_TOKENS:
                self.rec.prompt_tokens = prompt
        if not choices:
            return  # the trailing usage chunk, keep-alives
        text = _text(obj, self.chat)
        if not text and tokens <= 0:
            return  # chat's role-only opening chunk
        if not self.usage_seen:
            tokens = 1
        tokens = min(max(tokens, 1), MAX_TOKENS)
        rec = self.rec
        rec.chunks += 1
        rec.client_tokens += tokens
        if self.token_limit is not None and rec.chunks > self.token_limit:
            self._refuse(
                f"the stream went past max_tokens {self.max_tokens} ({rec.chunks:,} chunks): the server does not stop"
            )
            return
        if self.last is None:
            rec.ttft_s = now - self.sent
        else:
            rec.gaps_s.append(now - self.last)
            rec.chunk_tokens.append(tokens)
        self.last = now
        rec.e2el_s = now - self.sent

    def finish(self) -> None:
        rec = self.rec
        if self.done and rec.chunks == 0:
            rec.fail("malformed", "the stream ended without a single generated token")
        if rec.output_tokens < 0 and rec.chunks:
            rec.output_tokens = rec.client_tokens
        if not self.usage_seen and rec.chunks > 1 and rec.output_tokens > rec.client_tokens:
            # no per-chunk usage: spread the server's total over the later chunks
            extra = rec.output_tokens - rec.client_tokens
            n = len(rec.chunk_tokens)
            rec.chunk_tokens = [
                t + extra // n + (1 if k < extra % n else 0) for k, t in enumerate(rec.chunk_tokens)
            ]


class _Stamped(ResponseHandler):
    """aiohttp's client protocol, noting when bytes were read from the socket. The event loop runs
    every ready socket's read callback before any task, so this is when a chunk reached the client;
    the task that parses it may run milliseconds later when 64 streams' chunks land together."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.read_at: tuple[Any, float] | None = None  # (the body it was for, when)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        payload = getattr(self, "_payload", None)  # the response body's StreamReader, once headers are in
        before = payload.total_bytes if payload is not None else 0
        super().data_received(data)
        after_payload = getattr(self, "_payload", None)
        after = after_payload.total_bytes if after_payload is not None else 0
        if after_payload is not payload:
            before = 0
        if after > before and (self.read_at is None or self.read_at[0] is not after_payload):
            self.read_at = (after_payload, now)  # body bytes came with this read (not only headers)


def stamping(connector: aiohttp.TCPConnector) -> aiohttp.TCPConnector:
    """Make ``connector`` open :class:`_Stamped` connections. Its protocol factory is aiohttp's
    ``_factory`` (a partial of ``ResponseHandler``, aiohttp 3.9 to 3.14); an aiohttp laid out
    otherwise is left as it is, and chunks are then timed when their task reads them."""
    factory = getattr(connector, "_factory", None)
    if isinstance(factory, functools.partial) and factory.func is ResponseHandler:
        connector._factory = functools.partial(_Stamped, *factory.args, **factory.keywords)  # type: ignore[assignment]
    return connector


def _read_time(resp: aiohttp.ClientResponse) -> float:
    """When the bytes now in ``resp.content`` were read from the socket (the first read since the
    last call), else now."""
    now = time.perf_counter()
    proto = resp.connection.protocol if resp.connection is not None else None
    read_at = getattr(proto, "read_at", None)
    if read_at is None or read_at[0] is not resp.content:  # none, or an earlier response's
        return now
    proto.read_at = None  # type: ignore[union-attr]
    return min(read_at[1], now)


async def one_request(
    session: aiohttp.ClientSession,
    target: Target,
    rec: Record,
    body: bytes,
    t0: float,
    live: Live,
    max_tokens: int | None = None,
) -> None:
    """Send one request and fill ``rec``; never raises (except cancellation, recorded first).
    With ``max_tokens`` (what the body asks for), a response past it (:data:`TOKEN_SLACK`), or
    over :data:`BYTES_PER_TOKEN` bytes a token, is a ``malformed`` failure and is closed."""
    chat = target.endpoint == "chat"
    # identity: a gateway that gzips the stream would hold chunks back and hide their times
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "Accept-Encoding": "identity",
        "X-Request-Id": f"perfkit-{target.run_id}-{rec.i}",
    }
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    sent = time.perf_counter()
    rec.sent_s = sent - t0
    live.sent += 1
    stream = _Stream(rec, sent, chat, max_tokens, target.api_key)
    box: dict[str, float] = {}  # filled by _on_sent when the body goes to the socket
    try:
        url = target.url.rstrip("/") + target.path
        async with session.post(url, data=body, headers=headers, trace_request_ctx=box) as resp:
            if "sent" in box:  # the request really left then (aiohttp <3.12 on Python 3.11 sends it later)
                stream.sent = box["sent"]
                rec.sent_s = box["sent"] - t0
            rec.status = resp.status
            if resp.status >= 400:
                text = (await _read_some(resp, MAX_ERROR_BODY)).decode("utf-8", "replace")
                kind = "http_5xx" if resp.status >= 500 else "http_4xx"
                rec.fail(kind, f"HTTP {resp.status}: {_error_message(text, target.api_key)}")
                return
            encoding = resp.headers.get("Content-Encoding", "identity").lower()
            if encoding not in ("", "identity"):
                rec.fail(
                    "malformed", f"the stream came {encoding}-compressed although identity was asked for"
                )
                return
            async for data in resp.content.iter_any():
                stream.feed(data, _read_time(resp))
                if stream.stop:
                    resp.close()  # a hostile or broken stream: stop reading it
                    return
            if not stream.done:
                rec.fail("disconnect", "the stream ended before [DONE]")
    except asyncio.CancelledError:
        rec.fail("cancelled", "the run was stopped while this request was in flight")
        raise
    except aiohttp.ServerTimeoutError:
        if rec.chunks:
            rec.fail("stall", f"no bytes for {target.stall_s:g} s mid-stream")
        else:
            rec.fail("timeout", f"no answer within {target.stall_s:g} s")
    except TimeoutError:
        rec.fail("timeout", f"not finished within {target.timeout_s:g} s")
    except aiohttp.ClientConnectorError as exc:
        rec.fail("connect", f"cannot connect: {exc.os_error.strerror or exc}")
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, ConnectionResetError) as exc:
        rec.fail("disconnect", f"connection closed mid-stream: {type(exc).__name__}")
    except aiohttp.TooManyRedirects as exc:
        where = _shown_url(str(exc.request_info.real_url))
        rec.fail("connect", f"redirect loop at {where} ({len(exc.history)} redirects)")
    except aiohttp.ClientError as exc:
        rec.fail("connect", scrub(f"{type(exc).__name__}: {exc}", target.api_key))
    finally:
        stream.finish()
        if target.api_key and rec.detail and target.api_key in rec.detail:
            rec.detail = rec.detail.replace(target.api_key, "<api key>")  # a server that echoes headers
        live.done += 1
        live.tokens += max(rec.output_tokens, 0)
        if rec.error:
            live.errors += 1
            live.errors_by_kind[rec.error] = live.errors_by_kind.get(rec.error, 0) + 1
        elif not math.isnan(rec.ttft_s):
            live.recent_ttft.append(rec.ttft_s)


async def _on_sent(_session: Any, ctx: Any, _params: Any) -> None:
    """aiohttp's trace hook, just before the request's bytes go to the socket: the send time."""
    box = ctx.trace_request_ctx
    if isinstance(box, dict) and "sent" not in box:
        box["sent"] = time.perf_counter()


def tracing() -> aiohttp.TraceConfig:
    """A trace config that times each request when its body is written, not when it was queued:
    a task that writes the body starts only after every other ready task (measured: 11-16 ms at the
    99th percentile at 64 streams), and that wait is the client's, not the server's TTFT."""
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_sent)
    return trace


async def _read_some(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """Up to ``limit`` bytes of the body (``content.read(n)`` returns only what is buffered)."""
    data = b""
    while len(data) < limit and (chunk := await resp.content.read(limit - len(data))):
        data += chunk
    return data


def _shown_url(url: str) -> str:
    """``url`` as it may be shown: no credentials, no query, no fragment."""
    try:
        parts = urlsplit(url)
        netloc = parts.hostname or ""
        netloc = f"[{netloc}]" if ":" in netloc else netloc
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))[:200]
    except ValueError:
        return "<unreadable URL>"


def _error_message(text: str, key: str | None = None) -> str:
    """The message of an error body (OpenAI's ``{"error": {"message": ...}}``), scrubbed, then cut."""
    text = scrub(text, key)
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = err.get("message") if isinstance(err, dict) else err
        text = str(msg if msg is not None else obj)
    except (ValueError, RecursionError):
        pass
    return " ".join(scrub(text, key).split())[:160]


@dataclass
class RunInfo:
    """What the run itself knew: when it ran, how long, whether it was stopped."""

    started_wall: float
    duration_s: float
    sent: int
    interrupted: bool
    notes: list[str] = field(default_factory=list)  # what went wrong with the client itself
    # the records' time origin on this host's CLOCK_MONOTONIC (time.perf_counter on Linux), so that
    # a record's offsets can be lined up with another process's clock (the reference server's)
    origin_s: float | None = None


async def run_plan(
    target: Target,
    at_s: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    prompt_for: Callable[[int, int], str],
    sink: RecordSink,
    *,
    concurrency: int | None = None,
    duration_s: float | None = None,
    stop: asyncio.Event | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    live: Live | None = None,
    ids: np.ndarray | None = None,
    start_at: float | None = None,
) -> RunInfo:
    """Send the plan's requests and record each. ``prompt_for(i, tokens)`` gives request i's prompt
    (built when it is sent, so a long plan holds no prompts). Stops at the plan's end, after
    ``duration_s``, or when ``stop`` is set (in-flight requests are then cancelled and recorded)."""
    stop = stop or asyncio.Event()
    live = live or Live()
    cap = asyncio.Semaphore(concurrency if concurrency is not None else MAX_IN_FLIGHT)
    closed_loop = concurrency is not None and not np.any(at_s > 0)
    timeout = aiohttp.ClientTimeout(total=target.timeout_s, sock_read=target.stall_s, sock_connect=30.0)
    connector = stamping(aiohttp.TCPConnector(limit=0, ttl_dns_cache=300))
    tasks: set[asyncio.Task[None]] = set()
    if start_at is not None:  # a shared start (wall clock) with the other worker processes
        await asyncio.sleep(max(0.0, start_at - time.time()))
    started_wall = time.time()
    t0 = time.perf_counter() - (started_wall - start_at if start_at is not None else 0.0)
    live.started = t0
    end_at = t0 + duration_s if duration_s else math.inf

    async def report() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            if progress:
                progress(live.snapshot())

    async def send(i: int, scheduled: float, session: aiohttp.ClientSession) -> None:
        rec = Record(i=int(ids[i]) if ids is not None else i, scheduled_s=scheduled - t0)
        try:
            body = payload(target, prompt_for(i, int(prompt_tokens[i])), int(output_tokens[i]))
            await one_request(session, target, rec, body, t0, live, int(output_tokens[i]))
        finally:
            sink.add(rec)
            cap.release()

    reporter = asyncio.ensure_future(report())
    n = len(at_s)
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        read_bufsize=2**18,
        auto_decompress=False,
        trace_configs=[tracing()],
    ) as session:
        try:
            for i in range(n):
                due = t0 + float(at_s[i])
                now = time.perf_counter()
                while due > now and not stop.is_set():  # in slices, so Ctrl-C is seen within 0.25 s
                    await asyncio.sleep(min(due - now, 0.25))
                    now = time.perf_counter()
                if stop.is_set() or time.perf_counter() >= end_at:
                    break
                if not await _acquire(cap, stop):
                    break
                if time.perf_counter() >= end_at:
                    cap.release()
                    break
                scheduled = time.perf_counter() if closed_loop else due
                task = asyncio.ensure_future(send(i, scheduled, session))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            # the requests in flight finish (each within its timeout) unless the run is stopped
            while tasks and not stop.is_set():
                waiter = asyncio.ensure_future(stop.wait())
                await asyncio.wait({*tasks, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
        finally:
            interrupted = stop.is_set()
            for task in list(tasks):
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            reporter.cancel()
    if progress:
        progress(live.snapshot())
    return RunInfo(started_wall, time.perf_counter() - t0, live.sent, interrupted, origin_s=t0)


async def _acquire(cap: asyncio.Semaphore, stop: asyncio.Event) -> bool:
    """Take a slot, or give up when the run is stopped first."""
    if not cap.locked():
        await cap.acquire()
        return True
    getting, stopping = asyncio.ensure_future(cap.acquire()), asyncio.ensure_future(stop.wait())
    await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if getting.done() and not getting.cancelled():
        if stop.is_set():
            cap.release()
            return False
        return True
    getting.cancel()
    return False


def event_loop_runner():
    """An ``asyncio.Runner`` on uvloop when it is installed (fewer microseconds per chunk)."""
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        return asyncio.Runner()


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
