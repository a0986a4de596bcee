"""Before and after a fix: every metric's change beside its noise band, and whether the fix worked.

Each side is a time window of the server's own metrics (a bundle or a live Prometheus) or a load
test's result, measured by :mod:`perfkit.analyses.compare_sides` (``window_side``, ``bench_side``)
into a :class:`Side`: each metric's value and standard error. :func:`judge` compares two sides
metric by metric, the way the release gate (``perfkit.loadgen.gate``) judges a result against its
history, with the same terms. A metric moved when the change is larger than its band::

    band = max(relative x |before|,  K x sqrt(se_before^2 + se_after^2),  floor,  resolution)

* ``relative`` (10 % for latency, 5 % for throughput): the change that matters, the gate's
  ``max_regression``.
* ``K x se`` (K = 3, the gate's k): the noise of the difference of two estimates, from each side's
  standard error:

  - a window: cut into about ten blocks of at least a minute (four 15 s scrapes, what ``rate()``
    needs). A rate or the KV usage: *batch means* (Law & Kelton, *Simulation Modeling and
    Analysis*, §9.5.3), the metric in each block, ``se = stdev(blocks) / sqrt(blocks)``: blocks of
    minutes are long against a request, so their values are nearly independent even when
    minute-to-minute values are not. A latency quantile: the delete-a-block jackknife of the
    window's pooled histogram (:func:`perfkit.analyses.compare_sides.window_side`), since one block
    full of long prompts moves the pooled p95 by its share of the requests, not by its own p95.
    Measured against the spread of a window's p95 over 8 seeds of a healthy scenario, these errors
    read 0.6-1.2x it (40-minute windows) and 0.9-2.6x (7-minute windows: conservative).
  - a bench result: a quantile's distribution-free standard error from the per-request records:
    half the distance between the order statistics at ranks ``n p -/+ sqrt(n p (1 - p))`` (the
    binomial interval of a quantile, Conover, *Practical Nonparametric Statistics*, §3.2); an error
    rate's binomial ``sqrt(p (1 - p) / n)``.
  - When only one side has an estimate, it stands for both (the before window's own minute-to-minute
    variation stands for the after window's too).
* ``floor`` (absolute): the gate's floors (TTFT, E2E 2 ms; TPOT, ITL 1 ms; errors 1 point).
* ``resolution``: one request crossing each edge of a bench run moves a throughput by 2/duration.

A p99 is judged only when both sides counted 1,000 requests (the gate's ``P99_MIN_REQUESTS``).

The **overall verdict**: ``worked`` when the symptom metric improved beyond its band and nothing
else that counts regressed beyond its band; ``mixed`` when the symptom improved and another metric
regressed (a trade, named); ``regressed`` when the symptom or another metric got worse and nothing
offsets it; ``within-noise`` when nothing moved beyond its band; ``unusable`` when the symptom has
no value on a side (or the caller found the inputs not comparable). Metrics that do not count:
KV-cache usage (context: more of the cache in use is not worse by itself), throughput of windows of
production traffic (it follows the arrivals, not the fix: a changed load is named in the notes
instead) and any metric the engineer ``accept``\\ s as the fix's known cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfkit.errors import ConfigError

if TYPE_CHECKING:  # imported where used: `perfkit --help` does not load polars for this module
    import polars as pl

    from perfkit.core.frames import Window

LOWER, HIGHER = "lower_is_better", "higher_is_better"
K = 3.0
"""Bands are K standard errors of the difference: the gate's k (``perfkit.loadgen.gate``); at 3 a
difference of pure noise crosses it about 3 times in 1,000 per metric."""
BLOCKS = 10
"""Blocks a window is cut into for its noise: ten give the deviation of the block values within
about ±25 % (a standard deviation's relative error is ~1/sqrt(2(n-1)))."""
MIN_BLOCK_S = 60.0
"""A block is at least four 15 s scrapes (``signals.rate_window``): rate() needs two samples in range."""
MIN_BLOCKS = 3
"""Fewer blocks leave a deviation of one or two differences: no noise estimate, the band rests on
the relative and absolute terms alone (and the result says so)."""
P99_MIN_REQUESTS = 1000
"""A p99 rests on the n/100 slowest requests: below 1,000 (10 of them) its interval reaches the
sample maximum. The gate's rule (``perfkit.loadgen.gate.P99_MIN_REQUESTS``)."""
MAX_SAMPLES = 2_000_000
"""Per-request values read for a bench side's order statistics: beyond two million the standard
error of any quantile here is far below the floors, so a longer run is subsampled evenly."""


@dataclass(frozen=True)
class Metric:
    """One compared metric: its direction and the band's relative and absolute terms."""

    key: str
    label: str
    unit: str
    direction: str
    relative: float
    floor: float
    role: str  # latency | throughput | errors | preemptions | context
    signal: str | None = None  # histogram signal (perfkit.engine.signals) of a latency quantile
    q: float | None = None


def _lat(signal: str, q: float, label: str, floor: float) -> Metric:
    return Metric(f"{signal}_p{round(q * 100)}", f"{label} p{round(q * 100)}", "s", LOWER, 0.10, floor,
                  "latency", signal, q)  # fmt: skip


METRICS: tuple[Metric, ...] = (
    _lat("ttft", 0.5, "TTFT", 0.002),
    _lat("ttft", 0.95, "TTFT", 0.002),
    _lat("ttft", 0.99, "TTFT", 0.002),
    _lat("tpot", 0.5, "TPOT", 0.001),
    _lat("tpot", 0.95, "TPOT", 0.001),
    _lat("itl", 0.5, "ITL", 0.001),
    _lat("itl", 0.95, "ITL", 0.001),
    _lat("e2e", 0.95, "E2E", 0.002),
    _lat("queue", 0.95, "queue", 0.002),
    Metric("request_throughput", "requests", "req/s", HIGHER, 0.05, 0.0, "throughput"),
    Metric("output_throughput", "output tokens", "tok/s", HIGHER, 0.05, 0.0, "throughput"),
    Metric("error_rate", "error rate", "frac", LOWER, 0.0, 0.01, "errors"),
    # a preemption recomputes a sequence's prompt: under one a minute that is well under 1 % of the
    # engine's time (a 4k-token recompute at ~9k tokens/s of prefill is 0.5 s)
    Metric("preemptions_per_s", "preemptions", "1/s", LOWER, 0.10, 1 / 60, "preemptions"),
    Metric("kv_cache_usage", "KV cache usage (avg)", "frac", LOWER, 0.10, 0.02, "context"),
)
BY_KEY = {m.key: m for m in METRICS}
SYMPTOMS = ("ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95", "itl_p50", "itl_p95", "e2e_p95")
"""What users feel, at the median and the tail the SLOs name (p95): the candidates for the symptom
when none is given. A p99 is not a candidate: over one window it rests on a few dozen requests."""
STATUSES = ("regressed", "improved", "within noise", "no data")


@dataclass
class Measure:
    """One side's value of a metric, its standard error (None: not estimated) and counting step."""

    value: float | None
    se: float | None = None
    resolution: float = 0.0
    bound: float | None = None  # a quantile in its histogram's first bucket: only "at most bound" is known


@dataclass
class Side:
    """What one side measured: ``kind`` is ``window`` (server metrics) or ``bench`` (a load test)."""

    kind: str
    name: str
    values: dict[str, Measure]
    window: Window | None = None
    requests: float | None = None
    noise: str = ""
    baseline: dict[str, float | None] = field(default_factory=dict)  # the side's own ordinary period
    queries: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def value(self, key: str) -> float | None:
        m = self.values.get(key)
        return m.value if m else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "window": self.window.as_dict() if self.window else None,
            "requests": self.requests,
            "noise": self.noise,
            "values": {k: {"value": m.value, "se": m.se} for k, m in self.values.items()},
            "baseline": self.baseline,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Row:
    """One metric's judgement (values in its unit; ``band`` is the change noise can make)."""

    metric: str
    label: str
    unit: str
    direction: str
    before: float | None
    after: float | None
    change_pct: float | None
    band: float | None
    band_from: str | None
    status: str
    counted: bool
    why: str | None = None  # why no data, or why the row does not count
    before_bound: float | None = None  # a side in its histogram's first bucket: at most this
    after_bound: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    def shown(self, side: str) -> str:
        """One side's value for people: ``≤ 300 ms`` where only the first bucket's bound is known."""
        bound = self.before_bound if side == "before" else self.after_bound
        if bound is not None:
            return f"≤ {_fmt(bound, self.unit)}"
        return _fmt(self.before if side == "before" else self.after, self.unit)


@dataclass
class Comparison:
    """The answer: rows, the symptom, and the overall verdict (:attr:`overall`, :attr:`exit_code`)."""

    before: Side
    after: Side
    rows: list[Row]
    symptom: str | None
    symptom_why: str
    accepted: tuple[str, ...] = ()
    reasons: list[str] = field(default_factory=list)  # why it cannot be judged (unusable)
    notes: list[str] = field(default_factory=list)

    def get(self, key: str) -> Row | None:
        return next((r for r in self.rows if r.metric == key), None)

    @property
    def regressed(self) -> list[Row]:
        """Rows that count and got worse beyond their band (the symptom's own row included)."""
        return [r for r in self.rows if r.counted and r.status == "regressed"]

    @property
    def overall(self) -> str:
        row = self.get(self.symptom) if self.symptom else None
        if self.reasons or row is None or row.status == "no data":
            return "unusable"
        others = [r for r in self.regressed if r.metric != row.metric]
        if row.status == "improved":
            return "mixed" if others else "worked"
        if row.status == "regressed" or others:
            return "regressed"
        return "within-noise"

    @property
    def exit_code(self) -> int:
        """0: the fix worked; 1: it did not (within noise, mixed, regressed); 2: cannot be judged."""
        return {"worked": 0, "unusable": 2}.get(self.overall, 1)

    def headline(self) -> str:
        """One line: the verdict, the symptom's change and what regressed."""
        overall, row = self.overall, self.get(self.symptom) if self.symptom else None
        if overall == "unusable":
            why = (
                self.reasons[0]
                if self.reasons
                else f"the symptom {self.symptom or '(none)'} has no value on a side"
            )
            return f"cannot judge: {why}"
        assert row is not None
        sym = f"{row.label} {row.shown('before')} → {row.shown('after')} ({_pct(row)})"
        worse = ", ".join(f"{r.label} {_pct(r)}" for r in self.regressed if r.metric != row.metric)
        band = f"band ±{_fmt(row.band, row.unit)}"
        text = {
            "worked": f"the fix worked: {sym}, beyond its noise ({band}); nothing else regressed",
            "mixed": f"the fix traded: {sym} improved, but {worse} regressed beyond noise",
            "regressed": f"the fix did not work: {sym}" + (f"; regressed: {worse}" if worse else ""),
            "within-noise": f"no change beyond noise: {sym} is within its {band}",
        }[overall]
        if self.accepted and (
            taken := [r for r in self.rows if r.metric in self.accepted and r.status == "regressed"]
        ):
            text += "; accepted as the fix's cost: " + ", ".join(f"{r.label} {_pct(r)}" for r in taken)
        return text

    def table(self) -> pl.DataFrame:
        """Metric, unit, before, after, change %, band, verdict: one row per metric."""
        import polars as pl

        return pl.DataFrame(
            {
                "metric": [r.label + (" (symptom)" if r.metric == self.symptom else "") for r in self.rows],
                "unit": [r.unit for r in self.rows],
                "before": [r.before for r in self.rows],
                "after": [r.after for r in self.rows],
                "change_pct": [None if r.change_pct is None else round(r.change_pct, 1) for r in self.rows],
                "band": [r.band for r in self.rows],
                "band_from": [r.band_from for r in self.rows],
                "verdict": [_verdict_text(r) for r in self.rows],
            },
            schema={"metric": pl.Utf8, "unit": pl.Utf8, "before": pl.Float64, "after": pl.Float64,
                    "change_pct": pl.Float64, "band": pl.Float64, "band_from": pl.Utf8, "verdict": pl.Utf8},
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """The JSON ``perfkit compare --format json`` prints (``schema`` ``perfkit.compare/1``)."""
        return {
            "schema": "perfkit.compare/1",
            "verdict": self.overall,
            "exit_code": self.exit_code,
            "summary": self.headline(),
            "symptom": self.symptom,
            "symptom_why": self.symptom_why,
            "accepted": list(self.accepted),
            "regressed": [r.metric for r in self.regressed],
            "improved": [r.metric for r in self.rows if r.status == "improved"],
            "reasons": self.reasons,
            "notes": self.notes,
            "k": K,
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "metrics": [r.as_dict() for r in self.rows],
        }


# -- judging ---------------------------------------------------------------------------------------


def judge(before: Side, after: Side, *, symptom: str = "auto", accept: Sequence[str] = ()) -> Comparison:
    """Compare ``after`` with ``before``; ``symptom`` a metric key or ``auto``; ``accept``: metrics
    whose regression is the fix's known cost (shown, not counted)."""
    for key in [symptom, *accept]:
        if key != "auto" and key not in BY_KEY:
            raise ConfigError(f"{key}: not a compared metric (known: {', '.join(BY_KEY)})")
    few = min((r for r in (before.requests, after.requests) if r is not None), default=None)
    windows = "window" in (before.kind, after.kind)
    rows = [_row(m, before, after, few, windows, tuple(accept)) for m in METRICS]
    chosen, why = _symptom(rows, before, symptom)
    result = Comparison(before, after, rows, chosen, why, tuple(accept))
    result.notes = [*before.notes, *after.notes, *_load_notes(result, windows)]
    if all(not s.noise or s.noise.startswith("not estimated") for s in (before, after)):
        result.notes.append(
            "neither side's noise was estimated: bands rest on the relative and absolute terms"
        )
    if before.window and after.window and before.window == after.window and before.name == after.name:
        result.notes.append("both sides are the same window of the same evidence: every change is zero")
    return result


def _row(
    m: Metric, before: Side, after: Side, few: float | None, windows: bool, accept: tuple[str, ...]
) -> Row:
    b, a = before.values.get(m.key) or Measure(None), after.values.get(m.key) or Measure(None)
    counted, why = m.role != "context", None
    if m.role == "context":
        why = "context: shown, not judged"
    elif m.role == "throughput" and windows:
        counted, why = False, "load: a window's throughput follows its traffic"
    elif m.key in accept:
        counted, why = False, "accepted as the fix's cost"
    if b.value is None or a.value is None:
        missing = "before" if b.value is None else "after"
        return Row(m.key, m.label, m.unit, m.direction, b.value, a.value, None, None, None, "no data", False, f"no value {missing}")  # fmt: skip
    if m.q == 0.99 and (few is None or few < P99_MIN_REQUESTS):
        return Row(m.key, m.label, m.unit, m.direction, b.value, a.value, _change(b.value, a.value), None, None,
                   "no data", False, f"a p99 needs {P99_MIN_REQUESTS:,} requests a side")  # fmt: skip
    # a side in its histogram's first bucket is anywhere in [0, bound]: judged by the least change
    # the two sides allow (a move inside the bucket is none)
    lo_b, hi_b = (0.0, b.bound) if b.bound is not None else (b.value, b.value)
    lo_a, hi_a = (0.0, a.bound) if a.bound is not None else (a.value, a.value)
    se_b, se_a = b.se if b.se is not None else a.se, a.se if a.se is not None else b.se
    terms = {
        "relative": m.relative * abs(hi_b),
        "noise": K * math.sqrt((se_b or 0.0) ** 2 + (se_a or 0.0) ** 2),
        "floor": m.floor,
        "resolution": max(b.resolution, a.resolution),
    }
    band_from = max(terms, key=lambda t: terms[t])
    band = terms[band_from]
    worse, better = (lo_a - hi_b, lo_b - hi_a) if m.direction == LOWER else (lo_b - hi_a, lo_a - hi_b)
    status = "regressed" if worse > band else "improved" if better > band else "within noise"
    bounded = b.bound is not None or a.bound is not None
    if b.bound is not None and a.bound is not None and why is None:
        why = "both in the histogram's first bucket: it cannot tell them apart"
    change = None if bounded else _change(b.value, a.value)
    return Row(m.key, m.label, m.unit, m.direction, b.value, a.value, change, band, band_from, status, counted,
               why, b.bound, a.bound)  # fmt: skip


def _symptom(rows: list[Row], before: Side, asked: str) -> tuple[str | None, str]:
    if asked != "auto":
        return asked, "given"
    have = [r for r in rows if r.metric in SYMPTOMS and r.status != "no data"]
    ratios = {
        r.metric: r.before / base
        for r in have
        if (base := before.baseline.get(r.metric)) and r.before is not None and base > 0
    }
    if ratios:
        key = max(ratios, key=lambda k: ratios[k])
        return key, f"worsened most against the before side's own baseline ({ratios[key]:.2f}x)"
    moved = {r.metric: abs(math.log(r.after / r.before)) for r in have if r.before and r.after and r.before > 0 and r.after > 0}  # fmt: skip
    if not moved:
        return None, "no latency metric has a value on both sides"
    key = max(moved, key=lambda k: moved[k])
    return key, "moved most between the two (no baseline to say which got worse: name the symptom to be sure)"


def _load_notes(result: Comparison, windows: bool) -> list[str]:
    if not windows:
        return []
    notes = []
    for key in ("request_throughput", "output_throughput"):
        r = result.get(key)
        if r is not None and r.status in ("improved", "regressed"):
            notes.append(
                f"the load differs: {r.label} {_fmt(r.before, r.unit)} → {_fmt(r.after, r.unit)} ({_pct(r)}): "
                "the windows served different traffic, so their latencies compare different loads"
            )
    return notes[:1]


# -- text ------------------------------------------------------------------------------------------


def _verdict_text(r: Row) -> str:
    text = r.status
    if r.why and (r.status == "no data" or not r.counted or None not in (r.before_bound, r.after_bound)):
        text += f" ({r.why})"
    return text


def _change(before: float, after: float) -> float | None:
    return (after - before) / abs(before) * 100.0 if before else None


def _pct(r: Row) -> str:
    if r.change_pct is not None:
        return f"{r.change_pct:+.0f} %"
    return f"{r.shown('before')} → {r.shown('after')}"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.2f} s"
    if unit == "frac":
        return f"{value * 100:.1f} %"
    if unit == "1/s":  # events per second, shown per minute (a preemption a minute reads as 1)
        return f"{value * 60:.3g} /min"
    return f"{value:.3g} {unit}"


def fmt_value(value: float | None, unit: str) -> str:
    """A metric's value for people: ms or s for latency, % for fractions, else 3 figures and the unit."""
    return _fmt(value, unit)
