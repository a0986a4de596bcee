"""GPU state over the window from DCGM exporter series (per GPU), against the baseline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import ops
from perfkit.engine.promql import to_promql
from perfkit.engine.signals import Engine, resolve

FIELDS = (
    ("gpu_util", "avg", "GPU util %"),
    ("gr_engine_active", "avg", "GR engine active"),
    ("tensor_active", "avg", "tensor active"),
    ("dram_active", "avg", "DRAM active"),
    ("fb_used", "max", "FB used MiB"),
    ("fb_free", "min", "FB free MiB"),
    ("power", "avg", "power W"),
    ("sm_clock", "min", "SM clock MHz (min)"),
    ("gpu_temp", "max", "temp C (max)"),
    ("xid", "max", "last Xid"),
)


@dataclass
class GpuState:
    table: pl.DataFrame
    averages: dict[str, dict[str, float | None]]  # side → field → mean over GPUs
    gpus: int
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.gpus:
            return "no DCGM metrics: GPU state unknown"
        inc = self.averages.get("incident", {})
        parts = [f"{self.gpus} GPUs"]
        if inc.get("gpu_util") is not None:
            parts.append(f"util {inc['gpu_util']:.0f}%")
        if inc.get("tensor_active") is not None:
            parts.append(f"tensor active {inc['tensor_active']:.2f}")
        used, free = inc.get("fb_used"), inc.get("fb_free")
        if used is not None and free is not None:
            total = used + free
            parts.append(f"memory {used / total:.0%} used")
        if inc.get("xid"):
            parts.append(f"Xid {inc['xid']:.0f} seen")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "averages": self.averages, "summary": self.summary()}


def gpu_state(engine: Engine, window: Window, baseline: Window | None) -> GpuState:
    queries: list[str] = []
    per_gpu: dict[str, dict[str, float]] = {}
    averages: dict[str, dict[str, float | None]] = {"incident": {}, "baseline": {}}
    for signal, stat, _label in FIELDS:
        res = resolve(engine, signal)
        if res.metric is None:
            continue
        for side, w in (("incident", window), ("baseline", baseline)):
            if w is None:
                continue
            expr = ops.aggregate("avg", ops.over_time(stat, ops.Selector(res.metric), w.seconds), "gpu")
            if side == "incident":
                queries.append(to_promql(expr))
            frame = engine.instant(expr, w.end)
            if not frame.height:
                continue
            if side == "incident":
                for gpu, value in frame.select("gpu", "value").iter_rows():
                    per_gpu.setdefault(gpu, {})[signal] = value
            averages[side][signal] = float(cast(float, frame["value"].mean()))
    missing = [] if per_gpu else ["gpu: no DCGM exporter series (DCGM_FI_*) in the window"]
    rows = []
    for gpu in sorted(per_gpu, key=lambda g: int(g) if g.isdigit() else g):
        row: dict[str, Any] = {"gpu": gpu}
        for signal, _stat, label in FIELDS:
            row[label] = per_gpu[gpu].get(signal)
        rows.append(row)
    schema = {"gpu": pl.Utf8, **{label: pl.Float64 for _, _, label in FIELDS}}
    table = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    return GpuState(table, averages, len(per_gpu), queries, missing)
