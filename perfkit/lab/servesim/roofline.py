"""How long one engine step takes on the GPU: a roofline over the step's work (docs/simulator.md).

A step runs every scheduled token through the model once. Per step (all GPUs together, ``tp`` of
them; a GPU does 1/tp of the FLOPs and bytes, the heads and the weights being split)::

    T  = prefill tokens P + decoding sequences D            S = sequences sampled this step
    linear   = max((2 * N_body * T + 2 * vocab * hidden * S) / (tp * peak * compute_efficiency),
                   weight_read_bytes / (tp * hbm * memory_efficiency))
    prefill_attention = 4 * layers * heads * head_dim * pairs / (tp * peak * attention_efficiency)
                      + (prior context read + P written) * kv_bytes_per_token / (tp * hbm * memory_efficiency)
    decode_attention  = (decode context + D) * kv_bytes_per_token / (tp * hbm * memory_efficiency)
    allreduce (tp>1)  = 2 * layers * (allreduce_latency + 2 (tp-1)/tp * T * hidden * 2 / (link_efficiency * link / 2))
    step = (linear + prefill_attention + decode_attention + allreduce + step_overhead
            + decode_part * (decode_slowdown - 1)) * step_slowdown * jitter

A calibrated replay (:mod:`perfkit.app.whatif.calibrate`) scales two groups of terms by what a real
engine's recorded latencies say the roofline misses: ``prefill_cost_scale`` the compute-bound ones
(the GEMMs' FLOPs term of ``linear`` and ``prefill_attention``), ``decode_cost_scale`` the
memory-bound ones (the weight-read term of ``linear`` and ``decode_attention``); the calibration sets
``step_overhead_s`` itself. Both scales are 1 unless a calibration set them.

``N_body`` is the parameters a token's GEMMs touch (all but the embedding table, and but the LM
head, which runs only for the S sampled positions); ``pairs`` the (query, key) pairs causal
attention computes for the prefill chunks, ``sum(n * c0 + n (n+1) / 2)`` for a chunk of n tokens
after c0 already-computed ones; ``weight_read_bytes`` every weight but the embedding table (only the
rows looked up are read). ``decode_part`` is decode's memory-bound share: the decode attention plus
what the linear layers take beyond the prefill tokens' compute.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from perfkit.lab.servesim.config import SimConfig


@dataclass(frozen=True)
class StepWork:
    """What one step computes (token counts; contexts in tokens)."""

    prefill_tokens: int = 0
    prefill_pairs: float = 0.0  # causal (query, key) pairs of the prefill chunks
    prefill_context: int = 0  # already-computed tokens the prefill chunks attend to (KV read)
    decode_seqs: int = 0
    decode_context: int = 0  # tokens of KV the decoding sequences read (sum of their contexts)
    sampled: int = 0  # sequences that sample a token (decodes + prompts finishing)


@dataclass(frozen=True)
class StepTime:
    """One step's time, seconds, by part (``total`` includes the faults and the jitter)."""

    linear_s: float
    prefill_attention_s: float
    decode_attention_s: float
    allreduce_s: float
    overhead_s: float
    decode_part_s: float
    total_s: float


class Roofline:
    """Step times for one :class:`SimConfig` (constants computed once; :meth:`seconds` is cheap)."""

    def __init__(self, cfg: SimConfig) -> None:
        m, g, tp = cfg.model, cfg.gpu, cfg.tensor_parallel_size
        self.cfg = cfg
        peak = g.peak_flops(cfg.compute_dtype)
        wbytes = cfg.weight_bytes() / m.params  # bytes per parameter at the serving dtype
        emb = m.embedding_params()
        head = 0.0 if m.tied_embeddings else emb  # the LM head's own parameters
        self.flops_per_token = 2.0 * (m.params - emb - head)  # every GEMM but the LM head
        self.flops_per_sample = 2.0 * emb  # the LM head, for a sampled position
        self.weight_read_bytes = (m.params - (emb if not m.tied_embeddings else 0.0)) * wbytes
        self.flops_per_pair = 4.0 * m.layers * m.heads * m.head_dim  # QK^T and PV, 2 FLOPs per MAC
        self.kv_bytes = cfg.kv_bytes_per_token()
        self.compute = tp * peak * cfg.compute_efficiency
        self.attention = tp * peak * cfg.attention_efficiency
        self.memory = tp * g.hbm_bytes_per_s * cfg.memory_efficiency
        self.overhead = cfg.step_overhead_s
        self.allreduces = 2 * m.layers if tp > 1 else 0  # after attention and after the MLP, each layer
        link = g.interconnect_bytes_per_s or 0.0
        busbw = cfg.link_efficiency * link / 2.0  # per direction
        ring = 2.0 * (tp - 1) / tp  # a ring all-reduce moves 2 (n-1)/n of the buffer per GPU
        self.allreduce_latency = cfg.allreduce_latency_s
        self.allreduce_s_per_token = ring * m.hidden * 2.0 / busbw if tp > 1 and busbw > 0 else 0.0
        self.jitter = cfg.step_jitter
        self.prefill_scale = cfg.prefill_cost_scale
        self.decode_scale = cfg.decode_cost_scale
        self.attention_scale = cfg.attention_cost_scale
        self.spec = cfg.num_speculative_tokens
        self.draft_ratio = cfg.draft_cost_ratio

    def parts(self, w: StepWork, decode_slowdown: float = 1.0, step_slowdown: float = 1.0) -> StepTime:
        """The step's time by part, without jitter."""
        tokens = w.prefill_tokens + w.decode_seqs
        ps, ds = self.prefill_scale, self.decode_scale
        spec = self.spec if w.decode_seqs else 0
        # speculative decoding: the target verifies each decoding sequence's k drafts and its own
        # token in one forward (k + 1 positions, all sampled); the weights are still read once
        tokens += w.decode_seqs * spec
        sampled = w.sampled + w.decode_seqs * spec
        compute = (self.flops_per_token * tokens + self.flops_per_sample * sampled) / self.compute * ps
        weights = self.weight_read_bytes / self.memory * ds
        linear = compute if compute > weights else weights
        prefill_attn = 0.0
        if w.prefill_tokens:
            prefill_attn = (
                self.flops_per_pair * w.prefill_pairs / self.attention * self.attention_scale
                + (w.prefill_context + w.prefill_tokens) * self.kv_bytes / self.memory * ps
            )
        decode_attn = 0.0
        decode_part = 0.0
        if w.decode_seqs:
            decode_attn = (w.decode_context + w.decode_seqs) * self.kv_bytes / self.memory * ds
            prefill_compute = self.flops_per_token * w.prefill_tokens / self.compute * ps
            decode_part = decode_attn + max(0.0, linear - prefill_compute)
        comm = 0.0
        if self.allreduces:
            comm = self.allreduces * (self.allreduce_latency + tokens * self.allreduce_s_per_token)
        overhead = self.overhead
        # the draft proposes its k tokens one forward at a time, each a fraction of a target decode step
        draft = (
            spec * self.draft_ratio * (self.weight_read_bytes / self.memory * ds + overhead) if spec else 0.0
        )
        base = linear + prefill_attn + decode_attn + comm + overhead + draft
        total = (base + decode_part * (decode_slowdown - 1.0)) * step_slowdown
        return StepTime(linear, prefill_attn, decode_attn, comm, overhead, decode_part, total)

    def seconds(
        self,
        w: StepWork,
        decode_slowdown: float = 1.0,
        step_slowdown: float = 1.0,
        rng: random.Random | None = None,
    ) -> float:
        """The step's duration, seconds: :meth:`parts`' total times a jitter factor drawn from ``rng``."""
        total = self.parts(w, decode_slowdown, step_slowdown).total_s
        if rng is not None and self.jitter > 0:
            total *= max(0.5, rng.gauss(1.0, self.jitter))
        return total

    def decode_tpot_floor_s(self, batch: int = 1, context: int = 0) -> float:
        """The roofline's time of one pure decode step of ``batch`` sequences with ``context`` tokens each
        (no jitter, no faults): the lowest TPOT the configuration allows at that batch."""
        w = StepWork(decode_seqs=batch, decode_context=batch * context, sampled=batch)
        return self.parts(w).total_s
