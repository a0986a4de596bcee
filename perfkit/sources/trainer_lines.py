"""Training frameworks' own log lines, as :mod:`perfkit.sources.log_lines` keeps them (issue 25).

A training job that does not run perfkit's ``TrainMetrics`` exporter still prints its progress.
:func:`trainer_kind` names the format of one line (the record's ``kind`` in the logs frame) and
:func:`trainer_fields` reads its numbers; :mod:`perfkit.sources.trainer_series` turns the records
into the step-time, data-wait, communication, throughput and loss series the training rows read.
Each format is checked against real lines recorded in ``tests/data/trainers/`` (SOURCES.md there
names the run, repository and version each comes from) and written after the upstream code that
prints it:

``megatron``
    Megatron-LM ``megatron/training/training.py`` ``training_log`` (NeMo 1.x's Megatron path and
    forks such as FlagScale print the same line)::

        [2025-08-01 07:19:37] iteration        2/    5000 | consumed samples:          256 |
        elapsed time per iteration (ms): 12936.1 | throughput per GPU (TFLOP/s/GPU): 118.7 |
        learning rate: 1.395349E-07 | global batch size:   128 | lm loss: 1.044022E+01 |
        loss scale: 1.0 | grad norm: 26.305 | number of skipped iterations:   0 |
        number of nan iterations:   0 |

    (one line; older releases have no timestamp and no throughput, a fork may prefix ``==>`` or
    add ``consumed tokens:``). Fields are read by name, in any order.
``megatron_timer``
    the timers block ``training_log`` prints after that line with ``--timing-log-level`` 0-2
    (``megatron/core/timers.py``): a header ``(min, max) time across ranks (ms):`` or ``max time
    across ranks (ms):``, then one line per timer, ``    batch-generator ....: (0.85, 1.20)`` or
    ``: 1.20``, each the milliseconds per iteration over the logging interval.
``nemo``
    NeMo 2.x's progress printer (``nemo/lightning/pytorch/callbacks/progress_printer.py``):
    ``Training epoch 0, iteration 10/99 | lr: 1.499e-06 | global_batch_size: 16 | global_step: 10 |
    reduced_train_loss: 10.87 | train_step_timing in s: 0.6127 | consumed_samples: 176``; and
    NeMo 1.x's tqdm bar, ``Epoch 0:   1%|  | 795/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1,
    v_num=, reduced_train_loss=3.090, global_step=794.0, ...]`` (step time from ``s/it``).
``torchtitan``
    torchtitan's metrics line (``torchtitan/components/metrics.py``, ``log``)::

        step: 10  loss:  9.8785  grad_norm:  1.2345  memory: 20.10GiB(25.40%)  tps: 1,234
        tflops: 56.70  mfu: 5.70%

    (earlier releases: no ``grad_norm``, ``wps`` for ``tps``), behind ``[titan] <ISO time> - root -
    INFO -`` and ANSI colours.
``deepspeed``, ``deepspeed_time``, ``deepspeed_throughput``
    DeepSpeed ``deepspeed/runtime/engine.py``: ``[Rank 0] step=10, skipped=0, lr=[0.0001],
    mom=[(0.9, 0.999)]`` every ``steps_per_print``; with ``wall_clock_breakdown`` the timers line
    ``time (ms) | fwd: 104.12 | bwd: 221.50 | bwd_inner: 210.00 | bwd_allreduce: 11.40 | step:
    19.80`` (``fwd_microstep`` ... per micro-step); and ``deepspeed/utils/timer.py``'s
    ThroughputTimer: ``epoch=0/micro_step=20/global_step=20, RunningAvgSamplesPerSec=41.2,
    CurrSamplesPerSec=40.9, MemAllocated=12.3GB, MaxMemAllocated=20.1GB``.
``deepspeed_flops``
    the flops profiler's summary (``deepspeed/profiling/flops_profiler/profiler.py``), of which the
    line ``fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency):   102.0 TFLOPS`` is read
    (TFLOP/s per GPU at the profiled step; its time is the previous stamped line's).
``hf``
    the Hugging Face Trainer's (and Accelerate scripts') log dicts: ``{'loss': 2.3456, 'grad_norm':
    1.23, 'learning_rate': 4.9e-05, 'epoch': 0.01}`` and the last one, ``{'train_runtime': 123.4,
    'train_samples_per_second': 10.2, 'train_steps_per_second': 1.3, 'train_loss': 2.1, 'epoch':
    1.0}``. They carry no time and no step: :mod:`perfkit.sources.trainer_series` places them.
``train_progress``
    a training script's own progress line, ``step 2500 | loss 1.2297 | lr 2.00e-05 | step_time
    3.35s | ...`` (the shape of perfkit's simulated trainer and of hand-written loops that print
    ``f"step {step} | loss {loss:.4f} | ..."``): only its step number is read
    (:func:`progress_step`), for the job's progress across restarts
    (:mod:`perfkit.analyses.training_progress`); it is not in :data:`KINDS`, so no series is
    derived from a format this loose.
``elastic_restart``, ``elastic_failure``
    PyTorch elastic (torchrun, ``torch/distributed/elastic/agent/server/api.py`` and
    ``multiprocessing/api.py``): ``[default] Worker group FAILED. 3/3 attempts left; will restart
    worker group``, ``failed (exitcode: -9) local_rank: 0 (pid: 123) of binary: ...`` and
    ``torch.distributed.elastic.multiprocessing.errors.ChildFailedError``.

Lines are untrusted: every pattern is anchored on a literal, fields are bounded in count and
length, a number that does not parse is left out (never guessed), and a dict line is read by a
pattern, never evaluated.
"""

from __future__ import annotations

import re

_NUM = r"[-+]?(?:\d[\d,]*(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|nan|inf|NaN|Infinity)"
_MAX_FIELDS = 48  # Megatron's line holds about a dozen; a hostile line is cut at 48

_MEGATRON = re.compile(r"\biteration[=\s]\s{0,16}(\d{1,12})\s{0,4}/\s{0,16}(\d{1,12})\s{0,4}\|")
_NEMO = re.compile(r"\bTraining epoch \d{1,9}, iteration \d{1,12}/\d{1,12} \|")
_PIPE_FIELD = re.compile(
    rf"\|\s{{0,8}}([A-Za-z][\w /()-]{{0,60}}?)\s{{0,4}}[:=]\s{{0,16}}({_NUM})\s{{0,4}}(?=\||$)"
)
_TIMER_HEAD = re.compile(r"^\s{0,64}(\(min, max\) time|max time|min time|times) across ranks \(ms\):\s*$")
_TIMER = re.compile(
    rf"^\s{{1,64}}([a-z][\w-]{{0,63}})\s?\.{{2,200}}:\s{{0,4}}(?:\(({_NUM}),\s{{0,4}}({_NUM})\)|({_NUM}))\s*$"
)
_TITAN = re.compile(rf"\bstep:\s{{0,12}}(\d{{1,12}})\s{{1,8}}loss:\s{{0,12}}({_NUM})")
_TITAN_FIELD = re.compile(rf"\b(loss|grad_norm|tps|wps|tflops|mfu|memory):\s{{0,12}}({_NUM})\s?(GiB|%)?")
_TITAN_MEM_PCT = re.compile(rf"memory:\s{{0,12}}{_NUM}GiB\(({_NUM})%\)")
_DS_STEP = re.compile(r"\bstep=(\d{1,12}), skipped=(\d{1,12}), lr=\[")
_DS_LR = re.compile(rf"\blr=\[({_NUM})")
_DS_TIME = re.compile(r"\btime \(ms\) \|")
_DS_FIELD_HYPHEN = re.compile(rf"\|\s{{0,8}}([a-z][a-z_-]{{0,60}}):\s{{0,8}}({_NUM})")
_OLD_TIMERS = re.compile(r"\| [a-z]{1,30}-[a-z-]{1,60}: ")
_DS_FIELD = re.compile(rf"\|\s{{0,8}}([a-z][a-z_]{{0,40}}):\s{{0,8}}({_NUM})")
_DS_THROUGHPUT = re.compile(  # DeepSpeed's ThroughputTimer; before 0.9 it wrote "epoch/step, ..."
    r"(?:\bepoch=\d{1,9}/micro_step=\d{1,12}/global_step=(\d{1,12})|\b\d{1,9}/(\d{1,12})), RunningAvgSamplesPerSec="
)
_DS_THR_FIELD = re.compile(
    rf"\b(RunningAvgSamplesPerSec|CurrSamplesPerSec|MemAllocated|MaxMemAllocated)=({_NUM})"
)
_HF_DICT = re.compile(r"\{'(?:loss|eval_loss|train_runtime)': ")
_HF_FIELD = re.compile(rf"'([a-z][a-z_/]{{0,48}})': '?({_NUM})'?")
_NEMO_TQDM = re.compile(r"\bEpoch \d{1,9}:.{0,200}?\| *\d{1,12}/\d{1,12} \[")
_TQDM_RATE = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)(s/it|it/s)[,\]]")
_KV_FIELD = re.compile(
    rf"\b(reduced_train_loss|global_step|consumed_samples|train_step_timing in s|loss)=({_NUM})"
)
_DS_FLOPS = re.compile(
    r"^fwd\+bwd FLOPS per GPU = 3 \* fwd flops per GPU / \(fwd\+bwd latency\): +(\d{1,12}(?:\.\d{1,9})?) ([KMGTP]?)FLOPS\s*$"
)
_FLOPS_UNIT = {"": 1e-12, "K": 1e-9, "M": 1e-6, "G": 1e-3, "T": 1.0, "P": 1e3}
_PROGRESS = re.compile(r"\bstep\s{1,4}(\d{1,12})\s{0,4}\|\s{0,4}loss\b")
PROGRESS_KIND = "train_progress"
# Checkpoint saves that name their step, as each framework writes them (one rank logs them), kept as
# kind ``train_checkpoint`` for the step a rollback resumes from
#   Megatron-LM (megatron/training/checkpointing.py, print_rank_0):
#       "  successfully saved checkpoint from iteration    1000 to /ckpt"
#   DeepSpeed (runtime/checkpoint_engine/torch_checkpoint_engine.py, log_dist ranks=[0]):
#       "[Torch] Checkpoint global_step10 is about to be saved!"
#   HF Trainer (trainer.py _save_checkpoint, process zero): "Saving model checkpoint to out/checkpoint-500"
#   perfkit's simulated trainer: "saved checkpoint step_24000 (async)"
CHECKPOINT_KIND = "train_checkpoint"
_CHECKPOINTS = (
    re.compile(r"successfully saved checkpoint from iteration\s+(\d{1,12})\b"),
    re.compile(r"\bCheckpoint global_step(\d{1,12}) is about to be saved"),
    re.compile(r"Saving model checkpoint to \S*?\bcheckpoint-(\d{1,12})\b"),
    re.compile(r"\bsaved checkpoint step_(\d{1,12})\b"),
)
_ELASTIC_RESTART = re.compile(
    r"Worker group FAILED\. (\d{1,6})/(\d{1,6}) attempts left; will restart worker group"
)
_ELASTIC_FAIL = re.compile(
    r"(?:torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError"
    r"|failed \(exitcode: -?\d{1,4}\) local_rank: \d{1,6})"
)

KINDS = (
    "megatron",
    "megatron_timer",
    "nemo",
    "torchtitan",
    "deepspeed",
    "deepspeed_time",
    "deepspeed_throughput",
    "deepspeed_flops",
    "hf",
    "elastic_restart",
    "elastic_failure",
)
"""Every kind :func:`trainer_kind` gives (each a ``kind`` of the logs frame)."""

FRAMEWORKS = {
    "megatron": "Megatron-LM",
    "nemo": "NeMo",
    "torchtitan": "torchtitan",
    "deepspeed": "DeepSpeed",
    "hf": "Hugging Face Trainer",
    "elastic": "PyTorch elastic (torchrun)",
}
"""The framework a kind's prefix names, as the rows and the Scope section write it."""


def framework_of(kind: str) -> str:
    """``megatron_timer`` -> ``megatron``: the framework part of a kind."""
    return kind.split("_", 1)[0]


def trainer_kind(text: str) -> str | None:
    """The kind of one log line (ANSI codes already removed), or None when it is none of them."""
    if "|" in text:
        if "Training epoch" in text and _NEMO.search(text):
            return "nemo"
        if "iteration" in text and ("elapsed" in text or "consumed" in text) and _MEGATRON.search(text):
            return "megatron"
        if "time (ms)" in text and _DS_TIME.search(
            text
        ):  # Megatron's old one-line timers name theirs with "-"
            return "megatron_timer" if _OLD_TIMERS.search(text) else "deepspeed_time"
    if "reduced_train_loss=" in text and _NEMO_TQDM.search(text):  # NeMo 1.x's progress bar
        return "nemo"
    if text.startswith("fwd+bwd FLOPS per GPU") and _DS_FLOPS.match(text):  # DeepSpeed's flops profiler
        return "deepspeed_flops"
    if "across ranks (ms):" in text and _TIMER_HEAD.match(text):
        return "megatron_timer"
    if "...:" in text and _TIMER.match(text):
        return "megatron_timer"
    if "step:" in text and "loss:" in text and _TITAN.search(text):
        return "torchtitan"
    if "step=" in text and "skipped=" in text and _DS_STEP.search(text):
        return "deepspeed"
    if "RunningAvgSamplesPerSec=" in text and _DS_THROUGHPUT.search(text):
        return "deepspeed_throughput"
    if "{'" in text and _HF_DICT.search(text):
        return "hf"
    if "Worker group FAILED" in text and _ELASTIC_RESTART.search(text):
        return "elastic_restart"
    if ("ChildFailedError" in text or "exitcode:" in text) and _ELASTIC_FAIL.search(text):
        return "elastic_failure"
    return None


def progress_step(text: str) -> int | None:
    """The step of a ``step N | loss ...`` progress line (``train_progress`` in the module
    docstring), or None when ``text`` is not one."""
    m = _PROGRESS.search(text) if "| loss" in text or "|loss" in text else None
    return int(m.group(1)) if m else None


def checkpoint_step(text: str) -> int | None:
    """The step of a checkpoint save line (``train_checkpoint``), or None when ``text`` is not one."""
    if "heckpoint" not in text:
        return None
    for pattern in _CHECKPOINTS:
        if m := pattern.search(text[:2000]):
            return int(m.group(1))
    return None


def number(text: str) -> float | None:
    """A logged number (``1,234`` with thousands commas, ``nan``), or None when it does not parse."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _pairs(pattern: re.Pattern[str], text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, m in enumerate(pattern.finditer(text)):
        if i >= _MAX_FIELDS:
            break
        value = number(m.group(2))
        if value is not None:
            out.setdefault(m.group(1).strip(), value)
    return out


def trainer_fields(kind: str, text: str) -> dict[str, float]:
    """The numbers of a line of ``kind``, by their name in the line (``lm loss``, ``tps``, ...).

    Also ``step`` (the iteration, step or global step), and for a timer line the ``timer`` name's
    ``min``/``max`` (a ``max``-only line gives ``max``). A timer header gives nothing."""
    if kind == "nemo" and "reduced_train_loss=" in text:  # NeMo 1.x's tqdm bar: the last update
        last = text.rsplit("\r", 1)[-1]
        out = _pairs(_KV_FIELD, last)
        rate = _TQDM_RATE.search(last)
        if rate and (v := number(rate.group(1))) and v > 0:
            out["train_step_timing in s"] = v if rate.group(2) == "s/it" else 1.0 / v
        if "global_step" in out:
            out["step"] = out["global_step"]
        return out
    if kind == "deepspeed_flops":
        m = _DS_FLOPS.match(text)
        return {"tflops": float(m.group(1)) * _FLOPS_UNIT[m.group(2)]} if m else {}
    if kind in ("megatron", "nemo"):  # Megatron-DeepSpeed writes key=value with "_" for " "
        pairs = _pairs(_PIPE_FIELD, text + ("" if text.rstrip().endswith("|") else "|"))
        out = {k.replace("_", " ") if kind == "megatron" else k: v for k, v in pairs.items()}
        m = _MEGATRON.search(text) if kind == "megatron" else None
        if m:
            out["step"], out["train_iters"] = float(m.group(1)), float(m.group(2))
        elif "global_step" in out:
            out["step"] = out["global_step"]
        return out
    if kind == "megatron_timer":
        if _DS_TIME.search(text):  # the old one-line form: "time (ms) | forward-compute: 32054.16 | ..."
            return {f"max:{k}": v for k, v in _pairs(_DS_FIELD_HYPHEN, text).items()}
        t = _TIMER.match(text)
        if t is None:
            return {}
        lo, hi, only = (number(g) if g else None for g in t.group(2, 3, 4))
        return {k: v for k, v in (("min", lo), ("max", hi if only is None else only)) if v is not None}
    if kind == "torchtitan":
        m = _TITAN.search(text)
        out = _pairs(_TITAN_FIELD, text)
        if m:
            out["step"] = float(m.group(1))
        pct = _TITAN_MEM_PCT.search(text)
        if pct and (v := number(pct.group(1))) is not None:
            out["memory_pct"] = v
        if "tps" not in out and "wps" in out:
            out["tps"] = out.pop("wps")
        return out
    if kind == "deepspeed":
        m = _DS_STEP.search(text)
        if m is None:
            return {}
        out = {"step": float(m.group(1)), "skipped": float(m.group(2))}
        lr = _DS_LR.search(text)
        if lr and (v := number(lr.group(1))) is not None:
            out["lr"] = v
        return out
    if kind == "deepspeed_time":
        return _pairs(_DS_FIELD, text)
    if kind == "deepspeed_throughput":
        m = _DS_THROUGHPUT.search(text)
        out = _pairs(_DS_THR_FIELD, text)
        if m:
            out["step"] = float(m.group(1) or m.group(2))
        return out
    if kind == "hf":
        return _pairs(_HF_FIELD, text)
    if kind == PROGRESS_KIND:
        step = progress_step(text)
        return {} if step is None else {"step": float(step)}
    if kind == "elastic_restart":
        m = _ELASTIC_RESTART.search(text)
        return {"attempts_left": float(m.group(1)), "attempts": float(m.group(2))} if m else {}
    return {}


def timer_name(text: str) -> str | None:
    """The timer a Megatron timer line is about (``batch-generator``), None for a header."""
    t = _TIMER.match(text)
    return t.group(1) if t else None
