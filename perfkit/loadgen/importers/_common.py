"""What the importers share: reading a foreign document with key paths in every message, and the
empty ``perfkit.bench/1`` document they fill."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from perfkit import __version__
from perfkit.errors import ResultError

SCHEMA = "perfkit.bench/1"
METRICS = ("ttft", "tpot", "itl", "e2el")
PCTS = ("50", "90", "95", "99", "99.9")
MAX_REQUESTS = 2_000_000
"""Per-request arrays (``vllm bench serve --save-detailed``) longer than this are refused."""
MAX_GAPS = 50_000_000
"""All inter-chunk gaps of a detailed vLLM file together (400 MB as float64)."""
MAX_ITEMS = 10_000
"""Benchmarks of a guidellm report, error labels of inference-perf, appended vLLM results."""
MAX_TEXT = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Stats = tuple[float | None, float | None, float | None, dict[str, float | None]]
"""(mean, median, std, {percentile: value}) of one metric, in ms; None where not reported."""
NO_STATS: Stats = (None, None, None, {})


class ForeignResultError(ResultError):
    """Another tool's result that cannot be converted: names the file and the key path."""


def clean(text: str) -> str:
    """Text from a foreign file, fit for a message or a document: no control characters, bounded."""
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def show(v: Any) -> str:
    return clean(repr(v))[:40]


class Node:
    """A value of the foreign document and where it sits (``benchmarks[0].metrics``).

    Every accessor checks the type and raises :class:`ForeignResultError`
    ``file: key.path: what was wrong``; numbers must be finite (and >= ``minimum``)."""

    __slots__ = ("at", "src", "v")

    def __init__(self, v: Any, at: str, src: str) -> None:
        self.v, self.at, self.src = v, at, src

    def path(self, key: str | None = None) -> str:
        if key is None or key.startswith("["):
            return self.at + (key or "")
        return f"{self.at}.{key}" if self.at else key

    def fail(self, what: str, key: str | None = None) -> NoReturn:
        raise ForeignResultError(f"{self.src}: {self.path(key) or '(top level)'}: {what}")

    def get(self, key: str) -> Any:
        return self.v.get(key) if isinstance(self.v, dict) else None

    def obj(self, key: str, required: bool = False) -> Node | None:
        v = self.get(key)
        if v is None and not required:
            return None
        if not isinstance(v, dict):
            self.fail("expected an object" if v is not None else "missing (expected an object)", key)
        return Node(v, self.path(key), self.src)

    def need(self, key: str) -> Node:
        """The object at ``key``, which must be there."""
        node = self.obj(key, True)
        assert node is not None
        return node

    def num(self, key: str, required: bool = False, minimum: float | None = 0.0) -> float | None:
        v = self.get(key)
        if v is None:
            if required:
                self.fail("missing (expected a number)", key)
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.fail(f"expected a number, found {show(v)}", key)
        if not math.isfinite(v):
            self.fail(f"not a finite number ({v})", key)
        if minimum is not None and v < minimum:
            self.fail(f"expected at least {minimum:g}, found {v:g}", key)
        return float(v)

    def count(self, key: str, required: bool = False) -> int | None:
        x = self.num(key, required)
        if x is not None and x != int(x):
            self.fail(f"expected a whole number, found {x:g}", key)
        return None if x is None else int(x)

    def text(self, key: str) -> str | None:
        v = self.get(key)
        if v is not None and not isinstance(v, str):
            self.fail(f"expected text, found {show(v)}", key)
        return None if v is None else clean(v)

    def items(self, key: str, limit: int | None = None) -> list[Node]:
        v, limit = self.get(key), MAX_ITEMS if limit is None else limit
        if v is None:
            return []
        if not isinstance(v, list):
            self.fail("expected a list", key)
        if len(v) > limit:
            self.fail(f"{len(v)} entries, more than the {limit} perfkit reads", key)
        return [Node(x, f"{self.path(key)}[{i}]", self.src) for i, x in enumerate(v)]

    def numbers(self, key: str) -> np.ndarray | None:
        child = self.get(key)
        return None if child is None else Node(child, self.path(key), self.src).floats()

    def floats(self) -> np.ndarray:
        """This value as an array: a list of at most MAX_REQUESTS finite numbers >= 0."""
        if not isinstance(self.v, list) or len(self.v) > MAX_REQUESTS:
            self.fail(f"expected a list of at most {MAX_REQUESTS} numbers")
        for i, x in enumerate(self.v):
            if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x < 0:
                self.fail(f"expected a number >= 0, found {show(x)}", f"[{i}]")
        return np.asarray(self.v, dtype=np.float64)


def skeleton(tool: str, name: str) -> dict[str, Any]:
    """An empty converted document: every field of ``perfkit.bench/1``, null where unknown."""
    doc: dict[str, Any] = {"schema": SCHEMA, "completed": 0, "failed": 0, "duration": None}
    for key in ("total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput"):
        doc[key] = None
    doc.update(total_token_throughput=None, max_output_tokens_per_s=None, request_goodput=None)
    for m in METRICS:
        doc.update({f"{s}_{m}_ms": None for s in ("mean", "median", "std", "p99")})
    doc["percentiles"] = {
        f"{m}_ms": dict.fromkeys(PCTS) for m in ("ttft", "tpot", "itl", "itl_chunk", "e2el")
    }
    doc.update(tokens_per_chunk={"mean": None, "max": None}, goodput=None, token_mismatches=None)
    doc["errors"] = {"total": 0, "rate": 0.0, "by_kind": {}}
    doc["load"] = {
        "shape": None, "concurrency": None, "rate": None, "arrival": None, "burstiness": None,
        "prompt_tokens": None, "output_tokens": None, "replay": None, "requested_rate": None,
        "achieved_rate": None, "schedule_lag_ms": dict.fromkeys(("50", "90", "max")),
        "num_requests": None, "endpoint": None,
    }  # fmt: skip
    doc["meta"] = {
        "target": None, "model": None, "server_version": None, "perfkit_version": __version__,
        "host": dict.fromkeys(("hostname", "cpus", "python", "platform")), "started": None,
        "seed": None, "labels": {},
    }  # fmt: skip
    doc.update(validity={"valid": True, "reasons": [], "calibration": None}, server=None, records=None)
    doc.update(interrupted=False, source={"tool": tool, "file": Path(name).name, "notes": []})
    doc["source"]["recomputed"] = {}
    return doc


STATED_GAP = 0.005
"""A recomputed figure more than 0.5 % from the tool's own is named in the notes (rounding of the
tool's durations and counts stays below it)."""


def keep_stated(
    doc: dict[str, Any], key: str, stated: float | None, recomputed: float | None, said: str, notes: list[str]
) -> None:
    """The figure the tool states (``said`` names it) is the document's ``key``, as the tool
    reported it; perfkit's own recomputation is kept beside it in ``source.recomputed`` and named
    in the notes when the two differ. Without a stated figure the recomputed one is used, labelled."""
    doc[key] = stated if stated is not None else recomputed
    if recomputed is None:
        return
    if stated is None:
        notes.append(f"{key}: recomputed by perfkit ({said} is not in the file)")
        return
    doc["source"]["recomputed"][key] = recomputed
    if abs(recomputed - stated) > STATED_GAP * abs(stated):
        gap = f" ({(recomputed / stated - 1) * 100:+.1f} %)" if stated else ""
        notes.append(
            f"{key}: the tool's {said} {stated:.6g} kept; perfkit's recomputation {recomputed:.6g}{gap} "
            "is in source.recomputed"
        )


def put(doc: dict[str, Any], m: str, stats: Stats, block: str | None = None) -> None:
    """Write ``stats`` of metric ``m`` to the top level (``mean_m_ms`` ...) and its percentiles, or
    only to the percentiles block ``block`` (``itl_chunk`` has no top-level fields)."""
    mean, median, std, pcts = stats
    pcts = {"50": median, **{q: v for q, v in pcts.items() if v is not None}}
    if block is None:
        doc.update({f"mean_{m}_ms": mean, f"median_{m}_ms": pcts["50"], f"std_{m}_ms": std})
        doc[f"p99_{m}_ms"] = pcts.get("99")
    doc["percentiles"][f"{block or m}_ms"] = {q: pcts.get(q) for q in PCTS}


def array_stats(seconds: np.ndarray) -> Stats:
    """Stats in ms of values in seconds, as vLLM computes them (numpy's linear percentiles,
    population standard deviation)."""
    if not seconds.size:
        return NO_STATS
    ms = seconds * 1000.0
    values = np.percentile(ms, [float(q) for q in PCTS])
    pcts: dict[str, float | None] = {q: float(v) for q, v in zip(PCTS, values, strict=True)}
    return float(ms.mean()), pcts["50"], float(ms.std()), pcts


def scaled(x: float | None, scale: float) -> float | None:
    return None if x is None else x * scale


def safe_url(url: str | None) -> str | None:
    """``url`` without credentials, query or fragment: a target is named, never its secrets."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    return clean(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


def labels(pairs: dict[str, Any]) -> dict[str, str]:
    """The text values of ``pairs`` as ``meta.labels`` (at most 64, keys and values bounded)."""
    return {clean(str(k))[:64]: clean(v) for k, v in list(pairs.items())[:64] if isinstance(v, str)}


def no_latencies(doc: dict[str, Any], notes: list[str]) -> None:
    """A run with nothing completed has no latency: the 0.0 some tools write there (vLLM's mean of
    an empty list) is no measurement, so every latency figure is null."""
    fields = [f"{s}_{m}_ms" for m in METRICS for s in ("mean", "median", "std", "p99")]
    stated = [f for f in fields if doc.get(f) is not None] + [
        f"percentiles.{k}"
        for k, by_q in doc["percentiles"].items()
        if any(v is not None for v in by_q.values())
    ]
    doc.update(dict.fromkeys(fields))
    doc["percentiles"] = {k: dict.fromkeys(PCTS) for k in doc["percentiles"]}
    doc.update(tokens_per_chunk={"mean": None, "max": None}, max_output_tokens_per_s=None)
    if stated:
        more = f" and {len(stated) - 4} more" if len(stated) > 4 else ""
        notes.append(
            f"latency: no request completed; the file's {', '.join(stated[:4])}{more} are no measurement, left null"
        )


def finish(doc: dict[str, Any], sent: int, notes: list[str]) -> dict[str, Any]:
    """Totals and rate of the errors; a run with nothing completed marked invalid and without
    latency figures; the notes."""
    doc["errors"]["total"] = sum(doc["errors"]["by_kind"].values())
    doc["errors"]["rate"] = doc["errors"]["total"] / sent if sent else 0.0
    if doc["completed"] == 0:
        no_latencies(doc, notes)
        doc["validity"].update(valid=False, reasons=[*doc["validity"]["reasons"], "no request completed"])
    doc["source"]["notes"] = notes
    return doc
