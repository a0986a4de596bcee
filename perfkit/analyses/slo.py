"""SLO attainment from histograms: the share of requests under each SLO bound, per window.

An SLO such as ``ttft_p95_s: 1.5`` says "95 % of requests see their first token within 1.5 s".
Its attainment in a window is the share of observations at or under the bound, from the increase
of the histogram's cumulative buckets over the window::

    sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[<window>]))

* the bound is a bucket edge: the share is ``count(le=bound) / count(le=+Inf)``, **exact**;
* the bound lies inside a bucket ``(lo, hi]``: the count under it is interpolated linearly inside
  that bucket, as ``histogram_quantile`` does (the first bucket starts at 0): **interpolated**;
* the bound lies above the highest finite edge: the share under that edge is a lower bound (the
  ``+Inf`` bucket may hold observations under the bound): **at least**.

The interpolation is the inverse of ``histogram_quantile``'s, so the share reaches the target
(0.95 for a p95 SLO) exactly when ``histogram_quantile(0.95, ...)`` is at or under the bound:
the attainment table and the baseline table's breach column cannot disagree.

SLO keys are ``<signal>_p<digits>_s`` with a histogram signal of :mod:`perfkit.engine.signals`
(``ttft``, ``tpot``, ``itl``, ``e2e``, ``queue`` ...); the digits are the quantile's decimals
(``p95`` 0.95, ``p999`` 0.999). ITL histograms count inter-token gaps, not requests: their share
is of gaps. One query per signal and window answers on a bundle and on live Prometheus alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import signals as S

SLO_KEY = re.compile(r"^(?P<signal>[a-z][a-z0-9_]*?)_p(?P<digits>[0-9]{1,4})_s$")
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "queue": "queue", "prefill": "prefill"}
COUNTED = {"itl": "gaps"}
"""What one observation of the histogram is, when not a request (vLLM's ITL: one per engine output)."""
EDGE_REL_TOL = 1e-9
"""A bound within this relative distance of a bucket edge is that edge ("1.5" and "1.50" alike)."""
EXACT, INTERPOLATED, AT_LEAST = "exact", "interpolated", "at least"


@dataclass(frozen=True)
class Share:
    """The share of one window's observations at or under a bound.

    ``method``: :data:`EXACT` (the bound is a bucket edge), :data:`INTERPOLATED` (linear inside
    ``(lower, upper]``), :data:`AT_LEAST` (above the highest finite edge ``lower``: a lower bound).
    ``share`` is None when the window has no observations (``total`` 0) or no histogram.
    """

    share: float | None
    under: float | None = None
    total: float | None = None
    method: str | None = None
    lower: float | None = None
    upper: float | None = None

    def how(self) -> str:
        """The method in words, with the bucket it used."""
        if self.method == INTERPOLATED:
            return f"interpolated in ({_g(self.lower)}, {_g(self.upper)}]"
        if self.method == AT_LEAST:
            return f"at least (bound above the last bucket edge {_g(self.lower)})"
        return self.method or "no data"

    def as_dict(self) -> dict[str, Any]:
        return {
            "share": self.share,
            "under": self.under,
            "total": self.total,
            "method": self.method,
            "bucket": [self.lower, self.upper] if self.method == INTERPOLATED else None,
        }


@dataclass(frozen=True)
class SloRow:
    """One SLO: its bound and target, and its attainment in each window."""

    key: str  # "ttft_p95_s"
    signal: str
    bound_s: float
    target: float  # 0.95
    baseline: Share | None
    incident: Share

    @property
    def label(self) -> str:
        return f"{LABELS.get(self.signal, self.signal)} ≤ {_seconds(self.bound_s)}"

    @property
    def counted(self) -> str:
        return COUNTED.get(self.signal, "requests")

    @property
    def met(self) -> bool | None:
        """Whether the incident window reached the target (None when it cannot be told)."""
        return _met(self.incident, self.target)

    @property
    def met_baseline(self) -> bool | None:
        """Whether the baseline window reached the target (None without a baseline, or undecided)."""
        return _met(self.baseline, self.target) if self.baseline else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "slo": self.key,
            "signal": self.signal,
            "bound_s": self.bound_s,
            "target": self.target,
            "counted": self.counted,
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "incident": self.incident.as_dict(),
            "met": self.met,
            "met_baseline": self.met_baseline,
        }


@dataclass
class SloAttainment:
    """Every SLO's attainment in the baseline and incident windows."""

    rows: list[SloRow] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # SLOs that are not histogram SLOs

    def table(self) -> pl.DataFrame:
        """One row per SLO: shares in percent, how each was computed, whether the target was met."""

        def pct(s: Share | None) -> float | None:
            return None if s is None or s.share is None else round(100 * s.share, 2)

        def how(r: SloRow) -> str:
            methods = dict.fromkeys(s.how() for s in (r.baseline, r.incident) if s and s.share is not None)
            return "; ".join(methods) or "no data"

        return pl.DataFrame(
            {
                "SLO": [r.label for r in self.rows],
                "target %": [round(100 * r.target, 3) for r in self.rows],
                "counted": [r.counted for r in self.rows],
                "baseline %": [pct(r.baseline) for r in self.rows],
                "incident %": [pct(r.incident) for r in self.rows],
                "met": [_met_text(r.met) for r in self.rows],
                "how": [how(r) for r in self.rows],
            },
            schema={
                "SLO": pl.Utf8,
                "target %": pl.Float64,
                "counted": pl.Utf8,
                "baseline %": pl.Float64,
                "incident %": pl.Float64,
                "met": pl.Utf8,
                "how": pl.Utf8,
            },
        )

    def summary(self) -> str:
        """One clause on the incident window: each SLO missed or undecided with its attainment, then
        how many were met ("" without SLOs)."""
        parts = []
        met = 0
        for r in self.rows:
            s = r.incident
            if s.share is None:
                parts.append(f"{r.label}: no data")
            elif r.met:
                met += 1
            else:
                share = f"{'≥ ' if s.method == AT_LEAST else ''}{100 * s.share:.1f} %"
                undecided = ", undecided" if r.met is None else ""
                parts.append(
                    f"{r.label} for {share} of {r.counted} (target {100 * r.target:.4g} %{undecided})"
                )
        if met and parts:
            parts.append(f"{met} other{'s' if met > 1 else ''} met")
        elif met:
            parts.append("the SLO met" if met == 1 else f"all {met} SLOs met")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": [r.as_dict() for r in self.rows],
            "skipped": list(self.skipped),
            "missing": list(self.missing),
        }


def parse_slo_key(key: str) -> tuple[str, float] | None:
    """``"ttft_p95_s"`` → ``("ttft", 0.95)``; None for a key that is not a quantile SLO in seconds."""
    m = SLO_KEY.match(key)
    if not m or m.group("digits") == "100":
        return None
    digits = m.group("digits")
    return m.group("signal"), int(digits) / 10 ** len(digits)


def share_under(buckets: Mapping[float, float], bound: float) -> Share:
    """The share of observations at or under ``bound`` from cumulative ``buckets`` (upper edge →
    count; ``+Inf`` gives the total). Equal edges are added together, counts are made monotonic
    (as ``histogram_quantile`` does). No ``+Inf`` bucket or no observations: ``share`` None."""
    merged: dict[float, float] = {}
    for le, count in buckets.items():
        if math.isnan(le) or count is None or not math.isfinite(count):
            continue
        key = next((e for e in merged if _same_edge(e, le)), le)
        merged[key] = merged.get(key, 0.0) + float(count)
    edges = sorted(merged)
    if not edges or not math.isinf(edges[-1]) or edges[-1] < 0:
        return Share(None)
    counts: list[float] = []
    for e in edges:  # ensure monotonic, as Prometheus' bucketQuantile
        counts.append(max(merged[e], counts[-1] if counts else 0.0))
    total = counts[-1]
    if total <= 0:
        return Share(None, 0.0, 0.0)
    finite = edges[:-1]
    for i, edge in enumerate(finite):
        if _same_edge(edge, bound):
            return Share(counts[i] / total, counts[i], total, EXACT, edge, edge)
        if edge > bound:
            lo = finite[i - 1] if i else 0.0
            below = counts[i - 1] if i else 0.0
            if edge <= lo or bound <= lo:  # a first bucket at or under 0: nothing to interpolate
                return Share(below / total, below, total, EXACT, lo, lo)
            under = below + (counts[i] - below) * (bound - lo) / (edge - lo)
            return Share(under / total, under, total, INTERPOLATED, lo, edge)
    if not finite:  # only +Inf: nothing is known below it
        return Share(0.0, 0.0, total, AT_LEAST, 0.0, None)
    return Share(counts[len(finite) - 1] / total, counts[len(finite) - 1], total, AT_LEAST, finite[-1], None)


def attainment(
    engine: S.Engine, window: Window, baseline: Window | None, slo: Mapping[str, float]
) -> SloAttainment:
    """Each quantile SLO of ``slo`` (``ttft_p95_s`` ...): the share under its bound in the
    incident ``window`` and in ``baseline``. SLOs of another kind are listed in ``skipped``."""
    out = SloAttainment()
    cache: dict[tuple[str, str], dict[float, float] | None] = {}

    def buckets(signal: str, side: str, w: Window) -> dict[float, float] | None:
        if (signal, side) not in cache:
            cache[(signal, side)] = S.window_buckets(
                engine, signal, w, out.queries if side == "incident" else None
            )
        return cache[(signal, side)]

    for key, value in slo.items():
        parsed = parse_slo_key(str(key))
        bound = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
        if parsed is None or parsed[0] not in S.HISTOGRAMS:
            out.skipped.append(f"{key}: not a histogram quantile SLO (<signal>_p<quantile>_s)")
            continue
        if not math.isfinite(bound) or bound <= 0:
            out.skipped.append(f"{key}: bound {value!r} is not a positive number of seconds")
            continue
        signal, target = parsed
        inc = buckets(signal, "incident", window)
        if inc is None:
            out.missing.append(f"slo attainment: no {signal} histogram for {key}")
            continue
        base = buckets(signal, "baseline", baseline) if baseline is not None else None
        row = SloRow(
            str(key),
            signal,
            bound,
            target,
            share_under(base, bound) if base is not None else None,
            share_under(inc, bound),
        )
        if row.incident.share is None:
            out.missing.append(f"slo attainment: no {signal} observations in the incident window")
        out.rows.append(row)
    return out


def _met(share: Share | None, target: float) -> bool | None:
    if share is None or share.share is None:
        return None
    if share.share >= target * (
        1 - EDGE_REL_TOL
    ):  # at the bound exactly, as histogram_quantile's "not above"
        return True
    return None if share.method == AT_LEAST else False  # a lower bound under the target decides nothing


def _met_text(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "?"}[met]


def _same_edge(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=EDGE_REL_TOL)


def _g(v: float | None) -> str:
    return "?" if v is None else f"{v:g}"


def _seconds(v: float) -> str:
    return f"{v * 1000:g} ms" if v < 1 else f"{v:g} s"
