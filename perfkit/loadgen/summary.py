"""From per-request records to the result's numbers (``reference/loadtest.md`` §6).

* TTFT, E2EL: per completed request.
* TPOT: per request, ``(E2EL - TTFT) / (output_tokens - 1)``; requests of one token have none. The
  aggregate is request-weighted, as vLLM's is.
* ITL (``itl``): token-weighted and chunk-aware. A chunk of k tokens after a gap g counts as k
  tokens of g/k each. ``itl_chunk`` is the raw gap between chunks: what ``vllm bench serve`` calls
  ITL, and only the same thing when every chunk holds one token.
* Throughput: totals over the run's duration (first send to last answer); the peak is the busiest
  whole second of output tokens, as vLLM's ``max_output_tokens_per_s``.
* Goodput: requests that met every SLO given, per second. Attainment is their share of requests
  *sent*, so a failed request counts against it. TPOT is judged only where a request has one.
* Percentiles are over completed requests, and the error rate is printed beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.loadgen.records import ERROR_KINDS, read_columns

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass
class Gathered:
    sent: int = 0
    ttft: list[np.ndarray] = field(default_factory=list)
    e2el: list[np.ndarray] = field(default_factory=list)
    tpot: list[np.ndarray] = field(default_factory=list)
    itl: list[np.ndarray] = field(default_factory=list)
    itl_weights: list[np.ndarray] = field(default_factory=list)
    itl_chunk: list[np.ndarray] = field(default_factory=list)
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
    for batch in read_columns(records, cols):
        d = {name: batch.column(name) for name in cols}
        err = d["error"].to_pylist()
        g.sent += len(err)
        for kind in err:
            if kind is not None:
                g.errors[kind] = g.errors.get(kind, 0) + 1
        ok = np.array([e is None for e in err], dtype=bool)
        ttft = d["ttft_s"].to_numpy(zero_copy_only=False)
        e2el = d["e2el_s"].to_numpy(zero_copy_only=False)
        ok &= ~np.isnan(ttft)
        out = d["output_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
        client = d["client_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
        prompt = d["prompt_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
        sent_s = d["sent_s"].to_numpy(zero_copy_only=False)
        g.sent_at.append(sent_s[~np.isnan(sent_s)])
        g.lag.append((sent_s - d["scheduled_s"].to_numpy(zero_copy_only=False))[~np.isnan(sent_s)])
        g.ttft.append(ttft[ok])
        g.e2el.append(e2el[ok])
        g.prompt_tokens += int(prompt[ok & (prompt > 0)].sum())
        g.output_tokens += int(out[ok & (out > 0)].sum())
        g.mismatches += int(np.count_nonzero(ok & (out >= 0) & (client != out)))
        multi = ok & (out > 1)
        tpot = np.full(len(err), np.nan)
        tpot[multi] = (e2el[multi] - ttft[multi]) / (out[multi] - 1)
        g.tpot.append(tpot[multi])
        chunks = d["chunks"].to_numpy(zero_copy_only=False)
        g.chunks += int(chunks[ok].sum())
        # chunk-level arrays (the list columns flattened), then kept for completed requests
        offsets = d["gaps_s"].offsets.to_numpy()
        lengths = np.diff(offsets)
        all_gaps = d["gaps_s"].values.to_numpy(zero_copy_only=False).astype(np.float64)
        all_toks = np.maximum(d["chunk_tokens"].values.to_numpy(zero_copy_only=False).astype(np.int64), 1)
        owner_ok = np.repeat(ok, lengths)
        gaps, toks = all_gaps[owner_ok], all_toks[owner_ok]
        if toks.size:
            g.chunk_max = max(g.chunk_max, int(toks.max()))
        g.itl_chunk.append(gaps)
        g.itl.append(gaps / toks)
        g.itl_weights.append(toks)
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


def _weighted_percentiles(values: np.ndarray, weights: np.ndarray) -> dict[str, float | None]:
    """Percentiles of ``values`` each counted ``weights`` times (a chunk's tokens), in ms."""
    if not values.size:
        return {_q(q): None for q in PERCENTILES}
    order = np.argsort(values, kind="stable")
    v, w = values[order] * 1000.0, weights[order].astype(np.float64)
    cum = np.cumsum(w)
    out: dict[str, float | None] = {}
    for q in PERCENTILES:
        idx = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
        out[_q(q)] = float(v[min(idx, v.size - 1)])
    return out


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
    itl, itl_w, itl_chunk = cat(g.itl), cat(g.itl_weights), cat(g.itl_chunk)
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
        "max_output_tokens_per_s": float(g.per_second.max()) if g.per_second.size else None,
    }
    itl_stats = _ms(np.zeros(0))
    if itl.size:
        wsum = itl_w.sum()
        mean = float((itl * itl_w).sum() / wsum)
        itl_stats = {
            "mean": mean * 1000.0,
            "median": _weighted_percentiles(itl, itl_w)["50"],
            "std": float(math.sqrt(((itl - mean) ** 2 * itl_w).sum() / wsum)) * 1000.0,
            "p99": _weighted_percentiles(itl, itl_w)["99"],
        }
    for name, stats in (("ttft", _ms(ttft)), ("tpot", _ms(tpot)), ("itl", itl_stats), ("e2el", _ms(e2el))):
        for s, v in stats.items():
            doc[f"{s}_{name}_ms"] = v
    doc["percentiles"] = {
        "ttft_ms": _pcts(ttft),
        "tpot_ms": _pcts(tpot),
        "itl_ms": _weighted_percentiles(itl, itl_w),
        "itl_chunk_ms": _pcts(itl_chunk),
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
