"""The trainer's checklist (issue 25): for the evidence a training job left, which triage rows and
sections can be checked, from what, and which setting would make the rest checkable.

A job's evidence is perfkit's ``train_*`` exporter (``TrainMetrics``), or its framework's own lines
and TensorBoard scalars (:mod:`perfkit.sources.trainer_series` turns them into ``trainer_*``
series). Each framework logs some signals and never others; the settings that add them are
named after the upstream option:

* Megatron-LM: ``--log-interval`` (the iteration line: step time, loss), ``--log-throughput``
  (TFLOP/s per GPU), ``--timing-log-level 1`` (``all-grads-sync``, ``params-all-gather``: exposed
  communication) and ``--timing-log-level 2`` (``batch-generator``: data wait), both through
  ``--timing-log-option minmax`` (the default) so the slowest rank shows;
  ``--tensorboard-dir`` with ``--log-timers-to-tensorboard`` writes the same to TensorBoard.
* torchtitan: its metrics line always (loss, tps, TFLOP/s, MFU); ``--metrics.enable_tensorboard``
  writes ``time_metrics/data_loading(s)``, rank 0's only unless ``--metrics.save_for_all_ranks``.
* DeepSpeed: ``"wall_clock_breakdown": true`` (the ``bwd_allreduce`` timer: communication),
  ``steps_per_print``, the flops profiler (TFLOP/s per GPU); it times no data loading and prints no loss.
* NeMo: its progress line (``train_step_timing in s``, ``reduced_train_loss``); no timers.
* Hugging Face Trainer: ``logging_steps`` (loss, grad norm) and ``report_to="tensorboard"`` (the
  same with wall times); no step breakdown.
* any of them: perfkit's ``TrainMetrics`` (perfkit/sources/train_exporter.py) exports all four.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfkit.engine import signals as S


@dataclass(frozen=True)
class Need:
    what: str  # the checked thing: "data_pipeline row", "step breakdown"
    signal: str  # perfkit.engine.signals name it reads
    meaning: str
    how: Mapping[str, str]  # framework title (or "any") -> the setting that gives it


_TM = "perfkit TrainMetrics(... data_wait ...)"
NEEDS: tuple[Need, ...] = (
    Need(
        "step breakdown, every training row",
        "train_step",
        "step time",
        {
            "Megatron-LM": "--log-interval N (the iteration line)",
            "torchtitan": "its metrics line (step time from the lines' times)",
            "DeepSpeed": "steps_per_print (step time from the lines' times)",
            "Hugging Face Trainer": "none: it logs no step time (perfkit TrainMetrics)",
            "NeMo": "its progress line (train_step_timing in s)",
            "any": "perfkit TrainMetrics",
        },
    ),
    Need(
        "data_pipeline row",
        "train_data_wait",
        "the slowest rank's data wait per step",
        {
            "Megatron-LM": "--timing-log-level 2 (batch-generator, min/max across ranks)",
            "torchtitan": "--metrics.enable_tensorboard --metrics.save_for_all_ranks (time_metrics/data_loading)",
            "DeepSpeed": f"none: DeepSpeed does not time the DataLoader ({_TM})",
            "Hugging Face Trainer": f"none ({_TM})",
            "NeMo": f"none ({_TM})",
            "any": _TM,
        },
    ),
    Need(
        "network_communication row",
        "train_comm",
        "exposed communication per step",
        {
            "Megatron-LM": "--timing-log-level 1 (all-grads-sync, params-all-gather)",
            "torchtitan": "none in its metrics: profiler traces (traces/) or NCCL_DEBUG=WARN lines",
            "DeepSpeed": '"wall_clock_breakdown": true (bwd_allreduce)',
            "Hugging Face Trainer": "none: profiler traces (traces/) or NCCL_DEBUG=WARN lines",
            "NeMo": "none in its progress line: profiler traces (traces/) or NCCL_DEBUG=WARN lines",
            "any": "perfkit TrainMetrics(comm_s=...) or profiler traces",
        },
    ),
    Need(
        "training_instability row",
        "train_loss",
        "loss",
        {
            "Megatron-LM": "--log-interval N (lm loss)",
            "torchtitan": "its metrics line",
            "DeepSpeed": "none: DeepSpeed prints no loss (the training script's own print, or perfkit TrainMetrics)",
            "Hugging Face Trainer": 'logging_steps (and report_to="tensorboard" for wall times)',
            "NeMo": "its progress line (reduced_train_loss)",
            "any": "perfkit TrainMetrics",
        },
    ),
    Need(
        "efficiency (MFU) section",
        "train_tflops",
        "the framework's own TFLOP/s or MFU",
        {
            "Megatron-LM": "--log-throughput (throughput per GPU)",
            "torchtitan": "its metrics line (tflops, mfu)",
            "DeepSpeed": '"flops_profiler": {"enabled": true} (its fwd+bwd FLOPS per GPU at the profiled step)',
            "NeMo": "none (perfkit's MFU from tokens/s: set seq_len and global_batch)",
            "Hugging Face Trainer": "none (perfkit's MFU from tokens/s and the model)",
            "any": "perfkit's own MFU from tokens/s (train_tokens_total) and the model",
        },
    ),
)


def checklist(engine: Any, frameworks: Sequence[str], sources: Mapping[str, str]) -> list[dict[str, str]]:
    """One row per :data:`NEEDS` entry: ``checks``, ``needs``, ``found`` (the source, or "missing")
    and ``to_get_it`` (the setting, for the frameworks found, or for any job when none is).

    ``frameworks``: the framework titles whose lines the evidence holds; ``sources``: signal ->
    where it came from (:func:`perfkit.analyses.training_evidence.signal_sources`)."""
    titles = list(
        dict.fromkeys(
            f.removesuffix(" (TensorBoard)") for f in frameworks if not f.startswith("PyTorch elastic")
        )
    )
    titles = titles or ["any"]
    rows = []
    for need in NEEDS:
        found = S.resolve(engine, need.signal).found or (
            need.signal == "train_tflops" and S.resolve(engine, "train_mfu").found
        )
        how = "; ".join(f"{t}: {need.how.get(t, need.how['any'])}" for t in titles)
        rows.append(
            {
                "checks": need.what,
                "needs": need.meaning,
                "found": sources.get(need.signal, "found") if found else "missing",
                "to_get_it": "" if found else how,
            }
        )
    return rows
