"""From per-request records to the result's numbers (``reference/loadtest.md`` §6).

* TTFT, E2EL: per completed request.
* TPOT: per request, ``(E2EL - TTFT) / (output_tokens - 1)``; requests of one token have none. The
  aggregate is request-weighted, as vLLM's is.
* ITL (``itl``): token-weighted and chunk-aware. A chunk of k tokens after a gap g counts as k
  tokens of g/k each. ``itl_chunk`` is the raw gap between chunks: what ``vllm bench serve`` calls
  ITL, and only the same thing when every chunk holds one token.
* Throughput: totals over the run's duration (first send to last answer); the peak is the busiest
  whole second of output tokens, as vLLM's ``max_output_tokens_per_s``, and never below the mean:
  a run under a second has no whole second, and a run's tokens can crowd into less than its last
  partial second, so the peak is the run's own rate when that is higher.
* Goodput: requests that met every SLO given, per second. Attainment is their share of requests
  *sent*, so a failed request counts against it. TPOT is judged only where a request has one.
* Percentiles are over completed requests, and the error rate is printed beside them. TTFT, TPOT and
  E2EL are exact (one number per request). ITL and ``itl_chunk`` have one number per chunk, millions
  in a long run: they are counted into :class:`LogHistogram` (bins 0.046 % wide) as the record file is
  read, so memory does not grow with the run; their means and deviations stay exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.loadgen.records import ERROR_KINDS, flat_list, numbers, read_columns, texts

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
METRICS = ("ttft", "tpot", "itl", "e2el")
# records read at a time: the per-chunk arrays of 1,024 requests of 64 tokens are 0.5 MB each, and a
# dozen are alive at once; a whole 4,096-record row group made the summary the run's peak of memory
SLICE_ROWS = 1024


class LogHistogram:
    """Weighted counts of positive durations (seconds) in log-spaced bins, a fixed 50,000 of them.

    Bins are ``10**(1/PER_DECADE)`` wide (0.046 %) from 0.1 µs to 10^3 s, so a percentile read back
    is within 0.05 % of the exact one (at a 10 ms ITL: 5 µs), whatever the run's length. The bin's
    geometric middle stands for its values, clamped to the smallest and largest value seen; values
    below 0.1 µs (two chunks read at once) share bin 0. Mean and deviation are kept exact from sums.
    """

    LOW_S = 1e-7
    PER_DECADE = 5000
    DECADES = 10

    def __init__(self) -> None:
        self.counts = np.zeros(self.PER_DECADE * self.DECADES + 2)
        self.weight = self.sum = self.sum_sq = 0.0
        self.low, self.high = math.inf, -math.inf

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        if not values.size:
            return
        w = np.ones(values.size) if weights is None else weights.astype(np.float64)
        idx = np.floor(np.log10(np.maximum(values, self.LOW_S) / self.LOW_S) * self.PER_DECADE) + 1
        idx[values < self.LOW_S] = 0
        idx = np.clip(idx, 0, self.counts.size - 1).astype(np.int64)
        self.counts += np.bincount(idx, weights=w, minlength=self.counts.size)
        self.weight += float(w.sum())
        self.sum += float((values * w).sum())
        self.sum_sq += float((values * values * w).sum())
        self.low, self.high = min(self.low, float(values.min())), max(self.high, float(values.max()))

    def mean(self) -> float | None:
        return self.sum / self.weight if self.weight else None

    def std(self) -> float | None:
        if not self.weight:
            return None
        mean = self.sum / self.weight
        return math.sqrt(max(self.sum_sq / self.weight - mean * mean, 0.0))

    def percentiles(self, qs: tuple[float, ...]) -> dict[str, float | None]:
        """Percentiles in ms: the first bin whose cumulative weight reaches q % of the total."""
        if not self.weight:
            return {_q(q): None for q in qs}
        cum = np.cumsum(self.counts)
        out: dict[str, float | None] = {}
        for q in qs:
            if q >= 100.0:
                out[_q(q)] = self.high * 1000.0
                continue
            i = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
            mid = self.LOW_S * 10 ** ((i - 0.5) / self.PER_DECADE) if i > 0 else self.low
            out[_q(q)] = min(max(mid, self.low), self.high) * 1000.0
        return out


@dataclass
class Gathered:
    sent: int = 0
    ttft: list[np.ndarray] = field(default_factory=list)
    e2el: list[np.ndarray] = field(default_factory=list)
    tpot: list[np.ndarray] = field(default_factory=list)
    itl: LogHistogram = field(default_factory=LogHistogram)  # per token (a chunk's gap over its tokens)
    itl_chunk: LogHistogram = field(default_factory=LogHistogram)  # per chunk
    lag: list[np.ndarray] = field(default_factory=list)
    sent_at: list[np.ndarray] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    chunks: int = 0
    chunk_max: int = 0
    mismatches: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    goodput_met: int = 0
    per_second: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @staticmethod
    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0)


def gather(records: str | Path, slo_ms: dict[str, float] | None = None) -> Gathered:
    """Read the record file once, a row group at a time, keeping only arrays of numbers."""
    g = Gathered()
    slo = {k: v / 1000.0 for k, v in (slo_ms or {}).items()}
    cols = [
        "scheduled_s",
        "sent_s",
        "ttft_s",
        "e2el_s",
        "prompt_tokens",
        "output_tokens",
        "client_tokens",
        "chunks",
        "gaps_s",
        "chunk_tokens",
        "error",
    ]
    parts = (
        b.slice(i, SLICE_ROWS) for b in read_columns(records, cols) for i in range(0, len(b), SLICE_ROWS)
    )
    for batch in parts:
        d = {name: batch.column(name) for name in cols}
        err = texts(d["error"])
        g.sent += len(err)
        for kind in err:
            if kind is not None:
                g.errors[kind] = g.errors.get(kind, 0) + 1
        ok = np.array([e is None for e in err], dtype=bool)
        ttft = numbers(d["ttft_s"])
        e2el = numbers(d["e2el_s"])
        ok &= ~np.isnan(ttft)
        out = numbers(d["output_tokens"]).astype(np.int64)
        client = numbers(d["client_tokens"]).astype(np.int64)
        prompt = numbers(d["prompt_tokens"]).astype(np.int64)
        sent_s = numbers(d["sent_s"])
        g.sent_at.append(sent_s[~np.isnan(sent_s)])
        g.lag.append((sent_s - numbers(d["scheduled_s"]))[~np.isnan(sent_s)])
        g.ttft.append(ttft[ok])
        g.e2el.append(e2el[ok])
        g.prompt_tokens += int(prompt[ok & (prompt > 0)].sum())
        g.output_tokens += int(out[ok & (out > 0)].sum())
        g.mismatches += int(np.count_nonzero(ok & (out >= 0) & (client != out)))
        multi = ok & (out > 1)
        tpot = np.full(len(err), np.nan)
        tpot[multi] = (e2el[multi] - ttft[multi]) / (out[multi] - 1)
        g.tpot.append(tpot[multi])
        chunks = numbers(d["chunks"])
        g.chunks += int(chunks[ok].sum())
        # chunk-level arrays (the list columns flattened), then kept for completed requests
        offsets, all_gaps = flat_list(d["gaps_s"])
        lengths = np.diff(offsets)
        all_gaps = all_gaps.astype(np.float64)
        all_toks = np.maximum(flat_list(d["chunk_tokens"])[1].astype(np.int64), 1)
        owner_ok = np.repeat(ok, lengths)
        gaps, toks = all_gaps[owner_ok], all_toks[owner_ok]
        if toks.size:
            g.chunk_max = max(g.chunk_max, int(toks.max()))
        g.itl_chunk.add(gaps)
        g.itl.add(gaps / toks, toks)
        if slo:  # met every SLO given?
            met = ok.copy()
            if "ttft" in slo:
                met &= ttft <= slo["ttft"]
            if "e2el" in slo:
                met &= e2el <= slo["e2el"]
            if "tpot" in slo:
                met &= ~(multi & ~(tpot <= slo["tpot"]))
            g.goodput_met += int(met.sum())
        # output tokens in each second of the run: a request's first chunk at its TTFT, later ones after their gaps
        csum, tsum = np.r_[0.0, np.cumsum(all_gaps)], np.r_[0, np.cumsum(all_toks)]
        first = sent_s + ttft
        chunk_at = np.repeat(first, lengths) + csum[1:] - np.repeat(csum[offsets[:-1]], lengths)
        first_tokens = np.maximum(client - (tsum[offsets[1:]] - tsum[offsets[:-1]]), 1)
        times = np.concatenate([first[ok], chunk_at[owner_ok]])
        weights = np.concatenate([first_tokens[ok], toks]).astype(np.float64)
        if times.size:
            bins = np.floor(times).astype(np.int64)
            size = int(bins.max()) + 1
            if size > g.per_second.size:
                g.per_second = np.pad(g.per_second, (0, size - g.per_second.size))
            np.add.at(g.per_second, bins, weights)
    return g


def _peak(per_second: np.ndarray, mean: float) -> float | None:
    """The busiest whole second's output tokens, or the run's mean rate when that is higher (see the
    module docstring: a per-second peak below the run's average would be no peak)."""
    return max(float(per_second.max()), mean) if per_second.size else None


def _ms(values: np.ndarray) -> dict[str, float | None]:
    if not values.size:
        return {"mean": None, "median": None, "std": None, "p99": None}
    v = values * 1000.0
    return {
        "mean": float(v.mean()),
        "median": float(np.median(v)),
        "std": float(v.std()),
        "p99": float(np.percentile(v, 99)),
    }


def _q(q: float) -> str:
    return f"{q:g}"


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    if not values.size:
        return {_q(q): None for q in PERCENTILES}
    return {
        _q(q): float(x) for q, x in zip(PERCENTILES, np.percentile(values * 1000.0, PERCENTILES), strict=True)
    }


def summarise(
    records: str | Path, duration_s: float, slo_ms: dict[str, float] | None = None
) -> dict[str, Any]:
    """The result document's numbers: vLLM's top-level fields, and perfkit's beside them."""
    g = gather(records, slo_ms)
    cat = Gathered.cat
    ttft, e2el, tpot = cat(g.ttft), cat(g.e2el), cat(g.tpot)
    duration = max(duration_s, 1e-9)
    completed = int(ttft.size)
    doc: dict[str, Any] = {
        "completed": completed,
        "failed": g.sent - completed,
        "duration": duration_s,
        "total_input_tokens": g.prompt_tokens,
        "total_output_tokens": g.output_tokens,
        "request_throughput": completed / duration,
        "request_goodput": g.goodput_met / duration if slo_ms else None,
        "output_throughput": g.output_tokens / duration,
        "total_token_throughput": (g.prompt_tokens + g.output_tokens) / duration,
        "max_output_tokens_per_s": _peak(g.per_second, g.output_tokens / duration),
    }
    itl_pcts = g.itl.percentiles(PERCENTILES)
    itl_mean, itl_std = g.itl.mean(), g.itl.std()
    itl_stats = {
        "mean": None if itl_mean is None else itl_mean * 1000.0,
        "median": itl_pcts["50"],
        "std": None if itl_std is None else itl_std * 1000.0,
        "p99": itl_pcts["99"],
    }
    for name, stats in (("ttft", _ms(ttft)), ("tpot", _ms(tpot)), ("itl", itl_stats), ("e2el", _ms(e2el))):
        for s, v in stats.items():
            doc[f"{s}_{name}_ms"] = v
    doc["percentiles"] = {
        "ttft_ms": _pcts(ttft),
        "tpot_ms": _pcts(tpot),
        "itl_ms": itl_pcts,
        "itl_chunk_ms": g.itl_chunk.percentiles(PERCENTILES),
        "e2el_ms": _pcts(e2el),
    }
    doc["tokens_per_chunk"] = {
        "mean": g.output_tokens / g.chunks if g.chunks else None,
        "max": g.chunk_max or None,
    }
    if slo_ms:
        doc["goodput"] = {
            "slo_ms": dict(slo_ms),
            "attainment": g.goodput_met / g.sent if g.sent else None,
            "requests_per_s": g.goodput_met / duration,
            "met": g.goodput_met,
            "judged": g.sent,
        }
    else:
        doc["goodput"] = None
    errors = sum(g.errors.values())
    doc["errors"] = {
        "total": errors,
        "rate": errors / g.sent if g.sent else 0.0,
        "by_kind": {
            k: g.errors[k] for k in (*ERROR_KINDS, *sorted(set(g.errors) - set(ERROR_KINDS))) if k in g.errors
        },
    }
    doc["token_mismatches"] = g.mismatches
    sent_at, lag = cat(g.sent_at), cat(g.lag)
    span = float(sent_at.max() - sent_at.min()) if sent_at.size > 1 else 0.0
    doc["_fidelity"] = {
        "sent": g.sent,
        "achieved_rate": (sent_at.size - 1) / span if span > 0 else None,
        "schedule_lag_ms": {
            "50": float(np.percentile(lag, 50) * 1000) if lag.size else None,
            "90": float(np.percentile(lag, 90) * 1000) if lag.size else None,
            "max": float(lag.max() * 1000) if lag.size else None,
        },
    }
    return doc
