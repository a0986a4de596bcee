"""A seeded, step-level simulator of a data-parallel training job, written as an incident bundle.

The simulator is split as the inference one is: :mod:`perfkit.lab.sim.training_model` holds the
spec (:class:`~perfkit.lab.sim.training_model.TrainingSpec`), :mod:`perfkit.lab.sim.training_physics`
the physics of one step, :mod:`perfkit.lab.sim.training_engine` the simulation
(:func:`~perfkit.lab.sim.training_engine.simulate` plays a spec forward optimizer step by optimizer
step for every rank), :mod:`perfkit.lab.sim.training_logs` the launcher's log lines and
:mod:`perfkit.lab.sim.training_exporters` the scrapes. This module writes the bundle:
:func:`generate` writes it (docs/bundle.md) with the writer of :mod:`perfkit.lab.sim.bundle`. The
same spec and seed give the same bytes. The scenarios in
:data:`~perfkit.lab.sim.training_traces.TRACED` also carry profiler traces of a few steps per window
(``traces/baseline/``, ``traces/incident/``: :mod:`perfkit.lab.sim.training_traces`).
"""

from __future__ import annotations

import csv
import time
from dataclasses import replace
from pathlib import Path

import yaml

from perfkit.core.frames import iso
from perfkit.lab.sim.bundle import write_metrics
from perfkit.lab.sim.training_engine import simulate
from perfkit.lab.sim.training_exporters import _emit
from perfkit.lab.sim.training_frameworks import write_scalars
from perfkit.lab.sim.training_model import TrainingSpec
from perfkit.lab.sim.training_traces import TRACED, write_traces

# -- the bundle ------------------------------------------------------------------------------------


def compress(spec: TrainingSpec, duration_s: float) -> TrainingSpec:
    """The same story in ``duration_s`` (for tests): times, restarts, timeouts and checkpoints scaled."""
    k = duration_s / spec.duration_s
    return replace(
        spec,
        duration_s=duration_s,
        baseline=(spec.baseline[0] * k, spec.baseline[1] * k),
        window=(spec.window[0] * k, spec.window[1] * k),
        changes=tuple(replace(ch, at_s=ch.at_s * k) for ch in spec.changes),
        phases=tuple(replace(p, start_s=p.start_s * k, end_s=p.end_s * k) for p in spec.phases),
        crashes=tuple(
            replace(
                cr,
                at_s=cr.at_s * k,
                relaunch_after_s=None if cr.relaunch_after_s is None else cr.relaunch_after_s * k,
            )
            for cr in spec.crashes
        ),
        notes=tuple((at * k, kind, detail) for at, kind, detail in spec.notes),
        bad_batches=tuple(t * k for t in spec.bad_batches),
        restart_s=max(6.0, spec.restart_s * k),
        relaunch_down_s=max(2.0, spec.relaunch_down_s * k),
        oom_retry_s=max(2.0, spec.oom_retry_s * k),
        nccl_timeout_s=max(10.0, spec.nccl_timeout_s * k),
        ib_error_s=max(2.0, spec.ib_error_s * k),
        ckpt_every=max(20, int(spec.ckpt_every * k)),
    )


def generate(spec: TrainingSpec, out: Path, *, duration_s: float | None = None) -> dict[str, float]:
    """Simulate ``spec`` and write its bundle into ``out``; ``duration_s`` compresses the story (tests).

    Returns facts: simulate_s, write_s, lines (OpenMetrics), steps, bytes (all files).
    """
    if duration_s is not None and duration_s != spec.duration_s:
        spec = compress(spec, duration_s)
    t_begin = time.perf_counter()
    run = simulate(spec)
    sim_s = time.perf_counter() - t_begin
    series, log_lines = _emit(run)
    out = Path(out)
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    n_lines = write_metrics(out / "metrics", series.values())
    (out / "logs" / "train.log").write_text("\n".join(log_lines) + "\n", encoding="utf-8")
    if run.scalars:  # a framework's TensorBoard scalars (lab/sim/training_frameworks.py)
        stamp = int(spec.start.timestamp())
        write_scalars(
            run.scalars,
            out / "tensorboard" / spec.framework,
            f"events.out.tfevents.{stamp}.{spec.cluster.hostname_prefix}01",
        )
    _write_events(spec, out)
    _write_incident(spec, out)
    if spec.id in TRACED:  # profiler traces of a few steps per window (perfkit.lab.sim.training_traces)
        write_traces(run, out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        "simulate_s": sim_s,
        "write_s": time.perf_counter() - t_begin - sim_s,
        "lines": n_lines,
        "steps": int(run.t_start.size),
        "bytes": size,
    }


def _write_events(spec: TrainingSpec, out: Path) -> None:
    events = [(0.0, "note", spec.initial_version, f"training job {spec.job} running since before the window")]
    for ch in sorted(spec.changes, key=lambda c: c.at_s):
        events.append((ch.at_s, ch.kind, ch.version, ch.detail))
    events.extend((at, kind, "", detail) for at, kind, detail in spec.notes)
    events.sort(key=lambda e: e[0])
    with (out / "events.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["ts", "kind", "service", "version", "detail"])
        for at, kind, ver, detail in events:
            w.writerow([iso(spec.at(at)), kind, spec.job, ver, detail])


def _write_incident(spec: TrainingSpec, out: Path) -> None:
    gpus = spec.setup.gpus
    for ch in sorted(spec.changes, key=lambda c: c.at_s):
        if ch.at_s <= spec.window[1]:
            gpus = int(ch.set.get("gpus", gpus))
    incident = {
        "id": f"INC-{spec.start:%Y%m%d}-{spec.id}",
        "title": spec.title,
        "service": spec.job,
        "model": spec.model.name,
        "window": {
            "start": iso(spec.at(spec.window[0])),
            "end": iso(spec.at(min(spec.window[1], spec.duration_s))),
        },
        "baseline": {"start": iso(spec.at(spec.baseline[0])), "end": iso(spec.at(spec.baseline[1]))},
        "slo": dict(spec.slo),
        "hardware": {
            "gpu": spec.cluster.gpu,
            "count": gpus,
            "usd_per_gpu_hour": spec.cluster.usd_per_gpu_hour,
        },
        "generator": {
            "scenario": spec.id,
            "seed": spec.seed,
            "note": "simulated by perfkit.lab.sim.training; see perfkit/lab/sim/training.py",
        },
    }
    (out / "incident.yaml").write_text(yaml.safe_dump(incident, sort_keys=False), encoding="utf-8")
    answer = {"scenario": spec.id, "difficulty": spec.difficulty, "brief": spec.brief, **spec.answer}
    (out / "answer.yaml").write_text(
        yaml.safe_dump(answer, sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
