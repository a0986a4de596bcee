"""The series a simulated exporter emits: histograms with fixed buckets, and sample families by name,
each sample's value written as an exposition line would carry it."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np


class Histogram:
    def __init__(self, bounds: list[float]) -> None:
        self.bounds = np.asarray(bounds, dtype=np.float64)
        self.counts = np.zeros(len(bounds) + 1, dtype=np.int64)
        self.total = 0.0

    def observe(self, values) -> None:
        values = np.atleast_1d(np.asarray(values, dtype=np.float64))
        idx = np.searchsorted(self.bounds, values, side="left")  # first bound >= value
        self.counts += np.bincount(idx, minlength=self.counts.size)
        self.total += float(values.sum())

    def reset(self) -> None:
        self.counts[:] = 0
        self.total = 0.0


@dataclass
class Series:
    family: str
    kind: str  # counter | gauge | histogram
    help: str
    points: dict[tuple[str, *tuple[tuple[str, str], ...]], list[tuple[float, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )


class SeriesSet(dict[str, Series]):
    """Every family a simulated exporter emits, by family name; ``put`` records one sample."""

    def put(
        self, name: str, kind: str, help_: str, sample: str, labels: dict[str, str], ts: float, v
    ) -> None:
        series = self.get(name)
        if series is None:
            series = self[name] = Series(name, kind, help_)
        series.points[(sample, *sorted(labels.items()))].append((ts, fmt(v)))


def fmt(v: float) -> str:
    if isinstance(v, int | np.integer):
        return str(int(v))
    if math.isnan(v):
        return "NaN"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.6g}"
