"""One load test, start to finish: the plan, the run, the server's view, the result document.

``perfkit bench`` and the baseline runbook call :func:`run_bench`. It sends the plan
(:mod:`perfkit.loadgen.shapes`) with :mod:`perfkit.loadgen.client`, streams the records to
``<stem>.requests.parquet``, scrapes the server's ``/metrics`` while the load runs, and writes the
``perfkit.bench/1`` document (:mod:`perfkit.loadgen.result`). If it is stopped (Ctrl-C) it still
writes what it measured, and ``interrupted`` says so.

Calibration (:func:`calibrate`): the same load shape against a server whose timing is known (the
caller starts it: ``perfkit lab serve``). What the client measures above the truth is its own
overhead. A run whose overhead exceeds :data:`MAX_OVERHEAD_FRAC` of the TTFT or ITL it measured on
the real target is marked invalid, and the reasons say which.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import signal
import socket
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np

from perfkit import __version__
from perfkit.core.secrets import redact_text, url_userinfo_error
from perfkit.errors import ConfigError, PerfkitError
from perfkit.loadgen import client as C
from perfkit.loadgen.records import RecordSink
from perfkit.loadgen.result import SCHEMA, write_json
from perfkit.loadgen.server_view import (
    MAX_VERSION_BYTES,
    ServerView,
    disagreement,
    parse_small_json,
    read_body,
)
from perfkit.loadgen.summary import summarise

MAX_OVERHEAD_FRAC = 0.10
"""reference/loadtest.md §7: a client whose own overhead is over 10 % of what it measures is
measuring itself."""
CALIBRATION_S = 5.0
"""Calibration sends the planned load for this long (at least 20 requests): enough for a median."""
CALIBRATION_TRUTH = {"ttft_ms": 50.0, "itl_ms": 10.0}
"""The loopback server's timing during calibration (issue 10's reference: 50 ms TTFT, 10 ms/token)."""


@dataclass
class BenchOptions:
    url: str
    model: str
    plan: Any  # perfkit.loadgen.shapes.Plan
    out: Path
    endpoint: str = "completions"
    api_key: str | None = None
    concurrency: int | None = None
    duration_s: float | None = None
    seed: int = 0
    slo_ms: dict[str, float] = field(default_factory=dict)
    metrics_url: str | None = None  # None: <url>/metrics; "" : do not scrape
    tokenizer: str | None = None
    timeout_s: float = 600.0
    labels: dict[str, str] = field(default_factory=dict)
    overwrite: bool = False
    # each request goes out with X-Request-Id perfkit-<run_id>-<i> (i: its number in the plan)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    workers: int = 1  # client processes (perfkit.loadgen.workers)
    warmup: int = 0  # requests sent first and not recorded
    # request i's prompt text (a dataset's: --dataset-name sharegpt); None: synthetic prompts
    prompts: list[str] | None = field(default=None, repr=False)
    prompts_note: str | None = None  # where the prompts came from, for the result's meta


def _refuse_credentials(url: Any, name: str) -> Any:
    """``urlsplit(url)`` once ``url`` is known to carry no credentials: ``user:password@`` or a
    secret-looking query parameter (``?api_key=``, ``?token=``: :mod:`perfkit.core.secrets`'s
    rules) is refused without echoing it; so is any text that is not an http(s) URL with a host.
    Messages show the URL only as scheme, host, port and path."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{name}: expected http://HOST[:PORT][/PATH]")
    if url_userinfo_error(name, url) or url_userinfo_error(name, url, strict=True):
        hint = (
            "perfkit sends no credentials to /metrics: give the URL without them, or --no-metrics"
            if name == "--metrics-url"
            else "pass the API key by env var name (--api-key-env), never in the URL"
        )
        raise ConfigError(f"{name} carries credentials (user:password@ or a token in its query): {hint}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ConfigError(f"{name} {C._shown_url(url)!r}: not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} {redact_text(C._shown_url(url))!r}: expected http://HOST[:PORT][/PATH]")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{name} carries credentials: pass the API key by env var name (--api-key-env)")
    return parts


def check_metrics_url(url: str) -> str:
    """The server's /metrics URL (``--metrics-url``): as :func:`check_url` (no credentials, refused
    without echoing them), but its path and a plain query are kept."""
    _refuse_credentials(url, "--metrics-url")
    return url


def check_url(url: str) -> str:
    """A base URL perfkit will send load to: http(s), a host, no credentials (they belong in an env
    var: ``--api-key-env``), no query or fragment."""
    parts = _refuse_credentials(url, "--url")
    if parts.query or parts.fragment:
        raise ConfigError(f"--url {C._shown_url(url)!r}: no query or fragment, the base URL only")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):  # the OpenAI SDK's base URL: perfkit adds /v1/completions itself
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def records_name(out: Path) -> Path:
    return out.with_name(f"{out.stem}.requests.parquet")


def metrics_url(opts: BenchOptions) -> str:
    """Where the server's /metrics is: given, or beside the API ("" when not scraped)."""
    return opts.url.rstrip("/") + "/metrics" if opts.metrics_url is None else opts.metrics_url


async def _watch(cancel: threading.Event | None, stop: asyncio.Event) -> None:
    """Set ``stop`` when another thread sets ``cancel`` (Ctrl-C in a notebook: :func:`run_blocking`)."""
    while cancel is not None and not stop.is_set():
        if cancel.is_set():
            stop.set()
            return
        await asyncio.sleep(0.1)


async def _warm_up(opts: BenchOptions, target: C.Target, prompt_for, stop: asyncio.Event) -> None:
    """``opts.warmup`` requests first, not recorded: the server's cold start (allocations, compiled
    graphs, an empty prefix cache) and the client's connections stay out of what is measured."""
    if opts.warmup <= 0:
        return
    n = opts.warmup
    slots = max(1, min(n, opts.concurrency or 8))
    tokens = (np.resize(opts.plan.prompt_tokens, n), np.resize(opts.plan.output_tokens, n))
    fd, tmp = tempfile.mkstemp(prefix=".perfkit-warmup-", suffix=".parquet", dir=opts.out.parent)
    os.close(fd)
    sink = RecordSink(tmp)
    try:
        await C.run_plan(target, np.zeros(n), *tokens, prompt_for, sink, concurrency=slots, stop=stop)
    finally:
        sink.close()
        Path(tmp).unlink(missing_ok=True)


async def _run(
    opts: BenchOptions, progress, sink: RecordSink, cancel: threading.Event | None = None
) -> tuple[C.RunInfo, dict[str, Any] | None]:
    target = C.Target(opts.url, opts.model, opts.endpoint, opts.api_key, opts.timeout_s, run_id=opts.run_id)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
        loop.add_signal_handler(signal.SIGINT, stop.set)
    watcher = asyncio.ensure_future(_watch(cancel, stop))
    from perfkit.loadgen.prompts import prompt_factory

    prompt_for = prompt_factory(opts.seed, opts.tokenizer, opts.prompts)
    view = None
    scrape_url = metrics_url(opts)
    scrape_stop = asyncio.Event()
    scraper = None
    session = aiohttp.ClientSession()
    try:
        await _warm_up(opts, target, prompt_for, stop)
        if scrape_url:
            view = ServerView(scrape_url)
            scraper = asyncio.ensure_future(view.run(session, scrape_stop))
        plan = opts.plan
        info = await C.run_plan(
            target,
            plan.at_s,
            plan.prompt_tokens,
            plan.output_tokens,
            prompt_for,
            sink,
            concurrency=opts.concurrency,
            duration_s=opts.duration_s,
            stop=stop,
            progress=progress,
        )
        info.interrupted = info.interrupted or stop.is_set()
    finally:
        watcher.cancel()
        scrape_stop.set()
        if scraper is not None:
            await asyncio.gather(scraper, return_exceptions=True)
        await session.close()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)
    return info, view.summary() if view else None


def run_blocking(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs, cancel=event)`` (:func:`run_bench`, :func:`run_sweep`,
    :func:`calibrate`) from a thread that already runs an event loop (a notebook's kernel does), in a
    worker thread of its own. Ctrl-C (KeyboardInterrupt here) sets ``cancel``: the run stops
    sending, records what was in flight as cancelled, writes its result and returns it. Without a
    running loop, ``fn`` runs here and its own Ctrl-C handler does the same."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    cancel = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn(*args, cancel=cancel, **kwargs)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="perfkit-bench", daemon=True)
    worker.start()
    while worker.is_alive():
        try:
            worker.join(0.2)
        except KeyboardInterrupt:
            cancel.set()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _server_version(url: str) -> str | None:
    """The server's ``/version`` (vLLM answers {"version": ...}); None when it has none or when
    the answer is not that: over :data:`MAX_VERSION_BYTES` after decompression, nested deep, not
    JSON. Metadata: it never fails the run."""
    where = C._shown_url(url.rstrip("/") + "/version")
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s,
            s.get(url.rstrip("/") + "/version") as r,
        ):
            if r.status == 200:
                body = parse_small_json(await read_body(r, MAX_VERSION_BYTES, where), where)
                v = body.get("version") if isinstance(body, dict) else None
                if isinstance(v, str | int | float) and not isinstance(v, bool):
                    text = " ".join(redact_text(str(v)[:200]).split())
                    return text[:80] or None
    except (PerfkitError, aiohttp.ClientError, TimeoutError, ValueError, RecursionError, OSError):
        return None
    return None


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname()[:80],
        "cpus": C.cpu_count(),
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
    }


def run_bench(
    opts: BenchOptions,
    progress=None,
    *,
    calibration: dict[str, Any] | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Run the load test and write the result and its records; returns the document."""
    opts.url = check_url(opts.url)
    if opts.workers > 1 and opts.concurrency is not None and opts.workers > opts.concurrency:
        raise ConfigError(
            f"--workers {opts.workers} is more than --concurrency {opts.concurrency}: each worker needs a slot"
        )
    if opts.out.exists() and not opts.overwrite:
        raise ConfigError(f"{opts.out}: exists; choose another name or pass --force")
    rec_path = records_name(opts.out)
    if rec_path.exists() and not opts.overwrite:
        raise ConfigError(f"{rec_path}: exists; choose another name or pass --force")
    if opts.metrics_url:
        opts.metrics_url = check_metrics_url(opts.metrics_url)
    with C.event_loop_runner() as runner:  # metadata first: a hostile answer cannot lose the run
        version = runner.run(_server_version(opts.url))
    sink = RecordSink(rec_path)
    started = datetime.now(UTC)
    if opts.workers > 1:
        from perfkit.loadgen.workers import run_workers

        sink.close()  # the workers write parts, merged into rec_path
        scrape_url = metrics_url(opts)
        view = ServerView(scrape_url) if scrape_url else None
        info = run_workers(opts, opts.workers, rec_path, progress, view, cancel)
        server = view.summary() if view else None
    with C.event_loop_runner() as runner:
        if opts.workers <= 1:
            try:
                info, server = runner.run(_run(opts, progress, sink, cancel))
            finally:
                sink.close()
    doc: dict[str, Any] = {"schema": SCHEMA}
    numbers = summarise(rec_path, info.duration_s, opts.slo_ms or None)
    fidelity = numbers.pop("_fidelity")
    doc.update(numbers)
    load = dict(opts.plan.describe())
    load.update(
        {
            "achieved_rate": fidelity["achieved_rate"],
            "schedule_lag_ms": fidelity["schedule_lag_ms"],
            "num_requests": int(len(opts.plan.at_s)),
            "sent": fidelity["sent"],
            "endpoint": opts.endpoint,
            "concurrency": opts.concurrency if opts.concurrency is not None else load.get("concurrency"),
            "duration_limit_s": opts.duration_s,
        }
    )
    doc["load"] = load
    doc["meta"] = {
        "target": opts.url,
        "model": opts.model,
        "server_version": version,
        "perfkit_version": __version__,
        "host": host_info(),
        "started": started.isoformat().replace("+00:00", "Z"),
        "seed": opts.seed,
        "labels": dict(opts.labels),
        "request_ids": f"perfkit-{opts.run_id}-<i>",
        "clock_origin_s": info.origin_s,  # CLOCK_MONOTONIC at the records' zero (one process only)
        "prompts": opts.prompts_note
        or ("exact (tokenizer)" if opts.tokenizer else "approximate (one common word per token)"),
    }
    doc["server"] = server
    doc["client_vs_server"] = disagreement(doc, server)
    doc["records"] = rec_path.name
    doc["interrupted"] = info.interrupted
    doc["validity"] = judge_validity(doc, calibration, info.notes)
    doc["load"]["workers"] = opts.workers
    doc = finite(doc)
    write_json(doc, opts.out, overwrite=opts.overwrite)
    return doc


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (a server's /metrics may hold them) as null: JSON has none."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def judge_validity(
    doc: dict[str, Any], calibration: dict[str, Any] | None, notes: list[str] | None = None
) -> dict[str, Any]:
    """Valid unless the client's measured overhead is a real share of what it measured, the run
    was stopped, or nothing completed."""
    reasons = list(notes or [])
    if doc.get("interrupted"):
        reasons.append("stopped before the plan's end (Ctrl-C): not a complete measurement")
    if doc.get("completed", 0) == 0:
        reasons.append("no request completed")
    if calibration:
        for key, measured_key in (("ttft_ms", "median_ttft_ms"), ("itl_ms", "median_itl_ms")):
            over, measured = calibration.get(f"overhead_{key}"), doc.get(measured_key)
            if over is None or measured is None or measured <= 0:
                continue
            if over > MAX_OVERHEAD_FRAC * measured:
                reasons.append(
                    f"client overhead {over:.1f} ms is {over / measured:.0%} of the median {key[:-3].upper()} "
                    f"measured ({measured:.1f} ms; limit {MAX_OVERHEAD_FRAC:.0%}): use --workers or less load"
                )
    lag = (doc.get("load") or {}).get("schedule_lag_ms") or {}
    if doc["load"].get("shape") in ("rate", "replay") and (lag.get("90") or 0) > 100:
        reasons.append(f"schedule lag p90 {lag['90']:.0f} ms: the client could not send on time")
    return {"valid": not reasons, "reasons": reasons, "calibration": calibration}


def calibrate(
    opts: BenchOptions, loopback_url: str, work_dir: Path, cancel: threading.Event | None = None
) -> dict[str, Any]:
    """The client's overhead at ``opts``' load, against a server at ``loopback_url`` whose timing is
    :data:`CALIBRATION_TRUTH` (one token per chunk)."""
    plan = opts.plan
    rate = plan.describe().get("rate")
    n = len(plan.at_s)
    if rate:
        n = min(n, max(20, int(rate * CALIBRATION_S)))
    elif opts.concurrency:
        n = min(n, max(20, opts.concurrency * 4))
    out = work_dir / "calibration.json"
    cal = replace(
        opts,
        url=loopback_url,
        model="perfkit-lab",
        plan=_head(plan, n),
        out=out,
        metrics_url="",
        duration_s=CALIBRATION_S * 3,
        api_key=None,
        overwrite=True,
        slo_ms={},
    )
    doc = run_bench(cal, cancel=cancel)
    for suffix in (".json", ".requests.parquet"):
        Path(os.fspath(out)).with_name(f"calibration{suffix}").unlink(missing_ok=True)
    if doc["interrupted"]:  # Ctrl-C stops the whole command, not only its calibration
        raise KeyboardInterrupt("stopped during calibration: the load test was not started")
    ttft, itl = doc.get("median_ttft_ms"), doc.get("median_itl_ms")
    return {
        "requests": doc["completed"],
        "truth_ms": dict(CALIBRATION_TRUTH),
        "median_ttft_ms": ttft,
        "median_itl_ms": itl,
        "overhead_ttft_ms": max(0.0, ttft - CALIBRATION_TRUTH["ttft_ms"]) if ttft is not None else None,
        "overhead_itl_ms": max(0.0, itl - CALIBRATION_TRUTH["itl_ms"]) if itl is not None else None,
        "errors": doc["errors"]["total"],
    }


def _head(plan: Any, n: int) -> Any:
    """The plan's first ``n`` requests (same shape and timing)."""
    return replace(
        plan, at_s=plan.at_s[:n], prompt_tokens=plan.prompt_tokens[:n], output_tokens=plan.output_tokens[:n]
    )


SWEEP_SCHEMA = "perfkit.sweep/1"


def sweep_point(doc: dict[str, Any], result_file: str) -> dict[str, Any]:
    """One load level of a sweep, as :func:`perfkit.loadgen.sweep.find_knee` reads it."""
    load = doc["load"]
    e2e_s = (doc.get("mean_e2el_ms") or 0.0) / 1000.0
    steady = doc["duration"] - e2e_s
    return {
        "offered_rate": load.get("requested_rate"),
        # completions over the run less one mean latency: a server that keeps up finishes its last
        # requests one latency after the last arrival, which a short level must not count against it
        "achieved_rate": doc["completed"] / steady if steady > 0 else doc["request_throughput"],
        "p50_ttft_ms": doc.get("median_ttft_ms"),
        "p99_ttft_ms": doc.get("p99_ttft_ms"),
        "median_itl_ms": doc.get("median_itl_ms"),
        "p99_itl_ms": doc.get("p99_itl_ms"),
        "output_throughput": doc["output_throughput"],
        "error_rate": doc["errors"]["rate"],
        "valid": doc["validity"]["valid"],
        "result": result_file,
    }


def run_sweep(
    opts: BenchOptions,
    rates: list[float],
    make_plan: Callable[[float], Any],
    progress=None,
    *,
    calibration: dict[str, Any] | None = None,
    announce: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """A run per rate, lowest first, each written as ``<stem>-rate<R>.json``, until one is past the
    knee (:func:`~perfkit.loadgen.sweep.find_knee`: going further only measures the queue). The
    sweep document (``perfkit.sweep/1``: the points and the knee) is written to ``opts.out``."""
    from perfkit.loadgen.sweep import find_knee

    if opts.out.exists() and not opts.overwrite:
        raise ConfigError(f"{opts.out}: exists; choose another name or pass --force")
    points: list[dict[str, Any]] = []
    interrupted = False
    for rate in rates:
        out = opts.out.with_name(f"{opts.out.stem}-rate{rate:.4g}.json")
        if announce:
            announce(f"sweep: {rate:.4g} req/s -> {out.name}")
        doc = run_bench(
            replace(opts, plan=make_plan(rate), out=out), progress, calibration=calibration, cancel=cancel
        )
        points.append(sweep_point(doc, out.name))
        if doc["interrupted"]:
            interrupted = True
            break
        knee = find_knee(points)
        if knee is not None and knee["next"] is not None:
            break
    sweep = {
        "schema": SWEEP_SCHEMA,
        "points": points,
        "knee": find_knee(points),
        "rates_planned": rates,
        "interrupted": interrupted,
        "meta": {
            "target": opts.url,
            "model": opts.model,
            "perfkit_version": __version__,
            "host": host_info(),
        },
    }
    write_json(sweep, opts.out, overwrite=opts.overwrite)
    return sweep
