"""``vllm bench serve --save-result`` (``vllm/benchmarks/serve.py``, ``main_async``): one flat
object; with ``--save-detailed`` also per-request arrays (``ttfts``, ``itls``, ``output_lens`` ...,
seconds). ``latencies`` and ``queue_times`` are written even without it.

The older ``benchmarks/benchmark_serving.py`` (and the copies vendored by other projects, e.g.
SemiAnalysis InferenceX's ``utils/bench_serving``) writes the same keys, but no ``failed`` (taken
from ``num_prompts``), its goodput under ``"request_goodput:"`` (with the colon), and some copies
``benchmark_start_time_unix`` (the start as a Unix time: ``meta.started``)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import numpy as np

from perfkit.loadgen.importers._common import (
    MAX_GAPS,
    MAX_REQUESTS,
    METRICS,
    PCTS,
    Node,
    Stats,
    array_stats,
    clean,
    finish,
    labels,
    put,
    show,
    skeleton,
)

ONE_TOKEN_RATIO = 1.5
"""Without per-request arrays, one token per chunk is assumed when mean ITL / mean TPOT < 1.5: a
chunk of k tokens makes the mean chunk gap about k times the per-token time, and k is a whole
number, so 1.5 lies halfway between one and two tokens per chunk. (Gap- against request-weighting
moves the ratio by far less: a 100x spread of lengths with per-token time doubling along it
gives 1.33.)"""
_HTTP = {s.phrase.lower(): s.value for s in HTTPStatus}
_ERRORS = (  # matched on the last line of the error text (the exception raised), in this order
    ("malformed", re.compile(r"Never received a valid chunk|JSONDecodeError|UnicodeDecodeError")),
    ("connect", re.compile(r"ClientConnectorError|ConnectionRefusedError|Cannot connect to host|InvalidURL")),
    ("timeout", re.compile(r"TimeoutError|timed out", re.I)),
    ("disconnect", re.compile(r"ServerDisconnected|ClientPayloadError|ConnectionResetError|ClientOSError")),
    ("cancelled", re.compile(r"CancelledError")),
)
_NOT_LABELS = {
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "ramp_up_strategy",
    "request_rate",
}
"""Text fields vLLM itself writes; the other text fields at the top level are ``--metadata k=v``."""
_ENDPOINTS = {"openai-chat": "chat", "openai": "completions", "vllm": "completions"}


def convert_vllm(root: Node, name: str) -> dict[str, Any]:
    doc = skeleton("vllm", name)
    notes = [
        "TTFT: vLLM times the first chunk with choices, which may hold no token (empty text, chat's role)"
    ]
    completed, failed, duration = _counts(root, notes)
    sent = completed + failed
    doc.update(completed=completed, failed=failed, duration=duration)
    for key in ("total_input_tokens", "total_output_tokens"):
        doc[key] = root.count(key)
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        doc[key] = root.num(key)
    stats: dict[str, Stats] = {}
    for m in METRICS:
        pcts = {q: root.num(f"p{q}_{m}_ms") for q in PCTS}
        stats[m] = (root.num(f"mean_{m}_ms"), root.num(f"median_{m}_ms"), root.num(f"std_{m}_ms"), pcts)
    lat = root.numbers("latencies")
    ok = None if lat is None else lat > 0  # a failed request keeps latency 0.0
    if lat is not None and ok is not None and (lat.size != sent or int(np.count_nonzero(ok)) != completed):
        notes.append(f"per-request arrays ignored: {lat.size} latencies for {completed} + {failed} requests")
        lat = ok = None
    if lat is not None and ok is not None and stats["e2el"][0] is None:
        stats["e2el"] = array_stats(lat[ok])
    _errors(root, doc, ok, notes)
    one_token, lengths = _detail(root, doc, stats, lat, ok, notes)
    if one_token is None and stats["itl"][0] is not None:
        one_token = _one_token_per_chunk(root, stats, notes)
    for m in ("ttft", "tpot", "e2el"):
        put(doc, m, stats[m])
    put(doc, "itl", stats["itl"], "itl_chunk")
    if one_token:
        put(doc, "itl", stats["itl"])
        doc["max_output_tokens_per_s"] = root.num("max_output_tokens_per_s")
    elif stats["itl"][0] is not None:
        notes.append("ITL (token) and max_output_tokens_per_s left empty: vLLM's count chunks, not tokens")
    goodput = root.num("request_goodput")
    if goodput is None and root.num("request_goodput:") is not None:
        goodput = root.num("request_goodput:")
        notes.append("goodput: benchmark_serving.py's key 'request_goodput:' (with the colon)")
    if goodput is not None and duration:
        met = round(goodput * duration)  # vLLM: requests meeting every SLO / duration
        doc["request_goodput"] = goodput
        doc["goodput"] = {"slo_ms": None, "attainment": met / sent if sent else None}
        doc["goodput"].update(requests_per_s=goodput, met=met, judged=sent)
        notes.append("goodput: vLLM does not save the --goodput SLOs; attainment re-based on requests sent")
    _load(root, doc, lengths, notes)
    doc["meta"]["model"] = root.text("model_id")
    doc["meta"]["labels"] = labels({k: v for k, v in root.v.items() if k not in _NOT_LABELS})
    _started(root, doc, notes)
    return finish(doc, sent, notes)


def _started(root: Node, doc: dict[str, Any], notes: list[str]) -> None:
    """``meta.started`` from ``benchmark_start_time_unix`` (``time.time()`` at the first request,
    written by some copies of benchmark_serving.py); vLLM's ``date`` is local time without a zone."""
    start = root.num("benchmark_start_time_unix")
    if start:
        try:
            when = datetime.fromtimestamp(start, UTC)
        except (OverflowError, OSError, ValueError):
            root.fail(f"not a Unix time ({start:g})", "benchmark_start_time_unix")
        doc["meta"]["started"] = when.isoformat().replace("+00:00", "Z")
    elif root.text("date"):
        notes.append(f"started: vLLM's date {root.text('date')} is local time without a zone; left empty")


def _counts(root: Node, notes: list[str]) -> tuple[int, int, float | None]:
    """Completed and failed requests and the duration. Variants of the file (older vLLM, forks and
    scripts that write its keys) may lack one of ``completed`` and ``duration``: it is derived from
    the other and ``request_throughput`` (completed / duration, as vLLM computes it), and said so;
    ``failed`` from ``num_prompts`` - completed. What cannot be derived is named."""
    completed, duration = root.count("completed"), root.num("duration")
    rate = root.num("request_throughput")
    if completed is None and duration is not None and rate is not None:
        completed = round(rate * duration)
        notes.append(f"completed: request_throughput x duration = {completed} (the file has no completed)")
    elif duration is None and completed and rate:
        duration = completed / rate
        notes.append("duration: completed / request_throughput (the file has no duration)")
    if completed is None:
        keys = ", ".join(clean(str(k))[:30] for k in list(root.v)[:12])
        root.fail(
            f"missing, and not derivable: it needs duration and request_throughput (found: {keys})",
            "completed",
        )
    if duration is None:
        notes.append("duration: not in the file and not derivable; the throughputs as written")
    failed = root.count("failed")
    if failed is None:
        prompts = root.count("num_prompts")
        failed = prompts - completed if prompts is not None and prompts >= completed else 0
        notes.append(
            "failed: num_prompts - completed (the file has no failed)"
            if prompts is not None and prompts >= completed
            else "failed: not in the file; taken as 0"
        )
    return completed, failed, duration


def _one_token_per_chunk(root: Node, stats: dict[str, Stats], notes: list[str]) -> bool | None:
    """Without per-request arrays: did every chunk hold one token? Not with speculative decoding
    (its stats are in the file); otherwise when mean ITL / mean TPOT < ONE_TOKEN_RATIO."""
    itl, tpot = stats["itl"][0], stats["tpot"][0]
    if any(str(k).startswith("spec_decode") for k in root.v):
        notes.append(
            "ITL: vLLM's are gaps between chunks, and speculative decoding puts several tokens in one"
        )
        return False
    if itl is None or not tpot:
        notes.append("ITL: vLLM's are gaps between chunks; without TPOT the tokens per chunk are unknown")
        return None
    ratio = itl / tpot
    verdict = "assumed one token per chunk" if ratio < ONE_TOKEN_RATIO else "chunks hold several tokens"
    notes.append(f"ITL: vLLM's are gaps between chunks; {verdict} (mean ITL / TPOT = {ratio:.2f})")
    return ratio < ONE_TOKEN_RATIO


def error_kind(text: str) -> str:
    """An error string of vLLM's request functions as a perfkit kind: the HTTP reason phrase it
    keeps for a non-200 answer, or the exception on the last line of a traceback."""
    text = text.strip()[-4096:]
    code = _HTTP.get(text.lower())
    if code is not None:
        return "http_4xx" if code < 500 else "http_5xx"
    last = text.splitlines()[-1] if text else ""
    return next((kind for kind, pattern in _ERRORS if pattern.search(last)), "other")


def _errors(root: Node, doc: dict[str, Any], ok: np.ndarray | None, notes: list[str]) -> None:
    """Errors by kind from ``errors`` (``--save-detailed``); all ``other`` without it."""
    by_kind: dict[str, int] = {}
    for i, e in enumerate(root.items("errors", MAX_REQUESTS)):
        if not isinstance(e.v, str | None):
            e.fail(f"expected text, found {show(e.v)}")
        if e.v or (ok is not None and i < ok.size and not ok[i]):  # a refused answer may keep ""
            kind = error_kind(e.v or "")
            by_kind[kind] = by_kind.get(kind, 0) + 1
    if by_kind and sum(by_kind.values()) == doc["failed"]:
        doc["errors"]["by_kind"] = by_kind
    elif doc["failed"]:
        doc["errors"]["by_kind"] = {"other": doc["failed"]}
        notes.append("errors: not classified (vLLM saves the error text only with --save-detailed)")


def _detail(
    root: Node,
    doc: dict[str, Any],
    stats: dict[str, Stats],
    lat: np.ndarray | None,
    ok: np.ndarray | None,
    notes: list[str],
) -> tuple[bool | None, dict[str, np.ndarray]]:
    """With ``--save-detailed``: TTFT, TPOT and chunk ITL recomputed from the per-request arrays (so
    every percentile is there) and tokens per chunk. Returns whether every chunk held one token
    (None: unknown) and the completed requests' prompt and output lengths."""
    ttfts, outs, ins = root.numbers("ttfts"), root.numbers("output_lens"), root.numbers("input_lens")
    itls = root.items("itls", MAX_REQUESTS)
    if lat is None or ok is None or ttfts is None or outs is None:
        return None, {}
    n = lat.size
    if not ttfts.size == outs.size == len(itls) == n:
        notes.append("per-request arrays ignored: ttfts, itls and output_lens differ in length")
        return None, {}
    gaps, chunks, total = [], np.zeros(n), 0
    for i, node in enumerate(itls):
        g = node.floats()
        total += g.size
        if total > MAX_GAPS:
            node.fail(f"more than {MAX_GAPS} gaps in all")
        chunks[i] = g.size + 1
        if ok[i]:
            gaps.append(g)
    multi = ok & (outs > 1)
    stats["ttft"] = array_stats(ttfts[ok])
    stats["tpot"] = array_stats((lat[multi] - ttfts[multi]) / (outs[multi] - 1))
    stats["itl"] = array_stats(np.concatenate(gaps) if gaps else np.zeros(0))
    one = bool(np.all(outs[ok] == chunks[ok]))
    if ok.any():
        doc["tokens_per_chunk"] = {
            "mean": float(outs[ok].sum() / chunks[ok].sum()),
            "max": 1 if one else None,
        }
    if not one:
        notes.append("tokens per chunk: the mean only (vLLM saves a request's gaps, not its chunks' tokens)")
    lengths = {"output_tokens": outs[ok]}
    if ins is not None and ins.size == n:
        lengths["prompt_tokens"] = ins[ok]
    starts = root.numbers("start_times")
    if starts is not None and starts.size == n > 1 and np.ptp(starts) > 0:
        doc["load"]["achieved_rate"] = (n - 1) / float(np.ptp(starts))
    return one, lengths


def _load(root: Node, doc: dict[str, Any], lengths: dict[str, np.ndarray], notes: list[str]) -> None:
    """The load shape from ``request_rate`` (``"inf"``: all at once), ``burstiness`` (1: Poisson,
    else gamma; vLLM writes ``Infinity`` for evenly spaced) and ``max_concurrency``."""
    load = doc["load"]
    raw_rate, raw_burst = root.get("request_rate"), root.get("burstiness")
    rate = None if raw_rate == "inf" or raw_rate == math.inf else root.num("request_rate")
    conc = root.count("max_concurrency")
    ramp = root.text("ramp_up_strategy")
    if ramp:
        load["shape"] = "rate"
        start, end = root.num("ramp_up_start_rps"), root.num("ramp_up_end_rps")
        notes.append(f"load: {ramp} ramp-up from {start} to {end} req/s, not one rate")
    elif rate is None:
        load["shape"] = "concurrency" if conc else "burst"
    else:
        load.update(shape="rate", rate=rate, requested_rate=rate)
        if raw_burst == math.inf:
            load["arrival"] = "constant"
        else:
            burst = root.num("burstiness")
            load.update(arrival="poisson" if burst in (None, 1.0) else "gamma", burstiness=burst)
        if conc:
            notes.append(f"load: the rate was capped at {conc} requests in flight (max_concurrency)")
    load["concurrency"] = conc
    load["num_requests"] = root.count("num_prompts")
    load["endpoint"] = _ENDPOINTS.get(root.text("backend") or root.text("endpoint_type") or "")
    for key, values in lengths.items():
        if values.size and np.all(values == values[0]):
            load[key] = int(values[0])
