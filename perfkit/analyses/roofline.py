"""The decode roofline: the lowest time per output token the hardware allows, and the share of that
bound an engine's observed TPOT reaches (docs/training-efficiency.md, reference §4.4).

One decode step produces one token for every running sequence. Each step reads every weight once
and every resident sequence's KV cache once; the step cannot be shorter than those bytes over the
HBM bandwidth, nor than its FLOPs over the tensor cores' peak. Per GPU, ``tp`` of them::

    bytes/step = weight_bytes / tp + batch · context · kv_bytes_per_token_per_gpu
    t_memory   = bytes/step / hbm_bytes_per_s
    t_compute  = batch · 2 · N_matmul / tp / peak_flops          (2 FLOPs per weight per token)
    floor      = max(t_memory, t_compute)                      ≤ observed TPOT

``weight_bytes`` leaves out an untied input embedding table: a step reads only the batch's rows of
it (the LM head, a matmul, is read whole). The KV bytes per token and GPU follow vLLM's head split
(:func:`perfkit.analyses.memory.kv_bytes_per_token_per_gpu`). Tensor-parallel all-reduces, kernel
launch gaps, sampling and the scheduler come on top, so a real engine stays below the floor's speed
(vLLM's ``--enable-mfu-metrics`` estimates the same bytes per step from inside the engine).

``share = floor / observed TPOT`` (0-1): how close decode runs to the bound. A share that falls from
~70 % to ~40 % at the same batch and context is the GPU doing less per second than it did
(throttled clocks, a slower node, a regression in the kernels); a share at :data:`NEAR_BOUND_SHARE`
or above means decode already moves bytes as fast as the memory allows, and only more bandwidth
(a faster GPU, wider tensor parallelism) or fewer bytes (fp8 weights, an fp8 KV cache) speeds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perfkit.analyses.memory import kv_bytes_per_token_per_gpu
from perfkit.analyses.mfu import matmul_params
from perfkit.core.hardware import Gpu, ModelSpec
from perfkit.errors import ConfigError

NEAR_BOUND_SHARE = 0.9
"""At 90 % of the floor the engine moves bytes nearly as fast as HBM allows: what the floor leaves
out (the tensor-parallel all-reduce, launch gaps, sampling) is all that remains, so tuning the
engine cannot buy much; more bandwidth or fewer bytes can (issue 12: "95 % means buy bandwidth")."""
SAME_BATCH_RATIO = 1.25
"""Two windows' running batches within 1.25x of each other are "the same batch" for :func:`reading`:
the work a step does beyond the floor (per-sequence compute, sampling, scheduling) grows at most in
proportion to the batch, so a batch 1.25x larger can lower the share by at most 1.25x, less than
:data:`SHARE_DROP_RATIO`. With a larger change the reading asks for a comparison at equal batch:
the batch may have grown because decode slowed (Little's law), or have slowed decode itself."""
SHARE_DROP_RATIO = 1.4
"""The share fell to 1/1.4 of the baseline's or less (70 % → 50 %; issue 12's example, 70 % → 40 %, is
1.75x): the floor already accounts for the batch and context of each window, so at the same GPU a
drop that large is the GPU doing less per second (throttled clocks, a slower node, a kernel
regression), not more work."""


@dataclass
class DecodeRoofline:
    """The decode floor for one (model, GPU, batch, context, tp) and the observed TPOT's share of it."""

    model: str
    gpu: str
    tp: int
    batch: float
    context: float
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float  # the batch's KV read per step
    bytes_per_step: float
    memory_s: float
    compute_s: float
    floor_tpot_s: float
    bound: str  # memory | compute
    max_tokens_per_s: float  # batch / floor: the aggregate decode ceiling
    observed_tpot_s: float | None = None
    share: float | None = None  # floor / observed, 0-1
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _number(name: str, v: Any, *, low: float, high: float) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low <= v <= high:
        raise ConfigError(f"{name}: expected a number in [{low:g}, {high:g}], got {v!r}")
    return float(v)


def decode_roofline(
    model: ModelSpec,
    gpu: Gpu,
    batch: float,
    context: float,
    tp: int = 1,
    *,
    kv_dtype_bytes: float = 2.0,
    weight_bytes_per_param: float | None = None,
    dtype: str = "bf16",
    observed_tpot_s: float | None = None,
) -> DecodeRoofline:
    """The decode floor and, with ``observed_tpot_s``, the share of it decode reaches.

    ``batch``: running sequences (vLLM's ``num_requests_running``, at least 1); ``context``: their
    mean tokens in the KV cache (prompt + tokens generated so far); ``tp``: tensor-parallel GPUs."""
    b = _number("batch", batch, low=1.0, high=1e6)
    c = _number("context", context, low=0.0, high=2**24)
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= 1024:
        raise ConfigError(f"tp: expected a tensor-parallel size in [1, 1024], got {tp!r}")
    wb = model.bytes_per_param if weight_bytes_per_param is None else weight_bytes_per_param
    _number("weight_bytes_per_param", wb, low=0.125, high=8.0)
    read_params = matmul_params(model)  # the untied input table is looked up, not read whole
    weights = read_params * wb / tp
    kv = b * c * kv_bytes_per_token_per_gpu(model, tp, kv_dtype_bytes)
    memory_s = (weights + kv) / gpu.hbm_bytes_per_s
    compute_s = b * 2.0 * read_params / tp / gpu.peak_flops(dtype)
    floor = max(memory_s, compute_s)
    out = DecodeRoofline(
        model=model.key,
        gpu=gpu.key,
        tp=tp,
        batch=b,
        context=c,
        weight_bytes_per_gpu=weights,
        kv_bytes_per_gpu=kv,
        bytes_per_step=weights + kv,
        memory_s=memory_s,
        compute_s=compute_s,
        floor_tpot_s=floor,
        bound="memory" if memory_s >= compute_s else "compute",
        max_tokens_per_s=b / floor,
    )
    if observed_tpot_s is not None:
        tpot = _number("observed_tpot_s", observed_tpot_s, low=1e-6, high=3600.0)
        out.observed_tpot_s = tpot
        out.share = floor / tpot
        if out.share > 1.0:
            out.notes.append(
                f"observed TPOT {tpot * 1e3:.2f} ms is under the floor {floor * 1e3:.2f} ms: the batch, "
                "context, tp or GPU given is not what ran (speculative decoding also emits several tokens a step)"
            )
    return out


def decode_floor_tpot_s(model: ModelSpec, gpu: Gpu, batch: float, context: float, tp: int = 1) -> float:
    """The lowest TPOT (seconds) ``gpu`` allows for decoding ``batch`` sequences of ``context``
    tokens of ``model`` over ``tp`` GPUs (bf16 weights and KV cache): the module docstring's floor."""
    return decode_roofline(model, gpu, batch, context, tp).floor_tpot_s


def reading(
    share: float | None, baseline_share: float | None = None, batch_ratio: float | None = None
) -> str:
    """What a share of the floor says, in words (the decode-efficiency row's sentence);
    ``batch_ratio``: the running batch now over the baseline's."""
    if share is None:
        return ""
    fell = baseline_share is not None and baseline_share > 0 and share * SHARE_DROP_RATIO <= baseline_share
    if fell and batch_ratio is not None and not 1 / SAME_BATCH_RATIO <= batch_ratio <= SAME_BATCH_RATIO:
        return (
            f"the share fell from {baseline_share:.0%} to {share:.0%} with the batch {batch_ratio:.2f}x the "
            "baseline's: compare at an equal batch before blaming the GPU (per-sequence work the bandwidth "
            "floor does not count grows with the batch)"
        )
    if fell:
        return (
            f"the share fell from {baseline_share:.0%} to {share:.0%}: the GPU does less per second than it did "
            "(throttling, a slower node, a kernel regression)"
        )
    if share >= NEAR_BOUND_SHARE:
        return "decode runs at the memory-bandwidth bound: only more bandwidth or fewer bytes (fp8) make it faster"
    return ""


SERVING_RATES = ("requests_per_s", "prompt_tokens_per_s", "generated_tokens_per_s")
"""The window rates :func:`serving_roofline` takes by name (``analyses.baseline``'s rate names)."""


def mean_context(
    requests_per_s: float | None, prompt_tokens_per_s: float | None, generated_tokens_per_s: float | None
) -> float | None:
    """Mean tokens a running sequence holds in the KV cache: mean prompt + half the mean output (a
    sequence decoding its k-th token holds prompt + k; k runs over the output). None when unknown."""
    if (
        not requests_per_s
        or requests_per_s <= 0
        or prompt_tokens_per_s is None
        or generated_tokens_per_s is None
    ):
        return None
    return (prompt_tokens_per_s + generated_tokens_per_s / 2.0) / requests_per_s


def serving_roofline(
    model: ModelSpec,
    gpu: Gpu,
    tp: int,
    *,
    running: float | None,
    tpot_s: float | None,
    requests_per_s: float | None,
    prompt_tokens_per_s: float | None,
    generated_tokens_per_s: float | None,
) -> DecodeRoofline | None:
    """:func:`decode_roofline` from a serving window's rates: batch = running requests (at least 1),
    context = :func:`mean_context`. None when a rate or the TPOT is missing."""
    context = mean_context(requests_per_s, prompt_tokens_per_s, generated_tokens_per_s)
    if running is None or tpot_s is None or context is None:
        return None
    return decode_roofline(model, gpu, max(running, 1.0), context, tp, observed_tpot_s=tpot_s)


def describe(incident: DecodeRoofline, baseline: DecodeRoofline | None = None, assumed: str = "") -> str:
    """The decode-efficiency row's sentence: the share of the floor now (and in the baseline), and
    what it says (:func:`reading`)."""
    base = baseline.share if baseline is not None else None
    text = (
        f"decode runs at {incident.share or 0:.0%} of its HBM roofline (floor {incident.floor_tpot_s * 1e3:.1f} "
        f"ms/token for {incident.batch:.1f} running of ~{incident.context:,.0f} tokens on {incident.tp}x "
        f"{incident.gpu}{', ' + assumed if assumed else ''}"
        + (f"; baseline {base:.0%})" if base is not None else ")")
    )
    ratio = incident.batch / baseline.batch if baseline is not None and baseline.batch > 0 else None
    said = reading(incident.share, base, ratio)
    return text + (f": {said}" if said else "")


def lookup(model_name: str | None, gpu_name: str | None) -> tuple[ModelSpec | None, Gpu | None, str]:
    """The model and GPU called so in the hardware tables (data/hardware/*.yaml), and, when one is
    missing, why (a sentence naming the name and the table)."""
    from perfkit.core import hardware

    if not model_name:
        return None, None, "no model named (incident.yaml's model:, or one model_name label in the evidence)"
    try:
        spec = hardware.model(str(model_name))
    except ConfigError:
        return None, None, f"no model description for {model_name!r} in data/hardware/models.yaml"
    try:
        return spec, hardware.gpu(str(gpu_name)), ""
    except ConfigError:
        return spec, None, f"GPU {gpu_name!r} is not in data/hardware/gpus.yaml"
