"""The server's own view of a load test: its ``/metrics`` scraped while the load runs.

Queue length, running requests and KV-cache usage are sampled every few seconds. Preemptions and
the server's latency histograms are read as the difference between the first and last scrape.
Only the run's own requests are counted (a shared server's earlier traffic is subtracted out, not
its concurrent traffic).

Metric names are vLLM's (``vllm/v1/metrics/loggers.py``), with the older names as aliases:
``vllm:gpu_cache_usage_perc`` before ``kv_cache_usage_perc``, and ``vllm:time_per_output_token_seconds``
before ``inter_token_latency_seconds``.

The client's TTFT minus the server's is time spent outside the engine: the network, a gateway,
the HTTP front end, or the client itself. :func:`disagreement` puts the two side by side. A server
that reports *more* than the client saw is not on the client's clock: a simulated server whose
virtual time runs faster than wall time (``perfkit lab serve --speed``: its
``perfkit_lab_servesim_speed`` gauge is read into ``virtual_speed``), or one that starts counting
before the client's request was sent; that gap is named as the clocks disagreeing, not as time.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import numpy as np
import polars as pl

from perfkit.core.frames import MetricStore
from perfkit.core.secrets import redact_text
from perfkit.engine.local import bucket_quantile
from perfkit.errors import PerfkitError
from perfkit.sources.openmetrics import parse_text
from perfkit.sources.safejson import load_json_bounded

SCRAPE_EVERY_S = 2.0
MAX_METRICS_BYTES = 16 * 1024 * 1024
"""Largest /metrics page read, counted after decompression (vLLM's is ~100-300 KB; a 16-GPU node
with per-LoRA series a few MB)."""
MAX_VERSION_BYTES = 64 * 1024
"""Largest /version answer read (vLLM's is ``{"version": "0.11.0"}``: 20 bytes)."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of a small JSON answer (/version) parsed: vLLM's has depth 1."""
GAUGES: dict[str, tuple[str, ...]] = {
    "waiting": ("vllm:num_requests_waiting",),
    "running": ("vllm:num_requests_running",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
COUNTERS: dict[str, tuple[str, ...]] = {"preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions")}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    "e2el": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
}
SPEED = "perfkit_lab_servesim_speed"  # the simulator's virtual seconds per wall second
WANTED = frozenset(
    name for names in (*GAUGES.values(), *COUNTERS.values(), *HISTOGRAMS.values()) for name in names
) | {SPEED}
DISAGREE_MS = 5.0
"""A client-server gap above this (and 10 % of the server's value) is named: under it, the two
measure the same thing up to a loopback round trip and a scheduler tick."""


async def read_body(resp: aiohttp.ClientResponse, limit: int, where: str) -> bytes:
    """The whole body of ``resp``, up to EOF (a page sent in several TCP writes is read whole),
    refusing one over ``limit`` bytes after decompression (a gzip bomb, an endless body) with a
    :class:`PerfkitError` naming ``where``; the connection is then closed."""
    parts: list[bytes] = []
    got = 0
    while True:
        chunk = await resp.content.readany()
        if not chunk:
            return b"".join(parts)
        got += len(chunk)
        if got > limit:
            resp.close()
            raise PerfkitError(f"{where}: the answer is over {limit:,} bytes (after decompression)")
        parts.append(chunk)


def parse_small_json(data: bytes, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``data`` parsed as JSON within bounds (:func:`perfkit.sources.safejson.load_json_bounded`:
    nesting, value count, integers past 64 bits, NaN); :class:`PerfkitError` naming ``where``."""
    return load_json_bounded(data, source=where, max_depth=max_depth, max_values=10_000)


def _family(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        if name.endswith(suffix) and name[: -len(suffix)] in WANTED:
            return name[: -len(suffix)]
    return name


def _sum(store: MetricStore, name: str) -> float | None:
    frame = store.get(name)
    return float(frame["value"].sum()) if frame is not None and frame.height else None


def _first(store: MetricStore, names: tuple[str, ...], suffix: str = "") -> str | None:
    return next((n for n in names if store.get(n + suffix) is not None), None)


def _buckets(store: MetricStore, name: str) -> dict[float, float]:
    frame = store.get(f"{name}_bucket")
    if frame is None or "le" not in frame.columns:
        return {}
    agg = frame.group_by("le").agg(pl.col("value").sum())
    return {float(le): float(v) for le, v in zip(agg["le"], agg["value"], strict=True)}


@dataclass
class ServerView:
    """Scrapes ``metrics_url`` while the load runs (:meth:`run` as a task) and summarises."""

    metrics_url: str
    first: MetricStore | None = None
    last: MetricStore | None = None
    samples: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in GAUGES})
    scrapes: int = 0
    errors: list[str] = field(default_factory=list)

    async def scrape(self, session: aiohttp.ClientSession) -> None:
        try:
            async with session.get(self.metrics_url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                if resp.status != 200:
                    raise PerfkitError(f"{self.metrics_url}: HTTP {resp.status}")
                body = await read_body(resp, MAX_METRICS_BYTES, self.metrics_url)
            store = await asyncio.get_running_loop().run_in_executor(None, self._parse, body)
        except (PerfkitError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            if len(self.errors) < 5:
                text = redact_text(str(exc)[:4096])  # scrubbed before it is cut (a server's words)
                self.errors.append(" ".join(text.split())[:200] or type(exc).__name__)
            return
        self._keep(store)

    def _parse(self, body: bytes) -> MetricStore:
        """Off the event loop (tens of ms for a real server's page): the client's timestamps wait for nothing."""
        return parse_text(
            body.decode("utf-8", "replace"),
            path=self.metrics_url,
            default_ts=datetime.now(UTC),
            families=lambda n: _family(n) in WANTED,
        )

    def _keep(self, store: MetricStore) -> None:
        self.scrapes += 1
        if self.first is None:
            self.first = store
        self.last = store
        for key, names in GAUGES.items():
            name = _first(store, names)
            value = _sum(store, name) if name else None
            if value is not None and math.isfinite(value):
                self.samples[key].append(value)

    async def run(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        """Scrape now, every :data:`SCRAPE_EVERY_S` until ``stop``, and once more at the end."""
        await self.scrape(session)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), SCRAPE_EVERY_S)
            except TimeoutError:
                await self.scrape(session)
        await self.scrape(session)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metrics_url": self.metrics_url,
            "scrapes": self.scrapes,
            "errors": self.errors,
        }
        for key, values in self.samples.items():
            out[key] = {"max": max(values), "mean": sum(values) / len(values)} if values else None
        a, b = self.first, self.last
        if a is None or b is None or a is b:
            out["note"] = "fewer than two scrapes: no server-side latency"
            return out
        for key, names in COUNTERS.items():
            name = _first(b, names)
            before, after = (_sum(a, name), _sum(b, name)) if name else (None, None)
            out[key] = (
                after - before if after is not None and before is not None and after >= before else None
            )
        for key, hist_names in HISTOGRAMS.items():
            out[f"{key}_ms"] = _histogram_delta(a, b, hist_names)
        speed = _sum(b, SPEED)
        if speed is not None and math.isfinite(speed) and speed > 0:
            out["virtual_speed"] = speed
        return out


def _histogram_delta(a: MetricStore, b: MetricStore, names: tuple[str, ...]) -> dict[str, Any] | None:
    """Mean, p50 and p99 (ms) of what the histogram observed between two scrapes; None across a
    restart (counts went down) or when it observed nothing."""
    name = _first(b, names, "_count")
    if name is None:
        return None
    n0, n1 = _sum(a, f"{name}_count") or 0.0, _sum(b, f"{name}_count")
    s0, s1 = _sum(a, f"{name}_sum") or 0.0, _sum(b, f"{name}_sum")
    if n1 is None or s1 is None or n1 - n0 <= 0:
        return None
    before, after = _buckets(a, name), _buckets(b, name)
    bounds = sorted(after)
    counts = np.array([[after[le] - before.get(le, 0.0) for le in bounds]])
    out: dict[str, Any] = {"count": n1 - n0, "mean": (s1 - s0) / (n1 - n0) * 1000.0, "metric": name}
    if bounds and math.isinf(bounds[-1]) and np.all(counts >= 0):
        upper = np.array(bounds)
        total = float(counts[0, -1])
        for q in (0.5, 0.99):
            if counts[0, 0] >= q * total and upper[0] > 0:
                # inside the first bucket histogram_quantile() interpolates from 0 and would report
                # half its bound for a server that observed only zeros: say what is known instead
                out[f"p{round(q * 100)}"] = None
                out["under_first_bucket_ms"] = float(upper[0]) * 1000.0
                continue
            v = float(bucket_quantile(q, upper, counts)[0])
            out[f"p{round(q * 100)}"] = v * 1000.0 if math.isfinite(v) else None
        out["interpolated"] = "linear within vLLM's buckets, as histogram_quantile()"
    return out


def disagreement(client: dict[str, Any], server: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Client and server side by side for TTFT and E2EL. Where the client saw more than the server by
    over :data:`DISAGREE_MS` and 10 %, the gap is time spent outside the engine (``disagree``); where
    the server reports more by as much, their clocks disagree (``clocks_disagree``, with a ``note``):
    a gap below zero cannot be time spent outside the engine."""
    if not server:
        return []
    speed = server.get("virtual_speed")
    fast = isinstance(speed, int | float) and speed > 1
    clocks = (
        f"the server's clock runs {speed:g}x faster than wall time (a simulator's virtual seconds)"
        if fast
        else "the server counts from an earlier point than the client, or on another clock"
    )
    rows = []
    # (not ITL: vLLM's ITL histogram has one sample per chunk, the client's ITL is per token)
    for key, client_key in (("ttft", "mean_ttft_ms"), ("e2el", "mean_e2el_ms")):
        srv = server.get(f"{key}_ms")
        c = client.get(client_key)
        if not srv or c is None:
            continue
        gap, noise = c - srv["mean"], max(DISAGREE_MS, 0.1 * srv["mean"])
        row = {"metric": key, "client_mean_ms": c, "server_mean_ms": srv["mean"], "gap_ms": gap}
        row |= {"disagree": gap > noise, "clocks_disagree": gap < -noise}
        if gap < -noise:
            row["note"] = f"server above client: the clocks disagree ({clocks}), not time outside the engine"
        elif fast:
            row["note"] = f"{clocks}: the server's times are virtual"
        rows.append(row)
    return rows
