"""What the baseline-capture runbook calls (``runbooks/baseline_capture.ipynb``), one function a
section, and the inference runbook's baseline extras (SLO attainment, a bench result beside it).

:func:`open_capture` reads and runs everything once: it loads a result (or runs ``perfkit bench``
against ``url``; with neither, a demo against ``perfkit lab serve``), the store's history and a
sweep, and judges the result with the gate. The sections only show what it found and never
raise: a problem becomes a section that says what is missing::

    import perfkit.app.runbooks.baseline as br
    cap = br.open_capture(result="bench.json", store="baselines/")
    br.result(cap); br.curve(cap); br.history(cap); br.verdict(cap); br.findings(cap)
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from perfkit.core.findings import Finding, table_from_frame
from perfkit.errors import ConfigError, PerfkitError
from perfkit.report import bench_figures as bf
from perfkit.report.sections import Section

DEMO_TRUTH = {"ttft_ms": 50.0, "itl_ms": 10.0}
"""The demo server's timing: issue 10's reference (50 ms to the first token, 10 ms a token)."""
DEMO_HISTORY_RUNS = 2
"""Earlier runs the demo stores as baselines, so that the gate has a history and a spread to show."""
DEMO_SWEEP, DEMO_SWEEP_STEPS, SWEEP_STEPS = "10:40", 3, 5
SWEEP_LEVEL_S = 4.0
SWEEP_E2E_MULTIPLE = 20.0
"""A sweep level sends for ``max(SWEEP_LEVEL_S, SWEEP_E2E_MULTIPLE x the run's median E2E)`` seconds.
Its achieved rate counts completions over the arrivals plus the last requests' latency, so a server
that keeps up reads about T / (T + E2E) of the offered rate: 20 x E2E reads 95 %, 5 points clear of
the knee's 90 % cut (``perfkit.loadgen.sweep.ACHIEVED_MIN_FRAC``); 4 s holds 40+ requests at 10 req/s."""
MAX_PANELS = 8
SLO_CAPTION = (
    "SLO attainment from histograms: the share of requests (ITL: of inter-token gaps) at or under each SLO "
    "bound, from the buckets' increase over each window. exact: the bound is a bucket edge; interpolated: "
    "linearly inside its bucket, as histogram_quantile does; at least: the bound is above the last finite edge."
)


# -- the inference runbook's baseline section --------------------------------------------------------


def with_attainment_and_bench(ctx: Any, section: Section) -> Section:
    """The inference runbook's baseline section with SLO attainment from the histograms (recorded
    in the finding's ``data["slo_attainment"]``) and, when the ``bench_result`` parameter names a
    result, its headline numbers beside the windows' (a finding of its own, ``bench_result``)."""
    from perfkit.analyses.slo import attainment

    inc, f = ctx.incident, section.finding
    tables: list[tuple[str, pl.DataFrame]] = []
    extra, notes = [], []
    try:
        slo = ctx.need("slo_attainment", lambda: attainment(ctx.engine, inc.window, inc.baseline, inc.slo))
    except Exception as exc:  # the baseline table stands without it
        f.missing.append(f"slo attainment: {_one_line(exc)}")
    else:
        f.data["slo_attainment"] = slo.as_dict()
        f.queries = list(dict.fromkeys([*f.queries, *slo.queries]))
        f.missing = list(dict.fromkeys([*f.missing, *slo.missing]))
        if slo.rows:
            tables.append((SLO_CAPTION, slo.table()))
            f.summary += f"; SLO attainment in the incident window: {slo.summary()}"
        notes += [f"SLO not judged from the histograms: {why}" for why in slo.skipped]
        if not slo.rows:
            notes.append("SLO attainment: no SLO given (incident.yaml's slo, or the slo_* parameters)")
    name = str(ctx.params.get("bench_result") or "").strip()[-300:]
    if name:
        doc, problem = _read_result(name)
        title = "Bench result beside the metrics"
        if doc is None:
            notes.append(f"Bench result not shown: {name}: {problem}")
            extra.append(Finding("bench_result", title, f"{name}: {problem}", "missing", {"file": name}, missing=[f"bench_result: {problem}"]))  # fmt: skip
        else:
            table = bf.beside_metrics_table(doc, ctx.results.get("baseline"))
            line, meta = bf.headline(doc), doc.get("meta") or {}
            caption = f"Bench result {name} ({bf.load_text(doc)}): {line}. Measured at the client under the bench's own load; the windows are the server's view of production traffic."  # fmt: skip
            tables.append((caption, table))
            data = {"file": name, "load": bf.load_text(doc), "validity": doc.get("validity"), "source": doc.get("source")}  # fmt: skip
            data |= {k: meta.get(k) for k in ("model", "target", "started")}
            extra.append(Finding("bench_result", title, f"{name}: {line}", bf.status_of(doc), data, table_from_frame(table)))  # fmt: skip
    section.extra_findings.extend(extra)
    return bf.TablesSection(**vars(section), tables=tables, notes=notes)


def _read_result(path: str) -> tuple[dict[str, Any] | None, str | None]:
    from perfkit.loadgen.result import read_result

    try:
        return read_result(Path(path).expanduser()), None
    except Exception as exc:  # a broken file is said, never raised
        return None, _one_line(exc)


def _one_line(exc: BaseException) -> str:
    from perfkit.core.secrets import redact_text

    text = str(exc) if isinstance(exc, PerfkitError) else traceback.format_exception_only(type(exc), exc)[-1]
    return redact_text(" ".join(text.split()))[:300]


# -- the baseline-capture runbook ---------------------------------------------------------------------


@dataclass
class Capture:
    """What the sections show, read and run once by :func:`open_capture`."""

    params: dict[str, Any]
    mode: str = ""  # "loaded" | "ran" | "demo"
    source: str = ""  # where the result came from, in words
    result: dict[str, Any] | None = None
    result_name: str = ""
    requests: dict[str, list[Any]] | None = None  # each request (sampled when many), for the figure
    sampled: int | None = None
    history: list[Any] = field(default_factory=list)  # perfkit.loadgen.store.Baseline
    sweep: dict[str, Any] | None = None  # {"points", "knee", "source"}
    verdict: dict[str, Any] | None = None
    added: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    timeline: list[dict[str, str]] = field(default_factory=list)


def open_capture(
    result: Any = "",
    url: str = "",
    model: str = "",
    api_key_env: str = "",
    endpoint: str = "completions",
    concurrency: int = 8,
    rate: float = 0.0,
    num_requests: int = 200,
    prompt_tokens: int = 128,
    output_tokens: int = 16,
    seed: int = 0,
    slo_ms: Mapping[str, float] | None = None,
    labels: Any = "",
    calibrate: bool = True,
    sweep_rates: str = "",
    warmup: int = 16,
    out_dir: str = "",
    store: str = "",
    add_to_store: bool = False,
    sweep: Any = "",
    policy: str = "",
    history: int = 0,
) -> Capture:
    """Load ``result`` (a path; several: the last is judged, the others join its history), or run a
    bench against ``url``, or (neither) a demo against ``perfkit lab serve``; read the ``store`` and
    the ``sweep``; judge the result with the gate (``policy``, the newest ``history`` baselines).
    A problem the user can cause is kept in ``error`` (every section then says it), never raised."""
    cap = Capture(dict(locals()))
    work = Path(out_dir).expanduser() if out_dir else Path(tempfile.mkdtemp(prefix="perfkit-baseline-"))
    try:
        _capture(cap, work)
    except PerfkitError as exc:
        cap.error = _one_line(exc)
    finally:
        if not out_dir:
            shutil.rmtree(work, ignore_errors=True)
    return cap


def _capture(cap: Capture, work: Path) -> None:
    from perfkit.loadgen import gate, store

    p = cap.params
    given = _labels(p["labels"])
    policy = gate.Policy.from_file(p["policy"]) if p["policy"] else gate.Policy()
    policy = policy.with_history(_int(p["history"], "history", 0, 1000) or None)
    store_dir = str(p["store"] or "")
    paths = _paths(p["result"], "result")
    if paths and p["url"]:
        raise ConfigError("give `result` (load a result) or `url` (run a bench), not both")
    if not paths and not p["url"]:
        cap.mode = "demo"
        store_dir = store_dir or str(work / "store")
    skipped: list[store.Skipped] = []
    if store_dir and Path(store_dir).is_dir():
        found, skipped = store.scan_store(store_dir)  # a file that is no baseline: named, left out
        cap.history += found
        cap.missing += [f"store: {item}" for item in skipped]
    elif store_dir and not (p["add_to_store"] or cap.mode == "demo"):
        cap.missing.append(f"store {store_dir}: no such folder (create one with `perfkit baseline add`)")
    cap.history += [store.Baseline.from_doc(store.read_input(earlier)) for earlier in paths[:-1]]
    if paths:
        cap.mode, path = "loaded", Path(paths[-1])
        cap.result, cap.source = store.read_input(path), f"loaded from {path.name}"
    else:
        path = _run(cap, work, store_dir, given)
    assert cap.result is not None
    cap.result_name = path.name
    _read_records(cap, path)
    if p["sweep"]:
        try:
            cap.sweep = load_sweep(_paths(p["sweep"], "sweep"))
        except PerfkitError as exc:  # the other sections stand without it
            cap.sweep = {"problem": _one_line(exc)}
    from perfkit.loadgen.result import records_path

    v = gate.judge(
        cap.result,
        cap.history,
        policy,
        labels={**store.effective_labels(cap.result), **given},
        records=records_path(path, cap.result),  # the run's own noise: bands from the first baseline on
        skipped=skipped,
    )
    cap.verdict = v.as_dict()
    cap.missing += v.warnings
    chosen = {h["id"] for h in v.history}
    for b in cap.history:
        if b.id in chosen and b.started:
            cap.timeline.append({"ts": b.started, "event": f"baseline {b.id} measured", "source": "store"})
    if start := (cap.result.get("meta") or {}).get("started"):
        cap.timeline.append(
            {"ts": str(start), "event": f"this run started ({cap.source})", "source": "bench"}
        )
    if p["add_to_store"] and store_dir:
        if v.overall == "regress" or (cap.result.get("validity") or {}).get("valid") is False:
            cap.notes.append(f"not added to the store: the gate says {v.overall}; a baseline must pass")
        else:
            cap.added = store.add(path, store_dir, given, warn=cap.missing.append)


def _run(cap: Capture, work: Path, store_dir: str, given: dict[str, str]) -> Path:
    """Run the bench (the demo: its history and sweep too); returns the new result's path."""
    from perfkit.app.runner.loadtest import build_plan, calibration_against_lab, sweep_rates_option
    from perfkit.lab.serve import serving
    from perfkit.loadgen import store
    from perfkit.loadgen.bench import BenchOptions, check_url, run_bench, run_sweep

    p = cap.params
    model = str(p["model"] or ("perfkit-lab" if cap.mode == "demo" else ""))
    if not model:
        raise ConfigError("model: give the name of the model the server at `url` serves")
    conc = _int(p["concurrency"], "concurrency", 0, 10_000) or None
    rate = _float(p["rate"], "rate", 0, 1e5) or None
    if conc is None and rate is None:
        raise ConfigError("give the load: concurrency > 0 (in flight) or rate > 0 (arrivals a second)")
    n = _int(p["num_requests"], "num_requests", 1, 10_000_000)
    tokens = {k: _int(p[k], k, 1, 10**6) for k in ("prompt_tokens", "output_tokens")}
    seed = _int(p["seed"], "seed", 0, 2**31)
    if p["endpoint"] not in ("completions", "chat"):
        raise ConfigError(f"endpoint: expected completions or chat, got {str(p['endpoint'])[:40]!r}")
    slo_ms = {k: _float(v, f"slo_{k}_ms", 0, 3.6e6) for k, v in (p["slo_ms"] or {}).items() if v}
    api_key = _api_key(str(p["api_key_env"] or ""))
    work.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    if not p["out_dir"]:
        cap.notes.append("the new results (and the demo's store) were in a temporary folder, now removed")

    def plan(r: float | None, count: int, cap_at: int | None = conc) -> Any:
        return build_plan(concurrency=cap_at, rate=r, burst=False, arrival="poisson", burstiness=1.0, num_requests=count,
                          replay=None, time_scale=1.0, duration=None, seed=seed, **tokens)  # fmt: skip

    def options(url: str, out: Path, labels: dict[str, str], **over: Any) -> BenchOptions:
        return replace(BenchOptions(url=url, model=model, plan=plan(rate, n), out=out, endpoint=str(p["endpoint"]),
                       api_key=api_key, concurrency=conc, seed=seed, slo_ms=slo_ms, labels=labels), **over)  # fmt: skip

    def warm(url: str) -> None:  # cold start stays out of the sample (docs/loadtest.md)
        if count := _int(p["warmup"], "warmup", 0, 100_000):
            slots = conc or 8
            opts = options(url, work / ".warmup.json", {}, plan=plan(None, count, slots), concurrency=slots)
            _unblocked(run_bench, replace(opts, metrics_url="", overwrite=True))
            for f in work.glob(".warmup.*"):
                f.unlink()

    def sweep_at(url: str, text: str, steps: int) -> None:
        # open loop: the server's saturation shows, not a queue in the client
        opts = options(url, work / f"sweep-{stamp}.json", given, concurrency=None)
        e2e_s = (bf.number((cap.result or {}).get("median_e2el_ms")) or 0.0) / 1000
        level_s = max(SWEEP_LEVEL_S, SWEEP_E2E_MULTIPLE * e2e_s)

        def level(r: float) -> Any:
            return plan(r, max(20, math.ceil(r * level_s)), None)

        doc = _unblocked(run_sweep, opts, sweep_rates_option(text, steps), level)
        cap.sweep = {"points": doc["points"], "knee": doc["knee"], "source": f"swept {text} req/s here"}

    if cap.mode == "demo":
        with serving(model=model, ttft_ms=DEMO_TRUTH["ttft_ms"], itl_ms=DEMO_TRUTH["itl_ms"]) as url:
            truth = f"{DEMO_TRUTH['ttft_ms']:g} ms TTFT, {DEMO_TRUTH['itl_ms']:g} ms a token"
            cap.source = f"demo against `perfkit lab serve` ({truth}), after {DEMO_HISTORY_RUNS} runs stored as baselines"
            warm(url)
            for i in range(1, DEMO_HISTORY_RUNS + 1):
                _unblocked(run_bench, options(url, work / f"history-{i}.json", {"version": f"demo-{i}"}))
                ident = store.add(work / f"history-{i}.json", store_dir, {}, warn=cap.missing.append)
                cap.history.append(store.show(store_dir, ident))
            out = work / "bench-demo.json"
            labels = {"version": f"demo-{DEMO_HISTORY_RUNS + 1}", **given}
            cap.result = _unblocked(run_bench, options(url, out, labels))
            if not p["sweep"]:
                sweep_at(
                    url,
                    str(p["sweep_rates"] or DEMO_SWEEP),
                    SWEEP_STEPS if p["sweep_rates"] else DEMO_SWEEP_STEPS,
                )
        return out
    cap.mode, url = "ran", check_url(str(p["url"]))
    opts = options(url, work / f"bench-{stamp}.json", given)
    calibration = _unblocked(calibration_against_lab, opts) if p["calibrate"] else None
    warm(url)
    cap.result = _unblocked(run_bench, opts, calibration=calibration)
    cap.source = f"ran against {url}" + ("" if calibration else ", not calibrated")
    if p["sweep_rates"] and not p["sweep"]:
        sweep_at(url, str(p["sweep_rates"]), SWEEP_STEPS)
    return opts.out


def _unblocked(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` where a notebook's kernel already runs an event loop: in a thread of
    its own, stopped cleanly by Ctrl-C (:func:`perfkit.loadgen.bench.run_blocking`)."""
    from perfkit.loadgen.bench import run_blocking

    return run_blocking(fn, *args, **kwargs)


def load_sweep(paths: list[str]) -> dict[str, Any]:
    """A sweep from the document ``perfkit bench --sweep`` writes (``perfkit.sweep/1``), or from
    result files of rate runs, one a level. Raises :class:`~perfkit.errors.ConfigError` naming the file."""
    from perfkit.loadgen.bench import SWEEP_SCHEMA, sweep_point
    from perfkit.loadgen.store import read_document, read_input
    from perfkit.loadgen.sweep import find_knee

    source = ", ".join(Path(x).name for x in paths)[:200]
    doc = read_document(paths[0]) if len(paths) == 1 else {}
    if doc.get("schema") == SWEEP_SCHEMA:
        points = doc.get("points")
        if not isinstance(points, list) or not all(isinstance(x, dict) for x in points) or len(points) > 1000:
            raise ConfigError(f"{paths[0]}: points: expected a list of up to 1000 load levels")
    else:
        points = [sweep_point(read_input(path), Path(path).name) for path in paths]
        for path, point in zip(paths, points, strict=True):
            if not point["offered_rate"]:
                raise ConfigError(f"{path}: not a rate run (no requested rate): a sweep's levels are rates")
    try:
        return {"points": points, "knee": find_knee(points), "source": source}
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _read_records(cap: Capture, path: Path) -> None:
    """Each request's send time, TTFT, E2E latency and error (every k-th request when there are many)."""
    from perfkit.loadgen.records import read_columns
    from perfkit.loadgen.result import records_path

    rec = records_path(path, cap.result or {})
    if rec is None or not rec.is_file():
        return
    try:
        import pyarrow.parquet as pq

        step = max(1, math.ceil(pq.ParquetFile(rec).metadata.num_rows / bf.MAX_POINTS))
        out: dict[str, list[Any]] = {"sent_s": [], "ttft_ms": [], "e2el_ms": [], "error": []}
        i = 0
        for batch in read_columns(rec, ["sent_s", "ttft_s", "e2el_s", "error"]):
            for sent, ttft, e2el, error in zip(*(batch.column(k).to_pylist() for k in range(4)), strict=True):
                if i % step == 0 or (error is not None and len(out["error"]) < 2 * bf.MAX_POINTS):
                    for key, value in zip(out, (sent, _ms(ttft), _ms(e2el), error), strict=True):
                        out[key].append(value)
                i += 1
        cap.requests, cap.sampled = out, step if step > 1 else None
    except Exception as exc:  # the summary stands without the per-request view
        cap.missing.append(f"records {rec.name}: {_one_line(exc)}")


# -- sections -----------------------------------------------------------------------------------------


def capture_section(
    key: str, title: str
) -> Callable[[Callable[[Capture], Section]], Callable[[Capture], Section]]:
    """Guard a section: no result → 'missing' (``data.not_run``: `perfkit run` fails); any
    exception → 'error' with the message; never raises."""

    def wrap(fn: Callable[[Capture], Section]) -> Callable[[Capture], Section]:
        @functools.wraps(fn)
        def run(cap: Capture) -> Section:
            if cap.error or cap.result is None:
                why = cap.error or "no result loaded or run"
                return _said(key, title, f"not run: {why}", "missing", why, {"not_run": why})
            try:
                out = fn(cap)
            except Exception as exc:  # a bug must not end the record: say it, keep going
                why = _one_line(exc)
                out = _said(key, title, f"could not complete: {why}", "error", f"{key}: {why}")
            cap.missing += [m for m in out.finding.missing if m not in cap.missing]
            return out

        return run

    return wrap


@capture_section("bench", "Load-test result")
def result(cap: Capture) -> Section:
    doc = cap.result
    assert doc is not None
    table = bf.latency_table(doc)
    fig = bf.requests_figure(cap.requests, sampled=cap.sampled) if cap.requests else None
    gaps = bf.client_server_text(doc)
    notes = [f"Mean latency at the client against the server's own histograms: {gaps}"] if gaps else []
    keep = ("completed", "failed", "duration", "request_throughput", "output_throughput", "percentiles",
            "errors", "goodput", "load", "validity", "interrupted", "source")  # fmt: skip
    meta = {k: v for k, v in (doc.get("meta") or {}).items() if k != "host"}
    data = {"file": cap.result_name, "mode": cap.mode, "meta": meta, **{k: doc.get(k) for k in keep}}
    named = doc.get("records")
    missing = (
        [f"bench: its records {named} are not beside {cap.result_name}"]
        if named and cap.requests is None
        else []
    )
    caption = "each request by the time it was sent; failures at the bottom" if fig else None
    f = Finding("bench", "Load-test result", f"{bf.headline(doc)} ({cap.source})", bf.status_of(doc), data,
                table_from_frame(table), bf.fig_json(fig), caption, missing)  # fmt: skip
    tables = [("What it was measured under", bf.load_table(doc))]
    return bf.TablesSection(f, table, fig, tables=tables, notes=notes)


@capture_section("curve", "Latency against load")
def curve(cap: Capture) -> Section:
    title = "Latency against load"
    if not cap.sweep or "problem" in cap.sweep:
        why = "no sweep: run `perfkit bench --sweep LOW:HIGH ...` and set `sweep`, or set `sweep_rates` to run one"
        why = f"sweep not read: {cap.sweep['problem']}" if cap.sweep else why
        return _said("curve", title, why, "error" if cap.sweep else "missing", f"curve: {why}")
    points, knee = cap.sweep["points"], cap.sweep["knee"] or {}
    table, fig = bf.points_table(points, knee), bf.curve_figure(points, knee)
    summary = f"{len(points)} load levels ({cap.sweep['source']}): knee {knee.get('reason', 'not found')}"
    f = Finding("curve", title, summary, "ok" if knee.get("point") else "warn", {"points": points, "knee": knee},
                table_from_frame(table), bf.fig_json(fig), "knee: perfkit.loadgen.sweep.find_knee")  # fmt: skip
    return Section(f, table, fig)


@capture_section("history", "History of the gated metrics")
def history(cap: Capture) -> Section:
    from perfkit.loadgen.gate import metric_value

    title, v = "History of the gated metrics", cap.verdict or {}
    chosen = {h["id"] for h in v.get("history") or []}
    runs = sorted((b for b in cap.history if b.id in chosen), key=lambda b: b.sort_key())
    if not runs:
        why = (v.get("reasons") or ["no comparable baseline"])[0]
        return _said("history", title, f"no history: {why}", "missing", f"history: {why}")
    labels = [
        f"{i}: {b.labels.get('version') or (b.started or '')[11:19] or b.id[-8:]}"
        for i, b in enumerate(runs, 1)
    ]
    rows = {str(r.get("metric")): r for r in v.get("metrics") or []}

    def value(doc: Any, metric: str) -> float | None:
        try:
            return metric_value(doc, metric)
        except ValueError:
            return None

    regressed = [m for m, r in rows.items() if r.get("status") == "regressed"]
    judged = [m for m in bf.HEADLINE_METRICS if m in rows and rows[m].get("status") != "no-data"]
    chosen_metrics = list(dict.fromkeys([*regressed, *judged]))
    panels = [
        bf.Panel(m, str(rows[m].get("unit") or ""), [(lab, x) for lab, b in zip(labels, runs, strict=True)
                 if (x := value(b.doc, m)) is not None], value(cap.result, m), rows[m])
        for m in chosen_metrics[:MAX_PANELS]
    ]  # fmt: skip
    runs_table = [(lab, b.id, b.labels, b.doc) for lab, b in zip(labels, runs, strict=True)]
    table = bf.history_table([*runs_table, ("new", cap.result_name, {}, cap.result or {})])
    fig = bf.history_figure(panels)
    summary = f"{len(runs)} comparable baseline{'s' if len(runs) != 1 else ''} ({labels[0]} … {labels[-1]}) and this run"
    f = Finding("history", title, summary, "ok", {"runs": [b.id for b in runs]}, table_from_frame(table),
                bf.fig_json(fig), "shaded: the history's median ± the gate's band; dashed: the limit")  # fmt: skip
    return Section(f, table, fig)


@capture_section("verdict", "Release gate")
def verdict(cap: Capture) -> Section:
    v = cap.verdict or {}
    overall = str(v.get("verdict"))
    summary = "; ".join([str(v.get("summary") or overall), *(str(n) for n in v.get("notes") or [])])
    summary += f"; added to the store as {cap.added}" if cap.added else ""
    table = bf.verdict_table(v)
    status = {"pass": "ok", "regress": "critical"}.get(overall, "missing")
    f = Finding("verdict", "Release gate", summary, status, v, table_from_frame(table),
                missing=[f"gate: {r}" for r in v.get("reasons") or []])  # fmt: skip
    return bf.TablesSection(f, table, style=bf.verdict_style, notes=[n for n in cap.notes if n])


@capture_section("postmortem", "Findings")
def findings(cap: Capture) -> Section:
    assert cap.result is not None and cap.verdict is not None
    chosen = {h["id"] for h in cap.verdict.get("history") or []}
    from perfkit.loadgen.store import make_id

    model = bf.capture_model(
        cap.result,
        cap.verdict,
        (cap.sweep or {}).get("knee"),
        ident=make_id(cap.result),
        baselines=[b.doc for b in cap.history if b.id in chosen],
        added=cap.added,
        timeline=cap.timeline,
        missing=cap.missing,
    )
    events = model["timeline"]
    when = [str(e["ts"])[:19].replace("T", " ") for e in events]
    table = pl.DataFrame(
        {"time (UTC)": when, "event": [e["event"] for e in events], "source": [e["source"] for e in events]}
    )
    f = Finding("postmortem", "Findings", model["summary"], "ok", model, table_from_frame(table), missing=model["missing"])  # fmt: skip
    return Section(f, table)


def _said(key: str, title: str, summary: str, status: str, missing: str, data: Any = None) -> Section:
    """A section that only says something (what is missing, what went wrong)."""
    return Section(Finding(key, title, summary, status, data or {}, missing=[missing]))


# -- parameters ---------------------------------------------------------------------------------------


def _paths(value: Any, name: str) -> list[str]:
    items = value if isinstance(value, list) else str(value or "").split(",")
    paths = [str(x).strip() for x in items if str(x).strip()]
    if len(paths) > 1000:
        raise ConfigError(f"{name}: {len(paths)} files, more than 1000")
    return [str(Path(x).expanduser()) for x in paths]


def _labels(value: Any) -> dict[str, str]:
    from perfkit.loadgen.store import parse_labels, validate_labels

    if isinstance(value, Mapping):
        return validate_labels(value, where="labels")
    return parse_labels([x for x in str(value or "").split(",") if x.strip()])


def _int(value: Any, name: str, low: int, high: int) -> int:
    return int(_float(value, name, low, high, whole=True))


def _float(value: Any, name: str, low: float, high: float, *, whole: bool = False) -> float:
    try:
        number = float(value) if not isinstance(value, bool | str) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not (math.isfinite(number) and low <= number <= high) or (whole and number != int(number)):
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{name}: expected {kind} from {low:g} to {high:g}, got {str(value)[:40]!r}")
    return number


def _api_key(env: str) -> str | None:
    from perfkit.core.secrets import env_reference_error

    if not env:
        return None
    if message := env_reference_error("api_key_env", env):
        raise ConfigError(message)
    if not (key := os.environ.get(env)):
        raise ConfigError(f"api_key_env {env}: that environment variable is not set")
    return key


def _ms(seconds: Any) -> float | None:
    return seconds * 1000 if isinstance(seconds, float) and math.isfinite(seconds) else None
