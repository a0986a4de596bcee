"""The load spread over several client processes, for when one core cannot keep up.

One Python process parses a few thousand SSE events a second before its own latency shows in
what it measures (``reference/loadtest.md`` §5.5). With ``workers`` W, request *i* of the plan goes
to worker ``i mod W``: every worker keeps the plan's timing (an open loop stays the same
process, thinned), and a concurrency cap is split between them. All workers start on one
wall-clock instant, so their offsets share an origin. Each writes its own records part; the
parent merges them, row group by row group, into the run's one record file, scrapes the server's
``/metrics`` meanwhile, and forwards Ctrl-C to the workers (each writes what it measured).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from perfkit.loadgen import client as C
from perfkit.loadgen.records import SCHEMA, RecordSink

START_DELAY_S = 0.5
"""The workers start this long after the last one is ready: every worker is waiting when it comes."""
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Share:
    """What one worker process sends (picklable: it crosses to a spawned process)."""

    k: int
    target: C.Target
    ids: np.ndarray
    at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    concurrency: int | None
    duration_s: float | None
    seed: int
    tokenizer: str | None
    part: str
    prompts: list[str] | None = None  # this worker's dataset prompts (its ids' texts), if any


def split(plan: Any, workers: int, concurrency: int | None) -> list[tuple[np.ndarray, int | None]]:
    """Each worker's request numbers (``i mod W``) and its share of the concurrency cap."""
    out = []
    for k in range(workers):
        ids = np.arange(k, len(plan.at_s), workers)
        cap = None if concurrency is None else concurrency // workers + (k < concurrency % workers)
        out.append((ids, cap))
    return out


def _worker(share: Share, ready: Any, start: Any, reports: Any) -> None:
    """A worker process: wait for the shared start, send its share, report, write its records."""
    from perfkit.loadgen.prompts import prompt_factory

    async def main() -> C.RunInfo:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        ready.put(share.k)
        start_at = await loop.run_in_executor(None, start.get)
        sink = RecordSink(share.part)
        try:
            return await C.run_plan(
                share.target,
                share.at_s,
                share.prompt_tokens,
                share.output_tokens,
                prompt_factory(share.seed, share.tokenizer, share.prompts),
                sink,
                concurrency=share.concurrency,
                duration_s=share.duration_s,
                stop=stop,
                progress=lambda snap: reports.put(("progress", share.k, snap)),
                ids=share.ids,
                start_at=start_at,
            )
        finally:
            sink.close()

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the loop's handler is in place
    with C.event_loop_runner() as runner:
        info = runner.run(main())
    reports.put(("done", share.k, (info.duration_s, info.sent, info.interrupted)))


def merged_snapshot(snaps: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The workers' progress as one line: sums, the slowest p99, the median p50."""
    vals = list(snaps.values())
    p50s = [s["p50_ttft_ms"] for s in vals if s.get("p50_ttft_ms") is not None]
    p99s = [s["p99_ttft_ms"] for s in vals if s.get("p99_ttft_ms") is not None]
    return {
        "sent": sum(s["sent"] for s in vals),
        "done": sum(s["done"] for s in vals),
        "errors": sum(s["errors"] for s in vals),
        "rate": sum(s["rate"] for s in vals),
        "tokens_per_s": sum(s["tokens_per_s"] for s in vals),
        "p50_ttft_ms": float(np.median(p50s)) if p50s else None,
        "p99_ttft_ms": max(p99s) if p99s else None,
    }


def merge_parts(parts: list[Path], out: Path) -> None:
    """The workers' record files as one, a row group at a time; the parts are removed."""
    tmp = out.with_name(f".{out.name}.partial")
    with pq.ParquetWriter(tmp, SCHEMA, compression="zstd") as writer:
        for part in parts:
            if part.exists():
                pf = pq.ParquetFile(part)
                for g in range(pf.num_row_groups):
                    writer.write_table(pf.read_row_group(g))
    os.replace(tmp, out)
    for part in parts:
        part.unlink(missing_ok=True)


def run_workers(
    opts: Any, workers: int, records: Path, progress: Any, view: Any, cancel: Any = None
) -> C.RunInfo:
    """Run ``opts.plan`` over ``workers`` processes; ``view`` (a ServerView or None) is scraped
    by this process meanwhile. Returns the run as one: the longest worker's duration, all sent."""
    target = C.Target(opts.url, opts.model, opts.endpoint, opts.api_key, opts.timeout_s, run_id=opts.run_id)
    ctx = mp.get_context("spawn")
    ready, start, reports = ctx.Queue(), ctx.Queue(), ctx.Queue()
    parts = [records.with_name(f".{records.name}.part{k}") for k in range(workers)]
    procs = []
    for k, (ids, cap) in enumerate(split(opts.plan, workers, opts.concurrency)):
        share = Share(
            k,
            target,
            ids,
            opts.plan.at_s[ids],
            opts.plan.prompt_tokens[ids],
            opts.plan.output_tokens[ids],
            cap,
            opts.duration_s,
            opts.seed * 1000 + k,
            opts.tokenizer,
            str(parts[k]),
            [opts.prompts[int(i)] for i in ids] if opts.prompts else None,
        )
        proc = ctx.Process(target=_worker, args=(share, ready, start, reports), daemon=True)
        proc.start()
        procs.append(proc)

    def forward(signum: int, _frame: Any) -> None:
        for p in procs:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signum)

    cancelled: list[bool] = []
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, forward)
    started_wall = time.time()
    done: dict[int, tuple[float, int, bool]] = {}
    snaps: dict[int, dict[str, Any]] = {}
    try:
        for _ in procs:
            ready.get(timeout=READY_TIMEOUT_S)
        started_wall = time.time() + START_DELAY_S
        for _ in procs:
            start.put(started_wall)

        async def watch() -> None:
            stop = asyncio.Event()
            scraper = None
            if view is not None:
                import aiohttp

                session = aiohttp.ClientSession()
                scraper = asyncio.ensure_future(view.run(session, stop))
            try:
                while len(done) < len(procs) and any(p.is_alive() for p in procs) or not reports.empty():
                    if cancel is not None and cancel.is_set() and not cancelled:
                        cancelled.append(True)
                        forward(signal.SIGINT, None)
                    try:
                        kind, k, payload = reports.get_nowait()
                    except queue.Empty:
                        await asyncio.sleep(0.1)
                        continue
                    if kind == "progress":
                        snaps[k] = payload
                        if progress:
                            progress(merged_snapshot(snaps))
                    else:
                        done[k] = payload
            finally:
                stop.set()
                if scraper is not None:
                    await asyncio.gather(scraper, return_exceptions=True)
                    await session.close()

        with C.event_loop_runner() as runner:
            runner.run(watch())
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        merge_parts(parts, records)
    lost = [k for k in range(len(procs)) if k not in done]
    notes = [f"client worker {k} died before reporting: its requests are not in the records" for k in lost]
    duration = max((d for d, _, _ in done.values()), default=0.0)
    return C.RunInfo(
        started_wall,
        duration,
        sum(s for _, s, _ in done.values()),
        any(i for _, _, i in done.values()),
        notes,
    )
