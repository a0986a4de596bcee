"""The replica that diverges from its peers (issue 37 item 3): each replica's own latency medians,
against the median of the others, in the incident and the baseline.

Every other analysis sums the workload's series over its replicas, so one engine of four that decodes
twice as slowly moves the fleet's median by a tenth and its tail by less than twice: no row fires.
Splitting by replica is the first thing an engineer does in Grafana. The replicas are told apart by
the first label of :data:`REPLICA_LABELS` that gives the workload's histogram more than one value
(``pod`` on Kubernetes, ``instance`` as Prometheus scrapes, a DP rank's ``engine`` label).

Each replica's median of :data:`SIGNALS` is read from ``sum by (le, <label>) (increase(<histogram>_bucket
[window]))`` (one query a signal and window, as Prometheus would answer it). A replica **diverges**
when its median is at least :data:`OUTLIER_RATIO` times the median of its peers' in the incident
and was within :data:`BASELINE_ALIKE` of theirs in the baseline. Peers behind one load balancer serve
the same mix of requests, so their medians agree within tens of per cent (bucket interpolation and
the mix's noise); 1.5x is a replica that is itself slower, and one that already differed before
(another GPU model, another shard) is not the incident's. Three replicas at least: with two, the
peers' median is the other one and neither can be told to be the odd one.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.analyses.baseline import LABELS
from perfkit.core.frames import Window
from perfkit.engine import ops
from perfkit.engine import signals as S
from perfkit.engine.buckets import buckets_quantile
from perfkit.engine.promql import to_promql

REPLICA_LABELS = ("pod", "instance", "replica", "engine", "dp_rank", "hostname", "host", "node")
SIGNALS = ("tpot", "itl", "ttft", "e2e")
"""Each replica's median of these: its per-token time (TPOT, else the inter-token gaps) says how fast
it decodes, TTFT how long its queue and prefills take, E2E the whole."""
OUTLIER_RATIO = 1.5
"""A replica whose median is 1.5x its peers' is slower itself (module docstring)."""
BASELINE_ALIKE = 1.25
"""...and it must have been within 25 % of its peers in the baseline: a replica always different is
not what changed."""
MIN_REPLICAS = 3
MAX_REPLICAS = 256
"""Most replicas judged one by one: a label with more values is not a replica label (a request id
leaked into a label), and is left alone."""


@dataclass
class Replica:
    name: str
    #: signal → {"incident": median s, "baseline": median s, "peers": the others' median in the incident,
    #: "ratio": incident median over the peers', "baseline_ratio": the same in the baseline}
    numbers: dict[str, dict[str, float | None]] = field(default_factory=dict)
    outlier: bool = False
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"replica": self.name, "numbers": self.numbers, "outlier": self.outlier, "why": self.why}


@dataclass
class Replicas:
    label: str | None = None  # the label that tells them apart
    rows: list[Replica] = field(default_factory=list)
    #: each replica's per-token median over the baseline's start to the incident's end (label, ts,
    #: value), for a small-multiples chart; None without replicas
    series: pl.DataFrame | None = None
    signal: str | None = None  # the per-token signal the series reads (tpot, else itl)
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def outliers(self) -> list[Replica]:
        return [r for r in self.rows if r.outlier]

    def summary(self) -> str:
        if self.label is None:
            return "; ".join(self.missing) or "one replica: nothing to compare"
        if not self.outliers:
            return f"{len(self.rows)} replicas by {self.label}: none diverges from its peers"
        odd = " and ".join(f"{r.name} diverges ({r.why})" for r in self.outliers)
        return f"{len(self.rows)} replicas by {self.label}: {odd}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "replicas": [r.as_dict() for r in self.rows],
            "outliers": [r.name for r in self.outliers],
            "summary": self.summary(),
        }


def _label(engine: Any, metric: str, window: Window, queries: list[str]) -> tuple[str, int] | None:
    """The first of :data:`REPLICA_LABELS` with 2 to :data:`MAX_REPLICAS` values on ``metric``."""
    for label in REPLICA_LABELS:
        expr = ops.aggregate("count", ops.over_time("last", ops.Selector(metric), window.seconds), label)
        frame = engine.instant(expr, window.end)
        if not frame.height or label not in frame.columns:
            continue
        queries.append(to_promql(expr))
        values = {v for v in frame[label].to_list() if v not in (None, "")}
        if 2 <= len(values) <= MAX_REPLICAS:
            return label, len(values)
    return None


def _medians(engine: Any, signal: str, label: str, window: Window, queries: list[str]) -> dict[str, float]:
    """Each replica's median of ``signal`` over the window (by ``label``'s value)."""
    out = {}
    for who, counts in (S.window_buckets_by(engine, signal, window, label, queries) or {}).items():
        q = buckets_quantile(counts, 0.5)
        if who and q is not None and q > 0:
            out[who] = q
    return out


def replicas(engine: Any, window: Window, baseline: Window | None) -> Replicas:
    """Each replica against its peers (module docstring)."""
    out = Replicas()
    found = [(sig, m) for sig in SIGNALS if (m := S.resolve(engine, sig).metric) is not None]
    if any(s == "tpot" for s, _ in found):  # one per-token signal: the per-request TPOT where exported
        found = [(s, m) for s, m in found if s != "itl"]
    if not found:
        out.missing.append("replicas: no latency histogram to split by replica")
        return out
    picked = _label(engine, f"{found[0][1]}_count", window, out.queries)
    if picked is None or picked[1] < MIN_REPLICAS:
        out.missing.append(
            "replicas: the workload's series carry no label that tells 3 or more replicas apart"
            if picked is None
            else f"replicas: {picked[1]} by {picked[0]}, too few to tell which one is the odd one"
        )
        return out
    out.label = label = picked[0]
    rows: dict[str, Replica] = {}
    for sig, _ in found:
        inc = _medians(engine, sig, label, window, out.queries)
        base = _medians(engine, sig, label, baseline, out.queries) if baseline is not None else {}
        for who, value in inc.items():
            peers = [v for k, v in inc.items() if k != who]
            base_peers = [v for k, v in base.items() if k != who]
            if len(peers) < MIN_REPLICAS - 1:
                continue
            mid = statistics.median(peers)
            b = base.get(who)
            b_ratio = b / statistics.median(base_peers) if b is not None and len(base_peers) >= 2 else None
            rows.setdefault(who, Replica(who)).numbers[sig] = {
                "incident": value,
                "baseline": b,
                "peers": mid,
                "ratio": value / mid,
                "baseline_ratio": b_ratio,
            }
    for r in rows.values():
        for sig, n in r.numbers.items():
            ratio, before = n["ratio"], n["baseline_ratio"]
            if ratio is None or ratio < OUTLIER_RATIO or (before is not None and before >= BASELINE_ALIKE):
                continue
            r.outlier = True
            was = f", {before:.2f}x in the baseline" if before is not None else ""
            text = (
                f"{LABELS.get(sig, sig)} p50 {_ms(n['incident'])} against its peers' "
                f"{_ms(n['peers'])} ({ratio:.2f}x{was})"
            )
            r.why = f"{r.why}; {text}" if r.why else text
    out.rows = sorted(rows.values(), key=lambda r: r.name)
    span = Window(baseline.start if baseline is not None else window.start, window.end)
    out.signal = found[0][0]
    out.series = S.quantile_series(
        engine, out.signal, 0.5, span, max(60.0, S.choose_step(span, points=120)), out.queries, by=(label,)
    )
    return out


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"
