"""The training runbook's sections beyond the step gauges: profiler traces, efficiency (MFU),
memory, scaling, training cost, and the training postmortem. Called from the notebook as::

    import perfkit.app.runbooks.training as rbt
    rbt.scope(ctx)        # the scope, and the trainer's checklist: which rows the evidence can check
    rbt.trace(ctx); rbt.efficiency(ctx); rbt.memory(ctx); rbt.scaling(ctx); rbt.training_cost(ctx)
    rbt.findings(ctx)     # the postmortem in the job's terms (not rb.findings: that one is a server's)

Wiring only: traces are read and analysed by :mod:`perfkit.traces`, scaling by
:mod:`perfkit.analyses.scaling` (through :func:`perfkit.app.runbooks.scaling.scaling_for`), MFU by
:mod:`perfkit.analyses.mfu`, memory by :mod:`perfkit.analyses.memory`; they look as
:mod:`perfkit.report.training_view`, :mod:`perfkit.report.training_impact` and :mod:`perfkit.report.trace_figures` draw them. Every
section says plainly what it lacks (no traces, no model description, one phase only) and never
raises (:func:`perfkit.app.runbooks.context.section`).

The runbook parameters it reads (kept in ``ctx.params``; 0 or "" means: from the evidence)::

    model = ""          # a key of data/hardware/models.yaml; empty: incident.yaml's model
    gpu = ""            # a GPU of data/hardware/gpus.yaml; empty: incident.yaml's hardware.gpu
    seq_len = 0         # tokens per sequence; 0: train_tokens_total / train_samples_total
    global_batch = 0    # sequences per optimizer step: tokens/s from it when train_tokens_total is absent
    micro_batch = 0     # sequences per GPU per forward pass; 0: global batch per data-parallel rank
    baseline_gpus = 0   # GPUs of the job in the baseline window; 0: traces, then the exporting ranks
    incident_gpus = 0   # ... in the incident window; 0: traces, incident.yaml, the exporting ranks
    tp = 1; pp = 1      # tensor / pipeline parallel sizes
    zero_stage = -1     # 0-3 (3: FSDP full shard); -1: unknown (states shown for every stage)
    recompute = ""      # activation recomputation: none | selective | full; empty: implied by the memory peak, else none
    dtype = "bf16"      # the matmul dtype MFU's peak is taken for: bf16 | fp16 | fp8
    traces = ""         # a trace file or folder (one file per rank); empty: the bundle's traces/
    tensorboard = ""    # TensorBoard event files' folder (read at load: perfkit.sources.bundle); empty: tensorboard/
    usd_per_gpu_hour    # (shared) the hardware price; 0: incident.yaml, else the GPU table's list price
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from perfkit.app.runbooks.context import Context, section
from perfkit.errors import ConfigError
from perfkit.report import training_impact as impact
from perfkit.report import training_view as view
from perfkit.report.sections import Section
from perfkit.report.trace_figures import TracePhase

PARAMETERS = (
    "model", "gpu", "seq_len", "global_batch", "micro_batch", "baseline_gpus", "incident_gpus", "tp",
    "pp", "zero_stage", "recompute", "dtype", "traces", "tensorboard",
)  # fmt: skip
MAX_TEXT = 4096
"""A path or name longer than this is a mistake: refused, not read."""
MAX_RUNS = 8
"""Profiled runs read at most: a bundle holds one per window (baseline, incident) or a few more."""
MIN_RUN_OVERLAP = 0.5
"""A profiled run belongs to a window when at least half of its span lies inside it (a profile of
a few steps lasts seconds, a window minutes)."""


# -- parameters ---------------------------------------------------------------------------------------


def _text(ctx: Context, key: str, default: str = "") -> str:
    value = ctx.params.get(key)
    text = default if value in (None, "") else str(value).strip()
    if len(text) > MAX_TEXT:
        raise ConfigError(f"{key}: {len(text)} characters, more than {MAX_TEXT}")
    return text


def _int(ctx: Context, key: str, default: int, lo: int, hi: int) -> int:
    value = ctx.params.get(key)
    if value in (None, ""):
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise ConfigError(f"{key}: {int(value)} is outside [{lo}, {hi}]")
    return int(value)


def _gpus(ctx: Context, key: str) -> int | None:
    return _int(ctx, key, 0, 0, 10_000_000) or None


# -- scope: the incident, and what the job's evidence can check --------------------------------------


def scope(ctx: Context) -> Section:
    """The inference runbook's scope section with the trainer's checklist under it."""
    import perfkit.app.runbooks.inference as rb

    return view.with_checklist(rb.scope(ctx), checklist(ctx))


@section("training_evidence", "Trainer's checklist")
def checklist(ctx: Context) -> Section:
    """Which training rows and sections the evidence can check, from what, and which setting of the
    job's framework would make the rest checkable (:mod:`perfkit.analyses.training_checklist`)."""
    from perfkit.analyses.training_checklist import checklist as rows_for
    from perfkit.analyses.training_evidence import signal_sources

    trainer = getattr(ctx.bundle, "trainer", None)
    frameworks = list(trainer.frameworks) if trainer else []
    rows = rows_for(ctx.engine, frameworks, signal_sources(ctx.engine))
    return view.checklist_section(rows, frameworks, trainer.as_dict() if trainer else None)


# -- shared computations (each once per context) ---------------------------------------------------


def _hardware(ctx: Context) -> tuple[Any, Any, str]:
    """The model and GPU descriptions (``model``/``gpu`` parameters, else incident.yaml), and why
    not when one is missing."""
    from perfkit.core import hardware

    inc = ctx.incident
    assert inc is not None
    name = _text(ctx, "model") or (inc.model or "")
    gpu_name = _text(ctx, "gpu") or inc.hardware.gpu
    spec = gpu = None
    why = []
    if not name:
        why.append("no model named (set `model` to a key of data/hardware/models.yaml)")
    else:
        try:
            spec = hardware.model(name)
        except ConfigError:
            known = ", ".join(sorted(hardware.models()))
            why.append(
                f"no description of model {name!r} in data/hardware/models.yaml (set `model` to one of: {known})"
            )
    try:
        gpu = hardware.gpu(gpu_name)
    except ConfigError:
        why.append(f"GPU {gpu_name!r} is not in data/hardware/gpus.yaml (set `gpu`)")
    return spec, gpu, "; ".join(why)


def _scaling(ctx: Context) -> tuple[Any, dict[str, str | None]]:
    """The baseline window against the incident window (:func:`perfkit.app.runbooks.scaling.scaling_for`)."""
    from perfkit.app.runbooks.scaling import scaling_for

    return ctx.need(
        "scaling",
        lambda: scaling_for(
            ctx, gpus_before=_gpus(ctx, "baseline_gpus"), gpus_after=_gpus(ctx, "incident_gpus")
        ),
    )


def _sides(ctx: Context) -> dict[str, Any]:
    """Window -> :class:`~perfkit.analyses.scaling.RunSide`, with tokens/s from ``global_batch`` ×
    ``seq_len`` / step time when the job exports no ``train_tokens_total``."""

    def compute() -> dict[str, Any]:
        result, _ = _scaling(ctx)
        sides = {"baseline": result.before, "incident": result.after}
        batch, seq = _int(ctx, "global_batch", 0, 0, 2**31), _int(ctx, "seq_len", 0, 0, 2**24)
        for s in sides.values():
            if s.reported_tokens_per_s is None and batch and seq and s.step_s:
                s.reported_tokens_per_s, s.per_rank = batch * seq / s.step_s, False
                s.notes.append(
                    f"tokens/s = global_batch {batch} × seq_len {seq} / step time {s.step_s:.2f} s"
                )
            if s.reported_tokens_per_s is None and s.window is not None:
                _from_framework(ctx, s, seq)
        return sides

    return ctx.need("training_sides", compute)


def _from_framework(ctx: Context, side: Any, seq: int) -> None:
    """The job's tokens/s from what the framework's lines report: torchtitan's ``tps`` (per device)
    × the GPUs, else the samples/s a Megatron or DeepSpeed line gives × ``seq_len``."""
    from perfkit.engine import signals as S

    gpus = side.gpus or (ctx.incident.hardware.count if ctx.incident else None)
    per_gpu = S.gauge_stat(ctx.engine, "train_tokens_per_gpu", side.window, "avg", combine="avg")
    samples = S.gauge_stat(ctx.engine, "train_samples_rate", side.window, "avg", combine="avg")
    if per_gpu is not None and gpus:
        side.reported_tokens_per_s, side.per_rank = per_gpu * gpus, False
        side.notes.append(
            f"tokens/s = {per_gpu:,.0f} tokens/s per GPU as the framework reports it × {gpus} GPUs"
        )
    elif samples is not None and seq:
        side.reported_tokens_per_s, side.per_rank = samples * seq, False
        side.notes.append(f"tokens/s = {samples:,.2f} samples/s as the framework reports it × seq_len {seq}")


def _reported(ctx: Context) -> dict[str, dict[str, float | None]]:
    """Window -> the framework's own TFLOP/s per GPU and MFU (a fraction), as its lines state them."""
    from perfkit.engine import signals as S

    out: dict[str, dict[str, float | None]] = {}
    for name, side in _sides(ctx).items():
        if side.window is None:
            continue
        out[name] = {
            "tflops": S.gauge_stat(ctx.engine, "train_tflops", side.window, "avg", combine="avg"),
            "mfu": S.gauge_stat(ctx.engine, "train_mfu", side.window, "avg", combine="avg"),
        }
    return out


def _seq_len(ctx: Context, side: Any) -> tuple[float | None, str]:
    """The sequence length: the parameter, else tokens per sample of the side's window."""
    from perfkit.analyses.mfu import training_throughput

    given = _int(ctx, "seq_len", 0, 0, 2**24)
    if given:
        return float(given), ""
    if side.window is None:
        return None, "no window"
    tp = training_throughput(ctx.engine, side.window, world_size=side.gpus)
    if tp is None or tp.tokens_per_sample is None:
        return None, "no sequence length: set `seq_len` (the job exports no train_samples_total)"
    return tp.tokens_per_sample, (
        f"sequence length {tp.tokens_per_sample:,.0f} = train_tokens_total / train_samples_total "
        "(exact for packed sequences)"
    )


def _utilisation(ctx: Context) -> tuple[dict[str, Any], str, list[str]]:
    """MFU/HFU per window, or why there is none."""
    from perfkit.analyses.mfu import mfu

    def compute() -> tuple[dict[str, Any], str, list[str]]:
        spec, gpu, why = _hardware(ctx)
        sides = _sides(ctx)
        out: dict[str, Any] = dict.fromkeys(sides)
        notes: list[str] = []
        if spec is None or gpu is None:
            return out, why, notes
        (recompute, recompute_from), dtype = _recompute(ctx), _text(ctx, "dtype", "bf16")
        for name, s in sides.items():
            seq, note = _seq_len(ctx, s)
            if s.tokens_per_s is None or not s.gpus or seq is None:
                why = why or note or f"no tokens/s or GPU count in the {name} window"
                continue
            out[name] = mfu(s.tokens_per_s, spec, gpu, s.gpus, seq, dtype=dtype, recompute=recompute)
            if note:
                notes.append(note)
        notes.append(f"recompute = {recompute}: {recompute_from}")
        return out, (why if all(v is None for v in out.values()) else ""), notes

    return ctx.need("utilisation", compute)


def _recompute(ctx: Context) -> tuple[str, str]:
    """The job's activation recomputation and where it comes from: the ``recompute`` parameter, else
    implied by the observed memory peak (:func:`perfkit.analyses.memory_peak.implied_recompute`),
    else none, said as an assumption (HFU then equals MFU)."""

    def compute() -> tuple[str, str]:
        given = _text(ctx, "recompute", "")
        if given:
            return given, "the recompute parameter"
        assumed = "not given: taken as none, so HFU equals MFU; set `recompute` (selective, full) if the job rematerialises"
        spec, gpu, _ = _hardware(ctx)
        observed = _observed_fb_bytes(ctx)
        inc = ctx.incident
        if spec is None or observed is None or inc is None:
            return "none", assumed
        from perfkit.analyses.memory_peak import implied_recompute, states_vs_peak

        side = _sides(ctx)["incident"]
        gpus = side.gpus or inc.hardware.count
        seq, _ = _seq_len(ctx, side)
        if not gpus or not seq:
            return "none", assumed
        capacity = gpu.memory_gib * 2**30 if gpu is not None else None
        peak = states_vs_peak(spec, int(gpus), observed, capacity)
        implied, why = implied_recompute(peak, int(seq), _int(ctx, "tp", 1, 1, 4096))
        if implied is None:
            return "none", f"not given and not implied ({why}): taken as none, so HFU equals MFU"
        return implied, why

    return ctx.need("recompute", compute)


def _frameworks(ctx: Context) -> list[str]:
    """The training frameworks whose lines or scalars the evidence holds (titles)."""
    trainer = getattr(ctx.bundle, "trainer", None)
    return [f.removesuffix(" (TensorBoard)") for f in (trainer.frameworks if trainer else {})]


def _observed_fb_bytes(ctx: Context) -> float | None:
    """The incident window's peak ``DCGM_FI_DEV_FB_USED`` over GPUs, in bytes (DCGM reports MiB)."""
    from perfkit.engine import signals as S

    inc = ctx.incident
    assert inc is not None
    used = S.gauge_stat(ctx.engine, "fb_used", inc.window, "max", combine="max")
    return used * 2**20 if used is not None and math.isfinite(used) else None


def _span_share(span: tuple[float, float], window: Any) -> float:
    a, b = span
    w0, w1 = window.start.timestamp() * 1e6, window.end.timestamp() * 1e6
    return max(0.0, min(b, w1) - max(a, w0)) / (b - a) if b > a else float(w0 <= a <= w1)


def _trace_phases(ctx: Context) -> tuple[list[tuple[TracePhase, list[Any]]], str]:
    """Every profiled run (the ``traces`` parameter, else the bundle's ``traces/``), read and
    analysed, with the window each lies in; or why there is none."""
    from perfkit.traces.analysis import analyze_traces
    from perfkit.traces.read import read_traces

    def compute() -> tuple[list[tuple[TracePhase, list[Any]]], str]:
        given = _text(ctx, "traces")
        if given:
            root = Path(given).expanduser()
            subs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
            runs = {p.name: p for p in subs} if subs and not any(root.glob("*.json*")) else {"": root}
        elif ctx.bundle is not None and getattr(ctx.bundle, "traces", None):
            base = ctx.bundle.path / "traces"
            runs = {name: base / name if name else base for name in ctx.bundle.trace_runs()}
        else:
            where = "live sources carry none" if ctx.bundle is None else "the bundle has no traces/ folder"
            return [], f"{where} and the `traces` parameter is empty"
        inc = ctx.incident
        assert inc is not None
        out = []
        for name, path in sorted(runs.items())[:MAX_RUNS]:
            traces = read_traces(path)
            spans = [s for t in traces if (s := t.span()) is not None]
            window = name if name in ("baseline", "incident") else ""
            if spans:
                span = (min(s[0] for s in spans), max(s[1] for s in spans))
                for label, w in (("incident", inc.window), ("baseline", inc.baseline)):
                    if w is not None and _span_share(span, w) >= MIN_RUN_OVERLAP:
                        window = label
                        break
            sizes = {t.world_size for t in traces if t.world_size is not None}
            report = analyze_traces(traces, path=f"traces/{name}" if name else str(path))
            out.append((TracePhase(name, window, report, sizes.pop() if sizes else None), traces))
        order = {"baseline": 0, "incident": 1}
        out.sort(key=lambda pt: (order.get(pt[0].window, 2), pt[0].name))
        return out, ""

    return ctx.need("trace_phases", compute)


# -- sections --------------------------------------------------------------------------------------------


@section("trace", "Profiler traces: where each rank's step goes")
def trace(ctx: Context) -> Section:
    from perfkit.report.trace_figures import (
        no_traces_section,
        pick_step,
        rank_breakdown,
        step_timeline,
        trace_section,
    )

    phases, why = _trace_phases(ctx)
    if not phases:
        return no_traces_section(why)
    shown = next((pt for pt in phases if pt[0].window == "incident"), phases[-1])
    phase, traces = shown
    timeline, timeline_why = None, ""
    picked = pick_step(phase.report)
    if picked is not None:
        rank, step, timeline_why = picked
        rank_trace = next(t for t in traces if t.rank == rank)
        timeline = step_timeline(rank_trace, step, phase=phase.label)
        timeline_why = f"rank {rank} of the {phase.label} traces: {timeline_why}"
    notes = [n for p, _ in phases for n in p.report.notes]
    return trace_section(
        [p for p, _ in phases],
        timeline,
        timeline_why,
        rank_breakdown([(p.label, p.report) for p, _ in phases]),
        notes,
    )


@section("efficiency", "Efficiency: MFU and tokens/s per GPU")
def efficiency(ctx: Context) -> Section:
    sides = _sides(ctx)
    util, why, notes = _utilisation(ctx)
    side_notes = [
        n
        for s in sides.values()
        for n in s.as_dict()["notes"]
        if "train_tokens_total" in n or "tokens/s" in n
    ]
    return view.efficiency_section(sides, util, why, [*side_notes, *notes], _reported(ctx), _frameworks(ctx))


@section("memory", "GPU memory: what each item takes")
def memory(ctx: Context) -> Section:
    from perfkit.analyses.memory import TrainingSetup, training_memory
    from perfkit.analyses.memory_peak import states_vs_peak

    spec, gpu, why = _hardware(ctx)
    if spec is None:
        return view.missing_section(
            "memory", "GPU memory: what each item takes", f"no memory breakdown: {why}"
        )
    observed = _observed_fb_bytes(ctx)
    inc = ctx.incident
    assert inc is not None
    after = _sides(ctx)["incident"]
    gpus = after.gpus or inc.hardware.count
    notes = (
        []
        if observed is not None
        else ["no DCGM_FI_DEV_FB_USED in the incident window: the estimate stands alone"]
    )
    zero = _int(ctx, "zero_stage", -1, -1, 3)
    capacity = gpu.memory_gib * 2**30 if gpu is not None else None
    if zero < 0:
        if observed is None:
            return view.missing_section(
                "memory", "GPU memory: what each item takes",
                "no memory breakdown: zero_stage is not given and no DCGM_FI_DEV_FB_USED peak to split",
            )  # fmt: skip
        notes.append("zero_stage not given: the model states for every ZeRO stage against the observed peak; "
                     "set zero_stage, micro_batch and recompute for the item-by-item breakdown")  # fmt: skip
        return view.memory_section(states_vs_peak(spec, gpus, observed, capacity), notes)
    seq, note = _seq_len(ctx, after)
    if seq is None:
        return view.missing_section(
            "memory", "GPU memory: what each item takes", f"no memory breakdown: {note}"
        )
    tp, pp = _int(ctx, "tp", 1, 1, 4096), _int(ctx, "pp", 1, 1, 4096)
    micro = _int(ctx, "micro_batch", 0, 0, 2**20)
    if not micro:
        per_gpu = after.tokens_per_step_per_gpu
        micro = max(1, round(per_gpu * tp * pp / seq)) if per_gpu else 1
        notes.append(f"micro_batch not given: {micro}, the sequences per data-parallel rank and step "
                     "(no gradient accumulation assumed; set micro_batch when the job accumulates)")  # fmt: skip
    setup = TrainingSetup(seq_len=int(seq), micro_batch=micro, gpus=gpus, tp=tp, pp=pp, zero_stage=zero,
                          recompute=_recompute(ctx)[0], sequence_parallel=tp > 1)  # fmt: skip
    return view.memory_section(training_memory(spec, setup, gpu, observed_bytes=observed), [*notes, note])


@section("scaling", "Scaling: speed-up and where the time went")
def scaling(ctx: Context) -> Section:
    result, runs = _scaling(ctx)
    return view.scaling_section(result, runs)


def _price(ctx: Context) -> tuple[float | None, str]:
    inc = ctx.incident
    assert inc is not None
    given = ctx.params.get("usd_per_gpu_hour")
    if isinstance(given, int | float) and not isinstance(given, bool) and given > 0:
        return float(given), "the usd_per_gpu_hour parameter"
    if inc.hardware.usd_per_gpu_hour:
        return float(inc.hardware.usd_per_gpu_hour), "incident.yaml hardware.usd_per_gpu_hour"
    _, gpu, _ = _hardware(ctx)
    if gpu is not None and gpu.usd_per_hour:
        return float(gpu.usd_per_hour), f"the list price of {gpu.key} in data/hardware/gpus.yaml"
    return None, ""


def _cost(ctx: Context) -> impact.TrainingCost:
    inc = ctx.incident
    assert inc is not None
    price, source = _price(ctx)
    return ctx.need(
        "training_cost",
        lambda: impact.training_cost(_sides(ctx), price, source, inc.window.seconds, _progress(ctx)),
    )


def _progress(ctx: Context) -> dict[str, Any]:
    """Window -> the job's net progress from its logged steps (None where the logs number none)."""
    from perfkit.analyses.training_progress import progress
    from perfkit.sources.trainer_steps import step_points

    inc = ctx.incident
    assert inc is not None
    points = step_points(ctx.logs)
    logs = ctx.logs
    seen = logs["ts"].max() if logs is not None and logs.height and "ts" in logs.columns else None
    windows = {"baseline": inc.baseline, "incident": inc.window}
    return {k: progress(points, w, seen) if w is not None else None for k, w in windows.items()}  # type: ignore[arg-type]


def _rollback(ctx: Context) -> tuple[Any, str]:
    """What reverting the change a training instability started with discards (steps since the last
    checkpoint before it), and the change's name; (None, "") when the confirmed direction is not the
    training itself or no one change is to blame. A throughput regression's steps stay good: its
    revert discards nothing."""
    from perfkit.analyses.training_progress import rollback
    from perfkit.report.postmortem import training_change
    from perfkit.sources.trainer_steps import checkpoint_points, step_points

    inc, triage = ctx.incident, ctx.results.get("triage")
    confirmed = triage.confirmed() if triage is not None else []
    if (
        inc is None
        or ctx.events is None
        or not confirmed
        or confirmed[0].row.direction != "training_instability"
    ):
        return None, ""
    change = training_change(confirmed[0], ctx.events, inc)
    if change is None or change["at"] is None:
        return None, ""
    found = rollback(step_points(ctx.logs), checkpoint_points(ctx.logs), change["at"], inc.window.end)
    return (found, change["name"]) if found is not None else (None, "")


@section("training_cost", "Training cost")
def training_cost(ctx: Context) -> Section:
    return impact.cost_section(_cost(ctx))


def _quietly(compute: Any) -> Any:
    """A result for the postmortem, or None when it cannot be had (its section already said why)."""
    try:
        return compute()
    except Exception:  # noqa: BLE001 - the postmortem is built from what could be computed
        return None


@section("postmortem", "Findings")
def findings(ctx: Context) -> Section:
    """The postmortem in the job's terms: Impact as step time, tokens/s per GPU, MFU, time, GPU-hours
    and money lost; the step breakdown per rank and phase; the triage rows of a server set apart."""
    import polars as pl

    from perfkit.report import sections as show
    from perfkit.report.postmortem import build

    inc = ctx.incident
    assert inc is not None
    sides = _quietly(lambda: _sides(ctx)) or {}
    scaled = _quietly(lambda: _scaling(ctx))
    util = _quietly(lambda: _utilisation(ctx))
    phases = _quietly(lambda: _trace_phases(ctx))
    cost = _quietly(lambda: _cost(ctx))
    train = ctx.results.get("train")
    rollback, reverted = _quietly(lambda: _rollback(ctx)) or (None, "")
    job = impact.job_terms(
        rollback=rollback,
        reverted=reverted,
        sides=sides,
        util=util[0] if util else {},
        cost=cost,
        scaling=scaled[0] if scaled else None,
        phases=[p for p, _ in phases[0]] if phases else [],
        step_s=getattr(train, "step_s", {}) or {},
    )
    gpu_res = ctx.results.get("gpu")
    model = build(
        inc,
        base=None,
        stages=None,
        release=ctx.results.get("release"),
        triage=ctx.results.get("triage"),
        events=ctx.events if ctx.events is not None else pl.DataFrame(),
        missing=list(ctx.missing),
        gpu_summary=gpu_res.summary() if gpu_res else None,
        cost_summary=cost.summary() if cost else None,
        restarts=[r.as_dict() for r in getattr(ctx.results.get("completeness"), "restarts", [])],
        job=job,
    )
    return show.findings_section({**model, "workload": "training"})


__all__ = ["PARAMETERS", "efficiency", "findings", "memory", "scaling", "trace", "training_cost"]
