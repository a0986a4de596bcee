"""The samples of one read, series by series, made into a :class:`~perfkit.core.frames.MetricStore`.

:class:`SeriesStore` is the half of :class:`perfkit.sources.openmetrics.Reader` that every format
shares: the series registry (a family and labels per series id) and the compact samples read (series
id, ms timestamp, value), sorted by series and time, one value per timestamp (the last written),
narrowed by a ``select`` rule on one row per series, and cut into one frame per family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import polars as pl

from perfkit.core.frames import TS_DTYPE, MetricStore

Select: TypeAlias = Callable[[MetricStore], MetricStore]
"""Given one row per series (label columns, zero ``ts`` and ``value``), the rows to keep, as a store
of those frames narrowed by row; the result keeps its family order."""
PART = {"sid": pl.UInt32, "ts": pl.Int64, "value": pl.Float64}
"""The columns of compact samples: series id, ms timestamp, value."""
_ID = "#sid"  # a column name no label can have


class SeriesStore:
    """Series registry and compact samples; a reader fills them, :meth:`finish` makes the store."""

    def __init__(self) -> None:
        self.family: list[str] = []  # by series id
        self.labels: list[dict[str, str]] = []
        self.keys: dict[str, dict[str, None]] = {}  # label names of each family, first seen first
        self.order: dict[str, None] = {}  # families, first read first
        self.types: dict[str, str] = {}
        self.present: set[int] = set()  # series ids whose samples were taken
        self.parts: list[pl.DataFrame] = []  # compact samples (PART)

    def finish(self, select: Select | None = None) -> MetricStore:
        kept = np.zeros(len(self.family), dtype=bool)
        kept[list(self.present)] = True
        families = list(self.order)
        if select is not None:
            kept, families = self._selected(kept, select)
        members = self._members(kept)
        names = [n for n in families if n in members]
        key_of = np.full(len(self.family), -1, dtype=np.int64)
        lookups: dict[str, tuple[int, pl.DataFrame]] = {}
        base = 0
        for name in names:
            frame = self._series(name, members[name]).with_row_index(_ID)
            keys = list(self.keys[name])
            if keys:
                frame = frame.sort(keys, nulls_last=True, maintain_order=True)
            key_of[np.asarray(members[name])[frame[_ID].to_numpy()]] = base + np.arange(frame.height)
            lookups[name] = (base, frame.drop(_ID))
            base += frame.height
        samples = pl.concat(self.parts) if self.parts else pl.DataFrame(schema=PART)
        sid, ts, value = (samples[c].to_numpy() for c in PART)
        self.parts = []
        del samples
        key = key_of[sid]
        if not (keep := key >= 0).all():
            key, ts, value = key[keep], ts[keep], value[keep]
        order = _series_order(key, ts)
        key, ts, value = key[order], ts[order], value[order]
        del order
        if key.size > 1 and (dup := (key[1:] == key[:-1]) & (ts[1:] == ts[:-1])).any():
            keep = np.append(~dup, True)  # one value per (series, ts): the last written
            key, ts, value = key[keep], ts[keep], value[keep]
        store = MetricStore(types={n: self.types[n] for n in self.order})
        for name in names:
            base, lookup = lookups[name]
            lo, hi = (int(i) for i in np.searchsorted(key, [base, base + lookup.height]))
            columns = pl.DataFrame(
                {"ts": pl.Series(ts[lo:hi]).cast(TS_DTYPE), "value": pl.Series(value[lo:hi])}
            )
            if lookup.width:
                columns = pl.concat([lookup[key[lo:hi] - base], columns], how="horizontal")
            store.frames[name] = columns
        return store

    def _members(self, mask: np.ndarray) -> dict[str, list[int]]:
        members: dict[str, list[int]] = {}
        for sid in np.flatnonzero(mask).tolist():
            members.setdefault(self.family[sid], []).append(sid)
        return members

    def _series(self, name: str, sids: list[int]) -> pl.DataFrame:
        """One row of label columns per series (a family without labels: no columns, one row)."""
        keys = list(self.keys[name])
        if not keys:
            return pl.DataFrame({"_": [None] * len(sids)}).drop("_")
        return pl.DataFrame(
            {k: [self.labels[s].get(k) for s in sids] for k in keys}, schema=dict.fromkeys(keys, pl.Utf8)
        )

    def _selected(self, present: np.ndarray, select: Select) -> tuple[np.ndarray, list[str]]:
        """The series ``select`` keeps of a store of one row per series, and its family order."""
        members = self._members(present)
        series = MetricStore(types={n: self.types[n] for n in self.order})
        for name in self.order:
            if sids := members.get(name):
                zeros = pl.Series([0] * len(sids), dtype=pl.Int64)
                series.frames[name] = self._series(name, sids).with_columns(
                    ts=zeros.cast(TS_DTYPE), value=zeros.cast(pl.Float64)
                )
        chosen = select(series)
        kept = np.zeros_like(present)
        for name, frame in chosen.frames.items():
            full, ids = series.frames[name], np.asarray(members[name])
            labels = [c for c in full.columns if c not in ("ts", "value")]
            if frame.height == full.height or not labels:
                kept[ids] = True
            else:
                hit = full.with_row_index(_ID).join(
                    frame.select(labels), on=labels, how="semi", nulls_equal=True
                )
                kept[ids[hit[_ID].to_numpy()]] = True
        return kept, list(chosen.frames)


def _series_order(key: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Indices that sort by (series key, ts), equal pairs staying in the order they were written.
    The keys are small integers, so a stable radix sort by key is linear; it is all that is needed
    when every series was written in time order (as exporters and captures write them)."""
    order = _radix(key)
    k, t = key[order], ts[order]
    if np.any((k[1:] == k[:-1]) & (t[1:] < t[:-1])):
        by_ts = np.argsort(ts, kind="stable")
        order = by_ts[_radix(key[by_ts])]
    return order


def _radix(key: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative integer keys under 2**32: numpy's radix sort on 16-bit digits."""
    order = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
    if key.size and int(key.max()) > 0xFFFF:
        order = order[np.argsort((key[order] >> 16).astype(np.uint16), kind="stable")]
    return order
