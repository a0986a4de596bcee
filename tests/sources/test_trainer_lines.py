"""Training frameworks' own lines (issue 25), read from REAL samples in tests/data/trainers/
(SOURCES.md there: each file's run, repository, version and licence).

The expected values are read off the sample lines by the tests themselves (a plain substring or a
number written below from the file), never from what the reader under test produced."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from perfkit.core.frames import Window
from perfkit.sources.logs import parse_lines, read_logs
from perfkit.sources.trainer_lines import trainer_fields, trainer_kind
from perfkit.sources.trainer_series import trainer_store

DATA = Path(__file__).resolve().parents[1] / "data" / "trainers"
WINDOW = Window(datetime(2021, 1, 1, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC))


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


def _records(name: str) -> pl.DataFrame:
    return parse_lines(_lines(name), window=WINDOW, source=name).records


def _series(store, name: str) -> list[float]:
    frame = store.frames.get(name)
    return [] if frame is None else frame.sort("ts")["value"].to_list()


# -- which lines are which --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "kind", "marker"),
    [
        ("megatron_lm.log", "megatron", "elapsed time per iteration (ms)"),
        ("megatron_timers.log", "megatron", "elapsed_time_per_iteration_ms"),
        ("megatron_timers.log", "megatron_timer", "...............:"),
        ("torchtitan.log", "torchtitan", " tps: "),
        ("deepspeed.log", "deepspeed", "skipped="),
        ("deepspeed.log", "deepspeed_throughput", "CurrSamplesPerSec="),
        ("hf_trainer.log", "hf", "{'"),
        ("nemo.log", "nemo", "train_step_timing in s"),
        ("torchrun_elastic.log", "elastic_restart", "will restart worker group"),
    ],
)
def test_every_real_progress_line_is_recognised(file, kind, marker):
    """Each line of the sample that carries the format's marker is read as that kind."""
    want = [i for i, line in enumerate(_lines(file), 1) if marker in line]
    assert want, f"{file} holds no {marker!r} line"
    records = _records(file)
    got = set(records.filter(pl.col("kind") == kind)["line"].to_list())
    assert set(want) <= got, sorted(set(want) - got)


def test_deepspeed_timer_lines_and_megatron_one_line_timers_are_told_apart():
    """Both print ``time (ms) | ...``: DeepSpeed's names are fwd/bwd..., old Megatron's hyphenated."""
    ds = [line for line in _lines("deepspeed.log") if "time (ms) | fwd" in line]
    meg = [line for line in _lines("megatron_timers.log") if line.startswith("time (ms) | forward-compute")]
    assert ds and meg
    assert {trainer_kind(line) for line in ds} == {"deepspeed_time"}
    assert {trainer_kind(line) for line in meg} == {"megatron_timer"}


def test_lines_of_no_framework_are_not_read_as_one():
    for line in (
        "step 24000 | loss 1.9256 | lr 3.00e-04 | step_time 2.20s",  # perfkit's simulated trainer
        "INFO 11-30 00:10:05 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s",
        "[Rank 0] (after 20 iterations) memory (MB) | allocated: 6245.0 | max allocated: 6245.0",
        "the iteration 3/4 | of a sentence",
        "{'model': 'llama', 'dtype': 'bf16'}",
    ):
        assert trainer_kind(line) is None, line


# -- the numbers ------------------------------------------------------------------------------------


def test_megatron_fields_read_by_name():
    line = next(x for x in _lines("megatron_lm.log") if "[2024-04-06 03:02:12]" in x)
    f = trainer_fields("megatron", line)
    assert f["step"] == 71 and f["train_iters"] == 100
    assert f["elapsed time per iteration (ms)"] == 5361.6
    assert f["throughput per GPU (TFLOP/s/GPU)"] == 243.6
    assert f["global batch size"] == 128


def test_megatron_series_from_a_real_run_without_timestamps(tmp_path):
    """The 2021 BigScience run (lines 1-55): no timestamps, placed back from the file's mtime by
    each line's time per iteration; step time, loss and samples/s as the lines state them."""
    run = _lines("megatron_lm.log")[:55]
    path = tmp_path / "train.log"
    path.write_text("\n".join(run) + "\n", encoding="utf-8")
    end = datetime(2021, 5, 26, 4, 0, tzinfo=UTC).timestamp()
    os.utime(path, (end, end))
    logs = read_logs([path], window=WINDOW).records
    ev = trainer_store(logs, mtimes={"train.log": end})
    stated = [float(m) for m in re.findall(r"elapsed time per iteration \(ms\): ([\d.]+)", "\n".join(run))]
    assert _series(ev.store, "trainer_step_seconds") == pytest.approx([v / 1e3 for v in stated])
    losses = [float(m) for m in re.findall(r"\| lm loss: ([\d.E+-]+) \|", "\n".join(run))]
    assert _series(ev.store, "trainer_loss") == pytest.approx(losses)
    samples = _series(ev.store, "trainer_samples_per_second")
    assert samples[-1] == pytest.approx(4 / 1.3819)  # global batch size 4 / 1381.9 ms
    ts = ev.store.frames["trainer_step_seconds"].sort("ts")["ts"].to_list()
    assert ts[-1] == datetime.fromtimestamp(end, UTC)  # the last line at the file's mtime
    # iterations 160 -> 170 took 10 x 1381.9 ms: the line before is that much earlier
    assert (ts[-1] - ts[-2]).total_seconds() == pytest.approx(13.819, abs=0.002)
    assert any("placed back from the file's modification time" in n for n in ev.notes)


def test_megatron_timers_give_exposed_communication():
    """The old one-line timers (BigScience 2021): backward-params-all-reduce + backward-embedding-all-reduce."""
    ev = trainer_store(_records("megatron_timers.log"))
    line = next(x for x in _lines("megatron_timers.log") if x.startswith("time (ms) | forward-compute"))
    want = sum(
        float(v) for k, v in re.findall(r"\| ([a-z-]+): ([\d.]+)", line)
        if k in ("backward-params-all-reduce", "backward-embedding-all-reduce")
    )  # fmt: skip
    assert want > 0
    assert "backward-params-all-reduce" in ev.timers and "forward-backward" in ev.timers
    # untimed old lines are not placed without an mtime: they say so instead
    assert any("not placed" in n for n in ev.missing)


def test_torchtitan_step_time_from_the_lines_times():
    """torchtitan states no step time: (t210 - t200) / 10 steps, from two real consecutive lines."""
    ev = trainer_store(_records("torchtitan.log"))
    steps = ev.store.frames["trainer_step_seconds"].sort("ts")
    first = steps.filter(pl.col("ts") == datetime(2025, 6, 16, 22, 31, 4, 970000, tzinfo=UTC))
    assert first["value"].to_list() == pytest.approx([(64.970 - 50.322) / 10])
    tps = ev.store.frames["trainer_tokens_per_second_per_gpu"]
    assert 5856.0 in tps["value"].to_list() and 5593.0 in tps["value"].to_list()
    mfu = ev.store.frames["trainer_mfu_ratio"]
    assert 0.3429 in [round(v, 4) for v in mfu["value"].to_list()]
    assert ev.frameworks["torchtitan"] >= 10


def test_deepspeed_comm_per_step_from_its_allreduce_timer():
    """steps_per_print=1 in this run: bwd_allreduce of the print after step=136006 is that step's."""
    ev = trainer_store(_records("deepspeed.log"))
    comm = ev.store.frames["trainer_comm_seconds"]
    assert 1.18173 in [round(v, 5) for v in comm["value"].to_list()]
    cur = ev.store.frames["trainer_samples_per_second"]["value"].to_list()
    assert any(v == pytest.approx(2561.3206693919196) for v in cur)


def test_nemo_step_timing_and_loss():
    ev = trainer_store(_records("nemo.log"))
    stated = [
        float(v) for v in re.findall(r"train_step_timing in s: ([\d.]+)", (DATA / "nemo.log").read_text())
    ]
    losses = [float(v) for v in re.findall(r"reduced_train_loss: ([\d.]+)", (DATA / "nemo.log").read_text())]
    assert stated and len(losses) >= len(stated)
    # NeMo's lines carry no time either: not placed without an mtime, and said so
    assert any("not placed" in n for n in ev.missing) and "trainer_step_seconds" not in ev.store.frames
    placed = trainer_store(
        _records("nemo.log"), mtimes={"nemo.log": datetime(2024, 1, 1, tzinfo=UTC).timestamp()}
    )
    assert _series(placed.store, "trainer_step_seconds") == pytest.approx(stated)
    assert _series(placed.store, "trainer_loss") == pytest.approx(losses[-len(stated) :])


def test_hf_dicts_placed_by_the_final_dict(tmp_path):
    """The Hugging Face dicts carry no time: with the run's final train_runtime dict and the file's
    mtime they are placed by epoch and train_steps_per_second; without it they are not, and say so."""
    end = datetime(2024, 3, 1, 12, 0, tzinfo=UTC).timestamp()
    lines = [x for x in _lines("hf_trainer.log") if x.startswith("{'loss'")][:5]
    final = "{'train_runtime': 1000.0, 'train_samples_per_second': 8.0, 'train_steps_per_second': 1.0, 'train_loss': 0.1, 'epoch': 1.0}"  # noqa: E501  the shape of the sample's own final dicts
    assert any(x.startswith("{'train_runtime'") for x in _lines("hf_trainer.log"))
    recs = parse_lines([*lines, final], window=WINDOW, source="t.log").records
    ev = trainer_store(recs, mtimes={"t.log": end})
    loss = ev.store.frames["trainer_loss"].sort("ts")
    epochs = [float(re.search(r"'epoch': ([\d.]+)", x).group(1)) for x in lines]  # type: ignore[union-attr]
    want = [datetime.fromtimestamp(end - (1.0 - e) * 1000.0, UTC) for e in epochs]
    assert loss["ts"].to_list() == want
    bare = trainer_store(parse_lines(lines, window=WINDOW, source="t.log").records, mtimes={"t.log": end})
    assert "trainer_loss" not in bare.store.frames and any("not placed" in n for n in bare.missing)


def test_torchrun_restarts_counted():
    text = (DATA / "torchrun_elastic.log").read_text(encoding="utf-8")
    ev = trainer_store(_records("torchrun_elastic.log"))
    assert ev.restarts == text.count("will restart worker group") > 0


# -- hostile lines ----------------------------------------------------------------------------------


def test_hostile_lines_are_bounded_and_never_evaluated():
    huge = " iteration 1/ 2 |" + " x: 1 |" * 10_000
    assert len(trainer_fields("megatron", huge)) <= 50
    evil = "{'loss': __import__('os').system('false'), 'epoch': 1.0}"
    assert trainer_fields("hf", evil) == {"epoch": 1.0}
    for junk in ("iteration 99999999999999999/1 |", "step: 1  loss: nan  tps: 1,2,3,,"):
        trainer_kind(junk)  # no exception
    assert (
        trainer_fields("torchtitan", "step: 1  loss: nan")["loss"]
        != trainer_fields("torchtitan", "step: 1  loss: nan")["loss"]
    )


def test_megatron_deepspeed_tokens_per_gpu_in_both_of_its_forms():
    """Megatron-DeepSpeed states tokens/s per GPU as 'tokens per gpu per second (tgs): N' and, in its
    key=value form, 'tokens_per_gpu_per_second_tgs=N' (both real lines of deepspeed.log and
    megatron_timers.log)."""
    lines = [x for f in ("deepspeed.log", "megatron_timers.log") for x in _lines(f) if "tgs" in x]
    stated = {float(m) for x in lines for m in re.findall(r"tgs\)?[:=]\s*([\d.]+)", x)}
    assert len(stated) >= 2
    got = set()
    for x in lines:
        got |= {v for k, v in trainer_fields("megatron", x).items() if "tgs" in k}
    assert got == stated


def test_nemo_1_progress_bar_and_the_deepspeed_flops_profiler():
    """NeMo 1.x's tqdm bar (nemo.log line 1): global step, reduced_train_loss and the step time its
    's/it' states; DeepSpeed's flops profiler summary (deepspeed.log): fwd+bwd TFLOP/s per GPU."""
    bar = _lines("nemo.log")[0]
    assert trainer_kind(bar) == "nemo"
    f = trainer_fields("nemo", bar)
    assert (f["step"], f["reduced_train_loss"], f["train_step_timing in s"]) == (794.0, 3.09, 41.36)
    line = next(x for x in _lines("deepspeed.log") if x.startswith("fwd+bwd FLOPS per GPU"))
    stated = float(re.search(r"([\d.]+) TFLOPS\s*$", line).group(1))  # type: ignore[union-attr]
    assert trainer_kind(line) == "deepspeed_flops"
    ev = trainer_store(_records("deepspeed.log"))
    assert stated in ev.store.frames["trainer_tflops_per_gpu"]["value"].to_list()
