"""Model and hardware FLOPs utilisation (MFU, HFU) of a training job, and its throughput from every
rank, including the ranks that do not export (docs/training-efficiency.md).

**The FLOPs a token costs.** PaLM (Chowdhery et al. 2022, arXiv:2204.02311, Appendix B) counts the
matmul FLOPs of one training token (forward and backward) of a dense decoder as::

    F_model = 6 * N + 12 * L * H * Q * T

``6N``: every weight takes part in one multiply-add in the forward pass (2 FLOPs) and two in the
backward (the gradients of the input and of the weight, 4 FLOPs). ``12 L H Q T``: the two
attention matmuls (``QKᵀ`` and ``softmax · V``), each ``2 · H · Q · T`` FLOPs per token and layer in
the forward pass, three times that with the backward. ``L`` layers, ``H`` query heads of size ``Q``,
``T`` the sequence length (the attended context; causal masking is not discounted, as in PaLM).

The variant used here is torchtitan's (``torchtitan/models/utils.py``:
``get_nparams_and_active_nparams`` and ``quadratic_attention_flops_per_token``, at commit
01c01c8): ``N`` counts the parameters that take part in a matmul, i.e. all of them less the input
embedding table when it is not tied to the LM head (a lookup is no matmul; PaLM's embeddings are
tied, so for PaLM both readings agree). ``include_embedding=True`` gives nanoGPT's and the
simulator's reading (every parameter), 5 % more for Llama-3.1-8B (0.53 B of 8.03 B parameters
are its input table).

**MFU** = observed tokens/s × F_model / (GPUs × peak dense FLOP/s) (PaLM's definition: the
throughput achieved over the throughput the peak FLOP/s would allow). The peak is the datasheet's
dense tensor-core figure for the training dtype (``data/hardware/gpus.yaml``), never the 2:4 sparse
one.

**HFU** counts the FLOPs the hardware actually ran, rematerialisation included (PaLM App. B
contrasts the two; Korthikanti et al. 2022, arXiv:2205.05198, reports both):

* full activation recomputation runs the forward pass once more: ``+ 2N + 4 L H Q T``
  (``8N + 16 LHQT`` in all; Korthikanti's 96 vs 72 B s L h² closed forms, ratio 4/3);
* selective recomputation (Korthikanti §4) recomputes only the attention core
  (``QKᵀ``, softmax, ``· V``): ``+ 4 L H Q T``;
* FlashAttention's backward recomputes ``QKᵀ`` from Q and K (``+ 2 L H Q T``), counted only
  when ``flash_attention_recompute=True`` (torchtitan does not count it, MosaicML does).

**Throughput from the ranks that export.** ``train_tokens_total`` counts the tokens each process
trained on (perfkit's exporter, :mod:`perfkit.sources.train_exporter`). Often only some ranks are
scraped (one node, or local rank 0 of every node). The job's throughput is then the mean per
reporting rank times the world size: ranks of one synchronous data-parallel job run the same
number of steps on the same micro-batch, so each rank's tokens/s is the job's per-GPU rate. The
result says when it scaled, from how many ranks, and where the world size came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.core.frames import Window
from perfkit.core.hardware import Gpu, ModelSpec
from perfkit.engine import ops
from perfkit.engine import signals as S
from perfkit.errors import ConfigError

RECOMPUTE = ("none", "selective", "full")
"""Activation recomputation: none, selective (the attention core, Korthikanti §4), full (every
layer's forward pass again, keeping only its input)."""

VARIANT = (
    "PaLM App. B: F = 6N + 12·L·H·Q·T per token; N = matmul parameters (the input embedding table "
    "excluded unless tied to the LM head, torchtitan's count)"
)
VARIANT_ALL_PARAMS = "PaLM App. B: F = 6N + 12·L·H·Q·T per token; N = every parameter (nanoGPT's count)"


def matmul_params(model: ModelSpec, *, include_embedding: bool = False) -> float:
    """Parameters that take part in a matmul per token: all, less the input embedding table when it
    is a separate lookup (untied). ``include_embedding=True``: all of them."""
    if include_embedding or model.tied_embeddings:
        return model.params
    return model.params - model.embedding_params()


def _attention_width(model: ModelSpec) -> int:
    """``H · Q``: query heads times head size (equals ``hidden`` for Llama; Qwen3-32B's is 8192 on a
    5120 hidden)."""
    return model.heads * model.head_dim


def _check_seq(seq_len: float) -> float:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int | float) or not (seq_len > 0):
        raise ConfigError(f"seq_len: expected a positive number of tokens, got {seq_len!r}")
    if not math.isfinite(seq_len) or seq_len > 2**24:
        raise ConfigError(f"seq_len: {seq_len!r} is not a sequence length (over 16M tokens)")
    return float(seq_len)


def training_flops_per_token(model: ModelSpec, seq_len: float, *, include_embedding: bool = False) -> float:
    """Model FLOPs of one training token: ``6N + 12·L·H·Q·T`` (PaLM App. B; module docstring)."""
    t = _check_seq(seq_len)
    n = matmul_params(model, include_embedding=include_embedding)
    return 6.0 * n + 12.0 * model.layers * _attention_width(model) * t


def hardware_flops_per_token(
    model: ModelSpec,
    seq_len: float,
    *,
    recompute: str = "none",
    flash_attention_recompute: bool = False,
    include_embedding: bool = False,
) -> float:
    """FLOPs the GPUs run per training token, recomputation included (HFU's numerator)."""
    if recompute not in RECOMPUTE:
        raise ConfigError(f"recompute: expected one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    t = _check_seq(seq_len)
    n = matmul_params(model, include_embedding=include_embedding)
    lhqt = model.layers * _attention_width(model) * t
    extra = {"none": 0.0, "selective": 4.0 * lhqt, "full": 2.0 * n + 4.0 * lhqt}[recompute]
    if flash_attention_recompute:
        extra += 2.0 * lhqt
    return training_flops_per_token(model, t, include_embedding=include_embedding) + extra


@dataclass
class Utilisation:
    """MFU and HFU of a job at an observed throughput."""

    model: str
    gpu: str
    dtype: str
    gpus: int
    seq_len: float
    tokens_per_s: float  # the job's, all GPUs
    tokens_per_s_per_gpu: float
    model_flops_per_token: float
    hardware_flops_per_token: float
    peak_flops_per_gpu: float
    mfu: float  # 0-1
    hfu: float  # 0-1
    model_tflops_per_gpu: float  # achieved model TFLOP/s per GPU
    recompute: str
    formula: str
    notes: list[str] = field(default_factory=list)
    throughput: Throughput | None = None  # how tokens_per_s was measured (training_mfu)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "throughput"}
        out["throughput"] = self.throughput.as_dict() if self.throughput else None
        return out


def mfu(
    tokens_per_s: float,
    model: ModelSpec,
    gpu: Gpu,
    gpus: int,
    seq_len: float,
    *,
    dtype: str = "bf16",
    recompute: str = "none",
    flash_attention_recompute: bool = False,
    include_embedding: bool = False,
) -> Utilisation:
    """MFU and HFU of ``gpus`` GPUs training ``model`` at ``tokens_per_s`` (the whole job's).

    ConfigError for a negative or non-finite throughput, a GPU count under 1, or a dtype the GPU's
    datasheet has no dense figure for."""
    if isinstance(tokens_per_s, bool) or not isinstance(tokens_per_s, int | float):
        raise ConfigError(f"tokens_per_s: expected a number, got {tokens_per_s!r}")
    if not math.isfinite(tokens_per_s) or tokens_per_s < 0:
        raise ConfigError(f"tokens_per_s: expected a finite number >= 0, got {tokens_per_s!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"gpus: expected a positive integer, got {gpus!r}")
    peak = gpu.peak_flops(dtype)
    f_model = training_flops_per_token(model, seq_len, include_embedding=include_embedding)
    f_hw = hardware_flops_per_token(
        model,
        seq_len,
        recompute=recompute,
        flash_attention_recompute=flash_attention_recompute,
        include_embedding=include_embedding,
    )
    per_gpu = tokens_per_s / gpus
    notes = []
    if recompute == "none" and not flash_attention_recompute:
        notes.append("no recomputation: HFU equals MFU")
    return Utilisation(
        model=model.key,
        gpu=gpu.key,
        dtype=dtype,
        gpus=gpus,
        seq_len=float(seq_len),
        tokens_per_s=float(tokens_per_s),
        tokens_per_s_per_gpu=per_gpu,
        model_flops_per_token=f_model,
        hardware_flops_per_token=f_hw,
        peak_flops_per_gpu=peak,
        mfu=per_gpu * f_model / peak,
        hfu=per_gpu * f_hw / peak,
        model_tflops_per_gpu=per_gpu * f_model / 1e12,
        recompute=recompute,
        formula=VARIANT_ALL_PARAMS if include_embedding else VARIANT,
        notes=notes,
    )


# -- throughput from the ranks that report -----------------------------------------------------


@dataclass
class Throughput:
    """A training job's tokens/s and samples/s over a window, from the ranks that export."""

    window: dict[str, str]
    ranks_reporting: int
    ranks: list[str]  # the reporting ranks' labels (series keys when there is no ``rank`` label)
    world_size: int | None
    world_size_source: str  # "given" | "lower bound: highest reporting rank + 1" | "unknown"
    model_parallel: int  # ranks that share one data-parallel replica's tokens (tp × pp)
    tokens_per_s_reported: float  # summed over the reporting ranks
    samples_per_s_reported: float | None
    tokens_per_s_per_gpu: float  # mean over reporting ranks / model_parallel
    samples_per_s_per_gpu: float | None
    tokens_per_s: float  # the whole job's: per GPU × world size (or the reported sum when unknown)
    samples_per_s: float | None
    tokens_per_sample: float | None  # mean sample length (packed: the sequence length)
    scaled: bool  # tokens_per_s scaled from fewer ranks than the world size
    note: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


MAX_RANKS = 1_000_000
"""A world size beyond a million GPUs is a typo, not a job (the largest runs published use ~10⁵)."""


def _per_rank(engine: S.Engine, signal: str, window: Window) -> dict[str, float]:
    """Per-rank mean rate of a counter over the window: ``sum by (rank) (rate(x[w]))``."""
    res = S.resolve(engine, signal)
    if res.metric is None:
        return {}
    frame = engine.instant(ops.sum_by(ops.rate(ops.Selector(res.metric), window.seconds), "rank"), window.end)
    if not frame.height:
        return {}
    if "rank" not in frame.columns:  # no rank label: the job is one series
        frame = frame.with_columns(pl.lit("0").alias("rank"))
    out: dict[str, float] = {}
    for rank, value in frame.select("rank", "value").iter_rows():
        if value is not None and math.isfinite(value) and value >= 0:
            out[str(rank)] = out.get(str(rank), 0.0) + float(value)
    return out


def _rank_number(label: str) -> int | None:
    return int(label) if label.isdigit() and len(label) <= 7 else None


def training_throughput(
    engine: S.Engine, window: Window, *, world_size: int | None = None, model_parallel: int = 1
) -> Throughput | None:
    """Tokens/s and samples/s of the job in ``window`` from ``train_tokens_total`` /
    ``train_samples_total`` by ``rank``; None when no rank exports tokens.

    ``world_size``: the job's GPU count (incident.yaml's ``hardware.count``, NCCL's ``nranks``);
    without it the highest reporting rank + 1 is used as a lower bound and the result says so.
    ``model_parallel``: ranks of one tensor/pipeline-parallel group, which each count the same
    tokens (1 for data parallel and FSDP/ZeRO)."""
    for name, value in (("world_size", world_size), ("model_parallel", model_parallel)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name}: expected a positive integer, got {value!r}")
        if value is not None and value > MAX_RANKS:
            raise ConfigError(f"{name}: {value} is over {MAX_RANKS:,} GPUs")
    tokens = _per_rank(engine, "train_tokens", window)
    if not tokens:
        return None
    samples = _per_rank(engine, "train_samples", window)
    n = len(tokens)
    numbers = [r for r in (_rank_number(k) for k in tokens) if r is not None]
    source = "given"
    size = world_size
    if size is None:
        size = max(numbers) + 1 if numbers else None
        source = "lower bound: highest reporting rank + 1" if numbers else "unknown"
    if size is not None and size < n:
        raise ConfigError(f"world_size: {size} is fewer than the {n} ranks that export train_tokens_total")
    mean_tokens = sum(tokens.values()) / n
    per_gpu_tokens = mean_tokens / model_parallel
    per_gpu_samples = sum(samples.values()) / len(samples) / model_parallel if samples else None
    job_tokens = per_gpu_tokens * size if size is not None else sum(tokens.values()) / model_parallel
    job_samples = (
        per_gpu_samples * size
        if per_gpu_samples is not None and size is not None
        else (sum(samples.values()) / model_parallel if samples else None)
    )
    scaled = size is not None and n < size
    if size is None:
        note = f"{n} ranks export; the world size is unknown, so tokens/s is theirs only"
    elif scaled:
        note = (
            f"{n} of {size} ranks export train_tokens_total ({source}): the job's tokens/s is their "
            f"mean × {size}"
        )
    else:
        note = f"all {size} ranks export train_tokens_total"
    return Throughput(
        window=window.as_dict(),
        ranks_reporting=n,
        ranks=sorted(tokens, key=lambda k: (_rank_number(k) is None, _rank_number(k) or 0, k)),
        world_size=size,
        world_size_source=source,
        model_parallel=model_parallel,
        tokens_per_s_reported=sum(tokens.values()),
        samples_per_s_reported=sum(samples.values()) if samples else None,
        tokens_per_s_per_gpu=per_gpu_tokens,
        samples_per_s_per_gpu=per_gpu_samples,
        tokens_per_s=job_tokens,
        samples_per_s=job_samples,
        tokens_per_sample=(sum(tokens.values()) / sum(samples.values()))
        if samples and sum(samples.values())
        else None,
        scaled=scaled,
        note=note,
    )


def training_mfu(
    engine: S.Engine,
    window: Window,
    model: ModelSpec,
    gpu: Gpu,
    *,
    world_size: int | None = None,
    model_parallel: int = 1,
    seq_len: float | None = None,
    dtype: str = "bf16",
    recompute: str = "none",
    flash_attention_recompute: bool = False,
    include_embedding: bool = False,
) -> Utilisation | None:
    """MFU/HFU of the job in ``window`` from its ``train_*`` counters; None when no rank exports
    tokens, or the world size is unknown (MFU needs the GPU count).

    ``seq_len`` defaults to the mean tokens per sample (``train_tokens_total /
    train_samples_total``): the sequence length for packed sequences; for unpadded variable-length
    samples it is a lower bound of the token-weighted length the attention term wants
    (E[l²]/E[l] ≥ E[l]), which the result's notes say."""
    tp = training_throughput(engine, window, world_size=world_size, model_parallel=model_parallel)
    if tp is None or tp.world_size is None:
        return None
    notes = []
    length = seq_len
    if length is None:
        if tp.tokens_per_sample is None:
            return None
        length = tp.tokens_per_sample
        notes.append(
            f"sequence length {length:,.0f} = tokens per sample (train_tokens_total / train_samples_total): "
            "exact for packed sequences, a lower bound of the attention term's length for unpacked ones"
        )
    out = mfu(
        tp.tokens_per_s,
        model,
        gpu,
        tp.world_size,
        length,
        dtype=dtype,
        recompute=recompute,
        flash_attention_recompute=flash_attention_recompute,
        include_embedding=include_embedding,
    )
    out.notes = [tp.note, *notes, *out.notes]
    out.throughput = tp
    return out
