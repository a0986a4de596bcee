"""Tidy frames: the fixed schemas analyses read. No I/O here.

Time-series samples live in a :class:`MetricStore`: one polars frame per sample name
(``vllm:time_to_first_token_seconds_bucket``, ``DCGM_FI_DEV_GPU_UTIL`` ...) with

====================  =============================  =====================================
column                dtype                          meaning
====================  =============================  =====================================
<label> ...           Utf8                           one column per label name of the series
``ts``                Datetime(ms, UTC)              sample time
``value``             Float64                        sample value (NaN and ±Inf kept)
====================  =============================  =====================================

sorted by series then ``ts``. Other frames (events, log records, per-request records) are
documented where they are built: :data:`EVENTS_SCHEMA`, :data:`LOG_SCHEMA`, :data:`STATS_SCHEMA`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeAlias

import polars as pl
from polars.datatypes import DataTypeClass

TS_DTYPE = pl.Datetime("ms", "UTC")

#: a frame schema: column name → polars dtype (an instance such as ``TS_DTYPE`` or a class such as ``pl.Utf8``)
SchemaDict: TypeAlias = dict[str, pl.DataType | DataTypeClass]

#: events.csv → frame: ts, kind (deploy, rollback, config, scale, alert, note), service, version, detail
EVENTS_SCHEMA: SchemaDict = {
    "ts": TS_DTYPE,
    "kind": pl.Utf8,
    "service": pl.Utf8,
    "version": pl.Utf8,
    "detail": pl.Utf8,
}

#: parsed log records: one row per recognised line
LOG_SCHEMA: SchemaDict = {
    "ts": TS_DTYPE,
    "source": pl.Utf8,  # file name the line came from
    "line": pl.Int64,  # 1-based line number in that file
    "kind": pl.Utf8,  # vllm_stats, json, cuda_oom, nccl_warn, ...
    "level": pl.Utf8,
    "message": pl.Utf8,
}

#: vLLM periodic stats lines ("Engine 000: Avg prompt throughput: ...")
STATS_SCHEMA: SchemaDict = {
    "ts": TS_DTYPE,
    "engine": pl.Utf8,
    "prompt_tokens_per_s": pl.Float64,
    "generation_tokens_per_s": pl.Float64,
    "running": pl.Int64,
    "waiting": pl.Int64,
    "kv_cache_usage_frac": pl.Float64,
    "prefix_cache_hit_frac": pl.Float64,
    "preemptions": pl.Int64,
}


def utc(ts: datetime | str | float | int) -> datetime:
    """Return ``ts`` as a timezone-aware UTC datetime (naive values are taken as UTC).

    >>> utc("2026-11-30T02:00:00Z").isoformat()
    '2026-11-30T02:00:00+00:00'
    """
    if isinstance(ts, datetime):
        return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
    if isinstance(ts, int | float):
        return datetime.fromtimestamp(float(ts), UTC)
    text = str(ts).strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return utc(datetime.fromisoformat(text))


def to_ms(ts: datetime) -> int:
    """Milliseconds since the epoch of an aware datetime."""
    return round(utc(ts).timestamp() * 1000)


@dataclass(frozen=True)
class Window:
    """A closed time window [start, end] in UTC."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", utc(self.start))
        object.__setattr__(self, "end", utc(self.end))

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def as_dict(self) -> dict[str, str]:
        return {"start": iso(self.start), "end": iso(self.end)}

    def contains(self, ts: datetime) -> bool:
        return self.start <= utc(ts) <= self.end


def iso(ts: datetime) -> str:
    """ISO 8601 in UTC with a trailing Z, to the second."""
    return utc(ts).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class MetricStore:
    """Samples by sample name, plus the family type of each (counter, gauge, histogram ...)."""

    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.frames

    def __iter__(self) -> Iterator[str]:
        return iter(self.frames)

    def get(self, name: str) -> pl.DataFrame | None:
        return self.frames.get(name)

    def first(self, names: Iterable[str]) -> str | None:
        """The first of ``names`` that has samples (used for renamed metrics)."""
        for name in names:
            frame = self.frames.get(name)
            if frame is not None and frame.height:
                return name
        return None

    def labels(self, name: str) -> list[str]:
        frame = self.frames.get(name)
        if frame is None:
            return []
        return [c for c in frame.columns if c not in ("ts", "value")]

    def merge(self, other: MetricStore) -> MetricStore:
        """Concatenate two stores (e.g. several ``.om`` files); series stay sorted."""
        frames = dict(self.frames)
        for name, frame in other.frames.items():
            if name in frames:
                combined = pl.concat([frames[name], frame], how="diagonal_relaxed")
                labels = [c for c in combined.columns if c not in ("ts", "value")]
                # The same series from two files (scraped by two jobs): one sample per timestamp.
                frames[name] = sort_series(
                    combined.unique(subset=[*labels, "ts"], keep="last", maintain_order=True)
                )
            else:
                frames[name] = frame
        return MetricStore(frames, {**self.types, **other.types})

    @property
    def n_samples(self) -> int:
        return sum(f.height for f in self.frames.values())

    def time_range(self) -> tuple[datetime, datetime] | None:
        lo: int | None = None
        hi: int | None = None
        for frame in self.frames.values():
            if not frame.height:
                continue
            ts = frame["ts"].to_physical()
            a, b = int(ts.min()), int(ts.max())  # type: ignore[arg-type]
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if lo is None or hi is None:
            return None
        return utc(lo / 1000), utc(hi / 1000)


def select_series(
    frame: pl.DataFrame, keep: Callable[[dict[str, object]], bool]
) -> tuple[pl.DataFrame, int, int]:
    """The samples of the series of ``frame`` whose labels ``keep`` accepts (judged once per distinct
    label set, then a semi-join), with the numbers of series kept and seen."""
    labels = [c for c in frame.columns if c not in ("ts", "value")]
    if not labels:
        return (frame, 1, 1) if keep({}) else (frame.clear(), 0, 1)
    series = frame.select(labels).unique()
    chosen = series.filter(pl.Series([keep(row) for row in series.iter_rows(named=True)], dtype=pl.Boolean))
    if chosen.height == series.height:
        return frame, chosen.height, series.height
    return frame.join(chosen, on=labels, how="semi", nulls_equal=True), chosen.height, series.height


def sort_series(frame: pl.DataFrame) -> pl.DataFrame:
    """Sort a sample frame by its label columns, then by time."""
    labels = [c for c in frame.columns if c not in ("ts", "value")]
    return frame.sort([*labels, "ts"], nulls_last=True, maintain_order=True)
