"""The simulated engine's configuration: vLLM's engine arguments that shape latency and throughput,
the model and GPU it runs, and the efficiency knobs of the roofline (docs/simulator.md).

An engine config file (``perfkit lab serve --engine-config FILE``) is YAML::

    model: llama-3.1-8b            # a key, Hugging Face name or alias of data/hardware/models.yaml
    gpu: h100-sxm                  # a key, nvidia-smi name or alias of data/hardware/gpus.yaml
    tensor_parallel_size: 1
    dialect: vllm                  # or sglang, trtllm: whose metric names and log lines it speaks
    max_num_seqs: 256
    max_num_batched_tokens: 8192
    enable_chunked_prefill: true
    gpu_memory_utilization: 0.9

Every other :class:`SimConfig` field may be given too (dashes or underscores). A bad value raises
:class:`~perfkit.errors.ConfigError` naming the file and the field, as vLLM would refuse to start:
the weights do not fit, the KV cache cannot hold one ``max_model_len`` request, a block size vLLM's
CUDA attention backends do not take, chunked prefill off with a token budget under ``max_model_len``.

Memory (vLLM V1 ``gpu_worker.determine_available_memory``: the KV cache gets what is left of
``total * gpu_memory_utilization`` after the weights and the profiled peak activations)::

    kv_bytes_per_gpu = memory_gib * 2^30 * gpu_memory_utilization - weight_bytes / tp - reserve
    reserve          = max_num_batched_tokens * (2 * intermediate / tp + 4 * hidden) * 2 bytes   # profile run's peak
                     + max_num_seqs * vocab * 4 bytes                                            # fp32 logits
                     + runtime_overhead_gib                                                      # CUDA graphs, cuBLAS/NCCL
    num_gpu_blocks   = kv_bytes_per_gpu // (block_size * kv_bytes_per_token / tp)
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from typing import Any

from perfkit.core import hardware
from perfkit.core.hardware import Gpu, ModelSpec
from perfkit.errors import ConfigError

GIB = 2**30
BLOCK_SIZES = (8, 16, 32)
"""Block sizes vLLM's CUDA attention backends take (``CacheConfig.block_size``; 64/128 are other platforms')."""
MAX_TP = 8
"""One node: tensor parallelism over NVLink inside an 8-GPU server (multi-node is not modelled)."""
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
KV_DTYPES = {"auto": None, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
QUANTIZATIONS: dict[str, tuple[float, str, str]] = {
    "none": (0.0, "", "the checkpoint's weights"),
    "fp8": (1.0, "fp8", "W8A8 FP8 (vLLM --quantization fp8): GEMMs on the FP8 tensor cores"),
    "int8": (1.0, "int8", "W8A8 INT8 (a compressed-tensors w8a8 checkpoint): GEMMs on the INT8 tensor cores"),
    "int4": (
        0.5 + 4.0 / 128,
        "",
        "W4A16 (AWQ/GPTQ, group 128, fp16 scale and zero per group; vLLM's Marlin "
        "kernels): weights read at a quarter, GEMMs in the activations' dtype",
    ),
}
"""Weight quantization: (bytes per parameter, the GEMMs' dtype or "" for the activations', what it is).
Every parameter is counted at the quantized size (the embedding and LM head, often kept in bf16, are
~2 % of a 70B)."""
DIALECTS = ("vllm", "sglang", "trtllm")
"""Whose words the engine speaks: its /metrics names and its log lines (:mod:`.dialect_metrics`)."""

#: every other number of an engine config, bounded to what a GPU server can physically be (a value
#: outside would make a step take longer than a drill lasts, or no time at all): (low, high, why)
RANGES: dict[str, tuple[float, float, str]] = {
    "tensor_parallel_size": (1, MAX_TP, "GPUs in one node"),
    "max_num_seqs": (1, 16384, "vLLM deployments run 256 to a few thousand"),
    "max_num_batched_tokens": (1, 2**21, "a step's token budget: 2M tokens is past any deployment"),
    "max_model_len": (1, 2**21, "2M tokens: past every model of data/hardware/models.yaml"),
    "long_prefill_token_threshold": (0, 2**21, "0 (no cap) up to the longest context"),
    "compute_efficiency": (0.01, 1, "share of the dense peak: 1 % is a GPU barely used"),
    "attention_efficiency": (0.01, 1, "share of the dense peak"),
    "memory_efficiency": (0.01, 1, "share of the HBM bandwidth"),
    "link_efficiency": (0.01, 1, "share of the link bandwidth"),
    "allreduce_latency_s": (0, 0.01, "a small all-reduce costs 5-20 us; 10 ms is a broken fabric"),
    "step_overhead_s": (0, 0.5, "CPU work per step: ms; half a second is a stalled engine"),
    "runtime_overhead_gib": (0, 64, "per GPU, under the largest GPU's memory"),
    "step_jitter": (0, 0.5, "relative spread of step times"),
    "prefill_cost_scale": (
        0.1,
        10,
        "a calibration's factor on the roofline's prefill time: 10x is no longer the model",
    ),
    "decode_cost_scale": (0.1, 10, "a calibration's factor on the roofline's memory-bound time"),
    "attention_cost_scale": (0.1, 10, "a calibration's factor on the prefill attention's time"),
    "num_speculative_tokens": (0, 16, "draft tokens proposed per step: vLLM's examples use 1-8"),
    "spec_acceptance_rate": (0, 1, "the chance each draft token is accepted"),
    "draft_cost_ratio": (
        0,
        1,
        "one draft forward over one target decode step: a draft as big as the target is 1",
    ),
}

SETTABLE: tuple[str, ...] = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "gpu_memory_utilization",
    "block_size",
    "long_prefill_token_threshold",
    "max_model_len",
    "tensor_parallel_size",
    "kv_cache_dtype",
    "quantization",
    "num_speculative_tokens",
    "spec_acceptance_rate",
    "draft_cost_ratio",
)
"""The engine arguments ``--set`` (what-if) and ``drill fix`` may change: vLLM's own, by its names."""


@dataclass(frozen=True)
class SimConfig:
    """A simulated vLLM engine: model, GPU, engine arguments (vLLM's names and defaults where the
    contract fixes them) and the roofline's efficiency knobs (each with its reason in
    docs/simulator.md)."""

    model: ModelSpec
    gpu: Gpu
    served_model_name: str
    tensor_parallel_size: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 8192
    vllm_version: str = "0.10.1"
    long_prefill_token_threshold: int = 0  # vLLM: most prompt tokens one request gets per step (0: no cap)
    dtype: str = "auto"  # weights and GEMMs: auto (the checkpoint's: bf16) | bf16 | fp16 | fp8
    kv_cache_dtype: str = "auto"  # auto (as dtype) | fp8 | fp8_e4m3 | fp8_e5m2
    quantization: str = "none"  # weights: none | fp8 | int8 | int4 (QUANTIZATIONS)
    # -- speculative decoding (vLLM --speculative-config '{"num_speculative_tokens": k, ...}') --
    num_speculative_tokens: int = 0  # k draft tokens verified per decode step; 0: off
    spec_acceptance_rate: float = 0.7  # per draft token, independent (what vllm:spec_decode_* measure)
    draft_cost_ratio: float = (
        0.05  # one draft forward / one target decode step (a 1B draft for a 70B, EAGLE heads)
    )
    dialect: str = "vllm"  # vllm | sglang | trtllm: the engine whose metric names and log lines it speaks
    # -- the roofline's efficiency knobs (docs/simulator.md, "Parameters") --
    compute_efficiency: float = (
        0.5  # share of dense peak a prefill reaches end to end (GEMMs + the kernels between)
    )
    attention_efficiency: float = 0.4  # share of peak FlashAttention-2 reaches in prefill
    memory_efficiency: float = 0.75  # share of HBM peak decode's weight and KV reads reach
    link_efficiency: float = 0.7  # share of the per-direction link bandwidth an all-reduce reaches
    allreduce_latency_s: float = 10e-6  # fixed cost of one small all-reduce (launch + sync)
    step_overhead_s: float = 0.002  # CPU work per step the GPU waits for (schedule, prepare, sample)
    runtime_overhead_gib: float = 1.0  # per GPU: CUDA-graph pool, cuBLAS/NCCL workspaces, context
    step_jitter: float = 0.02  # relative spread of step times (clock boost, power management)
    # -- a replay's calibration (perfkit.app.whatif.calibrate): what the roofline misses of a real engine --
    prefill_cost_scale: float = 1.0  # x the GEMMs' compute time
    decode_cost_scale: float = 1.0  # x the weight and KV reads (decode's memory-bound time)
    attention_cost_scale: float = 1.0  # x the prefill attention's quadratic FLOPs

    def __post_init__(self) -> None:
        _validate(self)

    # -- derived quantities --------------------------------------------------------------------

    @property
    def compute_dtype(self) -> str:
        """The GEMMs' dtype: ``bf16`` for a bf16 checkpoint, else what ``dtype`` says."""
        gemm = QUANTIZATIONS.get(self.quantization, (0.0, "", ""))[1]
        if gemm:
            return gemm
        return "bf16" if self.dtype == "auto" else self.dtype

    def weight_bytes(self) -> float:
        """Bytes of the weights at the serving dtype or quantization (all GPUs together)."""
        if self.quantization in QUANTIZATIONS and self.quantization != "none":
            return self.model.params * QUANTIZATIONS[self.quantization][0]
        if self.dtype == "auto":
            return self.model.weight_bytes()
        return self.model.params * DTYPE_BYTES[self.dtype]

    def kv_dtype_bytes(self) -> float:
        """Bytes per K or V element in the cache."""
        fixed = KV_DTYPES.get(self.kv_cache_dtype)
        if fixed is not None:
            return fixed
        return self.model.bytes_per_param if self.dtype == "auto" else DTYPE_BYTES[self.dtype]

    def kv_bytes_per_token(self) -> float:
        """K and V bytes one token keeps, all layers and heads (all GPUs together)."""
        return self.model.kv_bytes_per_token(self.kv_dtype_bytes())

    def kv_bytes_per_token_per_gpu(self) -> float:
        """What one GPU keeps per token: its share of the KV heads (replicated when tp > kv_heads)."""
        heads = max(1.0, self.model.kv_heads / self.tensor_parallel_size)
        return self.kv_bytes_per_token() * heads / self.model.kv_heads

    def activation_reserve_bytes(self) -> float:
        """Per GPU: the profile run's peak activations, the sampler's fp32 logits and the runtime's own memory."""
        m, tp = self.model, self.tensor_parallel_size
        width = (
            2 * (m.intermediate or 4 * m.hidden) / tp + 4 * m.hidden
        )  # MLP gate+up output, residual, q/k/v/o
        activations = self.max_num_batched_tokens * width * 2.0
        logits = self.max_num_seqs * m.vocab * 4.0
        return activations + logits + self.runtime_overhead_gib * GIB

    def kv_cache_bytes_per_gpu(self) -> float:
        """Bytes left for the KV cache on each GPU (negative: the model does not fit)."""
        budget = self.gpu.memory_gib * GIB * self.gpu_memory_utilization
        return budget - self.weight_bytes() / self.tensor_parallel_size - self.activation_reserve_bytes()

    def num_gpu_blocks(self) -> int:
        """KV-cache blocks (of ``block_size`` tokens) the engine has, as vLLM's ``num_gpu_blocks``."""
        per_block = self.block_size * self.kv_bytes_per_token_per_gpu()
        return max(0, int(self.kv_cache_bytes_per_gpu() // per_block))

    def kv_capacity_tokens(self) -> int:
        """Tokens the KV cache holds (vLLM logs it as ``GPU KV cache size: N tokens``)."""
        return self.num_gpu_blocks() * self.block_size


def chunked_budget_default(gpu: Gpu) -> int:
    """vLLM's ``max_num_batched_tokens`` for the OpenAI server with chunked prefill on
    (``EngineArgs.get_batch_defaults``, vllm/engine/arg_utils.py): 8,192 on GPUs of at least 70 GiB
    other than A100, 2,048 elsewhere."""
    big = gpu.memory_gib >= 70 and "a100" not in f"{gpu.key} {gpu.name}".lower()
    return 8192 if big else 2048


# -- validation --------------------------------------------------------------------------------


def _validate(cfg: SimConfig) -> None:
    """Refuse what vLLM would refuse to start with (or what the simulator cannot model)."""
    for name in ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}: expected a positive integer, got {value!r}")
    for name in ("served_model_name", "vllm_version"):  # written into log lines and metric labels
        value = getattr(cfg, name)
        if not isinstance(value, str) or not 0 < len(value) <= 256 or not value.isprintable():
            raise ConfigError(
                f"{name}: expected 1 to 256 printable characters (no newline or control character)"
            )
    for name in ("enable_chunked_prefill", "enable_prefix_caching"):
        if not isinstance(getattr(cfg, name), bool):
            raise ConfigError(f"{name}: expected true or false, got {getattr(cfg, name)!r}")
    for name, (lo, hi, _why) in RANGES.items():
        value = getattr(cfg, name)
        if not _real(value) or not lo <= value <= hi:
            raise ConfigError(f"{name}: expected a number in [{_n(lo)}, {_n(hi)}] ({_why}), got {value!r}")
    m, tp = cfg.model, cfg.tensor_parallel_size
    if tp > MAX_TP or m.heads % tp:
        raise ConfigError(
            f"tensor_parallel_size: {tp} must divide the model's {m.heads} attention heads and be at most "
            f"{MAX_TP} (one node; multi-node serving is not modelled)"
        )
    if cfg.block_size not in BLOCK_SIZES or isinstance(cfg.block_size, bool):
        raise ConfigError(f"block_size: {cfg.block_size!r} is not one of {', '.join(map(str, BLOCK_SIZES))}")
    if cfg.max_model_len % cfg.block_size:
        raise ConfigError(
            f"block_size: {cfg.block_size} does not divide max_model_len ({cfg.max_model_len}) into whole blocks"
        )
    if m.max_position_embeddings and cfg.max_model_len > m.max_position_embeddings:
        raise ConfigError(
            f"max_model_len: {cfg.max_model_len} is greater than the model's max_position_embeddings "
            f"({m.max_position_embeddings})"
        )
    if cfg.max_num_batched_tokens < cfg.max_num_seqs:
        raise ConfigError(
            f"max_num_batched_tokens: {cfg.max_num_batched_tokens} must be at least max_num_seqs "
            f"({cfg.max_num_seqs})"
        )
    if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < cfg.max_model_len:
        raise ConfigError(
            f"max_num_batched_tokens: {cfg.max_num_batched_tokens} is smaller than max_model_len "
            f"({cfg.max_model_len}) with chunked prefill off: a long prompt could never be scheduled; "
            "raise max_num_batched_tokens or enable_chunked_prefill"
        )
    if isinstance(cfg.long_prefill_token_threshold, bool) or not isinstance(
        cfg.long_prefill_token_threshold, int
    ):
        raise ConfigError(
            f"long_prefill_token_threshold: expected an integer, got {cfg.long_prefill_token_threshold!r}"
        )
    if cfg.long_prefill_token_threshold < 0:
        raise ConfigError(
            f"long_prefill_token_threshold: must be >= 0, got {cfg.long_prefill_token_threshold}"
        )
    if cfg.dtype not in ("auto", *DTYPE_BYTES):
        raise ConfigError(f"dtype: {cfg.dtype!r} is not one of auto, {', '.join(DTYPE_BYTES)}")
    if cfg.dialect not in DIALECTS:
        raise ConfigError(f"dialect: {cfg.dialect!r} is not one of {', '.join(DIALECTS)}")
    if cfg.quantization not in QUANTIZATIONS:
        raise ConfigError(f"quantization: {cfg.quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    if cfg.quantization != "none" and cfg.dtype not in ("auto", "bf16", "fp16"):
        raise ConfigError(f"quantization: {cfg.quantization} with dtype {cfg.dtype}: give one of them")
    if cfg.kv_cache_dtype not in KV_DTYPES:
        raise ConfigError(f"kv_cache_dtype: {cfg.kv_cache_dtype!r} is not one of {', '.join(KV_DTYPES)}")
    if cfg.compute_dtype not in cfg.gpu.dense_flops:
        raise ConfigError(f"dtype: {cfg.gpu.key} has no {cfg.compute_dtype} tensor cores in its datasheet")
    _check_fraction("gpu_memory_utilization", cfg.gpu_memory_utilization)
    _check_memory(cfg)


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_fraction(name: str, value: Any) -> None:
    if not _real(value) or not 0 < value <= 1:
        raise ConfigError(f"{name}: expected a number in (0, 1], got {value!r}")


def _check_memory(cfg: SimConfig) -> None:
    tp, util, mem = cfg.tensor_parallel_size, cfg.gpu_memory_utilization, cfg.gpu.memory_gib
    weights = cfg.weight_bytes() / tp
    if weights >= mem * GIB * util:
        raise ConfigError(
            f"model: weights {cfg.weight_bytes() / GIB:.1f} GiB ({weights / GIB:.1f} GiB per GPU) exceed "
            f"{util:g} x {mem:g} GiB on {cfg.gpu.key} (tensor_parallel_size={tp}); raise "
            "tensor_parallel_size or pick a larger GPU"
        )
    kv = cfg.kv_cache_bytes_per_gpu()
    need = cfg.max_model_len * cfg.kv_bytes_per_token_per_gpu()
    if kv < need:
        room = max(0.0, kv) / cfg.kv_bytes_per_token_per_gpu()
        fits = int(room // cfg.block_size * cfg.block_size)
        raise ConfigError(
            f"max_model_len: one {cfg.max_model_len}-token request needs {need / GIB:.2f} GiB of KV cache per GPU, "
            f"more than the {max(0.0, kv) / GIB:.2f} GiB left after the weights and activations on {cfg.gpu.key} "
            f"(gpu_memory_utilization={util:g}, tensor_parallel_size={tp}); the largest that fits is {fits} "
            "tokens: raise gpu_memory_utilization or lower max_model_len"
        )


# -- reading -----------------------------------------------------------------------------------

_FIELDS = {f.name: str(f.type) for f in dataclasses.fields(SimConfig)}
_ZERO_OK = frozenset({"long_prefill_token_threshold"})  # the integer fields where 0 means something
_DIGITS = re.compile(r"[0-9]{1,11}")  # ASCII: str.isdigit() takes "²", which int() refuses
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_EXPONENT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]{1,3}")
_KEYS = sorted(set(_FIELDS))


def _norm_key(key: Any) -> str:
    return str(key).strip().lstrip("-").replace("-", "_")


def _parse(name: str, value: Any, *, text: bool) -> Any:
    """``value`` as the type of field ``name``; strings too when ``text`` ("true", "128", "0.85")."""
    kind = _FIELDS[name]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if (
            text
            and isinstance(value, str)
            and value.strip().lower() in ("true", "false", "on", "off", "1", "0")
        ):
            return value.strip().lower() in ("true", "on", "1")
        raise ConfigError(f"{name}: expected true or false, got {repr(value)[:60]}")
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text and isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
            return int(value.strip())
        what = "an integer >= 0" if name in _ZERO_OK else "a positive integer"
        raise ConfigError(f"{name}: expected {what}, got {repr(value)[:60]}")
    if kind == "float":
        if _real(value):
            return float(value)
        # YAML 1.1 reads 1e-5 (no dot) as a string: take numbers in exponent form from a file too
        number = _NUMBER if text else _EXPONENT
        if isinstance(value, str) and number.fullmatch(value.strip()) and math.isfinite(float(value)):
            return float(value)
        raise ConfigError(f"{name}: expected a number, got {repr(value)[:60]}")
    if isinstance(value, str) and 0 < len(value) <= 256:
        return value.strip()
    raise ConfigError(f"{name}: expected a short string, got {repr(value)[:60]}")


def config_from_dict(d: dict[str, Any], where: str) -> SimConfig:
    """A :class:`SimConfig` from a mapping (an engine config file's content); ConfigError ``where: field: ...``."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(d).__name__}")
    values = {_norm_key(k): v for k, v in d.items()}
    try:
        for key in values:
            if key not in _FIELDS:
                raise ConfigError(f"unknown setting {key!r}; known: {', '.join(_KEYS)}")
        for key in ("model", "gpu"):
            if not isinstance(values.get(key), str):
                raise ConfigError(f"{key}: required, a name from data/hardware/{key}s.yaml")
        try:
            spec = hardware.model(values.pop("model"))
        except ConfigError as exc:
            raise ConfigError(f"model: {exc}") from None
        try:
            device = hardware.gpu(values.pop("gpu"))
        except ConfigError as exc:
            raise ConfigError(f"gpu: {exc}") from None
        values.setdefault("served_model_name", spec.name)
        parsed = {k: _parse(k, v, text=False) for k, v in values.items()}
        return SimConfig(model=spec, gpu=device, **parsed)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def load_config(path: str | os.PathLike[str]) -> SimConfig:
    """The engine config file ``path`` (YAML, read bounded by :mod:`perfkit.sources.safeyaml`)."""
    from perfkit.sources.safeyaml import load_yaml

    try:
        doc = load_yaml(path, max_bytes=64 * 2**10)
    except FileNotFoundError:
        raise ConfigError(f"{path}: engine config not found") from None
    return config_from_dict(doc if doc is not None else {}, str(path))


def with_changes(cfg: SimConfig, changes: dict[str, str | int | float | bool], where: str) -> SimConfig:
    """``cfg`` with ``changes`` (settings of :data:`SETTABLE`; strings parsed: ``"true"``, ``"128"``,
    ``"0.85"``), validated as a whole; ConfigError ``where: field: ...``."""
    parsed = parse_changes(changes, where)
    try:
        return dataclasses.replace(cfg, **parsed)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_changes(changes: dict[str, str | int | float | bool], where: str) -> dict[str, Any]:
    """Each of ``changes`` parsed on its own (a settable name, a value of its type), not yet checked
    against the rest of a configuration; ConfigError ``where: field: ...``."""
    if not isinstance(changes, dict):
        raise ConfigError(f"{where}: expected a mapping of setting to value")
    parsed: dict[str, Any] = {}
    try:
        for key, value in changes.items():
            name = _norm_key(key)
            if name not in SETTABLE:
                raise ConfigError(f"{name}: cannot be changed; settable: {', '.join(SETTABLE)}")
            parsed[name] = _parse(name, value, text=True)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return parsed
