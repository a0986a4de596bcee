"""The simulated training job told as a framework tells it (a scenario's ``framework:`` field, issue 25).

``perfkit`` (the default): rank 0's ``step N | loss ...`` line and perfkit's ``train_*`` exporter.
Any other framework: no ``train_*`` series (a real job of that framework has none), and at each
logging interval rank 0's lines in that framework's own format, written after the upstream code
that prints them (real samples of each in ``tests/data/trainers/``, read by
:mod:`perfkit.sources.trainer_lines`):

``megatron``
    Megatron-LM ``training_log``'s iteration line (time per iteration, TFLOP/s per GPU, learning
    rate, global batch size, ``lm loss``, loss scale, skipped and NaN iterations; no ``grad norm``:
    the simulator has none to report) and its timers block at ``--timing-log-level 2``
    (of its timers ``forward-backward``, ``all-grads-sync`` and ``optimizer``, level 1, and
    ``batch-generator``, level 2; min and max across the ranks, ms per iteration;
    megatron/core/timers.py pads each name with dots to 48).
``torchtitan``
    the metrics line (``step  loss  memory  tps  tflops  mfu``, the release before ``grad_norm``)
    behind torchtitan's ``[titan] <time> - root - INFO -`` prefix, and its TensorBoard scalars
    (``--metrics.enable_tensorboard``: ``loss_metrics/global_avg_loss``, ``throughput(tps)``,
    ``time_metrics/end_to_end(s)``, ``time_metrics/data_loading(s)`` ...) under ``tensorboard/``.
``deepspeed``
    ``[Rank 0] step=..., skipped=..., lr=[...], mom=[...]`` every ``steps_per_print``, the
    ``wall_clock_breakdown`` timers line (ms summed over the interval) and the ThroughputTimer
    line. DeepSpeed prints no loss and does not time the data loader: those rows are not
    checkable from its lines, as in a real job.
``hf``
    the Hugging Face Trainer's ``{'loss': ..., 'learning_rate': ..., 'epoch': ...}`` dicts (no
    time, no step; no ``grad_norm``: the simulator has none) and its TensorBoard scalars
    (``train/loss`` ..., ``report_to="tensorboard"``), whose wall times place the run.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

FRAMEWORKS = ("perfkit", "megatron", "torchtitan", "deepspeed", "hf")
TRAIN_ITERS = 500_000  # Megatron's --train-iters as the line states it
EPOCH_STEPS = 20_000  # steps per epoch for the HF dicts' ``epoch``
GIB = float(1 << 30)


def _stamp(dt: datetime, kind: str) -> str:
    if kind == "megatron":
        return f"[{dt:%Y-%m-%d %H:%M:%S}]"
    return f"{dt:%Y-%m-%d %H:%M:%S},{dt.microsecond // 1000:03d}"


def interval(rows: list[dict[str, Any]], n: int, params: float, peak_tflops: float) -> dict[str, Any]:
    """What a logging interval's steps add up to: means per step, per rank where it varies."""
    dur = np.array([r["t_end"] - r["t_start"] for r in rows])
    wait = np.array([r["wait"][:n] for r in rows])
    compute = np.array([r["compute"][:n] for r in rows])
    comm = np.array([r["comm"][:n] for r in rows])
    tokens = float(sum(np.nansum(r["tokens"]) for r in rows))
    step_s = float(np.mean(dur))
    tps_gpu = tokens / float(np.sum(dur)) / n if np.sum(dur) > 0 else 0.0
    tflops = 6.0 * params * tps_gpu / 1e12
    losses = np.array([r["loss_global"] for r in rows])
    return {
        "step": int(rows[-1]["step"]),
        "steps": len(rows),
        "step_s": step_s,
        "wait": np.nanmean(wait, axis=0),  # per rank, s per step
        "compute": np.nanmean(compute, axis=0),
        "comm": np.nanmean(comm, axis=0),
        "loss": float(np.nanmean(losses)) if np.isfinite(losses).any() else float("nan"),
        "nan": int(np.sum(~np.isfinite(losses))),
        "lr": float(rows[-1]["lr"]),
        "samples": float(np.nansum(rows[-1]["samples"])),  # the global batch
        "tps_gpu": tps_gpu,
        "tflops": tflops,
        "mfu": 100.0 * tflops / peak_tflops,
    }


def _timer(name: str, lo: float, hi: float) -> str:
    """megatron/core/timers.py: ``'\\n    {}: ({:.2f}, {:.2f})'.format((name + ' ').ljust(48, '.'), ...)``."""
    return f"    {(name + ' ').ljust(48, '.')}: ({lo:.2f}, {hi:.2f})"


def lines(framework: str, at: datetime, iv: dict[str, Any], mem_gib: float, cap_gib: float) -> list[str]:
    """Rank 0's lines for one logging interval ending at ``at``."""
    step, loss = iv["step"], iv["loss"]
    if framework == "megatron":
        ms = lambda v: 1e3 * np.asarray(v)  # noqa: E731
        head = (
            f" {_stamp(at, 'megatron')} iteration {step:8d}/{TRAIN_ITERS:8d} | consumed samples: "
            f"{int(step * iv['samples']):12d} | elapsed time per iteration (ms): {iv['step_s'] * 1e3:.1f} | "
            f"throughput per GPU (TFLOP/s/GPU): {iv['tflops']:.1f} | learning rate: {iv['lr']:.6E} | "
            f"global batch size: {int(iv['samples']):5d} | lm loss: {loss:.6E} | loss scale: 1.0 | "
            f"number of skipped iterations: {0:3d} | number of nan iterations: {iv['nan']:3d} |"
        )
        fb = ms(iv["wait"] + iv["compute"] + iv["comm"])
        wait, comm = ms(iv["wait"]), ms(iv["comm"])
        opt = ms(0.04 * iv["compute"])
        return [
            head,
            "(min, max) time across ranks (ms):",
            _timer("forward-backward", float(fb.min()), float(fb.max())),
            _timer("batch-generator", float(wait.min()), float(wait.max())),
            _timer("all-grads-sync", float(comm.min()), float(comm.max())),
            _timer("optimizer", float(opt.min()), float(opt.max())),
        ]
    if framework == "torchtitan":
        return [
            f"[titan] {_stamp(at, 'py')} - root - INFO - step: {step:2}  loss: {loss:7.4f}  memory: "
            f"{mem_gib:5.2f}GiB({100 * mem_gib / cap_gib:.2f}%)  tps: {round(iv['tps_gpu']):,}  "
            f"tflops: {iv['tflops']:,.2f}  mfu: {iv['mfu']:.2f}%"
        ]
    if framework == "deepspeed":
        where = f"{_stamp(at, 'py')}] [INFO] [logging.py:128:log_dist] [Rank 0]"
        k = iv["steps"]
        c0 = float(np.nanmean(iv["compute"]))
        fwd, inner, opt = 1e3 * k * 0.3 * c0, 1e3 * k * 0.66 * c0, 1e3 * k * 0.04 * c0
        reduce = 1e3 * k * float(np.nanmean(iv["comm"]))
        samples_s = iv["samples"] / iv["step_s"]
        return [
            f"[{where} step={step}, skipped=0, lr=[{iv['lr']:.6g}], mom=[(0.9, 0.95)]",
            f"[{where} time (ms) | fwd: {fwd:.2f} | bwd: {inner + reduce:.2f} | bwd_inner: {inner:.2f} | "
            f"bwd_allreduce: {reduce:.2f} | step: {opt:.2f}",
            f"[{_stamp(at, 'py')}] [INFO] [timer.py:264:stop] epoch=0/micro_step={step}/global_step={step}, "
            f"RunningAvgSamplesPerSec={samples_s:.4f}, CurrSamplesPerSec={samples_s:.4f}, "
            f"MemAllocated={0.8 * mem_gib * GIB / 1e9:.2f}GB, MaxMemAllocated={mem_gib * GIB / 1e9:.2f}GB",
        ]
    if framework == "hf":
        return [f"{{'loss': {loss:.4f}, 'learning_rate': {iv['lr']:.4e}, 'epoch': {step / EPOCH_STEPS:.2f}}}"]
    return []


def scalars(
    framework: str, at: float, iv: dict[str, Any], mem_gib: float
) -> list[tuple[str, float, int, float]]:
    """(tag, value, step, wall time) of the TensorBoard scalars the framework writes each interval."""
    step = iv["step"]
    if framework == "torchtitan":
        values = {
            "loss_metrics/global_avg_loss": iv["loss"],
            "throughput(tps)": iv["tps_gpu"],
            "tflops": iv["tflops"],
            "mfu(%)": iv["mfu"],
            "time_metrics/end_to_end(s)": iv["step_s"],
            "time_metrics/data_loading(s)": float(iv["wait"][0]),  # rank 0 writes them
            "memory/max_reserved(GiB)": mem_gib,
        }
    elif framework == "hf":
        values = {
            "train/loss": iv["loss"],
            "train/learning_rate": iv["lr"],
            "train/epoch": step / EPOCH_STEPS,
        }
    else:
        return []
    return [(tag, float(v), step, at) for tag, v in values.items()]


def write_scalars(points: list[tuple[str, float, int, float]], folder: Path, name: str) -> None:
    """Write ``points`` as one event file, as ``torch.utils.tensorboard.SummaryWriter.add_scalar``
    does (``simple_value`` summaries), through TensorBoard's own event-file writer."""
    if not points:
        return
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".writing"
    writer = EventFileWriter(str(tmp))
    for tag, value, step, wall in points:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
    writer.close()
    (written,) = tmp.glob("*tfevents*")
    written.rename(folder / name)
    tmp.rmdir()
