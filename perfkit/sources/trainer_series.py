"""A training framework's log lines as series: the step time, data wait, exposed communication,
throughput and loss the training rows read (issue 25).

:func:`trainer_store` turns the records :mod:`perfkit.sources.trainer_lines` recognised into a
:class:`~perfkit.core.frames.MetricStore` of gauges named ``trainer_*`` (labels ``framework``, its
title such as ``Megatron-LM``, and ``source``, the log file). :mod:`perfkit.engine.signals` reads them wherever perfkit's own
``train_*`` series are absent, so every row, the step breakdown, MFU and the postmortem run on them
and name where each number came from (:data:`SERIES`).

==================================  ===========================================================
series                              from
==================================  ===========================================================
``trainer_step_seconds``            Megatron ``elapsed time per iteration (ms)``; NeMo ``train_step_timing
                                    in s``; torchtitan and DeepSpeed: the time between two logged steps /
                                    the steps between them (their lines state no step time)
``trainer_data_wait_seconds``       Megatron's ``batch-generator`` timer, its max across ranks (the
                                    slowest rank sets a synchronous job's pace)
``trainer_comm_seconds``            Megatron's gradient and parameter collectives' timers
                                    (:data:`COMM_TIMERS`, mean of min and max across ranks: the time
                                    a rank waits for them after compute, i.e. not hidden); DeepSpeed's
                                    ``bwd_allreduce`` timer over the steps since its last print
``trainer_loss``                    Megatron ``lm loss`` (the first ``... loss`` field), NeMo
                                    ``reduced_train_loss``, torchtitan ``loss``, HF ``loss``
``trainer_grad_norm``               ``grad norm`` / ``grad_norm``
``trainer_tokens_per_second_per_gpu``  torchtitan ``tps`` (per device, as it reports it)
``trainer_samples_per_second``      Megatron ``global batch size`` / step time; DeepSpeed
                                    ``CurrSamplesPerSec``; HF ``train_samples_per_second`` (job-wide)
``trainer_tflops_per_gpu``          Megatron ``throughput per GPU (TFLOP/s/GPU)``, torchtitan ``tflops``
``trainer_mfu_ratio``               torchtitan ``mfu`` (its own formula: 6N + attention FLOPs per token
                                    over the device's peak bf16 dense TFLOP/s)
``trainer_skipped_steps``           skipped iterations in the logging interval (Megatron), or since
                                    the last line (DeepSpeed's cumulative ``skipped``)
``trainer_nan_steps``               Megatron ``number of nan iterations``
``trainer_memory_reserved_bytes``   torchtitan ``memory`` (max reserved GiB)
==================================  ===========================================================

**Lines without a time.** Older Megatron releases print no timestamp, and the Hugging Face
Trainer's dicts never do. A line with no time of its own is placed backwards from the file's
modification time (the time of its last line): Megatron's by the stated time per iteration, HF's by
``train_steps_per_second`` and ``epoch`` of the final dict. Placed points are approximate and
:attr:`TrainerEvidence.notes` says so; without a modification time or a final HF dict they are not
placed and the note says that instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.core.frames import TS_DTYPE, MetricStore
from perfkit.sources.trainer_lines import FRAMEWORKS, KINDS, framework_of, timer_name, trainer_fields

COMM_TIMERS = (
    "backward-params-all-reduce",  # Megatron-LM before 2022 (and its forks)
    "backward-embedding-all-reduce",
    "all-grads-sync",
    "params-all-gather",
    "embedding-grads-all-reduce",
    "layernorm-grads-all-reduce",
    "conditional-embedder-grads-all-reduce",
)
"""Megatron-LM's timers of gradient reduction and parameter gathering (megatron/training/training.py
``timers_to_log``): with ``--overlap-grad-reduce`` they time only the wait after the backward pass,
the communication compute did not hide."""

SERIES = {
    "trainer_step_seconds": "step time (s)",
    "trainer_data_wait_seconds": "data wait per step (s)",
    "trainer_comm_seconds": "exposed communication per step (s)",
    "trainer_loss": "loss",
    "trainer_grad_norm": "grad norm",
    "trainer_tokens_per_second_per_gpu": "tokens/s per GPU",
    "trainer_samples_per_second": "samples/s (job)",
    "trainer_tflops_per_gpu": "TFLOP/s per GPU",
    "trainer_mfu_ratio": "MFU",
    "trainer_skipped_steps": "skipped steps",
    "trainer_nan_steps": "NaN steps",
    "trainer_memory_reserved_bytes": "max reserved memory (bytes)",
}
"""Every series :func:`trainer_store` writes, with what it means."""

_FIELDS: dict[str, tuple[tuple[str, str, float], ...]] = {
    # kind -> (field in the line, series, factor)
    "megatron": (  # Megatron-LM's names; Megatron-DeepSpeed's ("_" read as " ") after them
        ("elapsed time per iteration (ms)", "trainer_step_seconds", 1e-3),
        ("elapsed time per iteration ms", "trainer_step_seconds", 1e-3),
        ("grad norm", "trainer_grad_norm", 1.0),
        ("throughput per GPU (TFLOP/s/GPU)", "trainer_tflops_per_gpu", 1.0),
        ("TFLOPs", "trainer_tflops_per_gpu", 1.0),
        ("tokens per gpu per second tgs", "trainer_tokens_per_second_per_gpu", 1.0),
        ("tokens per gpu per second (tgs)", "trainer_tokens_per_second_per_gpu", 1.0),
        ("samples per second", "trainer_samples_per_second", 1.0),
        ("number of skipped iterations", "trainer_skipped_steps", 1.0),
        ("number of nan iterations", "trainer_nan_steps", 1.0),
    ),
    "nemo": (
        ("train_step_timing in s", "trainer_step_seconds", 1.0),
        ("reduced_train_loss", "trainer_loss", 1.0),
    ),
    "torchtitan": (
        ("loss", "trainer_loss", 1.0),
        ("grad_norm", "trainer_grad_norm", 1.0),
        ("tps", "trainer_tokens_per_second_per_gpu", 1.0),
        ("tflops", "trainer_tflops_per_gpu", 1.0),
        ("mfu", "trainer_mfu_ratio", 0.01),
        ("memory", "trainer_memory_reserved_bytes", float(1 << 30)),
    ),
    "deepspeed_throughput": (("CurrSamplesPerSec", "trainer_samples_per_second", 1.0),),
    "deepspeed_flops": (("tflops", "trainer_tflops_per_gpu", 1.0),),
    "hf": (
        ("loss", "trainer_loss", 1.0),
        ("grad_norm", "trainer_grad_norm", 1.0),
        ("train_samples_per_second", "trainer_samples_per_second", 1.0),
    ),
}
TB_TAGS: dict[str, tuple[str, str, float]] = {
    # tag -> (framework, series, factor). Megatron-LM megatron/training/training.py training_log
    # (add_scalar; iteration-time in seconds; timers via megatron/core/timers.py write: "<name>-time",
    # the max across ranks in seconds); HF transformers integration_utils.rewrite_logs ("train/" + key);
    # torchtitan torchtitan/components/metrics.py (MetricsProcessor.log)
    "iteration-time": ("megatron", "trainer_step_seconds", 1.0),
    "lm loss": ("megatron", "trainer_loss", 1.0),
    "grad-norm": ("megatron", "trainer_grad_norm", 1.0),
    "throughput": ("megatron", "trainer_tflops_per_gpu", 1.0),
    "batch-generator-time": ("megatron", "trainer_data_wait_seconds", 1.0),
    "train/loss": ("hf", "trainer_loss", 1.0),
    "train/grad_norm": ("hf", "trainer_grad_norm", 1.0),
    "train/train_samples_per_second": ("hf", "trainer_samples_per_second", 1.0),
    "loss_metrics/global_avg_loss": ("torchtitan", "trainer_loss", 1.0),
    "grad_norm": ("torchtitan", "trainer_grad_norm", 1.0),
    "throughput(tps)": ("torchtitan", "trainer_tokens_per_second_per_gpu", 1.0),
    "wps": ("torchtitan", "trainer_tokens_per_second_per_gpu", 1.0),
    "tflops": ("torchtitan", "trainer_tflops_per_gpu", 1.0),
    "mfu(%)": ("torchtitan", "trainer_mfu_ratio", 0.01),
    "time_metrics/end_to_end(s)": ("torchtitan", "trainer_step_seconds", 1.0),
    "time_metrics/data_loading(s)": ("torchtitan", "trainer_data_wait_seconds", 1.0),
    "memory/max_reserved(GiB)": ("torchtitan", "trainer_memory_reserved_bytes", float(1 << 30)),
}
"""The TensorBoard scalars read, by tag (Megatron's gradient collectives' ``<timer>-time`` tags
are summed into ``trainer_comm_seconds``)."""
_STEP_FROM_GAPS = ("torchtitan", "deepspeed")  # no step time in the line: from the lines' times
MAX_TRAINER_LINES = 500_000
"""At most this many framework lines are read (the newest; a step a second logged every step for
a week is 600k)."""


@dataclass
class TrainerEvidence:
    """What the framework lines gave: the series, and where each came from."""

    store: MetricStore
    frameworks: dict[str, int] = field(default_factory=dict)  # framework title -> lines read
    sources: dict[str, str] = field(default_factory=dict)  # series -> "Megatron-LM `lm loss` (logs/x.log)"
    timers: list[str] = field(default_factory=list)  # Megatron timer names seen
    restarts: int = 0  # torchrun "Worker group FAILED ... will restart" lines
    notes: list[str] = field(default_factory=list)  # how lines without a time were placed
    missing: list[str] = field(default_factory=list)  # lines that could not be placed, and why

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "store"}
        out["series"] = sorted(self.store.frames)
        return out


class _Points:
    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[int, str, str, float]]] = {}

    def add(self, series: str, ts: int | None, framework: str, source: str, value: float | None) -> None:
        """One point; ``framework`` a key of :data:`FRAMEWORKS`, whose title becomes the label."""
        if ts is not None and value is not None and not math.isinf(value):
            self.rows.setdefault(series, []).append((ts, FRAMEWORKS.get(framework, framework), source, value))

    def store(self) -> MetricStore:
        frames = {}
        for name, rows in self.rows.items():
            ts, fw, src, val = zip(*rows, strict=True)
            frame = pl.DataFrame(
                {
                    "framework": pl.Series(fw, dtype=pl.Utf8),
                    "source": pl.Series(src, dtype=pl.Utf8),
                    "ts": pl.Series(ts, dtype=pl.Int64).cast(TS_DTYPE),
                    "value": pl.Series(val, dtype=pl.Float64),
                }
            )
            frames[name] = frame.unique(subset=["framework", "source", "ts"], keep="last").sort(
                ["framework", "source", "ts"]
            )
        return MetricStore(frames, {name: "gauge" for name in frames})


def _loss_key(fields: Mapping[str, float]) -> str | None:
    """Megatron's loss field: ``lm loss`` or another ``... loss`` key, never ``loss scale``."""
    if "lm loss" in fields:
        return "lm loss"
    return next((k for k in fields if k.endswith(" loss")), None)


def trainer_store(
    logs: pl.DataFrame | None,
    *,
    mtimes: Mapping[str, float] | None = None,
    scalars: pl.DataFrame | None = None,
    scalars_from: str = "tensorboard",
) -> TrainerEvidence:
    """The ``trainer_*`` series of the framework lines in ``logs`` (the logs frame of
    :func:`perfkit.sources.logs.read_logs`) and of TensorBoard ``scalars``
    (:func:`perfkit.sources.tensorboard.read_scalars`, read from ``scalars_from``); ``mtimes``: each
    log file's modification time (epoch seconds, by the frame's ``source`` name), to place lines
    that carry no time. A number both give is two series (their ``source`` labels differ), which
    the rows average: the same number written twice."""
    ev = TrainerEvidence(MetricStore())
    points = _Points()
    if scalars is not None and scalars.height:
        _tensorboard(scalars, points, ev, scalars_from)
    if logs is not None and logs.height and "kind" in logs.columns:
        lines = logs.filter(pl.col("kind").is_in(KINDS)).tail(MAX_TRAINER_LINES)
        for (source,), part in lines.sort(["source", "line"]).group_by(["source"], maintain_order=True):
            _one_file(str(source), part, points, ev, (mtimes or {}).get(str(source)))
    ev.store = points.store()
    return ev


def _tensorboard(scalars: pl.DataFrame, points: _Points, ev: TrainerEvidence, where: str) -> None:
    comm = [f"{t}-time" for t in COMM_TIMERS]
    frame = scalars.filter(pl.col("tag").is_in([*TB_TAGS, *comm]) & pl.col("ts").is_not_null())
    summed = (  # Megatron's collectives' timers: one exposed-communication time per iteration
        frame.filter(pl.col("tag").is_in(comm))
        .group_by(["run", "step"], maintain_order=True)
        .agg(pl.col("ts").max(), pl.col("value").sum())
        .with_columns(tag=pl.lit("+".join(comm)))
    )
    frame = pl.concat([frame.filter(~pl.col("tag").is_in(comm)), summed.select(frame.columns)])
    for (tag, run), part in frame.group_by(["tag", "run"], maintain_order=True):
        fw, series, factor = TB_TAGS.get(str(tag), ("megatron", "trainer_comm_seconds", 1.0))
        source = f"{where}/{run}" if run else where
        for ts, value in zip(part["ts"], part["value"], strict=True):
            points.add(series, _ms(ts), fw, source, float(value) * factor)
        ev.sources.setdefault(series, f"{FRAMEWORKS[fw]} TensorBoard `{tag}` ({source})")
        ev.frameworks[f"{FRAMEWORKS[fw]} (TensorBoard)"] = (
            ev.frameworks.get(f"{FRAMEWORKS[fw]} (TensorBoard)", 0) + part.height
        )


def _ms(ts: Any) -> int | None:
    return None if ts is None else int(ts.timestamp() * 1000)


def _one_file(
    source: str, part: pl.DataFrame, points: _Points, ev: TrainerEvidence, mtime: float | None
) -> None:
    rows = [
        (kind, _ms(ts), text, trainer_fields(kind, text))
        for kind, ts, text in zip(part["kind"], part["ts"], part["message"], strict=True)
    ]
    rows = _placed(source, rows, ev, mtime)
    last: dict[str, tuple[int, float]] = {}  # framework -> (ts ms, step) of its last progress line
    step_s: float | None = None
    skipped_total: float | None = None
    printed: float | None = None  # DeepSpeed: steps between its last two step= lines
    timers: dict[str, tuple[float | None, float | None]] = {}
    anchor: int | None = None  # the ts of the Megatron line the timers that follow belong to

    def flush_timers() -> None:
        if anchor is None or not timers:  # set-up timers before the first iteration: not a step's
            timers.clear()
            return
        wait = timers.get("batch-generator")
        if wait and wait[1] is not None:
            points.add("trainer_data_wait_seconds", anchor, "megatron", source, wait[1] / 1e3)
        comm = [((lo + hi) / 2 if lo is not None and hi is not None else hi) for n, (lo, hi) in timers.items() if n in COMM_TIMERS]  # fmt: skip
        if comm:
            points.add(
                "trainer_comm_seconds",
                anchor,
                "megatron",
                source,
                sum(c for c in comm if c is not None) / 1e3,
            )
        timers.clear()

    for kind, ts, text, fields in rows:
        fw = framework_of(kind)
        ev.frameworks[FRAMEWORKS[fw]] = ev.frameworks.get(FRAMEWORKS[fw], 0) + 1
        if kind == "megatron_timer":
            one = {name: (fields.get("min"), fields.get("max"))} if (name := timer_name(text)) else {}
            one.update({k[4:]: (None, v) for k, v in fields.items() if k.startswith("max:")})
            timers.update(one)
            ev.timers.extend(n for n in one if n not in ev.timers)
            continue
        if kind.startswith("elastic"):
            ev.restarts += kind == "elastic_restart"
            continue
        if kind == "megatron":
            flush_timers()
            anchor = ts
        for key, series, factor in _FIELDS.get(kind, ()):
            if key in fields:
                points.add(series, ts, fw, source, fields[key] * factor)
                ev.sources.setdefault(series, f"{FRAMEWORKS[fw]} `{key}` ({source})")
        if kind == "megatron":
            loss_key = _loss_key(fields)
            if loss_key:
                points.add("trainer_loss", ts, fw, source, fields[loss_key])
                ev.sources.setdefault("trainer_loss", f"Megatron-LM `{loss_key}` ({source})")
            step_s = fields.get(
                "elapsed time per iteration (ms)", fields.get("elapsed time per iteration ms")
            )
            batch = fields.get("global batch size")
            if step_s and batch and "samples per second" not in fields:
                points.add("trainer_samples_per_second", ts, fw, source, batch / (step_s / 1e3))
                ev.sources.setdefault("trainer_samples_per_second", f"Megatron-LM `global batch size` / step time ({source})")  # fmt: skip
        if kind == "deepspeed" and "skipped" in fields:
            if skipped_total is not None and fields["skipped"] >= skipped_total:
                points.add("trainer_skipped_steps", ts, fw, source, fields["skipped"] - skipped_total)
            skipped_total = fields["skipped"]
            prev_step = last.get("deepspeed")
            printed = (
                fields["step"] - prev_step[1] if prev_step and fields.get("step", 0) > prev_step[1] else None
            )
        if kind == "deepspeed_time" and printed and "bwd_allreduce" in fields:
            # the global timers sum over the steps since the last print (deepspeed/runtime/engine.py
            # logs engine_timers.global_timers every steps_per_print, then resets them)
            points.add("trainer_comm_seconds", ts, fw, source, fields["bwd_allreduce"] / 1e3 / printed)
            ev.sources.setdefault("trainer_comm_seconds", f"DeepSpeed timer `bwd_allreduce` / steps per print ({source})")  # fmt: skip
        step = fields.get("step")
        if kind in _STEP_FROM_GAPS and step is not None and ts is not None:
            prev = last.get(fw)
            if prev is not None and step > prev[1] and ts > prev[0]:
                step_s = (ts - prev[0]) / 1e3 / (step - prev[1])
                points.add("trainer_step_seconds", ts, fw, source, step_s)
                ev.sources.setdefault("trainer_step_seconds", f"{FRAMEWORKS[fw]}: time between logged steps / steps ({source})")  # fmt: skip
            last[fw] = (ts, step)
    flush_timers()
    if "trainer_data_wait_seconds" in points.rows:
        ev.sources.setdefault("trainer_data_wait_seconds", f"Megatron-LM timer `batch-generator`, max across ranks ({source})")  # fmt: skip
    if "trainer_comm_seconds" in points.rows and FRAMEWORKS["megatron"] in {
        r[1] for r in points.rows["trainer_comm_seconds"]
    }:
        named = ", ".join(t for t in ev.timers if t in COMM_TIMERS)
        ev.sources.setdefault("trainer_comm_seconds", f"Megatron-LM timers {named} ({source})")


def _ms_per_step(fields: Mapping[str, float]) -> float | None:
    for key, factor in (("elapsed time per iteration (ms)", 1.0), ("elapsed time per iteration ms", 1.0), ("train_step_timing in s", 1e3)):  # fmt: skip
        if key in fields:
            return fields[key] * factor
    return None


def _placed(
    source: str,
    rows: list[tuple[str, int | None, str, dict[str, float]]],
    ev: TrainerEvidence,
    mtime: float | None,
) -> list[tuple[str, int | None, str, dict[str, float]]]:
    """``rows`` with a time for progress lines that carry none (module docstring)."""
    untimed = [i for i, (k, ts, _, f) in enumerate(rows) if ts is None and k in ("megatron", "nemo", "hf")]
    if not untimed:
        return rows
    kind = rows[untimed[0]][0]
    if mtime is None:
        ev.missing.append(f"{source}: {len(untimed)} {FRAMEWORKS[kind]} line(s) carry no time and the file's modification time is unknown: not placed")  # fmt: skip
        return rows
    end_ms = mtime * 1000
    out = list(rows)
    if kind in ("megatron", "nemo"):
        t = end_ms
        later: tuple[float, float] | None = None  # (step, ms per iteration) of the line after
        for i in reversed(untimed):
            k, _, text, f = out[i]
            step, per = f.get("step"), _ms_per_step(f)
            if later is not None and step is not None:
                t -= max(later[0] - step, 0.0) * later[1]  # the later line timed the iterations between
            out[i] = (k, round(t), text, f)
            if step is not None and per is not None:
                later = (step, per)
        ev.notes.append(f"{source}: {len(untimed)} {FRAMEWORKS[kind]} line(s) without timestamps placed back from the file's modification time by their time per iteration (approximate)")  # fmt: skip
        return out
    final = next((rows[i][3] for i in reversed(untimed) if "train_steps_per_second" in rows[i][3]), None)
    rate, epochs = (final or {}).get("train_steps_per_second"), (final or {}).get("epoch")
    runtime = (final or {}).get("train_runtime")
    if not rate or not epochs or not runtime:
        ev.missing.append(f"{source}: {len(untimed)} Hugging Face log dict(s) carry no time and no final train_runtime dict gives the step rate: not placed")  # fmt: skip
        return rows
    total_steps = runtime * rate
    for i in untimed:
        k, _, text, f = out[i]
        epoch = f.get("epoch")
        if epoch is not None:
            step = epoch / epochs * total_steps
            out[i] = (k, round(end_ms - (total_steps - step) / rate * 1e3), text, {**f, "step": round(step)})
    ev.notes.append(f"{source}: {len(untimed)} Hugging Face log dict(s) placed back from the file's modification time by train_steps_per_second and epoch (approximate)")  # fmt: skip
    return out
