"""kubernetes-sigs/inference-perf ``summary_lifecycle_metrics.json`` and
``stage_N_lifecycle_metrics.json`` (``inference_perf/reportgen/base.py``, ``summarize_requests``):
``load_summary``, ``successes`` (``latency.<metric>``: ``mean``, ``min``, ``max``, ``median``,
``p90`` ... in seconds; ``throughput``; token totals; ``goodput_metrics``), ``failures``
(``count``, ``by_label``) and ``benchmark_time_seconds`` (from 0.5; before it the run's window is
successes / ``requests_per_sec``). The model, the SLOs and the load type are only in the run's
``config.yaml``, which may be given as ``config``."""

from __future__ import annotations

import re
from typing import Any

from perfkit.loadgen.importers._common import (
    MAX_ITEMS,
    NO_STATS,
    PCTS,
    Node,
    Stats,
    finish,
    keep_stated,
    put,
    safe_url,
    scaled,
    skeleton,
)

_CODE = re.compile(r"^(\d{3}) - ")
"""``make_concise_label``: an HTTP error is ``"<code> - <label>"``; others ``Timeout``,
``Connection Error`` or the error type."""
_KINDS = {"Timeout": "timeout", "Connection Error": "connect"}
_SLOS = {"ttft": "ttft", "tpot": "tpot", "request_latency": "e2el"}
_LATENCY = (("ttft", "time_to_first_token"), ("tpot", "time_per_output_token"), ("e2el", "request_latency"))
DECODE_RATIO = 1.5
"""By definition a request's decode time (E2EL - TTFT) is TPOT x (tokens - 1). inference-perf before
0.3 (its KubeCon NA 2025 demo results) timed every line of the SSE stream, the blank line after
each event too, so its TPOT and ITL count two intervals per token and the ratio of the means,
(mean E2EL - mean TTFT) / (mean TPOT x (mean tokens - 1)), is about 2 (2.08 and 2.10 in the
recorded files); chunks of two tokens timed once make it about 0.5; per-token times make it about
1 (1.00 in a 0.7 report). 1.5 and 1/1.5 lie halfway; the spread of lengths moves a mean-of-ratios
against a ratio-of-means by far less than that."""


def summary(section: Node, key: str) -> tuple[Stats, Node | None]:
    """One ``summarize`` output (seconds) as stats in ms, and its node."""
    d = section.obj(key)
    if d is None:
        return NO_STATS, None
    pcts = {q: scaled(d.num(f"p{q}"), 1000.0) for q in PCTS if q != "50"}
    return (scaled(d.num("mean"), 1000.0), scaled(d.num("median"), 1000.0), None, pcts), d


def error_kind(label: str) -> str:
    code = _CODE.match(label)
    if code:
        return "http_4xx" if int(code[1]) < 500 else "http_5xx"
    return _KINDS.get(label, "other")


def convert_inference_perf(root: Node, name: str, config: dict[str, Any] | None) -> dict[str, Any]:
    doc, notes = skeleton("inference-perf", name), list[str]()
    succ, fails, load_in = root.need("successes"), root.need("failures"), root.need("load_summary")
    lat = succ.obj("latency")
    if lat is None:
        succ.fail(
            "no latency section: inference-perf's server-side (Prometheus) report? "
            "Import summary_lifecycle_metrics.json or a stage_N_lifecycle_metrics.json",
            "latency",
        )
    ok, failed = succ.count("count", True) or 0, fails.count("count") or 0
    sent = load_in.count("count") or ok + failed
    if sent < ok + failed:
        load_in.fail(f"{sent} requests sent, fewer than {ok} + {failed} answered", "count")
    tp = succ.obj("throughput")
    rps = tp.num("requests_per_sec") if tp else None
    duration = _duration(root, load_in, ok, rps, notes)
    doc.update(completed=ok, failed=sent - ok, duration=duration)
    for field, key, older in (
        ("total_input_tokens", "prompt_tokens", "prompt_len"),
        ("total_output_tokens", "output_tokens", "output_len"),
    ):
        node, prev = succ.obj(key), succ.obj(older)
        total = node.num("total") if node else None
        if total is None and prev is not None and (mean := prev.num("mean")) is not None:
            total = mean * ok  # before 0.6: only the per-request distribution
        doc[field] = None if total is None else round(total)
    tokens_in, tokens_out = doc["total_input_tokens"], doc["total_output_tokens"]
    both = None if tokens_in is None or tokens_out is None else tokens_in + tokens_out
    for key, stated, total in (
        ("request_throughput", "requests_per_sec", ok),
        ("output_throughput", "output_tokens_per_sec", tokens_out),
        ("total_token_throughput", "total_tokens_per_sec", both),
    ):
        mine = total / duration if total is not None and duration else None
        keep_stated(doc, key, tp.num(stated) if tp else None, mine, f"throughput.{stated}", notes)
    doc["token_mismatches"] = succ.count("token_count_mismatches")
    stats = {m: summary(lat, key)[0] for m, key in _LATENCY}
    per_token = _per_token(succ, stats, notes)
    for m in ("ttft", "e2el"):
        put(doc, m, stats[m])
    if per_token:
        put(doc, "tpot", stats["tpot"])
        notes.append("TPOT: divided by the client re-tokenized count unless use_server_output_tokens was set")
    notes.append("E2EL: request_latency lasts until the response ends, not to the last content chunk")
    notes.append("normalized_time_per_output_token (NTPOT, E2EL / tokens) not mapped")
    itl, itl_node = summary(lat, "inter_token_latency")
    if per_token and itl_node is not None:
        if (itl_node.num("min") or 0.0) > 0:  # no two tokens shared a chunk
            put(doc, "itl", itl)
            put(doc, "itl", itl, "itl_chunk")
            doc["tokens_per_chunk"] = {"mean": 1.0, "max": 1}
        else:
            doc["mean_itl_ms"] = itl[0]
            notes.append(
                "ITL: the mean only: chunks held several tokens, each given its chunk's time (min 0)"
            )
    _errors(fails, doc, notes)
    cfg = Node(config or {}, "config.yaml", name)
    _goodput(succ, cfg, doc, sent, notes)
    _load(load_in, cfg, doc, sent, notes)
    server = cfg.obj("server")
    if server is not None:
        doc["meta"].update(model=server.text("model_name"), target=safe_url(server.text("base_url")))
    else:
        notes.append("model: not in inference-perf's report (it is in config.yaml beside it)")
    api = cfg.obj("api")
    doc["load"]["endpoint"] = {"completion": "completions", "chat": "chat"}.get(
        (api.text("type") if api else None) or ""
    )
    return finish(doc, sent, notes)


def _duration(root: Node, load_in: Node, ok: int, rps: float | None, notes: list[str]) -> float | None:
    """The run's window, first send to last answer (perfkit's duration): ``benchmark_time_seconds``
    (0.5 on), else inference-perf's own window behind its throughput (successes /
    ``requests_per_sec``), else ``load_summary.send_duration`` (first to last send: shorter)."""
    stated = root.num("benchmark_time_seconds")
    if stated:
        return stated
    if ok and rps:
        notes.append(
            "duration: successes / throughput.requests_per_sec, inference-perf's own window (first send "
            "to last answer); the report (before 0.5) has no benchmark_time_seconds"
        )
        return ok / rps
    send = load_in.num("send_duration")
    if send:
        notes.append("duration: load_summary.send_duration (first to last send; the run lasted longer)")
        return send
    notes.append("duration: not in the report (no benchmark_time_seconds, no throughput, no send_duration)")
    return None


def _per_token(succ: Node, stats: dict[str, Stats], notes: list[str]) -> bool:
    """Whether the report's TPOT and ITL are per token (see DECODE_RATIO)."""
    out_node = succ.obj("output_len")
    tokens = out_node.num("mean") if out_node else None
    e2el, ttft, tpot = stats["e2el"][0], stats["ttft"][0], stats["tpot"][0]
    if None in (tokens, e2el, ttft) or not tpot or tokens is None or tokens <= 1:
        return True
    assert e2el is not None and ttft is not None
    ratio = (e2el - ttft) / (tpot * (tokens - 1))
    if 1 / DECODE_RATIO <= ratio <= DECODE_RATIO:
        return True
    why = (
        "two intervals per token: every SSE line was timed, blank separators too (inference-perf before 0.3)"
        if ratio > DECODE_RATIO
        else "one interval per several tokens: chunks were timed, not tokens"
    )
    notes.append(
        f"TPOT and ITL left empty: (mean E2EL - mean TTFT) / (mean TPOT x (mean tokens - 1)) = {ratio:.2f}, "
        f"{why}; the report's TPOT mean was {tpot:.4g} ms"
    )
    return False


def _errors(fails: Node, doc: dict[str, Any], notes: list[str]) -> None:
    by_label, by_kind = fails.obj("by_label"), doc["errors"]["by_kind"]
    for label in list(by_label.v if by_label else {})[:MAX_ITEMS]:
        assert by_label is not None
        entry = by_label.obj(str(label), True)
        assert entry is not None
        kind = error_kind(str(label))
        by_kind[kind] = by_kind.get(kind, 0) + (entry.count("count", True) or 0)
    failed = doc["failed"]
    if failed and sum(by_kind.values()) != failed:
        doc["errors"]["by_kind"] = {"other": failed}
        notes.append("errors: failures.by_label does not add up to the failures; all counted as other")


def _goodput(succ: Node, cfg: Node, doc: dict[str, Any], sent: int, notes: list[str]) -> None:
    """``goodput_metrics`` judges successes only; perfkit's attainment is over requests sent."""
    gp = succ.obj("goodput_metrics")
    if gp is None or not sent:
        return
    met = gp.count("good_requests", True) or 0
    report = cfg.obj("report")
    goodput_cfg = report.obj("goodput") if report else None
    slo = goodput_cfg.obj("constraints") if goodput_cfg else None
    slo_ms = {_SLOS[k]: v * 1000.0 for k in _SLOS if slo and (v := slo.num(k)) is not None}
    duration = doc["duration"]
    rate = met / duration if duration else None
    doc["goodput"] = {"slo_ms": slo_ms or None, "attainment": met / sent, "requests_per_s": rate}
    doc["goodput"].update(met=met, judged=sent)
    doc["request_goodput"] = rate
    notes.append("goodput: good_requests (judged over successes) re-based on requests sent and the run time")
    if slo is not None and any(k not in _SLOS for k in slo.v):
        notes.append("goodput: itl and ntpot SLOs have no perfkit equivalent; not in slo_ms")


def _load(load_in: Node, cfg: Node, doc: dict[str, Any], sent: int, notes: list[str]) -> None:
    """A stage file's ``load_summary`` has the requested and achieved rate (or the concurrency);
    the summary over all stages has only the schedule delay."""
    load = doc["load"]
    delay, delay_node = summary(load_in, "schedule_delay")
    lag_max = scaled(delay_node.num("max"), 1000.0) if delay_node else None
    load["schedule_lag_ms"] = {"50": delay[1], "90": delay[3].get("90"), "max": lag_max}
    requested = load_in.num("requested_rate")
    load.update(num_requests=sent, requested_rate=requested, achieved_rate=load_in.num("achieved_rate"))
    load_cfg = cfg.obj("load")
    kind = load_cfg.text("type") if load_cfg else None
    if load_in.get("concurrency") is not None:
        load.update(shape="concurrency", concurrency=load_in.count("concurrency"))
    elif requested is not None:
        load.update(shape="rate", rate=requested, arrival=kind if kind in ("constant", "poisson") else None)
        if kind == "constant":
            notes.append("load: inference-perf's constant rate is a fixed count per stage with random gaps")
    else:
        notes.append(
            "load: a summary over all stages has no single load; import a stage_N file for a baseline"
        )
    if load_cfg is not None:
        doc["meta"]["seed"] = load_cfg.count("base_seed")
