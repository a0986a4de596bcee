"""Baseline vs now: the incident window's latency quantiles and throughput against the baseline's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import signals as S
from perfkit.engine.buckets import first_of, within_resolution

QUANTILES = (0.5, 0.95, 0.99)
LATENCIES = ("ttft", "tpot", "itl", "e2e", "queue", "prefill", "decode")
LABELS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2e": "E2E",
    "queue": "queue",
    "prefill": "prefill",
    "decode": "decode",
}
USER_FACING = ("TTFT", "TPOT", "ITL", "E2E")  # what users feel; stages explain, these are the impact
#: SLO key for (signal, quantile)
SLO_KEY = {
    ("ttft", 0.95): "ttft_p95_s",
    ("tpot", 0.95): "tpot_p95_s",
    ("itl", 0.95): "itl_p95_s",
    ("e2e", 0.99): "e2e_p99_s",
}


@dataclass
class Row:
    metric: str
    unit: str
    baseline: float | None
    incident: float | None
    slo: float | None = None
    bound: float | None = None  # a latency quantile's first bucket bound, where a side's value lies in it
    under: tuple[bool, bool] = (False, False)  # (baseline, incident) inside that bucket: "at most bound"
    #: the change is within the histogram's resolution (one bucket, or one edge crossed by a few %:
    #: perfkit.engine.buckets.within_resolution): no headline
    within_bucket: bool = False

    @property
    def ratio(self) -> float | None:
        """incident / baseline; where one side lies in the first bucket, the bound the histogram does
        guarantee: at least ``incident / bound`` (baseline inside), at most ``bound / baseline``
        (incident inside); None where both do (the histogram cannot tell them apart)."""
        if self.baseline in (None, 0) or self.incident is None or all(self.under):
            return None
        if self.bound is not None and self.under[0]:
            return self.incident / self.bound
        if self.bound is not None and self.under[1]:
            return self.bound / self.baseline
        return self.incident / self.baseline

    @property
    def ratio_text(self) -> str:
        """The ratio for people: ``2.10x``, ``≥ 46.00x`` or ``≤ 0.50x`` (see :attr:`ratio`), else n/a."""
        r = self.ratio
        if r is None:
            return "n/a"
        return ("≥ " if self.under[0] else "≤ " if self.under[1] else "") + f"{r:.2f}x"

    @property
    def breach(self) -> bool | None:
        if self.slo is None or self.incident is None:
            return None
        if self.under[1] and self.bound is not None:  # only "at most bound" is known
            return False if self.bound <= self.slo else None
        return self.incident > self.slo

    def shown(self, side: int, fmt: Callable[[Any], str]) -> str:
        """One side's quantile (0 baseline, 1 incident) written by ``fmt``; ``≤ bound`` where it lies
        in the first bucket, whose interpolated value says nothing more."""
        if self.under[side] and self.bound is not None:
            return f"≤ {fmt(self.bound)}"
        return fmt(self.incident if side else self.baseline)

    @property
    def note(self) -> str:
        """Which side's value is only an upper bound (:class:`~perfkit.engine.signals.FirstBucket`)."""
        if self.within_bucket and not any(self.under):
            return "within the histogram's resolution: one bucket, or a few % of requests across one edge"
        if not any(self.under) or self.bound is None:
            return ""
        side = "both" if all(self.under) else ("baseline" if self.under[0] else "incident")
        return f"{side} ≤ {_ms(self.bound)} (first bucket: interpolated from 0)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:g} s"


@dataclass
class BaselineComparison:
    window: Window
    baseline: Window | None
    rows: list[Row]
    quantiles: dict[str, dict[str, dict[float, float | None]]] = field(default_factory=dict)  # side→signal→q
    rates: dict[str, dict[str, float | None]] = field(default_factory=dict)  # side→name→value
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def get(self, metric: str) -> Row | None:
        return next((r for r in self.rows if r.metric == metric), None)

    def q(self, side: str, signal: str, q: float) -> float | None:
        return self.quantiles.get(side, {}).get(signal, {}).get(q)

    def table(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "metric": [r.metric for r in self.rows],
                "unit": [r.unit for r in self.rows],
                "baseline": [r.baseline for r in self.rows],
                "incident": [r.incident for r in self.rows],
                "change_x": [round(r.ratio, 2) if r.ratio is not None else None for r in self.rows],
                "slo": [r.slo for r in self.rows],
                "breach": [r.breach for r in self.rows],
                "note": [r.note for r in self.rows],
            },
            schema={
                "metric": pl.Utf8,
                "unit": pl.Utf8,
                "baseline": pl.Float64,
                "incident": pl.Float64,
                "change_x": pl.Float64,
                "slo": pl.Float64,
                "breach": pl.Boolean,
                "note": pl.Utf8,
            },
        )

    def headline(self) -> Row | None:
        """The row with the biggest relative worsening among latency quantiles, of those whose change
        the histogram resolves (:attr:`Row.within_bucket`)."""
        lat = [
            r
            for r in self.rows
            if r.unit == "s"
            and r.ratio is not None
            and r.metric.split()[0] in USER_FACING
            and not r.within_bucket
        ]
        return max(lat, key=lambda r: r.ratio or 0, default=None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": [
                {
                    "metric": r.metric,
                    "unit": r.unit,
                    "baseline": r.baseline,
                    "incident": r.incident,
                    "ratio": r.ratio,
                    "slo": r.slo,
                    "breach": r.breach,
                    **({"first_bucket": r.bound, "under": list(r.under)} if any(r.under) else {}),
                }
                for r in self.rows
            ],
            "quantiles": {
                side: {sig: {str(q): v for q, v in qs.items()} for sig, qs in d.items()}
                for side, d in self.quantiles.items()
            },
            "rates": self.rates,
        }


def side_numbers(engine, window: Window, queries: list[str]) -> tuple[dict, dict, dict]:
    qs = {sig: S.window_quantiles(engine, sig, QUANTILES, window, queries) for sig in LATENCIES}
    if all(v is None for v in qs["tpot"].values()):
        qs.pop("tpot")
    counts = {sig: S.window_buckets(engine, sig, window, queries) for sig in qs}
    firsts = {sig: (first_of(c), c) for sig, c in counts.items()}  # the first bucket, and every bucket
    rates = {
        # the E2E histogram's observations; the finished-request counter where there is none (Triton)
        "requests_per_s": S.request_rate(engine, window, queries),
        "generated_tokens_per_s": S.counter_rate(engine, "generation_tokens_total", window, queries),
        "prompt_tokens_per_s": S.counter_rate(engine, "prompt_tokens_total", window, queries),
        "errors_per_s": _error_rate(engine, window, queries),
        "preemptions_per_s": S.counter_rate(engine, "preemptions", window, queries),
        "prefix_cache_hit_frac": _hit_rate(engine, window, queries),
        "running_avg": S.gauge_stat(engine, "running", window, "avg", queries),
        "waiting_avg": S.gauge_stat(engine, "waiting", window, "avg", queries),
        "waiting_max": S.gauge_stat(engine, "waiting", window, "max", queries),
        "kv_cache_usage_avg": S.gauge_stat(engine, "kv_cache_usage", window, "avg", queries, combine="max"),
        "kv_cache_usage_max": S.gauge_stat(engine, "kv_cache_usage", window, "max", queries, combine="max"),
    }
    _littles_law(engine, window, queries, rates)
    rates.update(_speculation(engine, window, queries))
    return qs, rates, firsts


def _speculation(engine, window: Window, queries: list[str]) -> dict[str, float]:
    """Speculative decoding over the window, where the engine drafts (vLLM's ``spec_decode`` counters;
    nothing otherwise): the share of draft tokens accepted (``rate(accepted) / rate(draft tokens)``,
    the PromQL vllm/v1/spec_decode/metrics.py documents), draft tokens per draft (k, the configured
    ``num_speculative_tokens``) and tokens emitted per verification step (1 + accepted per draft: the
    mean acceptance length, bonus token included, as vLLM logs it)."""
    drafted = S.counter_rate(engine, "spec_draft_tokens", window, queries)
    accepted = S.counter_rate(engine, "spec_accepted_tokens", window, queries)
    if not drafted or accepted is None:
        return {}
    out = {"spec_acceptance_rate": accepted / drafted}
    drafts = S.counter_rate(engine, "spec_drafts", window, queries)
    if drafts:
        out["spec_tokens_per_draft"] = drafted / drafts
        out["spec_accept_length"] = 1.0 + accepted / drafts
    return out


LITTLE = (
    "waiting_avg = request rate x mean queue time (Little's law): the engine exports no waiting gauge "
    "(trtllm-serve before its iteration metrics, TGI's queue gauge absent)"
)


def _littles_law(engine, window: Window, queries: list[str], rates: dict) -> None:
    """An engine without a waiting gauge still says how long requests queued and how many arrived:
    over a window, the mean number waiting is the arrival rate times the mean wait (Little's law,
    exact for any queue in steady state; the window's mean, not its peak, so ``waiting_max`` stays
    unknown)."""
    if rates["waiting_avg"] is not None or S.resolve(engine, "waiting").found:
        return
    lam, wait = rates["requests_per_s"], S.window_mean(engine, "queue", window, queries)
    if lam is not None and wait is not None:
        rates["waiting_avg"] = lam * wait


def _hit_rate(engine, window: Window, queries: list[str]) -> float | None:
    """Prefix-cache hits / queries (both counted in tokens by vLLM) over the window."""
    q = S.counter_rate(engine, "prefix_cache_queries", window, queries)
    h = S.counter_rate(engine, "prefix_cache_hits", window, queries)
    return h / q if q and h is not None else None


def _error_rate(engine, window: Window, queries: list[str]) -> float | None:
    """Aborted and failed requests per second: vLLM's and trtllm-serve's ``finished_reason`` of the
    success counter, SGLang's own counter of aborted requests."""
    total = S.counter_rate(engine, "request_aborted", window, queries)
    for reason in ("abort", "error"):
        v = S.counter_rate(engine, "request_success", window, queries, finished_reason=reason)
        if v is not None:
            total = (total or 0.0) + v
    return total


def compare(engine, window: Window, baseline: Window | None, slo: dict[str, float]) -> BaselineComparison:
    queries: list[str] = []
    missing: list[str] = []
    inc_q, inc_r, inc_f = side_numbers(engine, window, queries)
    if baseline is not None:
        base_q, base_r, base_f = side_numbers(engine, baseline, [])
    else:
        base_q, base_r, base_f = {}, {}, {}
        missing.append("baseline: no baseline window given; showing the incident alone")
    rows: list[Row] = []
    for sig, by_q in inc_q.items():
        (fb, cb), (fi, ci) = base_f.get(sig, (None, None)), inc_f.get(sig, (None, None))
        for q in QUANTILES:
            b, i = base_q.get(sig, {}).get(q), by_q.get(q)
            under = (
                b is not None and fb is not None and fb.holds(q),
                i is not None and fi is not None and fi.holds(q),
            )
            bound = fi if under[1] else fb if under[0] else None
            rows.append(
                Row(
                    f"{LABELS[sig]} p{round(q * 100)}",
                    "s",
                    b,
                    i,
                    slo.get(SLO_KEY.get((sig, q), "")),
                    bound.bound if bound else None,
                    under,
                    bool(cb and ci and within_resolution(cb, ci, q)),
                )
            )
    units = {
        "requests_per_s": "req/s",
        "generated_tokens_per_s": "tok/s",
        "prompt_tokens_per_s": "tok/s",
        "errors_per_s": "req/s",
        "preemptions_per_s": "1/s",
        "running_avg": "reqs",
        "waiting_avg": "reqs",
        "waiting_max": "reqs",
        "kv_cache_usage_avg": "frac",
        "kv_cache_usage_max": "frac",
        "prefix_cache_hit_frac": "frac",
        "spec_acceptance_rate": "frac",
        "spec_tokens_per_draft": "tokens",
        "spec_accept_length": "tokens",
    }
    for name, value in inc_r.items():
        rows.append(Row(name, units[name], base_r.get(name), value))
    for sig in ("ttft", "itl", "e2e"):
        if all(v is None for v in inc_q.get(sig, {None: None}).values()):
            missing.append(f"baseline: no {sig} histogram in the incident window")
    if inc_r.get("waiting_avg") is not None and not S.resolve(engine, "waiting").found:
        missing.append(f"baseline: {LITTLE}")
    return BaselineComparison(
        window,
        baseline,
        rows,
        {"baseline": base_q, "incident": inc_q},
        {"baseline": base_r, "incident": inc_r},
        queries,
        missing,
    )
