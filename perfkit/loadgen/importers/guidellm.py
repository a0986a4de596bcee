"""guidellm's ``GenerativeBenchmarksReport`` (``benchmarks.json``: ``metadata``, ``config`` or
``args``, ``benchmarks[]``). Each benchmark carries ``metrics.<name>`` as distributions by status
(``successful``, ``incomplete``, ``errored``, ``total``: ``mean``, ``median``, ``std_dev``, ``max``,
``count``, ``total_sum``, ``percentiles.p50 ... p999``); only ``successful`` is read, as vLLM and
perfkit report completed requests. Times are ms, except ``request_latency`` (s)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from perfkit.loadgen.importers._common import (
    NO_STATS,
    PCTS,
    Node,
    Stats,
    finish,
    keep_stated,
    labels,
    put,
    safe_url,
    scaled,
    skeleton,
)

MAX_LENGTH_CV = 0.10
"""guidellm aggregates each request's TPOT weighted by its tokens (guidellm#1144); perfkit's is
request-weighted. With output lengths of coefficient of variation <= 0.1 the two means differ by
at most 0.1 standard deviations of TPOT (Cauchy-Schwarz), below run-to-run noise; beyond it TPOT
is left empty rather than mislabelled."""
STOPPED_EARLY = ("over_saturation", "max_errors", "max_error_rate", "max_global_error_rate")
"""Constraints that end a benchmark because the measurement went wrong (not a planned duration)."""
_GUIDELLM_PCTS = ("p50", "p90", "p95", "p99", "p999")
_SYNTHETIC = re.compile(r"prompt_tokens=(?P<prompt>\d{1,7}),\s*output_tokens=(?P<output>\d{1,7})")
_SHAPES = {
    "synchronous": "concurrency",
    "concurrent": "concurrency",
    "throughput": "burst",
    "constant": "rate",
    "poisson": "rate",
    "trace": "replay",
}


def distribution(metrics: Node, key: str, scale: float = 1.0) -> tuple[Stats, Node | None]:
    """``metrics.<key>.successful`` as stats (times ``scale``) and its node; empty when absent."""
    node = metrics.obj(key)
    d = node.obj("successful") if node is not None else None
    if d is None or not d.count("count"):
        return NO_STATS, None
    p = d.obj("percentiles")
    pcts = {q: scaled(p.num(k), scale) for q, k in zip(PCTS, _GUIDELLM_PCTS, strict=True)} if p else {}
    mean, median, std = (scaled(d.num(k), scale) for k in ("mean", "median", "std_dev"))
    return (mean, median, std, pcts), d


def convert_guidellm(root: Node, name: str, i: int) -> dict[str, Any]:
    """Benchmark ``i`` of the report."""
    doc, notes = skeleton("guidellm", name), []
    b = root.items("benchmarks")[i]
    if not isinstance(b.v, dict):
        b.fail("expected an object")
    m, config, sm = b.need("metrics"), b.obj("config") or b.obj("args"), b.obj("scheduler_metrics")
    totals = m.obj("request_totals") or b.obj("request_totals") or (sm.obj("requests_made") if sm else None)
    if totals is None:  # 0.2-0.4: benchmark-level request_totals; 0.5-0.7: metrics.; 0.8: scheduler_metrics.
        b.fail(
            "no request counts (metrics.request_totals, request_totals or scheduler_metrics.requests_made)"
        )
    if totals.at.endswith("].request_totals"):
        notes.append("report layout of guidellm 0.2-0.4 (request_totals, args and worker per benchmark)")
    ok, errored = totals.count("successful", True) or 0, totals.count("errored") or 0
    cut = totals.count("incomplete") or 0
    sent = totals.count("total") or ok + errored + cut
    if sent < ok + errored + cut:
        totals.fail(f"total {sent} is less than successful + errored + incomplete ({ok + errored + cut})")
    duration = b.num("duration")
    if duration is None and sm is not None:
        duration = (sm.num("measure_end_time", True) or 0.0) - (sm.num("measure_start_time", True) or 0.0)
    if not duration or duration <= 0:
        b.fail("no measured duration (duration, or scheduler_metrics.measure_start_time and _end_time)")
    doc.update(completed=ok, failed=sent - ok, duration=duration)
    prompt_node, out_node = distribution(m, "prompt_token_count")[1], distribution(m, "output_token_count")[1]
    prompt = prompt_node.num("total_sum") if prompt_node else None
    out = out_node.num("total_sum") if out_node else None
    if prompt is not None:
        doc["total_input_tokens"] = round(prompt)
    if out is not None:
        doc["total_output_tokens"] = round(out)
    both = None if prompt is None or out is None else prompt + out
    for key, rate, total in (
        ("request_throughput", "requests_per_second", ok),
        ("output_throughput", "output_tokens_per_second", out),
        ("total_token_throughput", "tokens_per_second", both),
    ):
        stated = distribution(m, rate)[0][0]
        mine = None if total is None else total / duration
        keep_stated(doc, key, stated, mine, f"{rate} (successful, mean)", notes)
    ttft, ttft_node = distribution(m, "time_to_first_token_ms")
    if ttft_node is not None and ttft_node.num("max") == 0:
        ttft = NO_STATS
        notes.append("TTFT: all 0 (the requests were not streamed)")
    put(doc, "ttft", ttft)
    put(doc, "e2el", distribution(m, "request_latency", 1000.0)[0])
    notes.append("E2EL: request_latency (s) lasts until the response ends, not to the last content chunk")
    _decode(m, out_node, doc, notes)
    doc["errors"]["by_kind"] = {k: n for k, n in (("cancelled", cut), ("other", errored)) if n}
    if cut or errored:
        notes.append(
            "errors: guidellm does not classify them; incomplete (cut at the window's end) = cancelled"
        )
    _goodput(m, config, doc, sent, notes)
    _load(b, config, m, doc, sent, notes)
    _meta(root, b, config, doc, notes)
    return finish(doc, sent, notes)


def _decode(m: Node, out_node: Node | None, doc: dict[str, Any], notes: list[str]) -> None:
    """TPOT, ITL and tokens per chunk. guidellm's ``inter_token_latency_ms`` is per request
    (last token - first token) / (tokens - 1): vLLM's TPOT, aggregated token-weighted. Its mean
    is thus total decode time / tokens: perfkit's token ITL mean."""
    itl, _ = distribution(m, "inter_token_latency_ms")
    mean_out = out_node.num("mean") if out_node else None
    cv = (out_node.num("std_dev") or 0.0) / mean_out if out_node and mean_out else None
    if cv is not None and cv <= MAX_LENGTH_CV:
        put(doc, "tpot", itl)
        notes.append(f"TPOT: guidellm's inter_token_latency_ms (token-weighted; output length CV {cv:.2f})")
    else:
        notes.append("TPOT: left empty: guidellm weights it by tokens and the output lengths vary")
    doc["mean_itl_ms"] = itl[0]
    notes.append("ITL: the mean only (of inter_token_latency_ms); guidellm keeps no gap distribution")
    notes.append("time_per_output_token_ms not mapped: it includes TTFT")
    chunk, chunk_node = distribution(m, "output_tokens_per_iteration")
    if chunk_node is not None:
        most = chunk_node.num("max")
        doc["tokens_per_chunk"] = {"mean": chunk[0], "max": round(most) if most else None}


def _goodput(m: Node, config: Node | None, doc: dict[str, Any], sent: int, notes: list[str]) -> None:
    """``slo_attainment`` is over the requests it could judge (errored ones count as missed);
    perfkit's attainment is over requests sent."""
    attainment, judged = m.num("slo_attainment"), m.count("slo_determined_requests")
    if attainment is None or not judged or not sent:
        return
    met = round(attainment * judged)
    slo = config.obj("slo") if config else None
    slo_ms = {k: v for k in ("ttft", "tpot", "e2el") if slo and (v := slo.num(f"{k}_ms")) is not None}
    duration = doc["duration"]
    doc["goodput"] = {"slo_ms": slo_ms or None, "attainment": met / sent, "requests_per_s": met / duration}
    doc["goodput"].update(met=met, judged=sent)
    doc["request_goodput"] = met / duration
    notes.append("goodput: slo_attainment (over judged requests) re-based on requests sent; tpot SLO vs TPOT")


def _load(b: Node, config: Node | None, m: Node, doc: dict[str, Any], sent: int, notes: list[str]) -> None:
    load = doc["load"]
    strategy = config.obj("strategy") if config else None
    kind = strategy.text("type_") if strategy else None
    load["shape"] = _SHAPES.get(kind or "")
    if strategy is None or load["shape"] is None:
        notes.append(f"load: strategy {kind!r} has no perfkit shape")
    elif kind == "synchronous":
        load["concurrency"] = 1
    elif kind in ("concurrent", "throughput"):
        load["concurrency"] = strategy.count("streams" if kind == "concurrent" else "max_concurrency")
    elif kind in ("constant", "poisson"):
        rate = strategy.num("rate")
        load.update(rate=rate, requested_rate=rate, arrival=kind)
        doc["meta"]["seed"] = strategy.count("random_seed")
    else:
        load["replay"] = {
            "source": doc["source"]["file"],
            "requests": sent,
            "time_scale": strategy.num("time_scale"),
        }
    load["num_requests"] = sent
    load["achieved_rate"] = sent / doc["duration"]
    notes.append("load: achieved rate = requests in the measured window / its duration")
    delay, delay_node = distribution(m, "request_dispatch_delay", 1000.0)
    if delay_node is not None:
        lag = {"50": delay[1], "90": delay[3].get("90"), "max": scaled(delay_node.num("max"), 1000.0)}
        load["schedule_lag_ms"] = lag


def _meta(root: Node, b: Node, config: Node | None, doc: dict[str, Any], notes: list[str]) -> None:
    """Model, target, labels, host, start, the data's lengths, and constraints that stopped it."""
    meta, load = doc["meta"], doc["load"]
    report_config, args = root.obj("config"), root.obj("args")
    spec = report_config.obj("spec") if report_config else None
    backends = [c.obj("backend") for c in (config, spec) if c is not None]
    for source in [x for x in backends if x is not None] + ([args] if args else []):
        meta["model"] = meta["model"] or source.text("model")
        meta["target"] = meta["target"] or safe_url(source.text("target"))
    worker = b.obj("worker")  # 0.2-0.4: the backend is the worker's
    if worker is not None:
        meta["model"] = meta["model"] or worker.text("backend_model")
        meta["target"] = meta["target"] or safe_url(worker.text("backend_target"))
    loader = b.obj("request_loader")
    lengths = _SYNTHETIC.fullmatch(loader.text("data") or "") if loader else None
    if lengths:  # 0.2-0.4: --data "prompt_tokens=256,output_tokens=128" (fixed lengths)
        load.update(prompt_tokens=int(lengths["prompt"]), output_tokens=int(lengths["output"]))
    data = spec.items("data") if spec else []
    if data and isinstance(data[0].v, dict) and data[0].text("kind") == "synthetic_text":
        fixed = not data[0].get("prompt_tokens_stdev") and not data[0].get("output_tokens_stdev")
        if fixed:
            load.update(
                prompt_tokens=data[0].count("prompt_tokens"), output_tokens=data[0].count("output_tokens")
            )
    start = b.num("start_time")
    if start:
        meta["started"] = datetime.fromtimestamp(start, UTC).isoformat().replace("+00:00", "Z")
    user = report_config.obj("metadata") if report_config else None
    user_labels = user.obj("labels") if user else None
    meta["labels"] = labels(user_labels.v) if user_labels else {}
    info = root.obj("metadata")
    if info is not None:
        meta["host"].update(python=info.text("python_version"), platform=info.text("platform"))
        notes.append(f"guidellm {info.text('guidellm_version')}, report schema {info.count('version')}")
    state = b.obj("scheduler_state")
    ended = [
        str(k)
        for key in ("end_queuing_constraints", "end_processing_constraints")
        if state and isinstance(state.get(key), dict)
        for k in state.get(key)
    ]
    early = sorted({k for k in ended if k in STOPPED_EARLY})
    if early:
        doc["validity"]["valid"] = False
        doc["validity"]["reasons"].append(f"guidellm stopped the benchmark early: {', '.join(early)}")
