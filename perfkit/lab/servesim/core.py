"""A vLLM-like engine core, stepped one iteration at a time in virtual time: deterministic, no I/O.

**Scheduling** follows vLLM V1's ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``) with
chunked prefill on: each step first gives every running request the tokens it still needs (one for a
decoding sequence, a prompt chunk for one still in prefill, at most ``long_prefill_token_threshold``),
in order, until ``max_num_batched_tokens`` is spent; when a request's next KV block cannot be
allocated, the *newest* running request is preempted (``self.running.pop()``): its blocks are freed,
its computed tokens forgotten, and it goes back to the *front* of the waiting queue, to be recomputed
(prompt and the tokens it had generated) when readmitted. Then, if nothing was preempted, waiting
requests are admitted in order while the budget lasts, ``max_num_seqs`` is not reached and their blocks
fit. With chunked prefill off, a step is vLLM V0's: either a prefill of newly admitted whole prompts
(running sequences wait: the seed's §5.3 interference) or a decode of every running sequence.

**KV cache**: ``num_gpu_blocks`` blocks of ``block_size`` tokens (:meth:`SimConfig.num_gpu_blocks`);
``kv_usage`` is ``1 - free / total`` as vLLM's ``BlockPool.get_usage``. With prefix caching, a
request's first ``prefix_tokens`` (whole blocks) are blocks named by ``(prefix_key, index)`` (or the
``block_keys`` given): computed once, they stay cached while referenced and, unreferenced, sit in the
free queue in LRU order (vLLM's ``FreeKVCacheBlockQueue``; a request's blocks are freed tail first)
until an allocation evicts them. A new request reuses the longest run of its leading blocks still
cached (at most ``prompt - 1`` tokens: vLLM always computes the last one); those tokens are its
``cached_tokens`` and count as prefix-cache hits.

**Time**: :meth:`EngineCore.step` schedules at ``now`` and returns the step's work, its duration
(:mod:`.roofline`) and what came out at ``now + duration``. Stage times follow vLLM's definitions
(``vllm/v1/metrics/stats.py``): queue = scheduled - arrival, prefill = first token - scheduled,
decode = last token - first token, inter-token latency = the gap between a request's tokens.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from perfkit.errors import ConfigError
from perfkit.lab.servesim.blocks import Pool, shared_block_keys
from perfkit.lab.servesim.config import SimConfig
from perfkit.lab.servesim.roofline import Roofline, StepWork


class RequestRejected(ConfigError, ValueError):
    """A request the engine cannot take (over ``max_model_len``, empty, a duplicate id)."""


@dataclass
class Faults:
    decode_slowdown: float = 1.0  # thermal throttle: decode (memory/clock) time x this
    step_slowdown: float = 1.0  # a deploy that made every step slower
    kv_reserved_frac: float = 0.0  # share of KV blocks taken by another tenant's memory


@dataclass(slots=True)
class Output:
    """Tokens a request got from one step."""

    rid: str
    new_tokens: int
    first: bool
    finished: bool
    finish_reason: str | None  # "length"


@dataclass(slots=True)
class Finished:
    """Timings (virtual seconds) of a finished request, vLLM's stage definitions."""

    rid: str
    arrival: float
    scheduled: float
    first_token: float
    last_token: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    preemptions: int


@dataclass
class StepResult:
    start: float
    duration_s: float  # tokens appear at start + duration_s
    outputs: list[Output]
    finished: list[Finished]
    prefill_tokens: int
    decode_seqs: int
    num_running: int
    num_waiting: int
    kv_usage: float  # 0..1 after the step
    preemptions: int  # since the previous result: this step's, and a live reconfigure's before it
    prefix_queries: int  # tokens, this step
    prefix_hits: int
    itl: list[float]  # inter-token gaps observed at this step (one per decoding sequence)
    prompt_tokens: int = 0  # prompt tokens of the requests whose first token came out this step
    generation_tokens: int = 0  # tokens that came out this step
    work: StepWork = field(default_factory=StepWork)
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (rid, why): can never fit, dropped
    spec_drafts: int = 0  # speculative decoding: drafts verified this step (one per decoding sequence)
    spec_accepted: int = 0  # their draft tokens accepted (before a request's max_tokens cut them)


class _Req:
    __slots__ = (
        "rid", "prompt", "max_tokens", "arrival", "keys", "computed", "outputs", "blocks", "hashed",
        "registered", "scheduled", "first", "last", "cached", "preemptions", "prefix",
    )  # fmt: skip

    def __init__(self, rid: str, prompt: int, max_tokens: int, arrival: float, keys: list[Any]) -> None:
        self.rid, self.prompt, self.max_tokens, self.arrival, self.keys = (
            rid,
            prompt,
            max_tokens,
            arrival,
            keys,
        )
        self.computed = 0  # tokens whose KV is computed
        self.outputs = 0  # tokens generated
        self.blocks = 0  # KV blocks held (private + shared)
        self.hashed: list[Any] = []  # cached blocks held (prefix blocks, in order)
        self.registered = 0  # prefix blocks dealt with (hit, computed and cached, or computed as duplicates)
        self.scheduled = -1.0
        self.first = -1.0
        self.last = -1.0
        self.cached = -1  # prefix-cached tokens at first admission
        self.preemptions = 0
        self.prefix: tuple[Any, ...] = (None, 0, None)


class EngineCore:
    """The engine: add requests, :meth:`step` it, read what came out (see the module docstring)."""

    def __init__(self, cfg: SimConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self.faults = Faults()
        self.rng = random.Random(seed)
        self.roofline = Roofline(cfg)
        self.pool = Pool(cfg.num_gpu_blocks(), cfg.enable_prefix_caching)
        self.running: list[_Req] = []
        self.waiting: deque[_Req] = deque()
        self.requests: dict[str, _Req] = {}
        self.tenant_blocks = 0  # blocks held by the kv_reserved_frac fault's other tenant
        self.dropped: list[tuple[str, str]] = []  # since the last step's result (see _drop_unfit)
        self._reported = 0  # preemptions the step results have carried
        self.totals = dict.fromkeys(
            ("steps", "preemptions", "prompt_tokens", "generation_tokens", "prefix_queries", "prefix_hits"), 0
        )

    # -- requests ------------------------------------------------------------------------------

    def add(
        self,
        rid: str,
        prompt_tokens: int,
        max_tokens: int,
        now: float,
        prefix_key: str | None = None,
        prefix_tokens: int = 0,
        block_keys: list[Any] | None = None,
    ) -> None:
        """Queue a request arriving at ``now``. Its first ``prefix_tokens`` (whole blocks) are shared
        with every request of the same ``prefix_key``; ``block_keys`` (one key per block, e.g. chained
        content hashes) names them instead. RequestRejected (a ConfigError and ValueError) for a
        request over ``max_model_len``, empty, or with a duplicate id."""
        limit = self.cfg.max_model_len
        if rid in self.requests:
            raise RequestRejected(f"request {rid!r}: duplicate request id")
        if prompt_tokens < 1 or max_tokens < 1:
            raise RequestRejected(f"request {rid!r}: prompt_tokens and max_tokens must be >= 1")
        if prompt_tokens + max_tokens > limit:
            raise RequestRejected(
                f"request {rid!r}: prompt_tokens + max_tokens = {prompt_tokens + max_tokens} exceeds "
                f"max_model_len {limit}"
            )
        prefix = (prefix_key, prefix_tokens, block_keys)
        req = _Req(
            rid, prompt_tokens, max_tokens, now, shared_block_keys(prefix, prompt_tokens, self.cfg.block_size)
        )
        req.prefix = prefix
        self.requests[rid] = req
        self.waiting.append(req)

    def abort(self, rid: str) -> None:
        """Drop request ``rid`` (a client went away); its blocks are freed. Unknown ids are ignored."""
        req = self.requests.pop(rid, None)
        if req is None:
            return
        if req in self.waiting:
            self.waiting.remove(req)
        else:
            self.running.remove(req)
            self._free(req)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting or self.dropped)

    # -- configuration -------------------------------------------------------------------------

    def reconfigure(self, cfg: SimConfig) -> None:
        """Apply a new configuration live. A change of the KV geometry (model, GPU, parallelism, block
        size, dtypes) or of prefix caching restarts the cache: every running request is preempted and
        will be recomputed. Otherwise the pool grows or shrinks (preempting the newest requests when
        their blocks are needed back). A request that can never fit the new configuration is dropped
        (:meth:`_drop_unfit`); preemptions count in the next step's result."""
        old = self.cfg
        geometry = ("model", "gpu", "tensor_parallel_size", "block_size", "dtype", "kv_cache_dtype")
        restart = any(getattr(old, k) != getattr(cfg, k) for k in geometry)
        restart |= old.enable_prefix_caching != cfg.enable_prefix_caching
        self.cfg = cfg
        self.roofline = Roofline(cfg)
        self._drop_unfit(cfg, cfg.num_gpu_blocks())
        if restart:
            while self.running:
                self._preempt(self.running.pop())
            self.pool = Pool(cfg.num_gpu_blocks(), cfg.enable_prefix_caching)
            self.tenant_blocks = 0
            if cfg.block_size != old.block_size:
                for req in self.waiting:
                    if req.prefix[2] is not None:  # content keys of the old block size: no longer valid
                        req.prefix = (None, 0, None)
                    req.keys = shared_block_keys(req.prefix, req.prompt, cfg.block_size)
            return
        delta = cfg.num_gpu_blocks() - self.pool.total
        if delta >= 0:
            self.pool.total += delta
            self.pool.give(delta, [])
            return
        need = -delta
        while self.pool.free < need and self.running:
            self._preempt(self.running.pop())
        taken = min(need, self.pool.free)
        self.pool.take(taken)
        self.pool.total -= taken
        self.tenant_blocks = min(self.tenant_blocks, self.pool.total)

    # -- the step ------------------------------------------------------------------------------

    def step(self, now: float) -> StepResult:
        """Schedule at ``now``, run one step, and return what came out (at ``now + duration_s``)."""
        self._tenant()
        queries_before, hits_before = self.totals["prefix_queries"], self.totals["prefix_hits"]
        if self.cfg.enable_chunked_prefill:
            sched = self._schedule_chunked(now)
        else:
            sched = self._schedule_v0(now)
        preemptions = self.totals["preemptions"] - self._reported
        self._reported += preemptions
        queries = self.totals["prefix_queries"] - queries_before
        hits = self.totals["prefix_hits"] - hits_before
        if not sched:
            return self._result(now, 0.0, [], [], [], StepWork(), preemptions, queries, hits, 0, 0)
        work = self._work(sched)
        f = self.faults
        duration = self.roofline.seconds(work, f.decode_slowdown, f.step_slowdown, self.rng)
        end = now + duration
        outputs: list[Output] = []
        finished: list[Finished] = []
        itl: list[float] = []
        prompt_out = 0
        caching = self.pool.caching
        bs = self.cfg.block_size
        spec, accept, rng = self.cfg.num_speculative_tokens, self.cfg.spec_acceptance_rate, self.rng
        done = False
        drafts = accepted = 0
        for req, n in sched:
            req.computed += n
            if caching and req.registered < len(req.keys):
                self._register(req, min(req.computed // bs, len(req.keys)))
            if req.computed < req.prompt + req.outputs:
                continue  # a prompt chunk: no token yet
            first = req.outputs == 0
            new = 1
            if first:
                req.first = end
                prompt_out += req.prompt
            else:
                itl.append(end - req.last)
                if spec:  # the drafts accepted before the first rejected one come out with it
                    while new <= spec and rng.random() < accept:
                        new += 1
                    drafts += 1
                    accepted += new - 1
                    new = min(new, req.max_tokens - req.outputs)
                    req.computed += new - 1
            req.outputs += new
            req.last = end
            over = req.outputs >= req.max_tokens
            outputs.append(Output(req.rid, new, first, over, "length" if over else None))
            if over:
                done = True
                self._free(req)
                del self.requests[req.rid]
                finished.append(
                    Finished(
                        req.rid,
                        req.arrival,
                        req.scheduled,
                        req.first,
                        req.last,
                        req.prompt,
                        req.outputs,
                        max(0, req.cached),
                        req.preemptions,
                    )  # fmt: skip
                )
        if done:
            self.running = [r for r in self.running if r.rid in self.requests]
        generated = sum(o.new_tokens for o in outputs)
        self.totals["steps"] += 1
        self.totals["prompt_tokens"] += prompt_out
        self.totals["generation_tokens"] += generated
        res = self._result(
            now, duration, outputs, finished, itl, work, preemptions, queries, hits, prompt_out, generated
        )
        res.spec_drafts, res.spec_accepted = drafts, accepted
        return res

    def _result(self, now: float, duration: float, outputs: list[Output], finished: list[Finished],
                itl: list[float], work: StepWork, preemptions: int, queries: int, hits: int,
                prompt_out: int, generated: int) -> StepResult:  # fmt: skip
        dropped, self.dropped = self.dropped, []
        return StepResult(
            start=now, duration_s=duration, outputs=outputs, finished=finished,
            prefill_tokens=work.prefill_tokens, decode_seqs=work.decode_seqs,
            num_running=len(self.running), num_waiting=len(self.waiting), kv_usage=self.kv_usage(),
            preemptions=preemptions, prefix_queries=queries, prefix_hits=hits, itl=itl,
            prompt_tokens=prompt_out, generation_tokens=generated, work=work, dropped=dropped,
        )  # fmt: skip

    def _schedule_chunked(self, now: float) -> list[tuple[_Req, int]]:
        """vLLM V1: running requests first (preempting the newest when blocks run out), then waiting ones."""
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        threshold = cfg.long_prefill_token_threshold
        sched: list[tuple[_Req, int]] = []
        preempted = False
        running, pool, bs = self.running, self.pool, cfg.block_size
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.prompt + req.outputs - req.computed
            if 0 < threshold < n:
                n = threshold
            if n > budget:
                n = budget
            need = -(-(req.computed + n) // bs) - req.blocks
            if need > 0:
                while need > pool.free:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted = True
                    if victim is req:
                        break
                if preempted and (i >= len(running) or running[i] is not req):
                    break
                pool.take(need)
                req.blocks += need
            sched.append((req, n))
            budget -= n
            i += 1
        if not preempted:
            self._admit(now, budget, sched, chunked=True)
        return sched

    def _schedule_v0(self, now: float) -> list[tuple[_Req, int]]:
        """vLLM V0 without chunked prefill: a step of whole new prompts if any can start, else a decode step."""
        sched: list[tuple[_Req, int]] = []
        self._admit(now, self.cfg.max_num_batched_tokens, sched, chunked=False)
        if sched:
            return sched
        running, pool, bs = self.running, self.pool, self.cfg.block_size
        i = 0
        while i < len(running):
            req = running[i]
            n = req.prompt + req.outputs - req.computed
            need = -(-(req.computed + n) // bs) - req.blocks
            if need > 0:
                while need > pool.free:
                    victim = running.pop()
                    self._preempt(victim)
                    if victim is req:
                        break
                if i >= len(running) or running[i] is not req:
                    break
                pool.take(need)
                req.blocks += need
            sched.append((req, n))
            i += 1
        return sched

    def _admit(self, now: float, budget: int, sched: list[tuple[_Req, int]], chunked: bool) -> None:
        """Move waiting requests to running while the token budget, max_num_seqs and the blocks allow."""
        cfg, pool, bs = self.cfg, self.pool, self.cfg.block_size
        threshold = cfg.long_prefill_token_threshold if chunked else 0
        waiting, running = self.waiting, self.running
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            req = waiting[0]
            total = req.prompt + req.outputs
            hits = evictable = 0
            if pool.caching and req.keys:
                hits, evictable = pool.lookup(req.keys, (total - 1) // bs)
            cached = hits * bs
            n = total - cached
            if 0 < threshold < n:
                n = threshold
            if n > budget:
                if not chunked:
                    break
                n = budget
            need = -(-(cached + n) // bs) - hits
            if need > pool.free - evictable:
                break
            waiting.popleft()
            for key in req.keys[:hits]:
                pool.touch(key)
            pool.take(need)
            req.hashed = list(req.keys[:hits])
            req.registered = hits
            req.blocks = hits + need
            req.computed = cached
            if req.scheduled < 0:
                req.scheduled = now
            if req.cached < 0:
                req.cached = cached
            if pool.caching:
                self.totals["prefix_queries"] += total
                self.totals["prefix_hits"] += cached
            running.append(req)
            sched.append((req, n))
            budget -= n

    def _work(self, sched: list[tuple[_Req, int]]) -> StepWork:
        prefill = pairs = context = decodes = dcontext = sampled = 0
        for req, n in sched:
            before = req.computed
            total = req.prompt + req.outputs
            if n == 1 and req.outputs and before == total - 1:
                decodes += 1
                dcontext += before
                sampled += 1
                continue
            prefill += n
            pairs += n * before + n * (n + 1) // 2
            context += before
            if before + n >= total:
                sampled += 1
        return StepWork(prefill, float(pairs), context, decodes, dcontext, sampled)

    # -- blocks --------------------------------------------------------------------------------

    def _register(self, req: _Req, upto: int) -> None:
        """Cache the prefix blocks ``req`` finished computing (``registered`` .. ``upto``)."""
        cache = self.pool.cache
        for j in range(req.registered, upto):
            key = req.keys[j]
            if key not in cache:  # else another request computed it meanwhile: ours stays a private duplicate
                cache[key] = [1, 0, False]
                req.hashed.append(key)
        req.registered = max(req.registered, upto)

    def _free(self, req: _Req) -> None:
        self.pool.give(req.blocks - len(req.hashed), req.hashed)
        req.blocks = 0
        req.hashed = []
        req.registered = 0

    def _preempt(self, req: _Req) -> None:
        """vLLM's recompute preemption: free the blocks, forget the computed tokens, wait at the front."""
        self._free(req)
        req.computed = 0
        req.preemptions += 1
        self.totals["preemptions"] += 1
        self.waiting.appendleft(req)

    def _drop_unfit(self, cfg: SimConfig, blocks: int) -> None:
        """Drop every request that can never run to its end under ``cfg`` (over ``max_model_len``, or
        more blocks than the cache's ``blocks``): left waiting, it would head the queue forever. vLLM's
        V0 scheduler drops a prompt the cache can never hold, with a warning (vllm/core/scheduler.py
        ``_schedule_prefills``: ``AllocStatus.NEVER``, "exceeds the capacity of block_manager"); V1
        refuses it at admission. The server ends its stream with an error (:attr:`StepResult.dropped`)."""
        for req in [*self.running, *self.waiting]:
            total = req.prompt + req.max_tokens
            if total > cfg.max_model_len:
                why = f"prompt_tokens + max_tokens = {total} exceeds max_model_len {cfg.max_model_len}"
            elif -(-(total - 1) // cfg.block_size) > blocks:
                why = f"its {total} tokens need more than the KV cache's {blocks} blocks"
            else:
                continue
            self.abort(req.rid)
            self.dropped.append((req.rid, f"request {req.rid} dropped after a config change: {why}"))

    def _tenant(self) -> None:
        """The kv_reserved_frac fault: another tenant takes free blocks up to its share, and gives back."""
        target = int(self.faults.kv_reserved_frac * self.pool.total)
        if target > self.tenant_blocks:
            grab = min(target - self.tenant_blocks, self.pool.free)
            if grab > 0:
                self.pool.take(grab)
                self.tenant_blocks += grab
        elif target < self.tenant_blocks:
            self.pool.give(self.tenant_blocks - target, [])
            self.tenant_blocks = target

    # -- state ---------------------------------------------------------------------------------

    def kv_usage(self) -> float:
        """Share of KV blocks in use (0..1), as vLLM's ``kv_cache_usage_perc``."""
        total = self.pool.total
        return 1.0 - self.pool.free / total if total else 0.0

    def snapshot(self) -> dict[str, Any]:
        """Running and waiting counts, KV usage and blocks, and the running totals."""
        return {
            "running": len(self.running),
            "waiting": len(self.waiting),
            "kv_usage": self.kv_usage(),
            "num_gpu_blocks": self.pool.total,
            "free_blocks": self.pool.free,
            "cached_blocks": len(self.pool.cache),
            "tenant_blocks": self.tenant_blocks,
            "totals": dict(self.totals),
        }
