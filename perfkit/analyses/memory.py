"""GPU memory, item by item: what a training job or a serving engine keeps on each GPU, against the
capacity and the observed ``DCGM_FI_DEV_FB_USED``, with the largest item named and the seed's first
thing to try for it (docs/training-efficiency.md).

"显存不够怎么办？… 把显存消耗拆开，看看哪一项最大，再针对性地做优化" (the seed): the levers it lists
are activation recomputation, gradient accumulation, mixed precision, defragmentation and KV-cache
quantization (:data:`FIRST_TRY`).

**Model states** (Rajbhandari et al. 2020, ZeRO, arXiv:1910.02054 §3.1 and §5): mixed-precision
Adam keeps per parameter 2 bytes of 16-bit weights, 2 of 16-bit gradients and K = 12 of fp32
optimizer states (master weights, momentum, variance: 4 each), 16 bytes in all. Over ``N_d``
data-parallel ranks, per GPU:

===========  ==============================
ZeRO stage   bytes per GPU
===========  ==============================
0 (DDP)      (2 + 2 + 12) Ψ
1 (P_os)     2Ψ + 2Ψ + 12Ψ / N_d
2 (P_os+g)   2Ψ + (2 + 12) Ψ / N_d
3 (P_os+g+p) (2 + 2 + 12) Ψ / N_d
===========  ==============================

Ψ is the parameters one model-parallel rank holds (all of them / (tp · pp)); ``N_d`` = GPUs / (tp · pp).
``precision="fp32"`` is plain fp32 Adam: 4 + 4 + 8 bytes and 4-byte activations. ZeRO-3 / FSDP
also gathers whole layers while it runs them: the current and the prefetched layer's weights and
their unsharded gradients, ``2 layers × (2 + 2) × Ψ / L``.

**Activations** (Korthikanti et al. 2022, arXiv:2205.05198, §4 and Table 2), bytes per layer with
16-bit activations, ``s`` sequence length, ``b`` micro-batch, ``h`` hidden size, ``a`` heads,
``t`` tensor-parallel size:

==================================  ===============================
no parallelism                      s·b·h·(34 + 5·a·s/h)
tensor parallel                     s·b·h·(10 + 24/t + 5·a·s/(h·t))
tensor + sequence parallel          s·b·h/t·(34 + 5·a·s/h)
... + selective recomputation       the 5·a·s/h term goes
full recomputation                  2·s·b·h (the layer's input; /t with sequence parallel)
==================================  ===============================

The 5·a·s/h term is the s×s attention scores, softmax and dropout; FlashAttention never stores
them (``flash_attention=True``, the default: every current trainer uses it). With 1F1B pipeline
parallelism the first stage holds ``p`` micro-batches of ``L/p`` layers: ``L`` layers' worth
(Korthikanti §4). Full recomputation also rematerialises one layer's activations during its
backward (the working set). The loss keeps fp32 logits, ``4·s·b·vocab`` bytes (/t with a
vocab-parallel head). Activations are counted for a GPT-3-shaped layer (4h GeLU MLP); a SwiGLU
layer of Llama's shape stores about as much (no dropout masks, a 3.5h MLP), so the count is an
estimate to ±20 %, as every one is.

**Runtime overhead**: :data:`OVERHEAD_BYTES`.

**Inference** (a vLLM-style server, tensor parallel ``tp``): weights ``params × bytes / tp``; the KV
cache ``2 · layers · kv_heads_per_gpu · head_dim · bytes`` per token, where vLLM gives each GPU
``max(1, kv_heads // tp)`` KV heads (``ModelConfig.get_num_kv_heads`` in
``vllm/config/model.py``: fewer KV heads than GPUs are replicated); at the configured batch, the
batch times the mean context; one step's activations (the MLP's gate/up output for
``max_num_batched_tokens`` tokens, the fp32 logits of ``max_num_seqs`` sampled rows). vLLM sizes its
KV pool to fill ``gpu_memory_utilization × capacity`` after weights and a profiled step
(``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``), so ``FB_USED`` sits near that
share whatever the traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perfkit.core.hardware import Gpu, ModelSpec
from perfkit.errors import ConfigError

GIB = float(2**30)
MIB = float(2**20)

OVERHEAD_BYTES = 2.0 * GIB
"""CUDA context, cuBLAS/cuDNN workspaces and NCCL communicator buffers per GPU: the context with its
kernels takes ~0.5-1 GiB (reference §4.2), NCCL's buffers NCCL_BUFFSIZE (4 MiB default) × channels ×
peers, ~0.5-1 GiB for rings over 8 GPUs. 2 GiB is the sum's middle (the simulator's 0.75 + 1.25)."""

AGREE_SHARE = 0.1
"""An estimate within 10 % of DCGM's FB_USED agrees with it: the activation count is good to ±20 %
for a layer not shaped like GPT-3's, and the allocator rounds every block up (2 MiB segments)."""

PRECISIONS: dict[str, tuple[float, float, float, float]] = {
    # bytes per parameter (weights, gradients, optimizer states) and per activation element
    "mixed": (2.0, 2.0, 12.0, 2.0),  # ZeRO §3.1: fp16/bf16 weights and grads, fp32 master + m + v
    "fp32": (4.0, 4.0, 8.0, 4.0),  # plain fp32 Adam: weights, grads, m, v
}
RECOMPUTE = ("none", "selective", "full")

FIRST_TRY: dict[str, str] = {
    "activations": "activation recomputation: full recomputation keeps 2·s·b·h bytes per layer "
    "instead of 34·s·b·h; then gradient accumulation: a smaller micro-batch, more "
    "accumulation steps, the same global batch",
    "logits": "gradient accumulation: a smaller micro-batch at the same global batch shrinks "
    "the fp32 logits (4·s·b·vocab bytes); a chunked cross-entropy avoids them",
    "optimizer": "shard the optimizer states wider (a higher ZeRO stage, FSDP, more data-parallel GPUs); "
    "mixed precision only helps a job still training in fp32",
    "gradients": "shard the gradients (ZeRO-2 or FSDP) or accumulate them in bf16",
    "weights": "shard the weights (ZeRO-3/FSDP or tensor parallel) or, for serving, quantize them (fp8)",
    "gathered_layers": "limit FSDP's prefetch (forward_prefetch off, limit_all_gathers) or wrap smaller units",
    "kv_cache_pool": "lower gpu_memory_utilization (the pool is preallocated: an OOM is a step's activations "
    "or the sampler outside it) or max_num_seqs / max_num_batched_tokens; then KV-cache quantization "
    "(--kv-cache-dtype fp8) keeps the pool's tokens in half the bytes",
    "kv_cache": "KV-cache quantization: --kv-cache-dtype fp8 halves the bytes per token; "
    "or a lower max_num_seqs / max_model_len",
    "step_activations": "a lower max_num_batched_tokens (the step's token budget) or max_num_seqs",
    "recompute_working_set": "recompute at a finer granularity (per sub-block) or use a smaller micro-batch",
    "overhead": "fewer processes per GPU (each holds its own CUDA context) and NCCL_BUFFSIZE left at default",
    "unexplained": "defragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, and "
    "torch.cuda.memory_stats() reserved − allocated to see the cached-but-free share",
}


@dataclass(frozen=True)
class TrainingSetup:
    """How a training job lays a model on its GPUs (what memory depends on)."""

    seq_len: int
    micro_batch: int = 1
    gpus: int = 1
    tp: int = 1  # tensor parallel
    pp: int = 1  # pipeline parallel
    zero_stage: int = 0  # 0 (DDP) ... 3 (FSDP full shard)
    recompute: str = "none"  # none | selective | full
    sequence_parallel: bool = False
    flash_attention: bool = True
    precision: str = "mixed"  # mixed | fp32

    def __post_init__(self) -> None:
        for name in ("seq_len", "micro_batch", "gpus", "tp", "pp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**24:
                raise ConfigError(f"training setup: {name} must be an integer in [1, 2^24], got {v!r}")
        if self.gpus % (self.tp * self.pp):
            raise ConfigError(
                f"training setup: gpus ({self.gpus}) is not a multiple of tp × pp ({self.tp} × {self.pp})"
            )
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(f"training setup: zero_stage must be 0-3, got {self.zero_stage!r}")
        if self.recompute not in RECOMPUTE:
            raise ConfigError(f"training setup: recompute must be one of {', '.join(RECOMPUTE)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"training setup: precision must be one of {', '.join(PRECISIONS)}")

    @property
    def dp(self) -> int:
        """Data-parallel degree: the GPUs ZeRO shards over."""
        return self.gpus // (self.tp * self.pp)


@dataclass
class MemoryItem:
    name: str
    bytes: float
    formula: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "gib": self.bytes / GIB, "formula": self.formula}


@dataclass
class MemoryBreakdown:
    """Bytes per GPU by item, against the capacity and what DCGM observed."""

    kind: str  # training | inference
    model: str
    gpu: str | None
    items: list[MemoryItem]
    total_bytes: float
    capacity_bytes: float | None
    observed_bytes: float | None
    unexplained_bytes: (
        float | None
    )  # observed − estimate (the allocator's cache, fragmentation, other processes)
    largest: str
    first_try: str
    fits: bool | None  # estimate under capacity
    notes: list[str] = field(default_factory=list)

    def bytes_of(self, name: str) -> float:
        return sum(i.bytes for i in self.items if i.name == name)

    def summary(self) -> str:
        """One sentence: the items, the total against what DCGM saw, the largest and what to try."""
        items = ", ".join(f"{i.name} {i.bytes / GIB:.1f}" for i in self.items)
        text = f"estimate per GPU in GiB ({self.model}; {self.notes[0]}): {items}; total {self.total_bytes / GIB:.1f}"
        if self.observed_bytes is not None:
            text += f" against {self.observed_bytes / GIB:.1f} observed (DCGM_FI_DEV_FB_USED peak)"
        text += f"; largest: {self.largest}"
        if self.first_try:
            text += f"; first try: {self.first_try}"
        return "; ".join([text, *self.notes[1:]])

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "items"}
        out["items"] = [i.as_dict() for i in self.items]
        out["total_gib"] = self.total_bytes / GIB
        return out


def capacity_bytes(gpu: Gpu) -> float:
    """The GPU's memory in bytes (datasheet GiB; the driver shows ~1 % less)."""
    return gpu.memory_gib * GIB


# -- training ----------------------------------------------------------------------------------


def zero_states(params: float, zero_stage: int, dp: int, precision: str = "mixed") -> dict[str, float]:
    """Weights, gradients and optimizer states per GPU (ZeRO §3.1/§5; module docstring's table)."""
    if zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"zero_stage must be 0-3, got {zero_stage!r}")
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise ConfigError(f"dp: expected a positive integer, got {dp!r}")
    w, g, o, _ = PRECISIONS[precision]
    return {
        "weights": w * params / (dp if zero_stage >= 3 else 1),
        "gradients": g * params / (dp if zero_stage >= 2 else 1),
        "optimizer": o * params / (dp if zero_stage >= 1 else 1),
    }


def activation_bytes_per_layer(
    seq_len: float,
    micro_batch: float,
    hidden: int,
    heads: int,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    flash_attention: bool = False,
    bytes_per_element: float = 2.0,
) -> float:
    """Activation bytes one transformer layer keeps for the backward pass (Korthikanti Table 2).

    ``flash_attention=False`` is the paper's own accounting (its table's numbers);
    ``bytes_per_element`` scales the paper's 16-bit counts (4 for fp32 activations)."""
    if recompute not in RECOMPUTE:
        raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    s, b, h, a, t = float(seq_len), float(micro_batch), float(hidden), float(heads), float(tp)
    sbh = s * b * h
    scale = bytes_per_element / 2.0
    if recompute == "full":
        return scale * 2.0 * sbh / (t if sequence_parallel else 1.0)
    scores = 0.0 if (recompute == "selective" or flash_attention) else 5.0 * a * s / h
    if t == 1 or sequence_parallel:
        return scale * sbh / t * (34.0 + scores)
    return scale * sbh * (10.0 + 24.0 / t + scores / t)


def training_memory(
    model: ModelSpec, setup: TrainingSetup, gpu: Gpu | None = None, *, observed_bytes: float | None = None
) -> MemoryBreakdown:
    """Per-GPU memory of training ``model`` laid out as ``setup``, against ``gpu``'s capacity and the
    observed peak (``DCGM_FI_DEV_FB_USED`` in bytes: DCGM reports MiB, multiply by 2^20)."""
    observed = checked_bytes(observed_bytes)
    mp = setup.tp * setup.pp
    psi = model.params / mp  # what one model-parallel rank holds
    states = zero_states(psi, setup.zero_stage, setup.dp, setup.precision)
    w, g, o, act_b = PRECISIONS[setup.precision]
    stage = f"ZeRO-{setup.zero_stage} over {setup.dp} data-parallel GPUs"
    shard = f"Ψ = {model.params / 1e9:.2f} B params" + (f" / (tp·pp = {mp})" if mp > 1 else "")
    items = [
        MemoryItem(
            "weights", states["weights"], f"{w:g} B × {shard}" + (" / dp" if setup.zero_stage >= 3 else "")
        ),
        MemoryItem(
            "gradients",
            states["gradients"],
            f"{g:g} B × {shard}" + (" / dp" if setup.zero_stage >= 2 else ""),
        ),
        MemoryItem(
            "optimizer",
            states["optimizer"],
            f"{o:g} B × {shard}" + (" / dp" if setup.zero_stage >= 1 else ""),
        ),
    ]
    per_layer = activation_bytes_per_layer(
        setup.seq_len,
        setup.micro_batch,
        model.hidden,
        model.heads,
        tp=setup.tp,
        sequence_parallel=setup.sequence_parallel,
        recompute=setup.recompute,
        flash_attention=setup.flash_attention,
        bytes_per_element=act_b,
    )
    what = {"none": "34·s·b·h", "selective": "34·s·b·h", "full": "2·s·b·h"}[setup.recompute]
    if setup.recompute == "none" and not setup.flash_attention:
        what = "s·b·h·(34 + 5·a·s/h)"
    items.append(
        MemoryItem(
            "activations",
            per_layer * model.layers,
            f"{model.layers} layers × {what}"
            + (
                f" (tp={setup.tp}{', sequence parallel' if setup.sequence_parallel else ''})"
                if setup.tp > 1
                else ""
            )
            + f", s={setup.seq_len}, b={setup.micro_batch}, h={model.hidden}",
        )
    )
    if setup.recompute == "full":
        working = activation_bytes_per_layer(
            setup.seq_len,
            setup.micro_batch,
            model.hidden,
            model.heads,
            tp=setup.tp,
            sequence_parallel=setup.sequence_parallel,
            flash_attention=setup.flash_attention,
            bytes_per_element=act_b,
        )
        items.append(
            MemoryItem("recompute_working_set", working, "one layer rematerialised during its backward")
        )
    items.append(
        MemoryItem(
            "logits",
            4.0 * setup.seq_len * setup.micro_batch * model.vocab / setup.tp,
            f"fp32 logits 4·s·b·vocab{'/t' if setup.tp > 1 else ''} (vocab {model.vocab:,})",
        )
    )
    if setup.zero_stage == 3 and setup.dp > 1:
        items.append(
            MemoryItem(
                "gathered_layers",
                2.0 * (w + g) * psi / model.layers,
                "FSDP/ZeRO-3: current + prefetched layer gathered, with their unsharded gradients",
            )
        )
    items.append(MemoryItem("overhead", OVERHEAD_BYTES, "CUDA context, workspaces, NCCL buffers"))
    out = _finish("training", model, gpu, items, observed)
    out.notes.insert(0, f"{stage}, {setup.precision} precision, recompute {setup.recompute}")
    if setup.precision == "fp32" and out.largest in (
        "activations",
        "logits",
        "optimizer",
        "weights",
        "gradients",
    ):
        out.first_try = (
            "mixed precision: bf16 weights, gradients and activations halve them; " + out.first_try
        )
    return out


# -- inference ---------------------------------------------------------------------------------


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each GPU holds: ``max(1, kv_heads // tp)`` (vLLM ``ModelConfig.get_num_kv_heads``)."""
    positive_int("tp", tp)
    return max(1, model.kv_heads // tp)


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int = 1, kv_dtype_bytes: float = 2.0) -> float:
    """KV-cache bytes one token takes on each GPU: ``2 · layers · kv_heads_per_gpu · head_dim · bytes``."""
    if not (isinstance(kv_dtype_bytes, int | float) and 0 < kv_dtype_bytes <= 8):
        raise ConfigError(f"kv_dtype_bytes: expected 0 < bytes <= 8, got {kv_dtype_bytes!r}")
    return 2.0 * model.layers * kv_heads_per_gpu(model, tp) * model.head_dim * kv_dtype_bytes


def inference_memory(
    model: ModelSpec,
    gpu: Gpu | None = None,
    *,
    tp: int = 1,
    batch: float = 1.0,
    context: float = 0.0,
    kv_dtype_bytes: float = 2.0,
    weight_bytes_per_param: float | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    gpu_memory_utilization: float | None = None,
    observed_bytes: float | None = None,
) -> MemoryBreakdown:
    """Per-GPU memory of serving ``model`` over ``tp`` GPUs with ``batch`` sequences of ``context``
    tokens resident (the KV cache at the configured or observed batch).

    With ``gpu_memory_utilization`` and a GPU, the KV item is vLLM's preallocated pool instead
    (``kv_cache_pool``: ``util × capacity`` less everything else; held whatever the traffic), and
    the batch's own KV bytes are a note."""
    positive_int("tp", tp)
    for name, v in (("batch", batch), ("context", context)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"{name}: expected a finite number >= 0, got {v!r}")
    util = gpu_memory_utilization
    if util is not None and (
        isinstance(util, bool) or not isinstance(util, float | int) or not 0 < util <= 1
    ):
        raise ConfigError(f"gpu_memory_utilization: expected a share in (0, 1], got {util!r}")
    observed = checked_bytes(observed_bytes)
    wb = model.bytes_per_param if weight_bytes_per_param is None else weight_bytes_per_param
    per_token = kv_bytes_per_token_per_gpu(model, tp, kv_dtype_bytes)
    resident = batch * context * per_token
    items = [
        MemoryItem(
            "weights", model.params * wb / tp, f"{model.params / 1e9:.2f} B params × {wb:g} B / tp={tp}"
        )
    ]
    tokens, rows = max_num_batched_tokens or 0, max_num_seqs or 0
    if tokens or rows:
        gate_up = 2.0 * tokens * (2.0 * (model.intermediate or 4 * model.hidden) / tp)
        items.append(
            MemoryItem(
                "step_activations",
                gate_up + 4.0 * rows * model.vocab,
                "MLP gate/up output of max_num_batched_tokens + fp32 logits of max_num_seqs rows",
            )
        )
    items.append(
        MemoryItem("overhead", OVERHEAD_BYTES, "CUDA context, workspaces, NCCL buffers, CUDA graphs")
    )
    batch_kv = f"{batch:,.1f} seqs × {context:,.0f} tokens × {per_token / 1024:,.0f} KiB/token/GPU"
    notes = [
        f"tp={tp}, {kv_heads_per_gpu(model, tp)} KV heads per GPU, KV cache {kv_dtype_bytes:g} B/element"
    ]
    pool = util * capacity_bytes(gpu) - sum(i.bytes for i in items) if util is not None and gpu else None
    if pool is not None and pool > 0:
        items.insert(
            1, MemoryItem("kv_cache_pool", pool, f"gpu_memory_utilization {util:g} × capacity − the rest")
        )
        notes.append(
            f"vLLM preallocates its KV pool to gpu_memory_utilization {util:g}: {pool / per_token:,.0f} tokens per "
            f"GPU, of which the running batch holds {resident / GIB:.1f} GiB ({batch_kv}); an OOM is outside the pool"
        )
    else:
        items.insert(1, MemoryItem("kv_cache", resident, batch_kv))
        if pool is not None:
            notes.append(
                f"gpu_memory_utilization {util:g} leaves no room for a KV pool after weights and buffers"
            )
    out = _finish("inference", model, gpu, items, observed)
    out.notes[:0] = notes[:1]
    out.notes.extend(notes[1:])
    return out


# -- helpers -----------------------------------------------------------------------------------


def positive_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**20:
        raise ConfigError(f"{name}: expected a positive integer, got {v!r}")


def checked_bytes(observed_bytes: float | None) -> float | None:
    if observed_bytes is None:
        return None
    if isinstance(observed_bytes, bool) or not isinstance(observed_bytes, int | float):
        raise ConfigError(f"observed FB_USED: expected bytes, got {observed_bytes!r}")
    if not math.isfinite(observed_bytes) or observed_bytes < 0 or observed_bytes > 2**50:
        raise ConfigError(f"observed FB_USED: {observed_bytes!r} bytes is not a GPU's memory")
    return float(observed_bytes)


def _finish(
    kind: str, model: ModelSpec, gpu: Gpu | None, items: list[MemoryItem], observed: float | None
) -> MemoryBreakdown:
    total = sum(i.bytes for i in items)
    cap = capacity_bytes(gpu) if gpu is not None else None
    unexplained = observed - total if observed is not None else None
    ranked = sorted(items, key=lambda i: -i.bytes)
    largest = ranked[0].name
    notes: list[str] = []
    if observed is not None and unexplained is not None and unexplained > ranked[0].bytes:
        largest = "unexplained"
        notes.append(
            f"DCGM shows {observed / GIB:.1f} GiB, {unexplained / GIB:.1f} GiB more than the estimate: the caching "
            "allocator's free blocks, fragmentation, or another process on the GPU"
        )
    if cap is not None and total > cap:
        notes.append(
            f"the estimate, {total / GIB:.1f} GiB, is over the {cap / GIB:.0f} GiB the GPU has: this setup does not fit"
        )
    elif observed is not None and unexplained is not None and abs(unexplained) <= AGREE_SHARE * total:
        notes.append(f"DCGM shows {observed / GIB:.1f} GiB: the estimate agrees within {AGREE_SHARE:.0%}")
    elif observed is not None and unexplained is not None and unexplained < 0:
        notes.append(
            f"DCGM shows {observed / GIB:.1f} GiB, {-unexplained / GIB:.1f} GiB less than the estimate: the job "
            "holds less than this setup would (a shorter batch, or a setup other than the one given)"
        )
    return MemoryBreakdown(
        kind=kind,
        model=model.key,
        gpu=gpu.key if gpu is not None else None,
        items=items,
        total_bytes=total,
        capacity_bytes=cap,
        observed_bytes=observed,
        unexplained_bytes=unexplained,
        largest=largest,
        first_try=FIRST_TRY.get(largest, ""),
        fits=None if cap is None else total <= cap,
        notes=notes,
    )
