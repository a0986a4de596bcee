"""The hardware tables: GPUs (memory, HBM bandwidth, dense FLOP/s, interconnect, a list price) and
model shapes (parameters, layers, heads, KV heads, head size, vocabulary), plain data shared by the
serving simulator (:mod:`perfkit.lab.servesim`) and the analyses (MFU, the decode roofline).

The tables are ``data/hardware/gpus.yaml`` and ``data/hardware/models.yaml`` (found through
:func:`perfkit.core.resources.shipped`), each number with its source beside it. They are read once,
bounded (:data:`MAX_TABLE_BYTES`, no YAML aliases) and checked field by field: a bad entry raises
:class:`~perfkit.errors.ConfigError` naming the file, the entry and the field.

>>> gpu("H100").hbm_bytes_per_s
3350000000000.0
>>> model("llama-3.1-8b").kv_bytes_per_token()
131072.0
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import yaml
from yaml.events import AliasEvent

from perfkit.core.resources import shipped
from perfkit.errors import ConfigError

MAX_TABLE_BYTES = 256 * 2**10
"""Largest table read: the shipped ones are a few KiB; hundreds of entries would still fit."""
DTYPES = ("bf16", "fp16", "fp8", "int8")
"""The dtypes ``dense_flops`` may list (tensor-core paths an LLM server uses)."""


@dataclass(frozen=True)
class Gpu:
    """One accelerator's datasheet numbers (per GPU)."""

    key: str  # "h100-sxm"
    name: str  # "NVIDIA H100 80GB HBM3" (what nvidia-smi/DCGM print)
    memory_gib: float
    hbm_bytes_per_s: float
    dense_flops: dict[str, float]  # {"bf16": 989.4e12, ...}: dense (not 2:4 sparse) peak
    usd_per_hour: float | None  # an on-demand list price, to make cost examples concrete
    sources: dict[str, str]  # field -> citation
    aliases: tuple[str, ...]
    interconnect_bytes_per_s: float | None = None  # NVLink/Infinity Fabric/PCIe, bidirectional

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``dtype``; ConfigError when the GPU has no tensor-core path for it."""
        if dtype not in self.dense_flops:
            have = ", ".join(sorted(self.dense_flops))
            raise ConfigError(f"gpu {self.key} has no dense {dtype} FLOP/s in its datasheet (has: {have})")
        return self.dense_flops[dtype]


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shapes (Hugging Face ``config.json`` names in ``models.yaml``)."""

    key: str
    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    bytes_per_param: float = 2.0
    source: str = ""
    intermediate: int = 0  # MLP width (0: unknown)
    tied_embeddings: bool = False
    max_position_embeddings: int = 0
    aliases: tuple[str, ...] = field(default=())

    def kv_bytes_per_token(self, kv_dtype_bytes: float = 2.0) -> float:
        """Bytes of K and V one token keeps in the cache, all layers: 2 * layers * kv_heads * head_dim * bytes."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes

    def weight_bytes(self) -> float:
        """Bytes of the weights: params * bytes_per_param."""
        return self.params * self.bytes_per_param

    def embedding_params(self) -> float:
        """Parameters of the input embedding table (vocab * hidden); the LM head has as many when untied."""
        return float(self.vocab * self.hidden)


# -- lookup ------------------------------------------------------------------------------------


def table_dir() -> Path:
    """The folder of ``gpus.yaml`` and ``models.yaml``: the checkout's ``data/hardware``, else the installed one."""
    return shipped("data") / "hardware"


def gpus() -> dict[str, Gpu]:
    """Every GPU of the table, by key."""
    return dict(_gpus(table_dir() / "gpus.yaml"))


def models() -> dict[str, ModelSpec]:
    """Every model of the table, by key."""
    return dict(_models(table_dir() / "models.yaml"))


def gpu(name_or_alias: str) -> Gpu:
    """The GPU called ``name_or_alias`` (its key, its nvidia-smi name or an alias; case, spaces, dashes
    and underscores ignored). ConfigError listing the known keys otherwise."""
    table = gpus()
    found = _find(table, name_or_alias, lambda g: (g.key, g.name, *g.aliases))
    if found is None:
        raise ConfigError(f"unknown GPU {name_or_alias!r}; known: {', '.join(sorted(table))}")
    return found


def model(name: str) -> ModelSpec:
    """The model called ``name`` (its key, its Hugging Face name or an alias). ConfigError listing
    the known keys otherwise."""
    table = models()
    found = _find(table, name, lambda m: (m.key, m.name, *m.aliases))
    if found is None:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(table))}")
    return found


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", text.lower())


_T = TypeVar("_T")


def _find(table: dict[str, _T], name: str, names: Callable[[_T], Iterable[str]]) -> _T | None:
    want = _norm(str(name))
    for entry in table.values():
        if any(_norm(n) == want for n in names(entry)):
            return entry
    return None


# -- reading -----------------------------------------------------------------------------------


class _NoAliases(yaml.SafeLoader):
    """PyYAML's safe loader without aliases: a table has no use for them, and an alias bomb is refused."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: YAML aliases are not allowed here")
        return super().compose_node(parent, index)


def read_table(path: Path) -> dict[str, dict[str, Any]]:
    """The mapping of entries in the YAML table ``path``, bounded and alias-free.

    ConfigError ``path: problem`` for a missing, oversized, non-regular or invalid file."""
    try:
        if not path.is_file():
            raise ConfigError(f"{path}: hardware table missing (is perfkit's data/ folder installed?)")
        with path.open("rb") as fh:
            data = fh.read(MAX_TABLE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if len(data) > MAX_TABLE_BYTES:
        raise ConfigError(f"{path}: over the {MAX_TABLE_BYTES // 1024} KiB a hardware table may have")
    try:
        doc = yaml.load(data.decode("utf-8"), Loader=_NoAliases)  # noqa: S506 - a SafeLoader
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: invalid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise ConfigError(f"{path}: expected a mapping of entries, each a mapping of fields")
    return {str(k): v for k, v in doc.items()}


def _number(where: str, entry: dict[str, Any], name: str, *, positive: bool = True) -> float:
    value = entry.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        hint = ""
        if isinstance(value, str) and re.fullmatch(r"[0-9.]+e[0-9]+", value.strip()):
            hint = " (YAML 1.1 reads an exponent without a sign as text: write 3.35e+12)"
        raise ConfigError(f"{where}.{name}: expected a number, got {value!r}{hint}")
    if positive and value <= 0:
        raise ConfigError(f"{where}.{name}: must be positive, got {value!r}")
    return float(value)


def _int(where: str, entry: dict[str, Any], name: str) -> int:
    value = entry.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}.{name}: expected a positive integer, got {value!r}")
    return value


def _text(where: str, entry: dict[str, Any], name: str, default: str | None = None) -> str:
    value = entry.get(name, default)
    if not isinstance(value, str) or not value or len(value) > 1000:
        raise ConfigError(f"{where}.{name}: expected a non-empty string, got {value!r}")
    return value


def _aliases(where: str, entry: dict[str, Any]) -> tuple[str, ...]:
    value = entry.get("aliases", [])
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise ConfigError(f"{where}.aliases: expected a list of strings, got {value!r}")
    return tuple(value)


def _unknown(where: str, entry: dict[str, Any], known: set[str]) -> None:
    extra = sorted(set(map(str, entry)) - known)
    if extra:
        raise ConfigError(f"{where}: unknown field {extra[0]!r}; known: {', '.join(sorted(known))}")


_GPU_FIELDS = {
    "name",
    "memory_gib",
    "hbm_bytes_per_s",
    "dense_flops",
    "interconnect_bytes_per_s",
    "usd_per_hour",
    "sources",
    "aliases",
}
_MODEL_FIELDS = {
    "name",
    "params",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "intermediate",
    "tied_embeddings",
    "max_position_embeddings",
    "bytes_per_param",
    "source",
    "aliases",
}


def parse_gpu(key: str, entry: dict[str, Any], where: str) -> Gpu:
    """One ``gpus.yaml`` entry as a :class:`Gpu`; ConfigError naming ``where.field``."""
    _unknown(where, entry, _GPU_FIELDS)
    flops = entry.get("dense_flops")
    if not isinstance(flops, dict) or not flops:
        raise ConfigError(f"{where}.dense_flops: expected a mapping of dtype to FLOP/s, got {flops!r}")
    dense = {}
    for dtype in flops:
        if dtype not in DTYPES:
            raise ConfigError(f"{where}.dense_flops.{dtype}: unknown dtype; known: {', '.join(DTYPES)}")
        dense[str(dtype)] = _number(f"{where}.dense_flops", flops, dtype)
    sources = entry.get("sources")
    if not isinstance(sources, dict) or not all(isinstance(v, str) and v for v in sources.values()):
        raise ConfigError(f"{where}.sources: expected a mapping of field to citation, got {sources!r}")
    for cited in ("memory_gib", "hbm_bytes_per_s", "dense_flops"):
        if cited not in sources:
            raise ConfigError(f"{where}.sources.{cited}: every number needs its source")
    price = entry.get("usd_per_hour")
    link = entry.get("interconnect_bytes_per_s")
    return Gpu(
        key=key,
        name=_text(where, entry, "name"),
        memory_gib=_number(where, entry, "memory_gib"),
        hbm_bytes_per_s=_number(where, entry, "hbm_bytes_per_s"),
        dense_flops=dense,
        usd_per_hour=None if price is None else _number(where, entry, "usd_per_hour"),
        sources={str(k): v for k, v in sources.items()},
        aliases=_aliases(where, entry),
        interconnect_bytes_per_s=None if link is None else _number(where, entry, "interconnect_bytes_per_s"),
    )


def parse_model(key: str, entry: dict[str, Any], where: str) -> ModelSpec:
    """One ``models.yaml`` entry as a :class:`ModelSpec`; ConfigError naming ``where.field``."""
    _unknown(where, entry, _MODEL_FIELDS)
    heads, kv_heads = _int(where, entry, "heads"), _int(where, entry, "kv_heads")
    if heads % kv_heads:
        raise ConfigError(f"{where}.kv_heads: {kv_heads} does not divide heads ({heads})")
    tied = entry.get("tied_embeddings", False)
    if not isinstance(tied, bool):
        raise ConfigError(f"{where}.tied_embeddings: expected true or false, got {tied!r}")
    bpp = _number(where, entry, "bytes_per_param") if "bytes_per_param" in entry else 2.0
    return ModelSpec(
        key=key,
        name=_text(where, entry, "name"),
        params=_number(where, entry, "params"),
        layers=_int(where, entry, "layers"),
        hidden=_int(where, entry, "hidden"),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_int(where, entry, "head_dim"),
        vocab=_int(where, entry, "vocab"),
        bytes_per_param=bpp,
        source=_text(where, entry, "source"),
        intermediate=_int(where, entry, "intermediate") if "intermediate" in entry else 0,
        tied_embeddings=tied,
        max_position_embeddings=(
            _int(where, entry, "max_position_embeddings") if "max_position_embeddings" in entry else 0
        ),
        aliases=_aliases(where, entry),
    )


@cache
def _gpus(path: Path) -> dict[str, Gpu]:
    return {key: parse_gpu(key, entry, f"{path}: {key}") for key, entry in read_table(path).items()}


@cache
def _models(path: Path) -> dict[str, ModelSpec]:
    return {key: parse_model(key, entry, f"{path}: {key}") for key, entry in read_table(path).items()}
