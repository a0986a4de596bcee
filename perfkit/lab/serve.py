"""``perfkit lab serve``: a tiny OpenAI-compatible streaming server with known timing and fault knobs,
the target ``perfkit bench`` is tested and calibrated against. It listens on 127.0.0.1 only;
:func:`serving` runs it in a subprocess and stops it by its PID.

**Timing** (exact, drift-free). A request's clock starts when its first bytes are read from the socket
(``t0``; :class:`perfkit.lab.serve_clock.Arrivals`), so a queue in front of the handlers is the server's; output
token ``i`` (0-based) is due at ``t0 + ttft + i*itl``. Tokens leave in chunks of ``K``, a chunk when
its *last* token is due, by waiting for that absolute deadline (sleeps never add up): with ``K > 1``
the first token is seen when its chunk is sent, at ``t0 + ttft + (K-1)*itl``, and chunks are ``K*itl``
apart. ``stall_ms`` pauses every request once, before its middle chunk (index ``chunks // 2``): that
chunk and the later ones are due ``stall_ms`` later. :class:`Waker` keeps deadlines within about 0.1 ms.

**Tokens.** Exactly ``max_tokens`` output tokens (chat: ``max_completion_tokens`` first; default 16,
at most 16,384; ``finish_reason`` ``"length"``), each one word and a space, so a client counting words
counts tokens. The server's "tokenizer" counts words too: prompt tokens are the whitespace-separated
words of the prompt (chat: of every message's text), or the length of a token-id prompt.

**Wire format** as vLLM's OpenAI server (vllm/entrypoints/openai/serving_completion.py
``completion_stream_generator``, serving_chat.py ``chat_completion_stream_generator``): ``data:
{json}`` events, then ``data: [DONE]``; completion chunks carry explicit nulls (vLLM dumps them with
``exclude_unset=False``); chat opens with a role-only delta (sent with the first content chunk, as vLLM
sends it on the first engine output); ``stream_options.include_usage`` adds a last chunk with
``"choices": []`` and the ``usage``; ``continuous_usage_stats`` (only with include_usage, as vLLM's
``should_include_usage``) puts the running usage on every chunk.

**Errors**, OpenAI-style ``{"error": {"message", "type", "param", "code"}}``: bad JSON (also an integer
over Python's 4,300 digits or nesting past its recursion limit) or field -> 400;
no model -> 400 (vLLM would take its default: a benchmark must name its model); another model -> 404
``The model `x` does not exist.`` as vLLM; a body over 4 MiB -> 413.

**Faults**, from one RNG seeded by ``seed``, three draws per valid request in arrival order:
``fail_rate`` -> HTTP 500 with an error body; ``close_rate`` -> the connection is closed before the
middle chunk (no ``[DONE]``; not streaming: no answer); ``malformed_rate`` -> an extra event ``data:
{not json`` before the middle chunk (tokens and usage stay whole; not streaming: a non-JSON body).

**/metrics**: vLLM's series names, ``model_name`` and ``engine="0"`` labels and bucket bounds
(vllm/v1/metrics/loggers.py). TTFT, ITL (one sample per chunk, as vLLM records one per engine output)
and E2E are measured at write time; queue time and ``num_requests_waiting`` are 0 (no queue);
``kv_cache_usage_perc`` is the tokens running requests hold over :data:`KV_CAPACITY_TOKENS`. Also
``process_cpu_seconds_total``, ``perfkit_lab_serve_injected_faults_total{fault}`` and
``perfkit_lab_serve_chunk_lateness_seconds`` (write time minus due time: the server's share of an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, TextIO

from aiohttp import web

from perfkit import __version__
from perfkit.errors import ConfigError, SourceError
from perfkit.lab.serve_clock import Arrivals, Histogram, Waker

LOOPBACK = "127.0.0.1"
MAX_BODY_BYTES = 4 * 2**20  # a 100k-token prompt is well under 1 MiB of text
DEFAULT_MAX_TOKENS = 16  # vLLM's default for /v1/completions
MAX_TOKENS = 16_384
# what kv_cache_usage_perc is relative to: 2**18 tokens, the order of an 8B model's KV cache on one
# 80 GB GPU (128 KiB per token in bf16 -> 32 GiB)
KV_CAPACITY_TOKENS = 262_144
_VOCABULARY = "the of and to in is that it was for on are as with they at be this from have or by one had not"
WORDS = tuple(_VOCABULARY.split())  # plain ASCII: a chunk's text needs no JSON escaping
# vLLM's bucket bounds (vllm/v1/metrics/loggers.py), seconds
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
TTFT_BUCKETS += [20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
ITL_BUCKETS += [20.0, 40.0, 80.0]
REQUEST_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0]
REQUEST_BUCKETS += [240.0, 480.0, 960.0, 1920.0, 7680.0]
LATENESS_BUCKETS = [5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1]
_QUEUE_HELP = "Histogram of time spent in WAITING phase for request."
_HISTOGRAMS = {  # name: (help, bounds)
    "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", REQUEST_BUCKETS),
    "vllm:request_queue_time_seconds": (_QUEUE_HELP, REQUEST_BUCKETS),
    "perfkit_lab_serve_chunk_lateness_seconds": ("Chunk write time minus due time.", LATENESS_BUCKETS),
}


@dataclass(frozen=True)
class ServeConfig:
    """The server's knobs; an invalid one raises :class:`ConfigError` naming its option."""

    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    fail_rate: float = 0.0
    stall_ms: float = 0.0
    close_rate: float = 0.0
    malformed_rate: float = 0.0
    model: str = "perfkit-lab"
    host: str = LOOPBACK
    port: int = 8000
    seed: int = 0
    timing_log: str = (
        ""  # a file: one line per streamed request, "X-Request-Id<TAB>first chunk - arrival (s)"
    )

    def __post_init__(self) -> None:
        limits = {"ttft_ms": 3.6e6, "itl_ms": 6e4, "stall_ms": 3.6e6, "fail_rate": 1.0, "close_rate": 1.0}
        limits |= {"malformed_rate": 1.0, "tokens_per_chunk": 1024, "port": 65535, "seed": 2**63}
        for name, top in limits.items():
            value = getattr(self, name)
            integer = name in ("tokens_per_chunk", "port", "seed")
            kind = int if integer else int | float
            low = 1 if name == "tokens_per_chunk" else -top if name == "seed" else 0
            if isinstance(value, bool) or not isinstance(value, kind) or not low <= value <= top:
                what = f"{'an integer' if integer else 'a number'} in [{low:g}, {top:g}]"
                raise ConfigError(f"--{name.replace('_', '-')} must be {what}: got {value!r}")
        if not self.model or len(self.model) > 256 or not self.model.isprintable():
            raise ConfigError(f"--model must be 1 to 256 printable characters: got {self.model[:300]!r}")
        if self.host not in (LOOPBACK, "localhost"):
            refused = f"refused --host {self.host!r}"
            raise ConfigError(f"perfkit lab serve listens on {LOOPBACK} only (no authentication): {refused}")

    def cli_args(self) -> list[str]:
        """The ``perfkit lab serve`` options that stand for this configuration."""
        args = [(f"--{key.replace('_', '-')}", str(value)) for key, value in asdict(self).items()]
        return [arg for pair in args if pair[0] != "--host" and pair[1] != "" for arg in pair]


class ApiError(Exception):
    """A request the server refuses: ``status`` and the message of its OpenAI-style error body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str) -> web.Response:
    kind = {404: "NotFoundError", 500: "InternalServerError"}.get(status, "BadRequestError")
    error = {"message": message, "type": kind, "param": None, "code": status}
    return web.json_response({"error": error}, status=status)


@dataclass
class Request:
    """What a validated completions/chat body asks for."""

    prompt_tokens: int
    max_tokens: int
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    generated: int = 0  # output tokens emitted so far


def _prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    if not chat:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            return len(prompt.split())
        if isinstance(prompt, list) and all(type(t) is int for t in prompt):
            return len(prompt)  # token ids
        raise ApiError(400, "prompt must be a string or a list of token ids (one prompt per request)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list")
    count = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(400, f"messages[{i}] must be an object")
        content = message.get("content")
        if isinstance(content, list):  # content parts: the text ones count
            texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            content = " ".join(map(str, texts)) if all(isinstance(t, str) for t in texts) else 0
        if not isinstance(content, str | None):
            raise ApiError(400, f"messages[{i}].content must be a string or a list of parts")
        count += len((content or "").split())
    return count


def parse_request(body: Any, chat: bool, served: str) -> Request:
    """Validate a completions (``chat=False``) or chat body; :class:`ApiError` 400/404 otherwise."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is None or model == "":
        raise ApiError(400, f"the request names no model: this server serves `{served}`")
    if not isinstance(model, str):
        raise ApiError(400, "model must be a string")
    if model != served:
        raise ApiError(404, f"The model `{model[:200]}` does not exist.")
    stream, options = body.get("stream") or False, body.get("stream_options")
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false")
    if options is not None and not (stream and isinstance(options, dict)):
        raise ApiError(400, "Stream options can only be defined (as an object) when `stream=True`.")
    options = options or {}
    usage, continuous = options.get("include_usage") or False, options.get("continuous_usage_stats") or False
    if not isinstance(usage, bool) or not isinstance(continuous, bool):
        raise ApiError(400, "stream_options.include_usage and continuous_usage_stats must be true or false")
    if body.get("n") not in (None, 1):
        raise ApiError(400, "only n=1 is served")
    max_tokens = body.get("max_completion_tokens") if chat else None
    max_tokens = body.get("max_tokens") if max_tokens is None else max_tokens
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if type(max_tokens) is not int or not 1 <= max_tokens <= MAX_TOKENS:
        raise ApiError(400, f"max_tokens must be an integer in [1, {MAX_TOKENS}]")
    return Request(_prompt_tokens(body, chat), max_tokens, stream, usage, usage and continuous)


def _usage(prompt: int, completion: int) -> str:
    total = prompt + completion
    return f'{{"prompt_tokens":{prompt},"total_tokens":{total},"completion_tokens":{completion}}}'


def sse_events(req: Request, head: str, first: bool, text: str, chat: bool, malformed: bool) -> bytes:
    """The events of one chunk of ``text`` (``req.generated`` counts it already); ``head`` is the
    event's start up to the choices list: ``data: {"id":…,"object":…,"created":…,"model":…,"choices":[``."""
    last = req.generated == req.max_tokens
    usage = f',"usage":{_usage(req.prompt_tokens, req.generated)}' if req.continuous_usage else ""
    out = ["data: {not json\n\n"] if malformed else []
    if chat:
        if first:
            zero = f',"usage":{_usage(req.prompt_tokens, 0)}' if usage else ""
            role = (
                '{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}'
            )
            out.append(f"{head}{role}]{zero}}}\n\n")
        end = '"finish_reason":"length","stop_reason":null' if last else '"finish_reason":null'
        out.append(f'{head}{{"index":0,"delta":{{"content":"{text}"}},"logprobs":null,{end}}}]{usage}}}\n\n')
    else:
        end = '"length"' if last else "null"
        usage = usage or ',"usage":null'
        choice = f'{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{end},"stop_reason":null}}'
        out.append(f"{head}{choice}]{usage}}}\n\n")
    if last:
        if req.include_usage:
            out.append(f'{head}],"usage":{_usage(req.prompt_tokens, req.max_tokens)}}}\n\n')
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


class ReferenceServer:
    """The application and its counters: ``url = await start()`` in a running loop, ``await stop()``."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.requests = self.running = self.kv_tokens = self.prompt_tokens = self.generation_tokens = 0
        self.success = {"stop": 0, "length": 0, "abort": 0}
        self.injected = {"fail": 0, "close": 0, "malformed": 0}
        self.hist = {name: Histogram(bounds) for name, (_, bounds) in _HISTOGRAMS.items()}
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None
        self._arrivals: Arrivals | None = None
        self._timing: TextIO | None = None
        self._waker: Waker | None = None
        self._model_json = json.dumps(config.model)
        escaped = config.model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        self._labels = f'engine="0",model_name="{escaped}"'

    async def start(self, sock: socket.socket | None = None) -> str:
        """Listen on ``sock`` (else on 127.0.0.1 and the configured port) and return the base URL."""
        sock = sock or bind(self.config.port)
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._arrived])
        app.add_routes([web.post("/v1/completions", partial(self._generate, chat=False))])
        app.add_routes([web.post("/v1/chat/completions", partial(self._generate, chat=True))])
        app.add_routes([web.get("/v1/models", self._models), web.get("/health", self._health)])
        app.add_routes([web.get("/version", self._version), web.get("/metrics", self._metrics)])
        loop = asyncio.get_running_loop()
        self._waker = Waker(loop)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        assert self._runner.server is not None
        self._arrivals = Arrivals(self._runner.server)
        if self.config.timing_log:
            try:  # a new file: never over someone's earlier log
                self._timing = open(self.config.timing_log, "x", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in stop()
            except OSError as exc:
                raise ConfigError(f"--timing-log {self.config.timing_log}: {exc.strerror or exc}") from None
        self._server = await loop.create_server(self._arrivals, sock=sock, backlog=1024)
        self.url = f"http://{LOOPBACK}:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._waker is not None:
            self._waker.close()
        if self._timing is not None:
            self._timing.close()
            self._timing = None

    @web.middleware
    async def _arrived(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every request takes its arrival stamp (a stale one would start the next request's clock early)."""
        arrived = self._arrivals.take(request.protocol) if self._arrivals else None
        request["arrived"] = arrived if arrived is not None else time.monotonic()
        return await handler(request)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        t0 = request["arrived"]
        try:
            try:  # aiohttp stops reading at client_max_size
                body = json.loads(await request.read())
            except web.HTTPRequestEntityTooLarge:
                raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes") from None
            except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, >4,300 digits, deep nesting
                raise ApiError(400, f"invalid JSON: {str(exc)[:200]}") from None
            req = parse_request(body, chat, self.config.model)
        except ApiError as exc:
            return error_response(exc.status, str(exc))
        cfg = self.config
        rates = (cfg.fail_rate, cfg.close_rate, cfg.malformed_rate)
        fail, close, malformed = (self.rng.random() < rate for rate in rates)
        self.requests += 1
        if fail:
            self.injected["fail"] += 1
            return error_response(500, "injected failure (perfkit lab serve --fail-rate)")
        self.injected["close"] += close
        self.injected["malformed"] += malformed
        self.running += 1
        self.kv_tokens += req.prompt_tokens
        self.prompt_tokens += req.prompt_tokens
        done = False
        try:
            if req.stream:
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                with contextlib.suppress(ConnectionError):  # the client went away: aborted
                    done = await self._emit(req, t0, request, resp, chat, close, malformed) is not None
                return resp
            text = await self._emit(req, t0, request, None, chat, close, malformed)
            if text is None:  # closed halfway: no answer
                return web.Response()
            done = True
            if malformed:
                return web.Response(text="{not json", content_type="application/json")
            return web.json_response(self._whole(req, chat, text))
        finally:
            self.running -= 1
            self.kv_tokens -= req.prompt_tokens + req.generated
            self.success["length" if done else "abort"] += 1

    async def _emit(
        self, req: Request, t0: float, request: web.Request, resp: web.StreamResponse | None, *flags: bool
    ) -> str | None:
        """Send ``req.max_tokens`` tokens in chunks, each when its last token is due, to ``resp`` (not
        streaming: return them). ``None`` when the connection was closed halfway (``close``)."""
        chat, close, malformed = flags
        assert self._waker is not None
        k, n = self.config.tokens_per_chunk, req.max_tokens
        ttft, itl, stall = (x / 1e3 for x in (self.config.ttft_ms, self.config.itl_ms, self.config.stall_ms))
        chunks = -(-n // k)
        middle = chunks // 2
        kind = ("chatcmpl", "chat.completion.chunk") if chat else ("cmpl", "text_completion")
        ident = f'"id":"{kind[0]}-{uuid.uuid4().hex}","object":"{kind[1]}","created":{int(time.time())}'
        head = f'data: {{{ident},"model":{self._model_json},"choices":['  # what every event starts with
        offset, pieces, last_sent = self.requests, [], t0
        for j in range(chunks):
            if j == middle and close:
                if request.transport is not None:
                    request.transport.close()
                return None
            count = min(k, n - req.generated)
            due = t0 + ttft + (req.generated + count - 1) * itl + (stall if j >= middle else 0.0)
            await self._waker.sleep_until(due)
            text = "".join(WORDS[(offset + req.generated + i) % len(WORDS)] + " " for i in range(count))
            req.generated += count
            self.kv_tokens += count
            self.generation_tokens += count
            if resp is None:
                pieces.append(text)
            else:
                await resp.write(sse_events(req, head, j == 0, text, chat, malformed and j == middle))
            now = time.monotonic()
            self.hist["perfkit_lab_serve_chunk_lateness_seconds"].observe(now - due)
            if j == 0 and self._timing is not None and resp is not None:
                self._log_first(request, t0, now)
            name = "vllm:inter_token_latency_seconds" if j else "vllm:time_to_first_token_seconds"
            self.hist[name].observe(now - last_sent)
            last_sent = now
        self.hist["vllm:e2e_request_latency_seconds"].observe(last_sent - t0)
        self.hist["vllm:request_queue_time_seconds"].observe(0.0)
        return "".join(pieces)

    def _log_first(self, request: web.Request, arrived: float, written: float) -> None:
        """A request's arrival and first write for the timing log, under the client's request id: the
        loadgen benchmark subtracts the server's TTFT from the client's, which leaves the client's own
        error, and lines both up on the shared clock to say which side read late."""
        rid = "".join(
            c for c in request.headers.get("X-Request-Id", "")[:128] if c.isprintable() and c != "\t"
        )
        assert self._timing is not None
        self._timing.write(f"{rid or '-'}\t{arrived:.6f}\t{written:.6f}\n")

    def _whole(self, req: Request, chat: bool, text: str) -> dict[str, Any]:
        """A non-streaming answer, as vLLM's ``CompletionResponse`` / ``ChatCompletionResponse``."""
        choice = {
            "index": 0,
            **({"message": {"role": "assistant", "content": text}} if chat else {"text": text}),
        }
        choice |= {"logprobs": None, "finish_reason": "length", "stop_reason": None}
        kind = ("chatcmpl", "chat.completion") if chat else ("cmpl", "text_completion")
        answer = {"id": f"{kind[0]}-{uuid.uuid4().hex}", "object": kind[1], "created": int(time.time())}
        usage = json.loads(_usage(req.prompt_tokens, req.max_tokens))
        return {**answer, "model": self.config.model, "choices": [choice], "usage": usage}

    async def _models(self, request: web.Request) -> web.Response:
        name = self.config.model
        model = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "perfkit"}
        data = [{**model, "root": name, "parent": None, "max_model_len": MAX_TOKENS}]
        return web.json_response({"object": "list", "data": data})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": f"perfkit-lab-serve {__version__}"})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics_text(), content_type="text/plain", charset="utf-8")

    def metrics_text(self) -> str:
        """Prometheus text exposition (format 0.0.4) of the series this server keeps."""
        labels, lines = self._labels, []

        def family(name: str, kind: str, help_: str, *samples: str) -> None:
            lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", *samples])

        kv = min(1.0, self.kv_tokens / KV_CAPACITY_TOKENS)
        for name, help_, value in (
            ("num_requests_running", "Number of requests in model execution batches.", self.running),
            ("num_requests_waiting", "Number of requests waiting to be processed.", 0),
            ("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv),
        ):
            family(f"vllm:{name}", "gauge", help_, f"vllm:{name}{{{labels}}} {float(value)!r}")
        for name, help_, value in (
            ("num_preemptions", "Cumulative number of preemption from the engine.", 0),
            ("prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
            ("generation_tokens", "Number of generation tokens processed.", self.generation_tokens),
        ):
            total = f"vllm:{name}_total"  # prometheus_client names a counter's family with _total too
            family(total, "counter", help_, f"{total}{{{labels}}} {float(value)!r}")
        success = 'vllm:request_success_total{%s,finished_reason="%s"} %r'
        samples = [success % (labels, why, float(n)) for why, n in self.success.items()]
        family("vllm:request_success_total", "counter", "Count of successfully processed requests.", *samples)
        for name, (help_, _) in _HISTOGRAMS.items():
            family(name, "histogram", help_, *self.hist[name].lines(name, labels))
        cpu = f"process_cpu_seconds_total {time.process_time()!r}"
        family("process_cpu_seconds_total", "counter", "Total user and system CPU time in seconds.", cpu)
        faults = 'perfkit_lab_serve_injected_faults_total{fault="%s"} %r'
        samples = [faults % (fault, float(n)) for fault, n in self.injected.items()]
        family("perfkit_lab_serve_injected_faults_total", "counter", "Faults injected.", *samples)
        return "\n".join(lines) + "\n"


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: a free one); ConfigError when it is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as exc:
        sock.close()
        reason = f"cannot listen on {LOOPBACK}:{port} ({exc.strerror})"
        raise ConfigError(f"{reason}: choose another --port, or 0 for a free one") from None
    sock.listen(1024)
    return sock


def banner(config: ServeConfig, url: str) -> str:
    """The one line ``perfkit lab serve`` prints once it listens."""
    timing = f"ttft {config.ttft_ms:g} ms, itl {config.itl_ms:g} ms, {config.tokens_per_chunk} tokens/chunk"
    return f"serving {config.model} on {url} ({timing})"


_BANNER = re.compile(r"serving .* on (http://127\.0\.0\.1:\d+) \((?:ttft|simulated) ")
_SIM_OPTIONS = ("engine_config", "speed", "log_file", "admin_token_env")  # perfkit.lab.servesim.server


@contextlib.contextmanager
def serving(*, startup_timeout_s: float = 30.0, cpus: set[int] | None = None, **knobs: Any) -> Iterator[str]:
    """Run ``perfkit lab serve`` in a subprocess on a free port; yield its base URL; stop it by its PID.

    ``knobs`` are :class:`ServeConfig` fields (``ttft_ms=50, itl_ms=10, tokens_per_chunk=4`` ...);
    ``cpus`` pins the server to those CPUs (Linux), so that a benchmark's client has its own core.
    ``engine_config=PATH`` runs the simulated engine, with ``speed``, ``log_file``, ``admin_token_env``.
    """
    sim = [f"--{k.replace('_', '-')}={v}" for k in _SIM_OPTIONS if (v := knobs.pop(k, None)) is not None]
    cli = [*sim, *ServeConfig(**knobs | {"port": 0}).cli_args()]
    args = [sys.executable, "-m", "perfkit.app.cli.serve", *cli]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        try:
            if cpus and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(proc.pid, cpus)
            timer = threading.Timer(startup_timeout_s, proc.kill)  # a server that never prints
            timer.start()
            try:
                assert proc.stdout is not None
                line = proc.stdout.readline(4096).decode(errors="replace")
            finally:
                timer.cancel()
            if not (match := _BANNER.match(line)):
                err.seek(0)
                said = line.strip() or err.read()[-300:].decode(errors="replace").strip() or "no output"
                raise SourceError(f"perfkit lab serve did not start: {said[:300]}")
            _wait_healthy(match.group(1), proc, time.monotonic() + startup_timeout_s)
            yield match.group(1)
        finally:
            stop_process(proc)


def _wait_healthy(url: str, proc: subprocess.Popen, deadline: float) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    while True:
        with contextlib.suppress(OSError), opener.open(f"{url}/health", timeout=2) as resp:
            if resp.status == 200:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SourceError(f"{url}/health: perfkit lab serve is not answering", url=f"{url}/health")
        time.sleep(0.02)


def stop_process(proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """Terminate the process by its PID; kill it when it has not exited after ``timeout_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)
    if proc.stdout is not None:
        proc.stdout.close()
