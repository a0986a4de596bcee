"""Cost per million generated tokens, from the hardware bill and the generated-token rate.

``usd_per_million = usd_per_gpu_hour * gpus / (tokens_per_s * 3600) * 1e6``
(8 GPUs at $2.5/h doing 20k tok/s: $20 an hour for 72 M tokens, $0.278/M).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfkit.core.frames import Window
from perfkit.core.incident import Hardware
from perfkit.engine import signals as S


def usd_per_million_tokens(usd_per_gpu_hour: float, gpus: int, tokens_per_s: float) -> float | None:
    """Dollars per 1M tokens; None when nothing was generated.

    >>> round(usd_per_million_tokens(2.5, 8, 20_000), 3)
    0.278
    """
    if tokens_per_s <= 0:
        return None
    return usd_per_gpu_hour * gpus / (tokens_per_s * 3600.0) * 1e6


@dataclass
class Cost:
    usd_per_gpu_hour: float | None
    gpus: int
    tokens_per_s: dict[str, float | None]
    usd_per_million: dict[str, float | None]
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def summary(self) -> str:
        inc, base = self.usd_per_million.get("incident"), self.usd_per_million.get("baseline")
        if inc is None:
            return "cost per million tokens unknown: " + "; ".join(self.missing or ["no generated tokens"])
        text = f"${inc:.2f} per million generated tokens in the incident window"
        if base:
            text += f" vs ${base:.2f} in the baseline ({inc / base:.2f}x)"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "gpus": self.gpus,
            "tokens_per_s": self.tokens_per_s,
            "usd_per_million": self.usd_per_million,
            "summary": self.summary(),
        }


def cost(engine, hardware: Hardware, window: Window, baseline: Window | None) -> Cost:
    queries: list[str] = []
    missing: list[str] = []
    sides = {"incident": window, **({"baseline": baseline} if baseline else {})}
    tps = {
        side: S.counter_rate(engine, "generation_tokens_total", w, queries if side == "incident" else None)
        for side, w in sides.items()
    }
    if tps.get("incident") is None:
        missing.append(f"cost: {S.absent(engine, 'counters', 'generation_tokens_total')}")
    if hardware.usd_per_gpu_hour is None:
        missing.append("cost: incident.yaml has no hardware.usd_per_gpu_hour")
    usd = {}
    for side, v in tps.items():
        usd[side] = (
            usd_per_million_tokens(hardware.usd_per_gpu_hour, hardware.count, v)
            if v is not None and hardware.usd_per_gpu_hour is not None
            else None
        )
    return Cost(hardware.usd_per_gpu_hour, hardware.count, tps, usd, queries, missing)
