"""What the runbook sections compute beyond each analysis's own result.

The queries behind the training and GPU figures (the gauges over the baseline and incident
span), the training step table (baseline, incident and their ratio) and the cost table. Plain
frames out, no display: ``perfkit.report.sections`` draws them, ``perfkit.app.runbooks.inference`` wires them.
The training table reads ``perfkit.analyses.training_evidence.TrainingEvidence``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from perfkit.analyses.training_evidence import TrainingEvidence
from perfkit.core.frames import Window
from perfkit.engine import signals as S


def training_table(ev: TrainingEvidence) -> pl.DataFrame:
    """One row per training metric: baseline, incident and ``change_x`` (incident / baseline)."""
    rows = []
    measures: list[tuple[str, dict[str, Any], str]] = [
        ("step time", ev.step_s, "s"),
        ("data wait (slowest rank)", ev.data_wait_share, "share"),
        ("exposed communication (mean over ranks)", ev.comm_share, "share"),
        ("tokens/s per GPU (whole window, time down included)", ev.tokens_per_s, "tok/s"),
        ("loss roughness", ev.loss_roughness, "rel"),
        ("loss spikes", ev.loss_spikes, "count"),
        *((f"{name} (framework, as reported)", d, unit) for name, (d, unit) in ev.reported.items()),
    ]
    for name, d, unit in measures:
        b, i = d.get("baseline"), d.get("incident")
        rows.append(
            {
                "metric": name,
                "unit": unit,
                "baseline": None if b is None else float(b),
                "incident": None if i is None else float(i),
                "change_x": round(i / b, 2) if b and i is not None else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.Utf8,
            "unit": pl.Utf8,
            "baseline": pl.Float64,
            "incident": pl.Float64,
            "change_x": pl.Float64,
        },
    )


def training_series(engine: Any, window: Window, baseline: Window | None) -> dict[str, pl.DataFrame]:
    """The train_* gauges from the baseline's start to the incident's end, named as the figure shows them."""
    span_start = baseline.start if baseline else window.start
    span = Window(span_start, window.end)
    step = S.choose_step(span)
    return {
        "step time (s, avg over ranks)": S.gauge_series(engine, "train_step", span, step, combine="avg"),
        "data wait (s, slowest rank)": S.gauge_series(engine, "train_data_wait", span, step, combine="max"),
        "exposed comm (s, avg)": S.gauge_series(engine, "train_comm", span, step, combine="avg"),
        "loss (avg)": S.gauge_series(engine, "train_loss", span, step, combine="avg"),
    }


def throughput_series(engine: Any, window: Window, baseline: Window | None) -> dict[str, pl.DataFrame]:
    """The throughput a framework's own lines report (tokens/s per GPU, samples/s, TFLOP/s per GPU),
    over the baseline's start to the incident's end; empty frames where it reports none."""
    span = Window(baseline.start if baseline else window.start, window.end)
    step = S.choose_step(span)
    out = {
        "tokens/s per GPU (reported)": S.gauge_series(
            engine, "train_tokens_per_gpu", span, step, combine="avg"
        ),
        "samples/s (reported)": S.gauge_series(engine, "train_samples_rate", span, step, combine="avg"),
        "TFLOP/s per GPU (reported)": S.gauge_series(engine, "train_tflops", span, step, combine="avg"),
    }
    return {k: v for k, v in out.items() if v.height}


def gpu_activity_series(engine: Any, rel_span: Window) -> dict[str, pl.DataFrame]:
    """DCGM GPU utilisation and tensor activity (x100) averaged over GPUs, over ``rel_span``."""
    step = S.choose_step(rel_span)
    return {
        "GPU util % (avg)": S.gauge_series(engine, "gpu_util", rel_span, step, combine="avg"),
        "tensor active x100 (avg)": S.gauge_series(
            engine, "tensor_active", rel_span, step, combine="avg"
        ).with_columns(pl.col("value") * 100),
    }


def cost_table(res: Any) -> pl.DataFrame:
    """Generated tokens/s and dollars per million tokens, one row per window (a ``CostResult``)."""
    return pl.DataFrame(
        {
            "window": list(res.tokens_per_s),
            "generated_tokens_per_s": list(res.tokens_per_s.values()),
            "usd_per_million_tokens": [res.usd_per_million.get(k) for k in res.tokens_per_s],
        },
        schema={
            "window": pl.Utf8,
            "generated_tokens_per_s": pl.Float64,
            "usd_per_million_tokens": pl.Float64,
        },
    )
