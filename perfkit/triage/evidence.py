"""Gather, once, every number the triage rows read. Missing evidence stays ``None`` and is named."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import numpy as np
import polars as pl

from perfkit.analyses.baseline import BaselineComparison, compare
from perfkit.analyses.onset import Onset, find_onset
from perfkit.analyses.release import ReleaseCorrelation, correlate
from perfkit.analyses.replicas import Replicas, replicas
from perfkit.analyses.stages import StageBreakdown, breakdown
from perfkit.analyses.training_evidence import gather_training, loss_by_step
from perfkit.core.frames import Window, iso, utc
from perfkit.core.incident import Incident
from perfkit.core.ratios import ratio
from perfkit.engine import signals as S
from perfkit.sources.engine_config import engine_config, engine_version
from perfkit.triage import thresholds as T
from perfkit.triage.held_back import unheld_median
from perfkit.triage.interference import Interference, interference


@dataclass
class Evidence:
    incident: Incident
    baseline: BaselineComparison
    stages: StageBreakdown
    release: ReleaseCorrelation
    interference: Interference
    logs: dict[str, int]
    chunked_prefill: bool | None
    gpu: dict[str, float | None]
    host: dict[str, float | None]
    training: dict[str, Any]
    missing: list[str] = field(default_factory=list)
    train: Any = None  # perfkit.analyses.training_evidence.TrainingEvidence
    oom: dict[str, float] | None = None  # largest CUDA OOM allocation asked for vs free (GiB)
    engine_config: dict[str, dict[str, Any]] = field(default_factory=dict)  # key → value, source
    onset: Onset | None = None  # the span judged: ``incident.window`` is already narrowed to it
    #: a release history was given and read (events.csv, deploys, git tags, a release metric), even
    #: if it holds no release in the span: then "no deploy" is a finding, not a gap
    history_given: bool = True
    #: the KV cache's peak outside the minutes after restarts in the window (None: no restart in it)
    kv_max_steady: float | None = None
    #: the incident's TTFT median outside the minutes after restarts in the window (None: no restart)
    ttft_p50_steady: float | None = None
    restarts: list[str] = field(default_factory=list)  # ISO times of restarts in the judged window
    #: the TTFT median of the requests no long prefill held back, and the share held back (held_back.py)
    ttft_p50_unheld: float | None = None
    ttft_held_share: float | None = None
    #: ISO times of request-rate shifts that are a restart's backlog completing, not traffic
    restart_bursts: list[str] = field(default_factory=list)
    #: the serving engine whose series answered (perfkit.engine.dialects: vllm, sglang, trtllm ...)
    serving_engine: str | None = None
    engine_version: str | None = None  # as its start-up lines say it (vLLM's); None when none does
    replicas: Replicas | None = None  # each serving replica against its peers (None: not a serving workload)
    #: the named quantities the rows read, each computed once (perfkit.triage.quantities.value)
    quantities: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the names of the quantities read since the table set it (perfkit.triage.table.run: per row)
    read_log: list[str] | None = field(default=None, repr=False, compare=False)
    #: the preconditions checked since the table set it (perfkit.triage.conditions.precondition: per row)
    gate_log: list[Any] | None = field(default=None, repr=False, compare=False)

    # convenience accessors --------------------------------------------------------------------
    def q(self, side: str, signal: str, q: float) -> float | None:
        return self.baseline.q(side, signal, q)

    def ratio(self, signal: str, q: float) -> float | None:
        """A latency quantile, incident over baseline (:func:`perfkit.core.ratios.ratio`)."""
        return ratio(self.q("incident", signal, q), self.q("baseline", signal, q))

    def rate(self, side: str, name: str) -> float | None:
        return self.baseline.rates.get(side, {}).get(name)

    def rate_ratio(self, name: str) -> float | None:
        """A rate or gauge, incident over baseline (:func:`perfkit.core.ratios.ratio`)."""
        return ratio(self.rate("incident", name), self.rate("baseline", name))

    def mean(self, side: str, stage: str) -> float | None:
        return self.stages.means.get(side, {}).get(stage)

    def share(self, stage: str) -> float | None:
        """``stage``'s share of TTFT in the incident's typical minute (:mod:`perfkit.analyses.stages`)."""
        return self.stages.shares.get(stage)

    def kv_max(self) -> float | None:
        """The KV cache's peak in the incident window, outside each restart's backlog
        (:data:`~perfkit.triage.thresholds.RESTART_BACKLOG_S`)."""
        return self.kv_max_steady if self.restarts else self.rate("incident", "kv_cache_usage_max")

    def ttft_median_ratio(self, *, unheld: bool = False) -> float | None:
        """TTFT p50, incident over baseline, the incident's read outside each restart's backlog
        (:data:`~perfkit.triage.thresholds.RESTART_BACKLOG_S`): a restarted server is handed every
        request that arrived while it was down, and their queue raises the window's median while the
        engine serves as before. ``unheld``: the median of the requests no long prefill held back
        (:mod:`perfkit.triage.held_back`), where it could be read."""
        base = self.q("baseline", "ttft", 0.5)
        if unheld and self.ttft_p50_unheld is not None and base is not None and base > 0:
            return ratio(self.ttft_p50_unheld, base)
        if not self.restarts or self.ttft_p50_steady is None or base is None or base <= 0:
            return self.ratio("ttft", 0.5)
        return ratio(self.ttft_p50_steady, base)

    def per_token(self) -> str:
        """TPOT if the server exports it, else ITL (older vLLM)."""
        return "tpot" if self.q("incident", "tpot", 0.5) is not None else "itl"


#: ``Evidence.logs[LOG_LINES_READ]``: how many lines of known kinds the logs gave, in any span. Logs
#: that were read and hold no out-of-memory message in the window are evidence of none, not a gap.
LOG_LINES_READ = "lines_read"


def _log_counts(logs: pl.DataFrame | None, window: Window) -> dict[str, int]:
    if logs is None or not logs.height:
        return {}
    inw = logs.filter((pl.col("ts") >= window.start) & (pl.col("ts") <= window.end))
    counts = inw.group_by("kind").len()
    return {LOG_LINES_READ: logs.height, **{k: int(n) for k, n in counts.iter_rows()}}


def _gpu_host(engine: S.Engine, inc: Incident) -> tuple[dict[str, float | None], dict[str, float | None]]:
    gpu: dict[str, float | None] = {}
    host: dict[str, float | None] = {}
    for side, w in (("incident", inc.window), ("baseline", inc.baseline)):
        if w is None:
            continue
        gpu[f"util_{side}"] = S.gauge_stat(engine, "gpu_util", w, "avg", combine="avg")
        gpu[f"tensor_{side}"] = S.gauge_stat(engine, "tensor_active", w, "avg", combine="avg")
        gpu[f"fb_used_max_{side}"] = S.gauge_stat(engine, "fb_used", w, "max", combine="max")
        used, free = (
            S.gauge_stat(engine, "fb_used", w, "avg", combine="avg"),
            S.gauge_stat(engine, "fb_free", w, "avg", combine="avg"),
        )
        gpu[f"fb_total_{side}"] = used + free if used is not None and free is not None else None
        idle = S.counter_rate(engine, "node_cpu", w, mode="idle")
        total = S.counter_rate(engine, "node_cpu", w)
        host[f"cpu_busy_{side}"] = (1 - idle / total) if idle is not None and total else None
        host[f"cpu_busy_max_{side}"] = _busiest_cpu(engine, w)
        iowait = S.counter_rate(engine, "node_cpu", w, mode="iowait")
        host[f"iowait_{side}"] = iowait / total if iowait is not None and total else None
        rx = S.counter_rate(engine, "net_rx", w)
        tx = S.counter_rate(engine, "net_tx", w)
        host[f"net_bytes_per_s_{side}"] = (rx or 0) + (tx or 0) if rx is not None or tx is not None else None
        # RDMA (InfiniBand/RoCE) bypasses the kernel: collectives show in the IB port counters, not eth0's
        irx = S.counter_rate(engine, "ib_rx", w)
        itx = S.counter_rate(engine, "ib_tx", w)
        host[f"ib_bytes_per_s_{side}"] = (
            (irx or 0) + (itx or 0) if irx is not None or itx is not None else None
        )
    return gpu, host


def _busiest_cpu(engine: S.Engine, w: Window) -> float | None:
    """Busy fraction of the busiest CPU over the window (pinned DataLoader workers show here)."""
    from perfkit.engine import ops

    res = S.resolve(engine, "node_cpu")
    if res.metric is None:
        return None
    expr = ops.aggregate("min", ops.rate(ops.Selector(res.metric).where(mode="idle"), w.seconds), "instance")
    frame = engine.instant(expr, w.end)
    if not frame.height:
        return None
    return float(1 - cast(float, frame["value"].min()))  # a Float64 column: its min is a float


OOM_NUMBERS = re.compile(r"Tried to allocate ([\d.]+) ([KMG])iB.*?of which ([\d.]+) ([KMG])iB is free")


def oom_shortfall(logs: pl.DataFrame | None, window: Window) -> dict[str, float] | None:
    """From CUDA OOM messages: the largest allocation asked for and the free memory then (GiB)."""
    if logs is None or not logs.height:
        return None
    hits = logs.filter(
        (pl.col("kind") == "cuda_oom") & (pl.col("ts") >= window.start) & (pl.col("ts") <= window.end)
    )
    scale = {"K": 1 / 2**20, "M": 1 / 1024, "G": 1.0}
    best = None
    for msg in hits["message"].to_list():
        m = OOM_NUMBERS.search(msg or "")
        if m:
            asked, free = float(m.group(1)) * scale[m.group(2)], float(m.group(3)) * scale[m.group(4)]
            if best is None or asked > best["asked_gib"]:
                best = {"asked_gib": asked, "free_gib": free}
    return best


TRAINING = (
    "train_step",
    "train_data_wait",
    "train_comm",
    "train_loss",
)  # signals: train_* or a framework's lines


#: how the sources name a release history they did not get (sources.bundle, sources.live)
RELEASE_GAPS = ("events:", "deploys:", "git releases:", "release metric")


def release_history_given(missing: Iterable[str]) -> bool:
    """Whether the sources read a release history: none of their missing notes is about one."""
    return not any(m.startswith(RELEASE_GAPS) for m in missing)


def _outside_backlogs(engine: S.Engine, window: Window) -> tuple[list[Window], list[str]]:
    """The spans of ``window`` outside [restart, restart + RESTART_BACKLOG_S] of each restart found in
    it (at least a minute each), and the restarts' times ([], []: no restart, the whole window stands)."""
    from datetime import timedelta

    from perfkit.analyses.completeness import restarts

    found = sorted(utc(r.ts) for r in restarts(engine, window))
    if not found:
        return [], []
    spans, start = [], window.start
    for ts in found:
        if ts > start:
            spans.append(Window(start, ts))
        start = max(start, ts + timedelta(seconds=T.RESTART_BACKLOG_S))
    if start < window.end:
        spans.append(Window(start, window.end))
    return [w for w in spans if w.seconds >= 60], [iso(t) for t in found]


def _restart_bursts(engine: S.Engine, rel: ReleaseCorrelation) -> list[str]:
    """The request-rate shifts that are a restart's backlog completing (ISO times).

    perfkit reads the request rate as the completion rate; a restarted server is handed every request
    that arrived while it was down, and completes them in a burst on top of the arrivals. A rise that
    starts from a step before a restart to :data:`~perfkit.triage.thresholds.RESTART_BACKLOG_S` after
    it, with the rate past the backlog (to the next restart or the window's end, a minute at least)
    back within ``LOAD_SHIFT_AT_DEPLOY`` of its level before, was the backlog; one that stays is
    traffic, as is one with nothing after the backlog to tell."""
    from perfkit.analyses.completeness import restarts

    rate = rel.series.get("requests/s")
    rises = [x for x in rel.shifts if x.series == "requests/s" and x.rel_change > 0 and x.before > 0]
    if rate is None or not rises:
        return []
    found = sorted(utc(r.ts) for r in restarts(engine, rel.span))
    backlog, step = timedelta(seconds=T.RESTART_BACKLOG_S), timedelta(seconds=rel.step_s)
    out = []
    for x in rises:
        for k, ts in enumerate(found):
            if not ts - step <= x.ts <= ts + backlog:
                continue
            end = found[k + 1] if k + 1 < len(found) else rel.span.end
            after = rate.filter((pl.col("ts") >= ts + backlog) & (pl.col("ts") <= end))["value"].to_numpy()
            after = after[np.isfinite(after)]
            told = (end - ts - backlog).total_seconds() >= 60 and after.size
            if told and float(np.median(after)) / x.before - 1.0 < T.LOAD_SHIFT_AT_DEPLOY:
                out.append(iso(x.ts))
            break
    return out


def _steady(engine: S.Engine, window: Window) -> tuple[float | None, float | None, list[str], list[Window]]:
    """The KV cache's peak and the TTFT median outside each restart's backlog, the restarts' times,
    and the spans outside the backlogs (None, None, [], [window]: no restart in ``window``, the
    window's own values stand)."""
    spans, found = _outside_backlogs(engine, window)
    if not found:
        return None, None, [], [window]
    peaks = [S.gauge_stat(engine, "kv_cache_usage", w, "max", combine="max") for w in spans]
    values = [v for v in peaks if v is not None]
    ttft = S.spans_quantile(engine, "ttft", 0.5, spans) if spans else None
    return (max(values) if values else None), ttft, found, spans


def gather(
    engine: S.Engine,
    inc: Incident,
    *,
    events: pl.DataFrame,
    logs: pl.DataFrame | None = None,
    baseline: BaselineComparison | None = None,
    stages: StageBreakdown | None = None,
    release: ReleaseCorrelation | None = None,
    history_given: bool = True,
) -> Evidence:
    """Everything triage needs; pass already computed analyses to avoid computing them twice.

    The rows judge the span after the onset (:func:`perfkit.analyses.onset.find_onset`): ``inc``'s
    window is narrowed to it, and analyses computed over the whole window are recomputed over it.
    Release correlation keeps the whole window (the deploy at the onset is in it)."""
    rel = release or correlate(engine, inc.window, inc.baseline, events)
    onset = find_onset(rel, inc.window, inc.baseline, inc.slo)
    if onset.narrowed:
        inc = dataclasses.replace(inc, window=onset.span)
        baseline = stages = None
    base = baseline or compare(engine, inc.window, inc.baseline, inc.slo)
    st = stages or breakdown(engine, inc.window, inc.baseline)
    missing = [*base.missing, *rel.missing]
    if inc.baseline is None:
        missing.append("triage: no baseline window; rows needing a comparison are inconclusive")
    kv_steady, ttft_steady, restart_times, spans = _steady(engine, inc.window)
    unheld, held = unheld_median(engine, spans, inc.baseline)
    gpu, host = _gpu_host(engine, inc)
    if gpu.get("util_incident") is None:
        missing.append("gpu state: no DCGM metrics in window")
    if host.get("cpu_busy_incident") is None:
        missing.append("host: no node exporter CPU metrics in window")
    if logs is None or not logs.height:
        missing.append("logs: none in window (OOM, NCCL and Xid lines unchecked)")
    training = {name: S.resolve(engine, name).found for name in TRAINING}
    if not any(training.values()):
        missing.append(
            "training: no train_* metrics and no framework step lines (data-wait, comm and loss rows unchecked)"
        )
    if not events.height:
        missing.append("events: no deploy history (release_regression unchecked)")
    # the engine's settings (chunked prefill, batch limits): its start-up log lines, its info metrics
    config = engine_config(logs, engine, inc.window)
    train = gather_training(engine, inc)
    train.loss_by_step = loss_by_step(logs, inc)
    return Evidence(
        inc,
        base,
        st,
        rel,
        interference(engine, inc, base, logs),
        _log_counts(logs, inc.window),
        config.get("chunked_prefill", {}).get("value"),  # type: ignore[arg-type]
        gpu,
        host,
        training,
        missing,
        train,
        oom_shortfall(logs, inc.window),
        onset=onset,
        engine_config=config,
        history_given=history_given,
        kv_max_steady=kv_steady,
        ttft_p50_steady=ttft_steady,
        restarts=restart_times,
        restart_bursts=_restart_bursts(engine, rel),
        ttft_p50_unheld=unheld,
        ttft_held_share=held,
        serving_engine=serving_engine(engine),
        engine_version=engine_version(logs),
        replicas=replicas(engine, inc.window, inc.baseline) if serving_engine(engine) else None,
    )


def serving_engine(engine: S.Engine) -> str | None:
    """The engine dialect whose series answer (:func:`perfkit.engine.signals.serving_engine`)."""
    return S.serving_engine(engine)
