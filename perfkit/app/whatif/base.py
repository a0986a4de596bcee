"""The engine a what-if sweep starts from (:mod:`perfkit.app.whatif.replay`): ``--engine-config FILE``, or
what an incident bundle recorded (``incident.yaml``'s model, GPU, count, price and SLOs; the
engine's start-up log lines and ``vllm:cache_config_info`` through
:mod:`perfkit.sources.engine_config`), each field's origin said; the price of a GPU-hour."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError

_INCIDENT_PERCENTILES = ("p95", "p99", "p90", "p50")
"""Which of incident.yaml's ``slo:`` percentile keys becomes the per-request SLO, first found."""
_CONFIG_LINE = re.compile(r"Initializing (?:a V[01] |an )LLM engine \(v[^()\s]{1,64}\) with config: ")
_LOG_FIELDS = re.compile(
    r"(?:^|[ ,])(tensor_parallel_size|max_seq_len|kv_cache_dtype|dtype|model)=('?)([A-Za-z0-9_./:-]{1,128})\2(?=,|$)"
)
_MAX_LINE = 64 * 2**10  # characters of the config line scanned (log lines are capped at 64 KiB)
_ENGINE_KEYS = {  # perfkit.sources.engine_config key -> SimConfig field
    "chunked_prefill": "enable_chunked_prefill",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "prefix_caching": "enable_prefix_caching",
    "long_prefill_token_threshold": "long_prefill_token_threshold",
}
_DTYPES = {
    "torch.bfloat16": "auto",
    "bfloat16": "auto",
    "auto": "auto",
    "torch.float16": "fp16",
    "float16": "fp16",
}


# -- the base configuration -------------------------------------------------------------------------


@dataclass
class Base:
    """The configuration the sweep changes, where each of its fields came from, and what the
    traffic's source says about SLOs and price."""

    cfg: Any  # SimConfig
    origin: dict[str, str]  # field -> "incident.yaml model", "log line vllm.log:4", "default", ...
    slo_ms: dict[str, float] = field(default_factory=dict)
    slo_origin: str = ""
    usd_per_gpu_hour: float | None = None
    price_origin: str = ""
    notes: list[str] = field(default_factory=list)


def config_from_file(path: str | Path) -> Base:
    """``--engine-config FILE``: the file's fields, the rest defaults."""
    from perfkit.lab.servesim.config import config_from_dict
    from perfkit.sources.safeyaml import load_yaml

    try:
        doc = load_yaml(path, max_bytes=64 * 2**10)
    except FileNotFoundError:
        raise ConfigError(f"{path}: engine config not found") from None
    doc = doc if doc is not None else {}
    cfg = config_from_dict(doc, str(path))
    given = {str(k).strip().lstrip("-").replace("-", "_") for k in doc} if isinstance(doc, dict) else set()
    return Base(cfg, _origins(cfg, {k: str(path) for k in given}))


def _origins(cfg: Any, given: dict[str, str]) -> dict[str, str]:
    import dataclasses

    return {f.name: given.get(f.name, "default") for f in dataclasses.fields(cfg)}


def config_from_bundle(path: str | Path) -> Base:
    """The engine an incident bundle recorded: ``incident.yaml``'s ``model`` and ``hardware.gpu``
    (looked up in data/hardware by name or alias), ``hardware.count`` as the tensor-parallel size
    when the logs do not say it, the engine's settings from its last start-up lines and
    ``vllm:cache_config_info`` (block size, KV dtype); SLOs from ``slo:``, the price from
    ``hardware.usd_per_gpu_hour``. ConfigError naming the bundle's field when the tables lack the
    model or GPU (suggesting ``--engine-config``) or the recorded settings are not a valid engine."""
    from perfkit.core import hardware
    from perfkit.engine.local import LocalEngine
    from perfkit.lab.servesim.config import config_from_dict
    from perfkit.sources.bundle import load_bundle
    from perfkit.sources.engine_config import engine_config

    bundle = load_bundle(path, families={"vllm:cache_config_info"})
    inc, where = bundle.incident, Path(bundle.path) / "incident.yaml"
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    notes: list[str] = []
    log_fields, log_where = _config_line(bundle.logs)

    def put(name: str, value: Any, source: str) -> None:
        values[name] = value
        origin[name] = source

    model = inc.model or log_fields.get("model")
    if not model:
        raise ConfigError(f"{where}: names no model (model:); give --engine-config FILE")
    put("model", str(model), "incident.yaml model" if inc.model else log_where)
    if not inc.hardware.gpu or inc.hardware.gpu == "unknown":
        raise ConfigError(f"{where}: names no GPU (hardware.gpu); give --engine-config FILE")
    put("gpu", inc.hardware.gpu, "incident.yaml hardware.gpu")
    for name, look_up in (("model", hardware.model), ("gpu", hardware.gpu)):
        try:
            look_up(values[name])
        except ConfigError as exc:
            raise ConfigError(
                f"{where}: {'model' if name == 'model' else 'hardware.gpu'}: {exc}; describe the engine "
                "with --engine-config FILE (docs/simulator.md) or add it to data/hardware"
            ) from None
    if "tensor_parallel_size" in log_fields:
        put("tensor_parallel_size", log_fields["tensor_parallel_size"], log_where)
        if inc.hardware.count != log_fields["tensor_parallel_size"]:
            notes.append(
                f"incident.yaml hardware.count is {inc.hardware.count} and tensor_parallel_size "
                f"{log_fields['tensor_parallel_size']}: one engine is simulated, the cost is of its GPUs"
            )
    elif inc.hardware.count > 1:
        put("tensor_parallel_size", inc.hardware.count, "incident.yaml hardware.count")
    if "max_seq_len" in log_fields:
        put("max_model_len", log_fields["max_seq_len"], log_where)
    for key, name in (("dtype", "dtype"), ("kv_cache_dtype", "kv_cache_dtype")):
        if key in log_fields:
            put(name, log_fields[key], log_where)
    engine = LocalEngine(bundle.store)
    for key, found in engine_config(bundle.logs, engine, inc.window).items():
        put(_ENGINE_KEYS[key], found["value"], str(found["source"]))
    blocks_recorded = _cache_info(engine, inc.window, put)
    context = hardware.model(values["model"]).max_position_embeddings
    if "max_model_len" not in values and context:
        # vLLM's max_model_len, SGLang's context_length and trtllm-serve's max_seq_len all default to the
        # model's own context; without chunked prefill no prompt passes the step's token budget
        budget = (
            values.get("max_num_batched_tokens") if not values.get("enable_chunked_prefill", True) else None
        )
        cut = ", cut to the step's token budget" if budget and budget < context else ""
        put("max_model_len", min(int(context), int(budget or context)),
            f"the model's max_position_embeddings (the engines' default){cut}")  # fmt: skip
    if not values.get("enable_chunked_prefill", True) and "max_num_batched_tokens" not in values:
        # vLLM's SchedulerConfig.__post_init__ (vllm/config.py) without chunked prefill:
        # max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048 in vllm/utils) tokens a step
        put("max_num_batched_tokens", max(int(values.get("max_model_len", 8192)), 2048), "vLLM's default")
    try:
        cfg = config_from_dict(dict(values), f"{bundle.path}: the recorded engine")
    except ConfigError as exc:
        if not origin.get("max_model_len", "").startswith("the model's"):
            raise ConfigError(f"{exc}; describe the engine with --engine-config FILE instead") from None
        del values["max_model_len"], origin["max_model_len"]  # the KV cache cannot hold the whole context
        if origin.get("max_num_batched_tokens") == "vLLM's default":
            put("max_num_batched_tokens", 8192, "vLLM's default")
        notes.append(f"the model's whole context does not fit ({exc}): max_model_len left at 8,192")
        try:
            cfg = config_from_dict(dict(values), f"{bundle.path}: the recorded engine")
        except ConfigError as again:
            raise ConfigError(f"{again}; describe the engine with --engine-config FILE instead") from None
    if blocks_recorded:
        notes.append(
            f"vllm:cache_config_info says num_gpu_blocks={blocks_recorded}; the simulator's memory model "
            f"gives {cfg.num_gpu_blocks()}"
        )
    base = Base(cfg, _origins(cfg, origin), notes=notes)
    base.slo_ms, base.slo_origin = _incident_slo(inc.slo)
    if inc.hardware.usd_per_gpu_hour is not None:
        base.usd_per_gpu_hour = inc.hardware.usd_per_gpu_hour
        base.price_origin = "incident.yaml hardware.usd_per_gpu_hour"
    return base


def _config_line(records: Any) -> tuple[dict[str, Any], str]:
    """Fields of the last ``Initializing ... LLM engine ... with config:`` line (vLLM's
    ``VllmConfig.__str__``) that :mod:`perfkit.sources.engine_config` does not read: model,
    tensor_parallel_size, max_seq_len, dtype, kv_cache_dtype; and ``log line FILE:LINE``."""
    import polars as pl

    if records is None or not records.height:
        return {}, ""
    hits = records.filter(pl.col("message").str.contains("with config: ", literal=True))
    for src, line, message in reversed(hits.select("source", "line", "message").rows()):
        m = _CONFIG_LINE.match(message or "")
        if m is None:
            continue
        out: dict[str, Any] = {}
        for key, _, value in _LOG_FIELDS.findall(message[m.end() : _MAX_LINE]):
            if key in ("tensor_parallel_size", "max_seq_len"):
                if value.isdigit() and 0 < int(value) < 2**31:
                    out[key] = int(value)
            elif key == "dtype":
                if value in _DTYPES:
                    out[key] = _DTYPES[value]
            elif key == "kv_cache_dtype" or (key == "model" and "model" not in out):
                out[key] = value
        return out, f"log line {src}:{line}"
    return {}, ""


def _cache_info(engine: Any, window: Any, put: Any) -> int | None:
    """block_size and the KV dtype from ``vllm:cache_config_info`` at the window's end (one value
    across its series); returns its num_gpu_blocks to compare with the simulator's."""
    from perfkit.engine import ops

    name = "vllm:cache_config_info"
    if not engine.has(name):
        return None
    frame = engine.instant(ops.Selector(name), window.end)
    found: dict[str, str] = {}
    for label in ("block_size", "cache_dtype", "num_gpu_blocks"):
        if label in frame.columns:
            vals = {str(v)[:32] for v in frame[label].to_list() if v is not None}
            if len(vals) == 1:
                found[label] = vals.pop()
    if found.get("block_size", "").isdigit():
        put("block_size", int(found["block_size"]), f"metric {name}")
    if found.get("cache_dtype"):
        put("kv_cache_dtype", found["cache_dtype"], f"metric {name}")
    blocks = found.get("num_gpu_blocks", "")
    return int(blocks) if blocks.isdigit() and len(blocks) < 12 else None


def _incident_slo(slo: dict[str, float]) -> tuple[dict[str, float], str]:
    """incident.yaml's ``slo:`` (seconds, per percentile) as per-request SLOs in ms: ttft and tpot."""
    out: dict[str, float] = {}
    used: list[str] = []
    for metric in ("ttft", "tpot"):
        for pct in _INCIDENT_PERCENTILES:
            value = slo.get(f"{metric}_{pct}_s")
            if value is not None and math.isfinite(value) and value > 0:
                out[metric] = value * 1e3
                used.append(f"{metric}_{pct}_s")
                break
    return out, f"incident.yaml slo ({', '.join(used)})" if used else ""


def bundle_extras(path: str | Path) -> Base:
    """SLOs and price of a bundle whose engine ``--engine-config`` replaces."""
    from perfkit.sources.incident_file import read_incident

    inc = read_incident(Path(path) / "incident.yaml")
    base = Base(None, {})
    base.slo_ms, base.slo_origin = _incident_slo(inc.slo)
    if inc.hardware.usd_per_gpu_hour is not None:
        base.usd_per_gpu_hour = inc.hardware.usd_per_gpu_hour
        base.price_origin = "incident.yaml hardware.usd_per_gpu_hour"
    return base


def gpu_price(base: Base, override: float | None) -> tuple[float | None, str]:
    if override is not None:
        return float(override), "--usd-per-gpu-hour"
    if base.usd_per_gpu_hour is not None:
        return base.usd_per_gpu_hour, base.price_origin
    gpu = base.cfg.gpu
    if gpu.usd_per_hour is not None:
        return (
            gpu.usd_per_hour,
            f"data/hardware/gpus.yaml {gpu.key} ({gpu.sources.get('usd_per_hour', 'list price')})",
        )
    return None, ""
