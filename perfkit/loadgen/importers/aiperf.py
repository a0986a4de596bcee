"""NVIDIA AIPerf's ``profile_export_aiperf.json`` and ``.csv``, and genai-perf's
``profile_export_genai_perf.json`` (AIPerf's predecessor, the same metric tags).

Three layouts, one set of tags (``aiperf/metrics/types/*.py``: ``tag``, ``header``, ``unit``):

* AIPerf 0.1-0.3 JSON: ``records.<tag>`` = ``{tag, unit, header, avg, min, max, p1 ... p99, std,
  count}``, beside ``input_config``, ``error_summary``, ``was_cancelled``, ``start_time``.
* AIPerf from 0.4 (``schema_version``) and genai-perf JSON: each ``<tag>`` at the top level,
  ``{unit, avg, p1 ... p99, min, max, std}``.
* CSV: a table ``Metric,avg,min,...`` of ``Header (unit)`` rows, then ``Metric,Value`` rows.
  genai-perf writes every figure as ``f"{value:,.2f}"`` (``exporter_utils.format_stat_value``):
  ``"1,146.31"``, thousands grouped by commas; AIPerf writes plain numbers.

The definitions (AIPerf's metric classes): ``request_count`` counts valid (completed) requests,
``error_request_count`` the failed ones; ``benchmark_duration`` is first request to last response
(perfkit's duration); ``inter_token_latency`` is per request (latency - TTFT) / (OSL - 1), vLLM's
TPOT; ``inter_chunk_latency`` the gaps between responses (perfkit's chunk ITL); the output sequence
length includes reasoning tokens. Throughputs are AIPerf's own figures.
"""

from __future__ import annotations

import csv
import re
from typing import Any

from perfkit.loadgen.importers._common import (
    MAX_ITEMS,
    PCTS,
    ForeignResultError,
    Node,
    Stats,
    clean,
    finish,
    keep_stated,
    put,
    safe_url,
    skeleton,
)
from perfkit.loadgen.importers.vllm import ONE_TOKEN_RATIO

_TIME_UNITS = {"ms": 1.0, "sec": 1000.0, "s": 1000.0, "us": 1e-3, "ns": 1e-6}
_ALIASES = {
    "ttft": "time_to_first_token",
    "ttst": "time_to_second_token",
    "total_input_sequence_length": "total_isl",
    "total_output_sequence_length": "total_osl",
}
_HEADER = re.compile(r"(?P<name>[^()]+?)\s*\((?P<unit>[^()]*)\)")
_KEY = re.compile(r"[^a-z0-9]+")
_ENDPOINTS = {"chat": "chat", "completions": "completions"}
_MARKERS = ("request_throughput", "request_latency", "time_to_first_token", "request_count")
_GROUPED = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
"""A number with its thousands grouped by commas (genai-perf's CSV): ``3,000.05``."""


def is_aiperf(doc: dict[str, Any]) -> bool:
    """An AIPerf or genai-perf export: metrics as ``{unit, avg ...}`` objects, at the top level or
    under ``records``."""
    records = doc.get("records")
    where = records if isinstance(records, dict) else doc
    return any(isinstance(where.get(k), dict) and "avg" in where[k] for k in (*_MARKERS, "ttft"))


def tag_of(header: str) -> tuple[str, str | None]:
    """``"Time to First Token (ms)"`` -> (``time_to_first_token``, ``ms``)."""
    m = _HEADER.fullmatch(header.strip())
    name, unit = (m["name"], m["unit"].strip()) if m else (header, None)
    key = _KEY.sub("_", name.strip().lower()).strip("_")
    return _ALIASES.get(key, key), unit


def read_csv(text: str, name: str) -> dict[str, Any]:
    """An AIPerf (or genai-perf) CSV export as the top-level JSON layout (numbers still text:
    :func:`convert_aiperf` checks them with the row in the message)."""
    doc: dict[str, Any] = {}
    columns: list[str] | None = None
    for line_no, row in enumerate(csv.reader(text.splitlines()), 1):
        if line_no > MAX_ITEMS:
            raise ForeignResultError(f"{name}: more than {MAX_ITEMS} lines")
        if not row or not any(cell.strip() for cell in row):
            continue
        if row[0].strip() == "Metric":
            columns = ["avg" if c.strip().lower() == "value" else c.strip() for c in row[1:]]
            continue
        if columns is None:
            raise ForeignResultError(f"{name}:{line_no}: expected a 'Metric,...' header line first")
        tag, unit = tag_of(row[0])
        entry: dict[str, Any] = {"unit": unit}
        for col, cell in zip(columns, row[1:], strict=False):
            text = cell.strip()
            try:
                entry[col] = None if text in ("", "N/A") else float(_ungrouped(text))
            except ValueError:
                raise ForeignResultError(
                    f"{name}:{line_no}: {clean(row[0])[:60]}: {col}: not a number ({clean(cell)[:30]!r})"
                ) from None
        doc[tag] = entry
    if not doc:
        raise ForeignResultError(f"{name}: no metric rows")
    return doc


def _ungrouped(text: str) -> str:
    """``"1,146.31"`` -> ``"1146.31"``; only whole groups of three digits after each comma, so a
    decimal comma (``"1,5"``) stays unreadable rather than becoming fifteen."""
    return text.replace(",", "") if _GROUPED.fullmatch(text) else text


class _Metrics:
    """The export's metrics by canonical tag, whatever the layout."""

    def __init__(self, root: Node) -> None:
        records = root.obj("records")
        self.base = records if records is not None else root
        self.tags = {_ALIASES.get(str(k), str(k)): str(k) for k in list(self.base.v)[:MAX_ITEMS]}

    def node(self, tag: str) -> Node | None:
        key = self.tags.get(tag)
        node = self.base.obj(key) if key is not None else None
        return node if node is not None and "avg" in node.v else None

    def value(self, tag: str) -> float | None:
        node = self.node(tag)
        return node.num("avg") if node else None

    def stats(self, tag: str) -> Stats:
        """A time metric in ms (its ``unit`` converted)."""
        node = self.node(tag)
        if node is None:
            return None, None, None, {}
        unit = node.text("unit") or "ms"
        scale = _TIME_UNITS.get(unit)
        if scale is None:
            node.fail(f"not a time unit: {unit!r}", "unit")

        def ms(key: str) -> float | None:
            v = node.num(key)
            return None if v is None else v * scale

        return ms("avg"), ms("p50"), ms("std"), {q: ms(f"p{q}") for q in PCTS if q != "50"}


def convert_aiperf(root: Node, name: str) -> dict[str, Any]:
    doc, notes = skeleton("aiperf", name), list[str]()
    mx = _Metrics(root)
    completed, duration = _counts(root, mx, notes)
    failed = round(mx.value("error_request_count") or 0)
    sent = completed + failed
    doc.update(completed=completed, failed=failed, duration=duration)
    isl, osl = (_total(mx, t, completed, notes) for t in ("isl", "osl"))
    doc.update(
        total_input_tokens=None if isl is None else round(isl),
        total_output_tokens=None if osl is None else round(osl),
    )
    both = None if isl is None or osl is None else isl + osl
    for key, tag, total in (
        ("request_throughput", "request_throughput", completed),
        ("output_throughput", "output_token_throughput", osl),
        ("total_token_throughput", "total_token_throughput", both),
    ):
        mine = total / duration if total is not None and duration else None
        keep_stated(doc, key, mx.value(tag), mine, tag, notes)
    if mx.value("total_reasoning_tokens"):
        notes.append("output tokens: AIPerf's output sequence length includes reasoning tokens")
    _latency(mx, doc, notes)
    _errors(root, doc, failed, notes)
    _config(root, doc, notes)
    version, schema = root.text("aiperf_version"), root.text("schema_version")
    if version or schema:
        notes.append(f"aiperf {version or '?'}, export schema {schema or '?'}")
    elif root.obj("records") is not None:
        notes.append("AIPerf export of the 0.1-0.3 layout (records)")
    elif name.lower().endswith(".csv"):
        notes.append("CSV export: no input_config (model, load) in it")
    else:
        notes.append("genai-perf layout (no aiperf_version)")
    if root.get("was_cancelled") is True:
        doc["validity"]["valid"] = False
        doc["validity"]["reasons"].append("the run was cancelled (was_cancelled)")
    return finish(doc, sent, notes)


def _total(mx: _Metrics, which: str, completed: int, notes: list[str]) -> float | None:
    """``total_isl`` / ``total_osl``; genai-perf states none: its mean sequence length (over the
    completed requests, like the count) times ``request_count``, said so."""
    total = mx.value(f"total_{which}")
    mean = mx.value(("input" if which == "isl" else "output") + "_sequence_length")
    if total is not None or mean is None:
        return total
    key = "total_input_tokens" if which == "isl" else "total_output_tokens"
    notes.append(f"{key}: the mean {which.upper()} x request_count (the export states no total)")
    return mean * completed


def _counts(root: Node, mx: _Metrics, notes: list[str]) -> tuple[int, float | None]:
    """Completed requests (``request_count``) and the duration (``benchmark_duration``, s); one of
    them may be derived from the other and ``request_throughput``; a count neither states nor
    derives is named."""
    count, rate = mx.value("request_count"), mx.value("request_throughput")
    dur_node = mx.node("benchmark_duration")
    duration = None
    if dur_node is not None and (d := dur_node.num("avg")) is not None:
        unit = dur_node.text("unit") or "sec"
        scale = _TIME_UNITS.get(unit)
        if scale is None:
            dur_node.fail(f"not a time unit: {unit!r}", "unit")
        duration = d * scale / 1000.0
    if count is None and duration and rate is not None:
        count = rate * duration
        notes.append("completed: request_throughput x benchmark_duration (the export has no request_count)")
    elif duration is None and count and rate:
        duration = count / rate
        notes.append("duration: request_count / request_throughput (the export has no benchmark_duration)")
    if count is None:
        missing = " and ".join(
            k for k, v in (("benchmark_duration", duration), ("request_throughput", rate)) if not v
        )
        root.fail(
            f"no request_count, and no {missing} to derive it from "
            "(genai-perf named no count before its 'Request Count' row of December 2024)",
            "request_count",
        )
    return round(count), duration


def _latency(mx: _Metrics, doc: dict[str, Any], notes: list[str]) -> None:
    ttft, tpot, chunk = (
        mx.stats(t) for t in ("time_to_first_token", "inter_token_latency", "inter_chunk_latency")
    )
    put(doc, "ttft", ttft)
    put(doc, "tpot", tpot)
    put(doc, "e2el", mx.stats("request_latency"))
    if tpot[0] is not None:
        notes.append(
            "TPOT: inter_token_latency (AIPerf, genai-perf), (latency - TTFT) / (output tokens - 1) per request"
        )
    notes.append("E2EL: request_latency; percentiles p50 p90 p95 p99 as written (no p99.9)")
    if chunk[0] is None:
        return
    put(doc, "itl", chunk, "itl_chunk")
    if tpot[0]:
        ratio = chunk[0] / tpot[0]
        one = ratio < ONE_TOKEN_RATIO
        verdict = "assumed one token per chunk" if one else "chunks hold several tokens"
        notes.append(
            f"ITL: AIPerf's inter_chunk_latency are gaps between responses; {verdict} (ratio {ratio:.2f})"
        )
        if one:
            put(doc, "itl", chunk)


def error_kind(code: int | None, kind: str) -> str:
    """An ``error_summary`` entry (HTTP code, error type) as a perfkit kind."""
    if code == 499 or "cancel" in kind.lower():
        return "cancelled"
    if code is not None and 400 <= code < 600:
        return "http_4xx" if code < 500 else "http_5xx"
    low = kind.lower()
    if "timeout" in low:
        return "timeout"
    if "connect" in low:
        return "connect"
    return "other"


def _errors(root: Node, doc: dict[str, Any], failed: int, notes: list[str]) -> None:
    by_kind: dict[str, int] = {}
    for entry in root.items("error_summary"):
        details = entry.need("error_details")
        code = details.count("code")
        kind = error_kind(code, details.text("type") or "")
        by_kind[kind] = by_kind.get(kind, 0) + (entry.count("count", True) or 0)
    if sum(by_kind.values()) == failed:
        doc["errors"]["by_kind"] = by_kind
    elif failed:
        doc["errors"]["by_kind"] = {"other": failed}
        notes.append(
            "errors: error_summary does not add up to error_request_count; all counted as other"
            if by_kind
            else "errors: not classified (no error_summary in the export)"
        )


def _config(root: Node, doc: dict[str, Any], notes: list[str]) -> None:
    """Model, target, endpoint and load from ``input_config`` (AIPerf 0.1-0.3: ``endpoint``,
    ``loadgen``; later: ``models``, ``endpoint.urls``, ``phases``; genai-perf: flat)."""
    cfg = root.obj("input_config")
    if cfg is None:
        return
    meta, load = doc["meta"], doc["load"]
    endpoint, models = cfg.obj("endpoint"), cfg.obj("models")
    if endpoint is not None and endpoint.get("model_names"):  # 0.1-0.3
        names = [x.v for x in endpoint.items("model_names")]
    elif models is not None:  # 0.4 on
        names = [x.get("name") for x in models.items("items")]
    else:  # genai-perf
        names = [x.v for x in cfg.items("model")] if isinstance(cfg.get("model"), list) else []
    names = [n for n in names if isinstance(n, str)]
    meta["model"] = clean(names[0]) if names else None
    urls = endpoint.items("urls") if endpoint is not None else []
    url = urls[0].v if urls else (endpoint.get("url") if endpoint is not None else None) or cfg.get("u")
    meta["target"] = safe_url(url) if isinstance(url, str) else None
    kind = (endpoint.text("type") if endpoint is not None else None) or cfg.text("endpoint_type")
    load["endpoint"] = _ENDPOINTS.get(kind or "")
    phases = [p for p in cfg.items("phases") if isinstance(p.v, dict) and p.get("name") == "profiling"]
    source = phases[0] if phases else cfg.obj("loadgen") or cfg
    rate, conc = source.num("request_rate"), source.count("concurrency")
    if rate:
        load.update(shape="rate", rate=rate, requested_rate=rate, concurrency=conc)
    elif conc:
        load.update(shape="concurrency", concurrency=conc)
    load["num_requests"] = source.count("request_count") or source.count("requests")
    meta["seed"] = cfg.count("random_seed")
    if root.text("start_time"):
        notes.append("started: AIPerf's start_time is local time without a zone; left empty")
