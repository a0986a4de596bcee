"""Play a :class:`~perfkit.lab.sim.model.ScenarioSpec` forward: a continuous-batching engine, step by step.

Each request goes QUEUED → SCHEDULED (admitted when a sequence slot and KV blocks are free) →
prefill (its first token comes out of the step that finishes its prompt) → decode (one token per
decode step) → finished. Stage times follow vLLM's definitions (``vllm/v1/metrics/stats.py``):
queue = scheduled − arrival, prefill = first token − scheduled, decode = last token − first
token, TPOT = decode / (tokens − 1), ITL = time between a request's successive tokens.

The engine reports what happens to a recorder (:class:`perfkit.lab.sim.exporters.Recorder`), which
aggregates it the way vLLM's exporter does, and snapshots it at every scrape.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from perfkit.lab.sim.model import EngineConfig, ScenarioSpec


@dataclass
class Requests:
    arrival: np.ndarray  # seconds from scenario start
    prompt: np.ndarray  # tokens
    output: np.ndarray  # target output tokens
    long: np.ndarray  # bool: drawn from the long-prompt mix


def _lengths(rng: np.random.Generator, mix, n: int) -> np.ndarray:
    raw = rng.lognormal(np.log(mix.median), mix.sigma, n)
    return np.clip(np.rint(raw), mix.floor, mix.cap).astype(np.int64)


def draw_requests(spec: ScenarioSpec, rng: np.random.Generator) -> Requests:
    """Non-homogeneous Poisson arrivals (thinning) with a gentle diurnal swell and the spec's phases."""
    peak = spec.base_rps * max([1.0, *[p.rate_mult for p in spec.phases]]) * 1.15
    n = rng.poisson(peak * spec.duration_s)
    t = np.sort(rng.uniform(0.0, spec.duration_s, n))
    rate = spec.base_rps * (1.0 + 0.1 * np.sin(2 * np.pi * t / 7200.0))
    long_frac = np.full(t.shape, spec.base_long_prompt_frac)
    prompt_mult = np.ones(t.shape)
    output_mult = np.ones(t.shape)
    for phase in spec.phases:
        inside = (t >= phase.start_s) & (t < phase.end_s)
        rate[inside] *= phase.rate_mult
        prompt_mult[inside] *= phase.prompt_mult
        output_mult[inside] *= phase.output_mult
        if phase.long_prompt_frac is not None:
            long_frac[inside] = phase.long_prompt_frac
    keep = rng.uniform(0.0, peak, t.shape) < rate
    t, long_frac, prompt_mult, output_mult = t[keep], long_frac[keep], prompt_mult[keep], output_mult[keep]
    is_long = rng.uniform(size=t.shape) < long_frac
    prompt = np.where(is_long, _lengths(rng, spec.long_prompt, t.size), _lengths(rng, spec.prompt, t.size))
    prompt = np.maximum(1, np.rint(prompt * prompt_mult)).astype(np.int64)
    output = np.maximum(2, np.rint(_lengths(rng, spec.output, t.size) * output_mult)).astype(np.int64)
    return Requests(t, prompt, output, is_long)


class Engine:
    """The serving engine's scheduler and step clock."""

    def __init__(self, spec: ScenarioSpec, recorder, rng: np.random.Generator) -> None:
        self.spec = spec
        self.cfg: EngineConfig = spec.engine
        self.rec = recorder
        self.rng = rng

    def _accepted(self, idx: np.ndarray, cfg: EngineConfig, room: np.ndarray) -> np.ndarray | int:
        """Draft tokens each decoding sequence gets accepted this step (0 without speculative
        decoding): leading successes of ``spec_tokens`` draws at ``spec_acceptance``, as vLLM's
        rejection sampler keeps the drafts up to the first rejected one; at most ``room`` emitted."""
        if not cfg.spec_tokens:
            return 0
        k = cfg.spec_tokens
        accepted = np.cumprod(self.rng.random((idx.size, k)) < cfg.spec_acceptance, axis=1).sum(axis=1)
        self.rec.spec_decode(int(idx.size), int(idx.size * k), int(accepted.sum()))
        return np.minimum(accepted, np.maximum(room, 0))

    def run(self) -> None:
        spec = self.spec
        reqs = draw_requests(spec, self.rng)
        n = reqs.arrival.size
        scheduled = np.full(n, np.nan)
        first = np.full(n, np.nan)
        prefilled = np.zeros(n, dtype=np.int64)  # prompt tokens computed so far
        generated = np.zeros(n, dtype=np.int64)
        last_tok = np.full(n, np.nan)
        preempted = np.zeros(n, dtype=np.int64)

        waiting: deque[int] = deque()
        running: list[int] = []  # admission order
        releases = deque(sorted(spec.releases, key=lambda r: r.at_s))
        cfg = self.cfg
        kv_blocks_total = cfg.kv_capacity_tokens // cfg.block_size
        next_arrival = 0
        now = 0.0
        self.rec.start(0.0, spec.initial_version, cfg)

        def blocks(tokens: int) -> int:
            return -(-int(tokens) // cfg.block_size)

        used_blocks = 0
        while now < spec.duration_s:
            if releases and now >= releases[0].at_s:
                rel = releases.popleft()
                cfg = replace(cfg, **{k: type(getattr(cfg, k))(v) for k, v in rel.engine_changes.items()})
                if rel.restart:
                    now = self.rec.restart(rel, now, cfg, running, waiting)
                    kv_blocks_total = cfg.kv_capacity_tokens // cfg.block_size
                else:
                    self.rec.reconfigure(cfg)
                continue
            while next_arrival < n and reqs.arrival[next_arrival] <= now:
                waiting.append(next_arrival)
                self.rec.arrived(next_arrival, reqs)
                next_arrival += 1
            if not running and not waiting:
                idle_until = reqs.arrival[next_arrival] if next_arrival < n else spec.duration_s
                if releases:
                    idle_until = min(idle_until, releases[0].at_s)
                now = self.rec.idle(
                    now, max(idle_until, now + 1e-3), running, waiting, used_blocks, kv_blocks_total
                )
                continue

            # -- schedule this step --------------------------------------------------------
            prefill_plan: list[tuple[int, int]] = []  # (request, tokens this step)
            budget = cfg.max_num_batched_tokens if cfg.chunked_prefill else cfg.max_prefill_tokens
            decoding = [r for r in running if prefilled[r] >= reqs.prompt[r]]
            if cfg.chunked_prefill:
                budget -= len(decoding)
                for r in running:  # unfinished prompt chunks first
                    if budget <= 0:
                        break
                    left = int(reqs.prompt[r] - prefilled[r])
                    if left > 0:
                        take = min(left, budget, cfg.long_prefill_token_threshold or budget)
                        prefill_plan.append((r, take))
                        budget -= take
            while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                r = waiting[0]
                need = blocks(reqs.prompt[r] + 1)
                if used_blocks + need > kv_blocks_total * 0.99:
                    break
                if not cfg.chunked_prefill and prefill_plan and reqs.prompt[r] > budget:
                    break
                waiting.popleft()
                running.append(r)
                used_blocks += need
                if np.isnan(scheduled[r]):
                    scheduled[r] = now
                # Prefix cache: the cached share of the prompt needs no compute (vLLM counts it as a hit).
                cached = int(reqs.prompt[r] * cfg.prefix_cache_hit_frac) if reqs.prompt[r] > 1 else 0
                prefilled[r] = min(cached, int(reqs.prompt[r]) - 1)
                self.rec.prefix_cache(int(reqs.prompt[r]), int(prefilled[r]))
                rest = int(reqs.prompt[r] - prefilled[r])
                take = (
                    rest
                    if not cfg.chunked_prefill
                    else min(rest, budget, cfg.long_prefill_token_threshold or budget)
                )
                prefill_plan.append((r, take))
                budget -= take
            if not cfg.chunked_prefill and prefill_plan:
                decoding = []  # a prefill step: running decodes wait for it
            prefill_tokens = sum(t for _, t in prefill_plan)
            if not decoding and not prefill_plan:
                # Nothing admissible (KV full and nothing running cannot happen; guard anyway).
                now = self.rec.idle(now, now + 0.01, running, waiting, used_blocks, kv_blocks_total)
                continue
            ctx_tokens = int(sum(int(prefilled[r] + generated[r]) for r in decoding))
            step = (
                cfg.overhead_s
                + prefill_tokens * cfg.prefill_s_per_token
                + len(decoding) * cfg.decode_s_per_seq
                + ctx_tokens * cfg.kv_read_s_per_token
            )
            if cfg.spec_tokens and decoding:
                k, n_dec = cfg.spec_tokens, len(decoding)
                step += n_dec * k * cfg.prefill_s_per_token + k * (
                    cfg.draft_overhead_s + n_dec * cfg.draft_s_per_seq
                )
            step *= 1.0 + 0.03 * self.rng.standard_normal()
            step = max(step, 0.002)
            end = now + step

            # -- apply the step ------------------------------------------------------------
            finished: list[int] = []
            if decoding:
                idx = np.asarray(decoding)
                itl = end - last_tok[idx]
                emitted = 1 + self._accepted(idx, cfg, reqs.output[idx] - generated[idx] - 1)
                # vLLM observes one interval per sequence per step, however many tokens it emitted
                self.rec.itl(itl, emitted)
                generated[idx] += emitted
                last_tok[idx] = end
                for r in decoding:
                    if generated[r] >= reqs.output[r]:
                        finished.append(r)
            for r, take in prefill_plan:
                prefilled[r] += take
                if prefilled[r] >= reqs.prompt[r]:
                    generated[r] += 1  # the prefill step emits the first token
                    last_tok[r] = end
                    if np.isnan(first[r]):
                        first[r] = end
                        self.rec.first_token(r, end - reqs.arrival[r])
                    if generated[r] >= reqs.output[r]:
                        finished.append(r)
            # KV growth: one slot per generated token; preempt the newest when it runs out.
            used_blocks = sum(blocks(reqs.prompt[r] + generated[r]) for r in running)
            while used_blocks > kv_blocks_total and len(running) > 1:
                victim = running.pop()
                used_blocks -= blocks(reqs.prompt[victim] + generated[victim])
                prefilled[victim] = 0
                generated[victim] = 0
                preempted[victim] += 1
                waiting.appendleft(victim)
                self.rec.preempted(victim)
            for r in finished:
                if r in running:
                    running.remove(r)
                    used_blocks -= blocks(reqs.prompt[r] + generated[r])
                    self.rec.finished(
                        r,
                        prompt=int(reqs.prompt[r]),
                        generated=int(generated[r]),
                        arrival=float(reqs.arrival[r]),
                        scheduled=float(scheduled[r]),
                        first=float(first[r]),
                        last=float(end),
                        preemptions=int(preempted[r]),
                    )
            self.rec.step(
                now,
                end,
                prefill_tokens,
                len(decoding),
                running,
                waiting,
                used_blocks,
                kv_blocks_total,
                prefill_seqs=len(prefill_plan),
            )
            now = end
        self.rec.close(spec.duration_s)
