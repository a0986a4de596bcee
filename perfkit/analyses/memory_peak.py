"""An observed per-GPU memory peak split into model states and the rest, when a training job's
setup (micro-batch, sequence length, ZeRO stage, recomputation) is not known: what the OOM row can
say from the model, the GPU count and ``DCGM_FI_DEV_FB_USED`` alone (docs/training-efficiency.md).

For each ZeRO stage over the job's GPUs the model states are computed as in
:func:`perfkit.analyses.memory.zero_states` (16 bytes per parameter, mixed-precision Adam); a stage
whose states and runtime buffers exceed the GPU cannot be what ran. What remains of the observed
peak under the others is activations, logits and the allocator's cache; it is expressed as tokens
per micro-batch at Korthikanti's 34·h·L bytes per token (FlashAttention, no recomputation: the
s·b·h·34 term per layer, with s·b = 1). When that rest outweighs the states under every stage that
can run, the activations are the largest item whatever the setup, and the seed's first lever,
activation recomputation, is what to try.

The same arithmetic says when a job *must* be recomputing activations (:func:`implied_recompute`):
a micro-batch holds at least one whole sequence, so when the rest of the peak holds fewer than half a
sequence's tokens at 34·h·L (per tensor-parallel rank) under every stage that can run, storing every
activation cannot be what ran, and full recomputation (2·h·L a token) is what fits. The factor 2 is
the margin for what 34·h·L leaves out or over-counts (the logits, a fused kernel's buffers, the
allocator's cache are in the peak; selective recomputation saves a part): tens of %, not 2x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from perfkit.analyses.memory import (
    FIRST_TRY,
    GIB,
    MIB,
    OVERHEAD_BYTES,
    PRECISIONS,
    checked_bytes,
    positive_int,
    zero_states,
)
from perfkit.core.hardware import ModelSpec


@dataclass
class StatesVsPeak:
    """Model states under each ZeRO stage against an observed peak, when the rest of the setup
    (micro-batch, sequence length, recomputation) is unknown: what remains of the peak is
    activations, logits and the allocator's cache."""

    model: str
    gpus: int
    observed_bytes: float
    capacity_bytes: float | None
    states_bytes: dict[int, float]  # ZeRO stage → weights + gradients + optimizer per GPU
    fits: dict[int, bool]  # states + overhead under the capacity (else that stage cannot run)
    rest_bytes: dict[int, float]  # observed − states − overhead, for the stages that fit under it
    activation_bytes_per_token: float  # 34·h·L (FlashAttention, no recomputation)
    full_recompute_bytes_per_token: float  # 2·h·L
    activations_largest: bool | None  # the rest outweighs the states under every stage that fits
    first_try: str  # for activations when they are the largest item under some stage that fits

    def summary(self) -> str:
        """One sentence: the states per ZeRO stage, the rest of the peak, the largest item."""
        stages = ", ".join(
            f"ZeRO-{z} {b / GIB:.1f} GiB" + ("" if self.fits[z] else " (cannot fit)")
            for z, b in self.states_bytes.items()
        )
        text = f"model states per GPU ({self.model} over {self.gpus} GPUs, 16 B/param): {stages}"
        if not self.rest_bytes:
            return text + f"; none of them leaves room under the {self.observed_bytes / GIB:.1f} GiB peak"
        low, high = min(self.rest_bytes.values()), max(self.rest_bytes.values())
        per = self.activation_bytes_per_token
        span = f"{low / GIB:.1f}" + (f"-{high / GIB:.1f}" if high - low > 0.05 * GIB else "")
        toks = f"{low / per:,.0f}" + (f"-{high / per:,.0f}" if high - low > 0.05 * GIB else "")
        text += (
            f"; the rest of the {self.observed_bytes / GIB:.1f} GiB peak, {span} GiB after "
            f"{OVERHEAD_BYTES / GIB:.0f} GiB of CUDA/NCCL buffers, is activations and logits: ~{toks} tokens "
            f"per micro-batch at 34·h·L = {per / MIB:.2f} MiB each (2·h·L = {self.full_recompute_bytes_per_token / MIB:.2f} "
            "MiB with full recomputation)"
        )
        over = [z for z, r in self.rest_bytes.items() if r > self.states_bytes[z]]
        if self.activations_largest:
            text += "; they are the largest item whatever the ZeRO stage"
        elif over:
            text += "; they are the largest item under " + "/".join(f"ZeRO-{z}" for z in over)
        else:
            text += "; the model states outweigh them"
        return text

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["summary"] = self.summary()
        out["states_gib"] = {k: v / GIB for k, v in self.states_bytes.items()}
        out["rest_gib"] = {k: v / GIB for k, v in self.rest_bytes.items()}
        return out


def states_vs_peak(
    model: ModelSpec,
    gpus: int,
    observed_bytes: float,
    capacity: float | None = None,
    *,
    precision: str = "mixed",
) -> StatesVsPeak:
    """Split an observed per-GPU peak into model states (for each ZeRO stage over ``gpus``) and the
    rest, and say whether the rest (activations, logits) is the largest item whatever the stage."""
    positive_int("gpus", gpus)
    observed = checked_bytes(observed_bytes)
    assert observed is not None
    states = {z: sum(zero_states(model.params, z, gpus, precision).values()) for z in (0, 1, 2, 3)}
    room = capacity if capacity is not None else math.inf
    fits = {z: s + OVERHEAD_BYTES <= room for z, s in states.items()}
    rest = {
        z: observed - s - OVERHEAD_BYTES
        for z, s in states.items()
        if fits[z] and s + OVERHEAD_BYTES <= observed
    }
    largest = all(r > states[z] for z, r in rest.items()) if rest else None
    over = [z for z, r in rest.items() if r > states[z]]  # stages under which the rest is the largest item
    act_b = PRECISIONS[precision][3] / 2.0
    return StatesVsPeak(
        model=model.key,
        gpus=gpus,
        observed_bytes=observed,
        capacity_bytes=capacity,
        states_bytes=states,
        fits=fits,
        rest_bytes=rest,
        activation_bytes_per_token=act_b * 34.0 * model.hidden * model.layers,
        full_recompute_bytes_per_token=act_b * 2.0 * model.hidden * model.layers,
        activations_largest=largest,
        first_try=FIRST_TRY["activations"] if over else FIRST_TRY["optimizer"] if rest else "",
    )


IMPLIED_MARGIN = 2.0
"""How far under one sequence the stored-activation room must be to call recomputation implied
(module docstring)."""


def implied_recompute(peak: StatesVsPeak, seq_len: int, tp: int = 1) -> tuple[str | None, str]:
    """("full", why) when the observed peak leaves too little room to store one sequence's activations
    (module docstring), else (None, why not)."""
    if not peak.rest_bytes or seq_len <= 0 or tp <= 0:
        return None, "no room left under the peak to weigh"
    room = max(peak.rest_bytes.values())
    stored = room * tp / peak.activation_bytes_per_token  # tokens whose activations fit, stored
    recomputed = room * tp / peak.full_recompute_bytes_per_token
    if stored * IMPLIED_MARGIN > seq_len:
        return (
            None,
            f"~{stored:,.0f} tokens of stored activations fit: a {seq_len:,}-token sequence needs no recomputation",
        )
    if recomputed < seq_len:
        return (
            None,
            f"even with full recomputation only ~{recomputed:,.0f} tokens fit: the memory numbers disagree",
        )
    return "full", (
        f"implied by the memory arithmetic: the {room / GIB:.1f} GiB left under the peak holds ~{stored:,.0f} tokens "
        f"of stored activations (34·h·L{'' if tp == 1 else f' / tp {tp}'}), {seq_len / stored:.1f}x short of one "
        f"{seq_len:,}-token sequence, and ~{recomputed:,.0f} with full recomputation (2·h·L): the job recomputes"
    )
