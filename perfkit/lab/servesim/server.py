"""``perfkit lab serve --engine-config FILE``: an OpenAI-compatible streaming server in front of the
simulated engine (:class:`perfkit.lab.servesim.core.EngineCore`), on 127.0.0.1 only.

**Requests** are parsed, answered and streamed as the reference server does (:mod:`perfkit.lab.serve`:
``parse_request``, ``sse_events``, the OpenAI-style errors, words as tokens, ``max_tokens``), on
``/v1/completions`` and ``/v1/chat/completions``; also ``/v1/models``, ``/health``, ``/version`` (the
build version: a ``deploy`` fault changes it) and ``/metrics`` (:mod:`.metrics`). A request whose
prompt plus ``max_tokens`` exceeds ``max_model_len`` is refused (400) with vLLM's message. The engine
emits exactly ``max_tokens`` tokens (``finish_reason`` ``"length"``, as ``ignore_eos``). A client that
disconnects aborts its request in the engine. A request a live config change leaves unable ever to
fit (over the new ``max_model_len``) is dropped by the engine: its stream ends with an OpenAI-style
error event (``data: {"error": {...}}``, then ``data: [DONE]``, as vLLM's
``create_streaming_error_response``), a non-streaming one gets a 400, and it counts as
``vllm:request_success_total{finished_reason="abort"}``. A body that is not JSON, or JSON Python
cannot hold (an integer over 4,300 digits, nesting past the recursion limit), is a 400.

**Time.** One engine loop drives the core: while it has work, ``res = core.step(v)``, wait until the
step's virtual end mapped to wall time, then hand each request its new tokens (one SSE event per
engine output, as vLLM's frontend) and record the metrics. Virtual time is ``(wall - w0) * speed``
(``--speed S``, S >= 1); when the loop reaches a step's end late (the simulator's own work, a busy
machine) virtual time *stands still* for the lateness (``w0`` moves on): steps run back to back in
virtual time, as in an engine whose scheduler costs nothing, and the metrics, the log stamps and the
arrival times of requests all stay on one clock. ``perfkit_lab_servesim_clock_held_seconds_total``
says how much wall time was given up so.

**Prefix sharing** (with ``enable_prefix_caching``): a prompt's words (token ids as given; chat: the
messages' words in order), at most :data:`PREFIX_MAX_WORDS`, are cut into whole blocks of
``block_size`` and each block is named by a hash of it and every block before it (vLLM's chained
block hashes, vllm/v1/core/kv_cache_utils.py ``hash_request_tokens``); the core reuses the longest
run of leading blocks still cached, so prompts that share a system prompt share its blocks.

**Admin** (``/admin/...``, bearer token from the env var ``--admin-token-env``; no token configured:
403 for every admin call; a wrong or missing token: 401, compared with ``hmac.compare_digest``):
``POST /admin/faults`` switches one fault (:mod:`.faults`: every fault and its triage row),
``GET /admin/faults`` lists them, ``POST /admin/config`` with ``{"set": {"enable_chunked_prefill":
true}}`` applies :func:`~perfkit.lab.servesim.config.with_changes` live (the fix of a drill) and logs
vLLM's start-up lines with the new settings. Bodies are read whole (however many TCP segments they
come in), at most :data:`MAX_ADMIN_BODY` bytes. A traffic fault (``surge``, ``long_prompt_tenant``)
whose given ``prompt_tokens``/``max_tokens``, with the defaults for the ones not given, exceed
``max_model_len`` is refused naming the field (an untouched default prompt is cut to fit); a config
change that would leave an active traffic fault's ``max_tokens`` at or over ``max_model_len`` is
refused (409). ``perfkit_lab_servesim_speed`` exports ``--speed``: the vLLM series are in virtual
seconds, that many times faster than the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import random
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any, TextIO

from aiohttp import web

from perfkit.errors import ConfigError
from perfkit.lab.serve import (
    LOOPBACK,
    MAX_BODY_BYTES,
    WORDS,
    ApiError,
    Request,
    Waker,
    bind,
    error_response,
    parse_request,
    sse_events,
)
from perfkit.lab.servesim.clock import Arrivals, VirtualClock
from perfkit.lab.servesim.config import SETTABLE, SimConfig, with_changes
from perfkit.lab.servesim.core import EngineCore, StepResult
from perfkit.lab.servesim.faults import FAULTS, TRAFFIC, FaultBoard, FaultError
from perfkit.lab.servesim.metrics import EngineMetrics, Exposition, GpuSeries, StatsLog

PREFIX_MAX_WORDS = 8192  # a shared system prompt is hundreds to a few thousand tokens
MAX_ADMIN_BODY = 64 * 2**10
MAX_SPEED = 1000.0  # past this a 10 ms step is 10 us of wall time: the event loop cannot keep up
HOSTNAME = "servesim-0"  # the DCGM Hostname label
_Item = tuple[int, bool, float, str]  # an engine output to a stream: (tokens, finished, at, error)


def block_keys(words: Sequence[str | int], block: int) -> list[str]:
    """vLLM-style chained hashes of the whole blocks of ``block`` words among the first
    :data:`PREFIX_MAX_WORDS` of a prompt: each names its block and every block before it."""
    h, keys = hashlib.blake2b(digest_size=12), []
    for i in range(min(len(words), PREFIX_MAX_WORDS) // block):
        text = "\x1f".join(map(str, words[i * block : (i + 1) * block])) + "\x1e"
        h.update(text.encode(errors="surrogatepass"))  # JSON's "\ud800" escapes give lone surrogates
        keys.append(h.hexdigest())
    return keys


def prompt_words(body: dict[str, Any], chat: bool) -> list[str | int]:
    """The words (or token ids) of a body :func:`parse_request` accepted, in order."""
    if not chat:
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        return list(prompt.split()) if isinstance(prompt, str) else list(prompt)
    words: list[str | int] = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text")
        words += (content or "").split()
    return words


class SimServer:
    """The application, its engine loop and its synthetic tenants: ``url = await start()``, ``await stop()``."""

    def __init__(
        self,
        cfg: SimConfig,
        *,
        speed: float = 1.0,
        seed: int = 0,
        admin_token: str | None = None,
        log: TextIO | None = None,
    ) -> None:
        if not 1.0 <= speed <= MAX_SPEED:
            raise ConfigError(f"--speed must be a number in [1, {MAX_SPEED:g}]: got {speed!r}")
        self.cfg, self.admin_token = cfg, admin_token or None
        self.core = EngineCore(cfg, seed=seed)
        self.clock = VirtualClock(speed)
        self.faults = FaultBoard(cfg.vllm_version)
        self.metrics = EngineMetrics(cfg, self.faults.version)
        self.gpus = GpuSeries(cfg, seed)
        self.log = StatsLog(log or sys.stderr, time.time(), os.getpid())
        self.rng = random.Random(seed)
        self.streams: dict[str, asyncio.Queue[_Item]] = {}
        self.work, self.traffic_changed = asyncio.Event(), asyncio.Event()
        self.steps = 0
        self.step_cpu_s = 0.0
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._waker: Waker | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._synthetic = 0
        self.dead = ""  # the engine's fatal error, once it has died
        self.arrivals: Arrivals | None = None  # paced arrivals (POST /admin/pace; clock.py)

    # -- life ------------------------------------------------------------------------------------

    async def start(self, sock: socket.socket | None = None) -> str:
        sock = sock or bind(0)
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.add_routes([web.post("/v1/completions", partial(self._generate, chat=False))])
        app.add_routes([web.post("/v1/chat/completions", partial(self._generate, chat=True))])
        app.add_routes([web.get("/v1/models", self._models), web.get("/health", self._health)])
        app.add_routes([web.get("/version", self._version), web.get("/metrics", self._metrics)])
        app.add_routes(
            [web.get("/admin/faults", self._faults_get), web.post("/admin/faults", self._faults_post)]
        )
        app.add_routes(
            [web.post("/admin/config", self._config_post), web.post("/admin/pace", self._pace_post)]
        )
        loop = asyncio.get_running_loop()
        self._waker = Waker(loop)
        self.arrivals = arrivals = Arrivals(lambda: self.clock, self._waker.sleep_until)
        self.clock = VirtualClock(self.clock.speed)  # virtual 0 is when the server starts listening
        self.log.epoch = time.time()
        self.log.startup(0.0, self.cfg, self.faults.version)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        await web.SockSite(self._runner, sock, shutdown_timeout=1.0, backlog=1024).start()
        tasks = (self._engine(), self._stats(), self._traffic(), arrivals.run())
        self._tasks = [loop.create_task(c) for c in tasks]
        self.url = f"http://{LOOPBACK}:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._waker is not None:
            self._waker.close()

    # -- the engine loop -------------------------------------------------------------------------

    async def _engine(self) -> None:
        """Run the engine; if it raises, log it as vLLM does, fail every open request and /health."""
        try:
            await self._run_engine()
        except Exception as exc:  # a bug in the simulator: say so rather than hang every client
            self.dead = f"{type(exc).__name__}: {exc}"[:500]
            message = f"EngineCore encountered a fatal error: {self.dead}"
            self.log.write(self.clock.now(), "core.py:588", message, process="EngineCore_0", level="ERROR")
            for queue in self.streams.values():
                queue.put_nowait((-1, True, time.monotonic(), self.dead))
            raise

    async def _run_engine(self) -> None:
        assert self._waker is not None
        while True:
            if not self.core.busy:
                self.work.clear()
                await self.work.wait()
                continue
            cpu = time.process_time()
            res = self.core.step(self.clock.now())
            self.step_cpu_s += time.process_time() - cpu
            self.steps += 1
            end = res.start + res.duration_s
            if res.duration_s > 0:
                self.clock.run_until(end)
                await self._waker.sleep_until(self.clock.wall(end))
                self._deliver(res)
                self.clock.hold(end)  # the next step starts where this one ended
            else:  # nothing could run (every block taken): let time pass rather than spin
                await asyncio.sleep(0.001)
                self._deliver(res)

    def _deliver(self, res: StepResult) -> None:
        now = time.monotonic()
        for out in res.outputs:
            queue = self.streams.get(out.rid)
            if queue is not None:
                queue.put_nowait((out.new_tokens, out.finished, now, ""))
        for rid, why in res.dropped:
            self.log.write(res.start, "scheduler.py:1", why, process="EngineCore_0", level="WARNING")
            if (queue := self.streams.get(rid)) is not None:
                queue.put_nowait((0, True, now, why))
        self.metrics.step(res)
        self.log.step(res, self.metrics)
        self.gpus.step(res)
        state = self.core.snapshot()  # after the step and whatever came or went while it ran
        self.metrics.gauges(state["running"], state["waiting"], state["kv_usage"])

    async def _stats(self) -> None:
        """A stats log line every STATS_INTERVAL_S virtual seconds."""
        assert self._waker is not None
        while True:
            await self._waker.sleep_until(self.clock.wall(self.log.next_at))
            due = list(self.log.due(self.clock.now()))
            for at in due:
                self.log.stats(at, self.metrics)
            if not due:  # the clock stands at a late step's end: wait for the engine, never spin
                await asyncio.sleep(0.001)

    async def _traffic(self) -> None:
        """The synthetic tenants of the ``long_prompt_tenant`` and ``surge`` faults: Poisson arrivals
        in virtual time, redrawn whenever the faults change (exact: arrivals are memoryless)."""
        while True:
            sources = [(name, self.faults.active[name]) for name in TRAFFIC if name in self.faults.active]
            self.traffic_changed.clear()
            if not sources:
                await self.traffic_changed.wait()
                continue
            total = sum(p["rate"] for _, p in sources)
            due = self.clock.now() + self.rng.expovariate(total)  # virtual: a late engine keeps the rate
            if await self._changed_before(due):
                continue  # the faults changed before the arrival: draw again
            name, params = self.rng.choices(sources, weights=[p["rate"] for _, p in sources])[0]
            self._synthetic += 1
            prompt = min(int(params["prompt_tokens"]), self.cfg.max_model_len - int(params["max_tokens"]))
            with contextlib.suppress(ConfigError):  # no longer fits a max_model_len changed since
                self._add(f"{name}-{self._synthetic}", max(1, prompt), int(params["max_tokens"]), None)

    async def _changed_before(self, due: float) -> bool:
        """Wait until the virtual clock reaches ``due``; True when the faults changed first."""
        while self.clock.now() < due:
            wait = max(0.001, self.clock.wall(due) - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.traffic_changed.wait(), timeout=wait)
                return True
        return False

    def _add(self, rid: str, prompt: int, max_tokens: int, keys: list[str] | None) -> None:
        now = self.clock.now()
        self.core.add(rid, prompt, max_tokens, now, block_keys=keys)
        self.metrics.admitted(rid, now, prompt, max_tokens)
        self.work.set()

    # -- requests --------------------------------------------------------------------------------

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            try:
                body = json.loads(await request.read())
            except web.HTTPRequestEntityTooLarge:
                raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes") from None
            except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, >4,300 digits, deep nesting
                raise ApiError(400, f"invalid JSON: {str(exc)[:200]}") from None
            req = parse_request(body, chat, self.cfg.served_model_name)
            if req.prompt_tokens < 1:
                raise ApiError(400, "The prompt cannot be empty.")
            limit = self.cfg.max_model_len
            if req.prompt_tokens + req.max_tokens > limit:
                raise ApiError(
                    400,
                    f"This model's maximum context length is {limit} tokens. However, you requested "
                    f"{req.prompt_tokens + req.max_tokens} tokens ({req.prompt_tokens} in the messages, "
                    f"{req.max_tokens} in the completion). Please reduce the length of the messages or "
                    "completion.",
                )
        except ApiError as exc:
            return error_response(exc.status, str(exc))
        if self.arrivals is not None:
            await self.arrivals.wait()  # paced: the virtual second its client meant (clock.py)
        if self.dead:
            return error_response(500, f"EngineDeadError: {self.dead}")
        keys = (
            block_keys(prompt_words(body, chat), self.cfg.block_size)
            if self.cfg.enable_prefix_caching
            else None
        )
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.streams[rid] = queue
        done = False
        try:
            try:
                self._add(rid, req.prompt_tokens, req.max_tokens, keys)
            except (ConfigError, ValueError) as exc:
                return error_response(400, str(exc))
            if req.stream:
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                with contextlib.suppress(ConnectionError):  # the client went away: aborted below
                    done = await self._emit(rid, req, queue, chat, resp) is not None
                return resp
            try:
                text = await self._emit(rid, req, queue, chat, None)
            except ApiError as exc:  # dropped by the engine
                return error_response(exc.status, str(exc))
            done = True
            return web.json_response(self._whole(rid, req, chat, text or ""))
        finally:
            self.streams.pop(rid, None)
            if not done:
                self.core.abort(rid)
                self.metrics.aborted(rid)
                state = self.core.snapshot()  # an idle engine steps no more: the gauges say it now
                self.metrics.gauges(state["running"], state["waiting"], state["kv_usage"])

    async def _emit(
        self,
        rid: str,
        req: Request,
        queue: asyncio.Queue[_Item],
        chat: bool,
        resp: web.StreamResponse | None,
    ) -> str | None:
        """Write each engine output as it comes (``network_delay`` later); the text when not streaming.
        A request the engine dropped: an error event and ``None`` (not streaming: ApiError 400)."""
        assert self._waker is not None
        kind = "chat.completion.chunk" if chat else "text_completion"
        ident = f'"id":"{rid}","object":"{kind}","created":{int(time.time())}'
        head = f'data: {{{ident},"model":{json.dumps(self.cfg.served_model_name)},"choices":['
        pieces, first, offset = [], True, len(rid)
        while True:
            count, finished, produced, error = await queue.get()
            if count < 0:  # the engine died
                raise ConnectionResetError(self.dead)
            if error:
                if resp is None:
                    raise ApiError(400, error)
                body = {"message": error, "type": "BadRequestError", "param": None, "code": 400}
                await resp.write(f"data: {json.dumps({'error': body})}\n\ndata: [DONE]\n\n".encode())
                return None
            delay_ms = self.faults.get("network_delay", "delay_ms")
            if delay_ms:
                await self._waker.sleep_until(produced + delay_ms / 1e3 / self.clock.speed)
            if finished:  # the engine's last output closes the stream (usage counts what came)
                req.max_tokens = req.generated + count
            text = "".join(WORDS[(offset + req.generated + i) % len(WORDS)] + " " for i in range(count))
            req.generated += count
            if resp is None:
                pieces.append(text)
            elif count or finished:
                await resp.write(sse_events(req, head, first, text, chat, False))
                first = False
            if finished:
                return "".join(pieces)

    def _whole(self, rid: str, req: Request, chat: bool, text: str) -> dict[str, Any]:
        """A non-streaming answer, as vLLM's ``CompletionResponse`` / ``ChatCompletionResponse``."""
        content = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        choice = {"index": 0, **content, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        usage = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.generated}
        usage["completion_tokens"] = req.generated
        kind = "chat.completion" if chat else "text_completion"
        return {
            "id": rid,
            "object": kind,
            "created": int(time.time()),
            "model": self.cfg.served_model_name,
            "choices": [choice],
            "usage": usage,
        }

    async def _models(self, request: web.Request) -> web.Response:
        name = self.cfg.served_model_name
        model = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm"}
        data = [
            {**model, "root": self.cfg.model.name, "parent": None, "max_model_len": self.cfg.max_model_len}
        ]
        return web.json_response({"object": "list", "data": data})

    async def _health(self, request: web.Request) -> web.Response:
        if self.dead:
            return error_response(500, f"EngineDeadError: {self.dead}")
        return web.Response()

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.faults.version})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics_text(), content_type="text/plain", charset="utf-8")

    def metrics_text(self) -> str:
        out = Exposition()
        self.metrics.version = self.faults.version
        self.metrics.exposition(out)
        self.gpus.exposition(out, self.clock.now(), HOSTNAME)
        cpu = f"process_cpu_seconds_total {time.process_time()!r}"
        out.family(
            "process_cpu_seconds_total", "counter", "Total user and system CPU time in seconds.", [cpu]
        )
        for name, help_, value in (
            ("perfkit_lab_servesim_steps_total", "Engine steps simulated.", self.steps),
            (
                "perfkit_lab_servesim_step_cpu_seconds_total",
                "CPU seconds spent computing steps.",
                self.step_cpu_s,
            ),
            (
                "perfkit_lab_servesim_clock_held_seconds_total",
                "Wall seconds virtual time stood still because the engine loop was late.",
                self.clock.held,
            ),
        ):
            out.family(name, "counter", help_, [f"{name} {float(value)!r}"])
        for name, help_, value in (
            ("perfkit_lab_servesim_virtual_seconds", "Virtual seconds since the start.", self.clock.now()),
            ("perfkit_lab_servesim_speed", "Virtual seconds per wall second (--speed).", self.clock.speed),
        ):
            out.family(name, "gauge", help_, [f"{name} {float(value)!r}"])
        return out.text()

    # -- admin -----------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> web.Response | None:
        """``None`` when the call carries the admin token; else the refusal."""
        if self.admin_token is None:
            return _admin_error(403, "admin is disabled: no admin token configured (--admin-token-env)")
        given = request.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        try:  # a header of bytes that are not UTF-8 holds lone surrogates: not the token
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                token.strip().encode(), self.admin_token.encode()
            )
        except UnicodeError:
            ok = False
        return (
            None if ok else _admin_error(401, "a valid admin token is required (Authorization: Bearer ...)")
        )

    async def _admin_body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > MAX_ADMIN_BODY:
            raise FaultError(413, f"admin body over {MAX_ADMIN_BODY} bytes")
        raw = b""  # read() returns what is buffered: read on to the end (a body may come in many segments)
        while chunk := await request.content.read(MAX_ADMIN_BODY + 1 - len(raw)):
            raw += chunk
            if len(raw) > MAX_ADMIN_BODY:
                raise FaultError(413, f"admin body over {MAX_ADMIN_BODY} bytes")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, >4,300 digits, deep nesting
            raise FaultError(400, f"invalid JSON: {str(exc)[:200]}") from None

    async def _faults_get(self, request: web.Request) -> web.Response:
        return self._authorized(request) or web.json_response(self.faults.listing())

    async def _faults_post(self, request: web.Request) -> web.Response:
        if refused := self._authorized(request):
            return refused
        try:
            body = await self._admin_body(request)
            self._check_traffic(body)
            self.faults.apply(body)
        except FaultError as exc:
            return _admin_error(exc.status, str(exc))
        self._apply_faults()
        if body.get("fault") == "deploy":  # a release restarts the server: its start-up lines say so
            self.log.startup(self.clock.now(), self.cfg, self.faults.version)
        return web.json_response(self.faults.listing())

    def _check_traffic(self, body: Any) -> None:
        """A traffic fault's given sizes, with the defaults for those not given, must fit max_model_len."""
        if not (isinstance(body, dict) and body.get("fault") in TRAFFIC and body.get("on", True) is True):
            return
        name, limit = body["fault"], self.cfg.max_model_len
        given = {k: body[k] for k in ("prompt_tokens", "max_tokens") if type(body.get(k)) is int}
        if not given:  # the defaults: the server cuts the prompt to fit (_traffic)
            return
        sizes = {k: given.get(k, FAULTS[name][k][0]) for k in ("prompt_tokens", "max_tokens")}
        if sum(sizes.values()) > limit:
            said = " + ".join(f"{k} {v}{'' if k in given else ' (the default)'}" for k, v in sizes.items())
            raise FaultError(
                400,
                f"{name}.{' + '.join(given)}: {said} = {sum(sizes.values())} exceed max_model_len {limit}",
            )

    def _apply_faults(self) -> None:
        board, engine, gpu = self.faults, self.core.faults, self.gpus.state
        engine.decode_slowdown = board.get("thermal", "decode_slowdown") or 1.0
        engine.step_slowdown = board.get("deploy", "step_slowdown") or 1.0
        engine.kv_reserved_frac = board.get("kv_pressure", "kv_reserved_frac") or 0.0
        gpu.clock_drop = board.get("thermal", "clock_drop") or 0.0
        gpu.hot = "thermal" in board.active
        cfg = self.cfg
        pool = cfg.kv_capacity_tokens() * cfg.kv_bytes_per_token_per_gpu()  # per GPU
        gpu.tenant_bytes = engine.kv_reserved_frac * pool
        self.metrics.version = board.version
        self.traffic_changed.set()
        self.work.set()

    async def _pace_post(self, request: web.Request) -> web.Response:
        """``{"on": true}``: admit requests at the virtual second their wall-clock client meant, from
        now (clock.py); ``{"on": false}``: as they come."""
        if refused := self._authorized(request):
            return refused
        try:
            body = await self._admin_body(request)
            if not isinstance(body, dict) or not isinstance(body.get("on"), bool):
                raise FaultError(400, 'pace: the body must be {"on": true} or {"on": false}')
        except FaultError as exc:
            return _admin_error(exc.status, str(exc))
        self.clock.pace(body["on"])
        return web.json_response({"paced": body["on"], "virtual_s": round(self.clock.now(), 3)})

    async def _config_post(self, request: web.Request) -> web.Response:
        if refused := self._authorized(request):
            return refused
        try:
            body = await self._admin_body(request)
            changes = body.get("set") if isinstance(body, dict) else None
            if not isinstance(changes, dict) or not changes:
                raise FaultError(400, 'set: the body must be {"set": {SETTING: value, ...}}')
            cfg = with_changes(self.cfg, changes, "POST /admin/config")
            for name in (n for n in TRAFFIC if n in self.faults.active):
                if self.faults.active[name]["max_tokens"] >= cfg.max_model_len:
                    raise FaultError(
                        409,
                        f"max_model_len: {cfg.max_model_len} leaves no room for the active {name} fault's "
                        f"max_tokens {self.faults.active[name]['max_tokens']}; switch it off first",
                    )
        except FaultError as exc:
            return _admin_error(exc.status, str(exc))
        except ConfigError as exc:
            return _admin_error(400, str(exc))
        self.core.reconfigure(cfg)
        self.cfg = self.metrics.cfg = self.gpus.cfg = cfg
        self._apply_faults()  # the tenant's bytes follow the new pool
        self.log.startup(self.clock.now(), cfg, self.faults.version)
        return web.json_response({"config": {key: getattr(cfg, key) for key in SETTABLE}})


def _admin_error(status: int, message: str) -> web.Response:
    """An OpenAI-style error body; the type names the OpenAI SDK's exception for the status."""
    kind = {401: "AuthenticationError", 403: "PermissionDeniedError", 409: "ConflictError"}
    error = {"message": message, "type": kind.get(status, "BadRequestError"), "param": None, "code": status}
    return web.json_response({"error": error}, status=status)


def banner(cfg: SimConfig, url: str, speed: float, admin_env: str | None = None, admin: bool = False) -> str:
    """The one line the simulator prints once it listens (:func:`perfkit.lab.serve.serving` reads it);
    with ``admin_env``, whether /admin is on and the env var its token comes from (never the token)."""
    what = f"{cfg.model.name} on {cfg.tensor_parallel_size}x {cfg.gpu.name}, {cfg.num_gpu_blocks()} KV blocks"
    line = f"serving {cfg.served_model_name} on {url} (simulated {what}, speed {speed:g}x)"
    if admin_env is None:
        return line
    state = f"on, token from ${admin_env}" if admin else f"off: ${admin_env} is not set"
    return f"{line}; admin {state}"
