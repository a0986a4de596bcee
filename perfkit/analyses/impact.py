"""Impact in SLO terms: what the incident cost each SLO, counted against what was already broken.

Per quantile SLO of the incident (``ttft_p95_s: 1.5`` ...), from the same histograms as the SLO
attainment (:mod:`perfkit.analyses.slo`):

* ``baseline_attainment`` / ``incident_attainment``: the share of requests (ITL: of inter-token
  gaps) at or under the bound in each window;
* ``pre_existing``: the baseline window already missed the target. Such a breach is not the
  incident's: it is reported on its own ("already breached before") and sets the severity only
  where the incident made it materially worse (:data:`MATERIAL_BUDGETS`);
* ``minutes_over``: minutes of the incident window whose per-minute quantile
  (``histogram_quantile(q, sum by (le) (rate(bucket[1m])))``) is above the bound, of
  ``minutes_measured`` (minutes with data; a gap is neither over nor under);
* ``requests_over``: requests over the bound in the incident window, ``(1 - attainment) x count``
  (``None`` for ITL, whose histogram counts gaps: ``observations_over`` has them); ``added_over``:
  those beyond the baseline's own share of misses, the incident's part;
* ``burn_rate``: the error budget's burn rate in the window, ``(1 - attainment) / (1 - target)``
  (1.0 spends the budget exactly as fast as the SLO allows), and the baseline's;
* ``start`` / ``end``: the breach's onset and recovery, from the per-minute quantile smoothed over
  :data:`SMOOTH_MINUTES` (a sustained breach, not one noisy minute) crossing the bound, or for a
  breach there before, the baseline window's own quantile (where the tail left its usual level);
  ``end`` is None while it lasts to the window's end, ``start_at_edge`` when it was already on at
  the window's start.

Severity is from what the incident *caused*, and names its basis (the SLOs that set it):

* SEV-2: an SLO the baseline met is breached with its quantile at or over :data:`SEV2_MULTIPLE`
  times its bound;
* SEV-3: any other breach the incident caused: a new one, or a pre-existing one made worse by more
  than a whole error budget (its added misses alone would break the SLO) and by more than counting
  noise (:data:`NOISE_SIGMAS`);
* SEV-4: the incident caused no breach (a pre-existing one may remain, reported apart).

Without an attainment (no histogram for the SLO's signal) the SLO is judged on the baseline
table's quantiles alone (``how``: ``quantile``): breached or not, no counts.

Where a label names tenants, each caused breach is split by tenant
(:mod:`perfkit.analyses.tenant_impact`): whose requests the misses fell on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import numpy as np
import polars as pl

from perfkit.analyses.slo import LABELS, SloAttainment, SloRow, parse_slo_key
from perfkit.analyses.tenant_impact import TenantImpact, by_tenant, concentration
from perfkit.core.frames import Window, iso
from perfkit.engine import signals as S

MINUTE_S = 60.0
SMOOTH_MINUTES = 5
"""The onset and recovery are read on the per-minute quantile's running median over 5 minutes: a
breach starts when most minutes around it are over, so one slow minute neither opens nor closes it."""
SEV2_MULTIPLE = 2.0
"""A new breach whose quantile reaches twice its bound is a SEV-2: users wait twice what was promised."""
MATERIAL_BUDGETS = 1.0
"""A pre-existing breach counts as the incident's only where the incident added misses worth at least
one whole error budget (``1 - target`` of its requests): the added misses alone would break the SLO."""
NOISE_SIGMAS = 3.0
"""...and where that rise in the share of misses is past 3 binomial standard errors of the two windows'
shares (a handful of requests more or less over the bound is counting noise)."""


@dataclass(frozen=True)
class SloImpact:
    """One SLO's impact: attainment on both sides, minutes and requests over, budget burn."""

    key: str  # "ttft_p95_s", as in incident.yaml
    signal: str
    slo_s: float
    target: float
    counted: str  # requests | gaps
    how: str  # histogram | quantile
    baseline_attainment: float | None = None
    incident_attainment: float | None = None
    baseline_quantile_s: float | None = None
    incident_quantile_s: float | None = None
    baseline_met: bool | None = None
    incident_met: bool | None = None
    incident_count: float | None = None
    baseline_count: float | None = None
    minutes_over: int | None = None
    minutes_measured: int | None = None
    start: str | None = None
    end: str | None = None
    start_at_edge: bool = False
    source: str | None = None  # the histogram family that answered (``vllm:time_to_first_token_seconds``)

    @property
    def metric(self) -> str:
        """``ttft_p95``: the incident.yaml key without its unit."""
        return self.key.removesuffix("_s")

    @property
    def label(self) -> str:
        q = self.metric.rsplit("_", 1)[-1]
        return f"{LABELS.get(self.signal, self.signal)} {q}"

    @property
    def pre_existing(self) -> bool | None:
        """The baseline already missed the target (None: no baseline, or it cannot be told)."""
        return None if self.baseline_met is None else not self.baseline_met

    @property
    def breached(self) -> bool | None:
        return None if self.incident_met is None else not self.incident_met

    def _misses(self, attainment: float | None) -> float | None:
        return None if attainment is None else max(0.0, 1.0 - attainment)

    @property
    def observations_over(self) -> float | None:
        miss = self._misses(self.incident_attainment)
        return None if miss is None or self.incident_count is None else miss * self.incident_count

    @property
    def requests_over(self) -> float | None:
        return self.observations_over if self.counted == "requests" else None

    @property
    def added_over(self) -> float | None:
        """Observations over the bound beyond the baseline's own share of misses (the incident's part)."""
        inc, base = self._misses(self.incident_attainment), self._misses(self.baseline_attainment)
        if inc is None or self.incident_count is None:
            return None
        return max(0.0, inc - (base or 0.0)) * self.incident_count

    def burn(self, attainment: float | None) -> float | None:
        miss = self._misses(attainment)
        return None if miss is None or self.target >= 1 else miss / (1 - self.target)

    @property
    def worsened(self) -> bool:
        """A pre-existing breach the incident made materially worse (:data:`MATERIAL_BUDGETS`,
        :data:`NOISE_SIGMAS`)."""
        inc, base = self._misses(self.incident_attainment), self._misses(self.baseline_attainment)
        if not self.pre_existing or inc is None or base is None:
            return False
        if not self.incident_count or not self.baseline_count:
            return False
        rise = inc - base
        noise = math.sqrt(base * (1 - base) / self.baseline_count + inc * (1 - inc) / self.incident_count)
        return rise >= MATERIAL_BUDGETS * (1 - self.target) and rise > NOISE_SIGMAS * noise

    @property
    def caused(self) -> str:
        """What the incident did to this SLO: ``new`` (a breach the baseline did not have), ``worse``
        (a pre-existing breach made materially worse), ``""`` (nothing of its own)."""
        if not self.breached:
            return ""
        if self.pre_existing is False:
            return "new"
        if self.pre_existing is None:  # no baseline to say it was there before: the incident's
            return "new"
        return "worse" if self.worsened else ""

    @property
    def multiple(self) -> float | None:
        """The incident quantile over the bound."""
        q = self.incident_quantile_s
        return None if q is None or not math.isfinite(q) else q / self.slo_s

    def alert_rule(self, for_minutes: int = 5) -> dict[str, str] | None:
        """The Prometheus alerting rule on this SLO (its quantile over the bound for ``for_minutes``),
        on the family that answered; None where none did."""
        if self.source is None:
            return None
        name = "".join(w.capitalize() for w in self.metric.split("_")) + "OverSLO"
        q = self.metric.rsplit("_p", 1)[-1]
        expr = f"histogram_quantile(0.{q}, sum by (le) (rate({self.source}_bucket[5m]))) > {self.slo_s:g}"
        return {"alert": name, "expr": expr, "for": f"{for_minutes}m"}

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "slo_key": self.key,
            "label": self.label,
            "slo_s": self.slo_s,
            "target": self.target,
            "counted": self.counted,
            "how": self.how,
            "baseline_attainment": self.baseline_attainment,
            "incident_attainment": self.incident_attainment,
            "baseline_quantile_s": self.baseline_quantile_s,
            "incident_quantile_s": self.incident_quantile_s,
            "breached": self.breached,
            "pre_existing": self.pre_existing,
            "caused": self.caused or None,
            "minutes_over": self.minutes_over,
            "minutes_measured": self.minutes_measured,
            "requests_over": _round(self.requests_over),
            "observations_over": _round(self.observations_over),
            "added_over": _round(self.added_over),
            "burn_rate": _round(self.burn(self.incident_attainment), 3),
            "baseline_burn_rate": _round(self.burn(self.baseline_attainment), 3),
            "start": self.start,
            "end": self.end,
            "start_at_edge": self.start_at_edge,
        }


@dataclass
class Severity:
    level: str  # SEV-2 | SEV-3 | SEV-4 | unknown
    basis: list[str]  # the metrics that set it ("ttft_p95")
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "basis": list(self.basis), "why": self.why}


@dataclass
class Impact:
    """Every SLO's impact, the severity it sets and the breaches that were there before."""

    window: Window
    baseline: Window | None
    slos: list[SloImpact] = field(default_factory=list)
    series: dict[str, pl.DataFrame] = field(default_factory=dict)  # metric → per-minute quantile / bound
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    tenant_label: str | None = None  # the label that names tenants (perfkit.analyses.tenant_impact)
    tenants: list[TenantImpact] = field(default_factory=list)

    @property
    def severity(self) -> Severity:
        return severity(self.slos)

    @property
    def start(self) -> str | None:
        """The impact's onset: the first breach start of an SLO the incident caused to break."""
        starts = [s.start for s in self.slos if s.caused and s.start]
        return min(starts) if starts else None

    @property
    def end(self) -> str | None:
        """Its recovery: the last recovery, None while any caused breach lasts to the window's end."""
        caused = [s for s in self.slos if s.caused and s.start]
        if not caused or any(s.end is None for s in caused):
            return None
        return max(s.end for s in caused if s.end)

    def pre_existing(self) -> list[SloImpact]:
        return [s for s in self.slos if s.pre_existing]

    def pre_existing_text(self) -> list[str]:
        """One sentence per breach that was already there in the baseline."""
        out = []
        for s in self.pre_existing():
            base = _seconds(s.baseline_quantile_s)
            now = _seconds(s.incident_quantile_s)
            worse = (
                f"; the incident made it worse ({_pct(s.baseline_attainment)} → {_pct(s.incident_attainment)} "
                f"of {s.counted} within it)"
                if s.caused == "worse"
                else f"; {now} in the incident window, not materially worse"
                if s.breached
                else f"; met in the incident window ({now})"
            )
            out.append(
                f"already breached before: {s.label} {base} against {_seconds(s.slo_s)} in the baseline "
                f"({_pct(s.baseline_attainment)} within it, target {_pct(s.target)}){worse}; the SLO or "
                "the baseline needs a look"
            )
        return out

    def summary(self) -> str:
        if not self.slos:
            return "no SLO to judge the impact against: " + "; ".join(
                self.missing or ["incident.yaml gives no slo"]
            )
        sev = self.severity
        parts = [f"{sev.level} ({sev.why})"]
        for s in self.slos:
            if not s.caused:
                continue
            bits = [f"{s.label} over {_seconds(s.slo_s)}"]
            if s.minutes_over is not None and s.minutes_measured:
                bits.append(f"{s.minutes_over} of {s.minutes_measured} min")
            if s.requests_over is not None:
                bits.append(f"~{s.requests_over:,.0f} requests")
            parts.append(" ".join(bits[:1]) + (f" ({', '.join(bits[1:])})" if bits[1:] else ""))
        if pre := self.pre_existing():
            parts.append("already breached before: " + ", ".join(s.label for s in pre))
        parts += concentration(self.tenant_label, self.tenants)
        if not any(s.breached for s in self.slos) and all(s.incident_met for s in self.slos):
            parts = [f"all {len(self.slos)} SLOs met in the incident window"]
        return "; ".join(parts)

    def table(self) -> pl.DataFrame:
        def pct(v: float | None) -> float | None:
            return None if v is None else round(100 * v, 2)

        rows = self.slos
        return pl.DataFrame(
            {
                "SLO": [f"{s.label} ≤ {_seconds(s.slo_s)}" for s in rows],
                "target %": [round(100 * s.target, 3) for s in rows],
                "baseline %": [pct(s.baseline_attainment) for s in rows],
                "incident %": [pct(s.incident_attainment) for s in rows],
                "before": [_yes(s.pre_existing, "breached", "met") for s in rows],
                "incident": [_caused_text(s) for s in rows],
                "min over": [s.minutes_over for s in rows],
                "over SLO": [_count(s.observations_over, s.counted) for s in rows],
                "burn rate": [
                    None if (b := s.burn(s.incident_attainment)) is None else round(b, 1) for s in rows
                ],
            },
            schema={
                "SLO": pl.Utf8,
                "target %": pl.Float64,
                "baseline %": pl.Float64,
                "incident %": pl.Float64,
                "before": pl.Utf8,
                "incident": pl.Utf8,
                "min over": pl.Int64,
                "over SLO": pl.Utf8,
                "burn rate": pl.Float64,
            },
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "slos": [s.as_dict() for s in self.slos],
            "severity": self.severity.as_dict(),
            "start": self.start,
            "end": self.end,
            "pre_existing": self.pre_existing_text(),
            "tenant_label": self.tenant_label,
            "tenants": [t.as_dict() for t in self.tenants],
            "missing": list(self.missing),
        }


def severity(slos: list[SloImpact]) -> Severity:
    """The severity the incident caused (module docstring), with the SLOs that set it."""
    if not slos:
        return Severity("unknown", [], "no SLO could be judged")
    caused = [s for s in slos if s.caused]
    big = [s for s in caused if s.caused == "new" and (s.multiple or 0) >= SEV2_MULTIPLE]
    if big:
        what = ", ".join(f"{s.label} {s.multiple:.1f}x its SLO" for s in big if s.multiple)
        return Severity(
            "SEV-2", [s.metric for s in big], f"a new breach at ≥ {SEV2_MULTIPLE:g}x its SLO: {what}"
        )
    if caused:
        what = ", ".join(f"{s.label} ({'new breach' if s.caused == 'new' else 'made worse'})" for s in caused)
        return Severity("SEV-3", [s.metric for s in caused], f"breaches the incident caused: {what}")
    if any(s.breached is None for s in slos) and not any(s.breached for s in slos):
        return Severity("unknown", [], "no SLO could be told met or breached")
    pre = [s.label for s in slos if s.pre_existing]
    why = "the incident caused no SLO breach" + (
        f" (already breached before, and not made materially worse: {', '.join(pre)})" if pre else ""
    )
    return Severity("SEV-4", [], why)


def assess(
    engine: S.Engine,
    window: Window,
    baseline: Window | None,
    slo: Mapping[str, Any],
    attained: SloAttainment | None,
    quantiles: Mapping[str, Mapping[str, Mapping[float, float | None]]] | None = None,
) -> Impact:
    """Every quantile SLO's impact. ``attained``: the SLO attainment of both windows (its rows give
    the shares and counts); ``quantiles``: the baseline comparison's side → signal → q → value
    (:attr:`~perfkit.analyses.baseline.BaselineComparison.quantiles`), asked of the engine where absent."""
    out = Impact(window, baseline)
    rows = {r.key: r for r in (attained.rows if attained else [])}
    for key, value in slo.items():
        parsed = parse_slo_key(str(key))
        if parsed is None or parsed[0] not in S.HISTOGRAMS:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            continue
        signal, q = parsed
        bound = float(value)
        qs = {side: _quantile(engine, quantiles, side, signal, q, w) for side, w in (("baseline", baseline), ("incident", window))}  # fmt: skip
        row = rows.get(str(key))
        if row is not None and row.incident.share is not None:
            impact = _from_row(row, qs)
        elif qs["incident"] is not None:
            base_q = qs["baseline"]
            impact = SloImpact(
                str(key), signal, bound, q, "requests", "quantile",
                baseline_quantile_s=base_q, incident_quantile_s=qs["incident"],
                baseline_met=None if base_q is None else base_q <= bound,
                incident_met=qs["incident"] <= bound,
            )  # fmt: skip
        else:
            out.missing.append(f"impact: no {signal} histogram or quantile for {key}")
            continue
        # a breach that was there before starts where the tail left its usual level, not its bound
        usual = impact.baseline_quantile_s if impact.pre_existing else None
        onset = max(bound, usual) if usual is not None else bound
        minute = _minutes(engine, signal, q, bound, onset, window, baseline, out)
        out.slos.append(replace(impact, source=S.resolve(engine, signal).metric, **minute))
    out.tenant_label, out.tenants = by_tenant(engine, out.slos, window, baseline, out.queries)
    return out


def _from_row(row: SloRow, qs: Mapping[str, float | None]) -> SloImpact:
    base = row.baseline
    return SloImpact(
        row.key,
        row.signal,
        row.bound_s,
        row.target,
        row.counted,
        "histogram",
        baseline_attainment=base.share if base else None,
        incident_attainment=row.incident.share,
        baseline_quantile_s=qs["baseline"],
        incident_quantile_s=qs["incident"],
        baseline_met=row.met_baseline,
        incident_met=row.met,
        incident_count=row.incident.total,
        baseline_count=base.total if base else None,
    )


def _quantile(
    engine: S.Engine,
    known: Mapping[str, Mapping[str, Mapping[float, float | None]]] | None,
    side: str,
    signal: str,
    q: float,
    w: Window | None,
) -> float | None:
    if w is None:
        return None
    value = (known or {}).get(side, {}).get(signal, {}).get(q)
    if value is None:
        value = S.window_quantiles(engine, signal, (q,), w).get(q)
    return None if value is None or not math.isfinite(value) else float(value)


def _minutes(
    engine: S.Engine,
    signal: str,
    q: float,
    bound: float,
    onset: float,
    window: Window,
    baseline: Window | None,
    out: Impact,
) -> dict[str, Any]:
    """Minutes over the bound in the incident window, the breach's onset and recovery (the smoothed
    per-minute quantile crossing ``onset``: the bound, or for a breach there before, the baseline's
    level), and the per-minute quantile over both windows as multiples of the bound (for the figure)."""
    frame = S.quantile_series(engine, signal, q, window, MINUTE_S, out.queries)
    grid = _on_grid(frame, window)
    values = grid["value"].to_numpy().astype(float)
    measured = np.isfinite(values)
    if not measured.any():
        return {}
    over = measured & (values > bound)
    filled = np.where(measured, values, -np.inf)  # a gap counts as under in the running median
    half = SMOOTH_MINUTES // 2
    smooth = np.array([np.median(filled[max(0, i - half) : i + half + 1]) for i in range(values.size)])
    above = np.flatnonzero(smooth > onset)
    ts = grid["ts"].to_list()
    start = end = None
    if above.size:
        start = iso(ts[above[0]])
        end = iso(ts[above[-1] + 1]) if above[-1] + 1 < len(ts) else None
    key = f"{signal}_p{_digits(q)}"
    parts = [grid.with_columns(pl.col("value") / bound)]
    if baseline is not None:
        base = _on_grid(S.quantile_series(engine, signal, q, baseline, MINUTE_S), baseline)
        parts.insert(0, base.with_columns(pl.col("value") / bound))
        gap = pl.DataFrame({"ts": [baseline.end + timedelta(seconds=MINUTE_S / 2)], "value": [None]})
        parts.insert(1, gap.cast(parts[0].schema))  # no line drawn between the two windows
    out.series[key] = pl.concat(parts)
    return {
        "minutes_over": int(over.sum()),
        "minutes_measured": int(measured.sum()),
        "start": start,
        "end": end,
        "start_at_edge": bool(above.size and above[0] == 0),
    }


def _on_grid(frame: pl.DataFrame, window: Window) -> pl.DataFrame:
    """The per-minute series on every minute of the window, a missing minute as null (a gap)."""
    n = max(1, int(window.seconds // MINUTE_S))
    ts = [window.start + timedelta(seconds=MINUTE_S * (i + 1)) for i in range(n)]
    grid = pl.DataFrame({"ts": ts}).with_columns(pl.col("ts").cast(pl.Datetime("ms", "UTC")))
    if not frame.height:
        return grid.with_columns(pl.lit(None, pl.Float64).alias("value"))
    f = frame.select("ts", pl.col("value").cast(pl.Float64)).with_columns(
        pl.col("ts").cast(pl.Datetime("ms", "UTC"))
    )
    f = f.with_columns(pl.when(pl.col("value").is_nan()).then(None).otherwise(pl.col("value")).alias("value"))
    return grid.join_asof(
        f.sort("ts"), on="ts", strategy="nearest", tolerance=timedelta(seconds=MINUTE_S / 2)
    )


def _digits(q: float) -> str:
    text = f"{q:.4f}".split(".")[1].rstrip("0")
    return text or "0"


def _round(v: float | None, digits: int = 0) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return round(v, digits) if digits else float(round(v))


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.4g} %"


def _seconds(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.3g} s"


def _yes(flag: bool | None, yes: str, no: str) -> str:
    return "?" if flag is None else yes if flag else no


def _caused_text(s: SloImpact) -> str:
    if s.breached is None:
        return "?"
    if not s.breached:
        return "met"
    return {"new": "BREACH (new)", "worse": "BREACH (worse)"}.get(s.caused, "breached, as before")


def _count(v: float | None, counted: str) -> str | None:
    return None if v is None else f"{v:,.0f} {counted}"
