"""perfkit.sources.tensorboard: scalars from event files written by TensorBoard's own writers, a real
event file from tensorflow/lingvo, and damaged or hostile files.

Tag names as the trainers write them:

* Megatron-LM, ``training_log`` in NVIDIA/Megatron-LM ``megatron/training/training.py`` (commit
  001b00c2734d8f0fad096fe48a382fedf755d321): ``writer.add_scalar('learning-rate' ...)``, ``'batch-size'``,
  ``'loss-scale'``, ``'grad-norm'``, ``'iteration-time'``, ``'throughput'``, and one per ``loss_dict`` key
  (``'lm loss'`` in pretrain_gpt.py); its writer is PyTorch's SummaryWriter, so they are simple_values.
* HF Trainer, ``rewrite_logs`` in huggingface/transformers ``src/transformers/integrations/
  integration_utils.py``: ``"train/" + k`` for the Trainer's log keys ``loss``, ``grad_norm``,
  ``learning_rate``.
"""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from tensorboard.summary import Writer

from perfkit.errors import BundleError
from perfkit.lab.sim.training_frameworks import write_scalars
from perfkit.sources.tensorboard import SCHEMA, read_scalars

LINGVO = Path(__file__).resolve().parents[1] / "data" / "tensorboard" / "events.out.tfevents.test"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

MEGATRON = {
    "lm loss": 2.5,
    "learning-rate": 3e-4,
    "grad-norm": 1.25,
    "loss-scale": 65536.0,
    "batch-size": 512.0,
}


def write_tf2(logdir: Path, points: list[tuple[str, float, int, float]]) -> Path:
    """(tag, value, step, wall_time) through tensorboard.summary.Writer: float32 tensors, plugin "scalars"."""
    writer = Writer(str(logdir))
    for tag, value, step, wall_time in points:
        writer.add_scalar(tag, value, step, wall_time=wall_time)
    writer.close()
    (file,) = logdir.glob("*tfevents*")
    return file


def write_tf1(logdir: Path, points: list[tuple[str, float, int, float]]) -> Path:
    """The same as summary.value.simple_value events (what torch.utils.tensorboard's add_scalar emits),
    through tensorboard's EventFileWriter."""
    write_scalars(
        [(tag, value, step, wall) for tag, value, step, wall in points], logdir, "events.out.tfevents.1.tf1"
    )
    (file,) = logdir.glob("*tfevents*")
    return file


def megatron_points(steps: range) -> list[tuple[str, float, int, float]]:
    return [(tag, v * (1 + s / 100), s, T0 + s) for s in steps for tag, v in MEGATRON.items()]


@pytest.mark.parametrize("write", [write_tf1, write_tf2], ids=["simple_value", "tensor"])
def test_round_trip(tmp_path: Path, write) -> None:
    points = megatron_points(range(1, 6)) + [("iteration-time", 0.8125, 3, T0 + 3.5)]
    file = write(tmp_path, points)

    df = read_scalars(file)
    assert df.schema == pl.Schema(SCHEMA)
    assert df.height == len(points)
    assert set(df["run"]) == {""}
    assert df.select(["run", "tag", "step"]).equals(
        df.select(["run", "tag", "step"]).sort(["run", "tag", "step"])
    )
    got = {(r["tag"], r["step"]): r for r in df.iter_rows(named=True)}
    for tag, value, step, wall_time in points:
        row = got[(tag, step)]
        assert row["value"] == pytest.approx(value, rel=1e-6)  # float32 on disk
        assert row["ts"] == datetime.fromtimestamp(wall_time, UTC)
    assert got[("iteration-time", 3)]["ts"] == datetime(2026, 1, 1, 0, 0, 3, 500000, tzinfo=UTC)


def test_directory_with_two_runs(tmp_path: Path) -> None:
    hf = [("train/loss", 1.9, 10, T0 + 10), ("train/grad_norm", 0.7, 10, T0 + 10)]
    hf += [("train/learning_rate", 5e-05, 10, T0 + 10), ("train/loss", 1.7, 20, T0 + 20)]
    write_tf1(tmp_path / "hf" / "runs" / "Jan01_00-00-00_host", hf)
    write_tf2(tmp_path / "megatron", megatron_points(range(1, 3)))

    df = read_scalars(tmp_path)
    assert df["run"].unique(maintain_order=True).to_list() == ["hf/runs/Jan01_00-00-00_host", "megatron"]
    hf_rows = df.filter(pl.col("run") == "hf/runs/Jan01_00-00-00_host")
    assert hf_rows["tag"].to_list() == ["train/grad_norm", "train/learning_rate", "train/loss", "train/loss"]
    assert hf_rows.filter(pl.col("tag") == "train/loss")["step"].to_list() == [10, 20]
    assert df.filter(pl.col("run") == "megatron").height == 2 * len(MEGATRON)


def test_truncated_file_keeps_the_intact_events(tmp_path: Path) -> None:
    file = write_tf1(tmp_path, [("lm loss", 3.0 - s / 10, s, T0 + s) for s in range(1, 11)])
    data = file.read_bytes()
    file.write_bytes(data[:-5])  # the last record loses its data CRC and a byte of data

    df = read_scalars(file)
    assert df["step"].to_list() == list(range(1, 10))
    file.write_bytes(data[:-30])  # cut inside the last record's header region as well
    assert read_scalars(file)["step"].to_list() == list(range(1, 10))


def test_corrupted_record_stops_that_file_only(tmp_path: Path) -> None:
    file = write_tf1(tmp_path / "a", [("lm loss", 1.0, s, T0 + s) for s in range(1, 6)])
    write_tf1(tmp_path / "b", [("lm loss", 2.0, 1, T0)])
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte: that record fails its CRC
    file.write_bytes(bytes(data))

    df = read_scalars(tmp_path)
    a = df.filter(pl.col("run") == "a")["step"].to_list()
    assert a == list(range(1, len(a) + 1)) and len(a) < 5
    assert df.filter(pl.col("run") == "b")["value"].to_list() == [2.0]


def test_random_bytes_named_like_an_event_file_is_an_error(tmp_path: Path) -> None:
    # Decision: a non-empty file with no readable first record is not an event file -> BundleError naming it.
    bad = tmp_path / "events.out.tfevents.x"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(BundleError, match="not a TensorBoard event file") as info:
        read_scalars(bad)
    assert info.value.path == str(bad)
    with pytest.raises(BundleError, match=r"events\.out\.tfevents\.x"):
        read_scalars(tmp_path)

    text = tmp_path / "events.out.tfevents.y"
    bad.unlink()
    text.write_text("step,loss\n1,2.5\n")
    with pytest.raises(BundleError, match="not a TensorBoard event file"):
        read_scalars(text)


def test_empty_file_and_folder_without_event_files(tmp_path: Path) -> None:
    empty = tmp_path / "events.out.tfevents.0"
    empty.write_bytes(b"")
    assert read_scalars(empty).height == 0
    assert read_scalars(empty).schema == pl.Schema(SCHEMA)

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "train.log").write_text("loss 1.0\n")
    with pytest.raises(BundleError, match="no TensorBoard event file") as info:
        read_scalars(tmp_path / "other")
    assert info.value.path == str(tmp_path / "other")
    with pytest.raises(BundleError, match="cannot read"):
        read_scalars(tmp_path / "missing")


@pytest.mark.parametrize("write", [write_tf1, write_tf2], ids=["simple_value", "tensor"])
def test_non_finite_values_are_kept(tmp_path: Path, write) -> None:
    points = [("lm loss", 2.0, 1, T0), ("lm loss", math.nan, 2, T0 + 1), ("grad-norm", math.inf, 2, T0 + 1)]
    df = read_scalars(write(tmp_path, points))
    loss = df.filter(pl.col("tag") == "lm loss")
    assert loss["step"].to_list() == [1, 2]
    assert math.isnan(loss["value"][1])
    assert df.filter(pl.col("tag") == "grad-norm")["value"].to_list() == [math.inf]


def test_max_points(tmp_path: Path) -> None:
    write_tf1(tmp_path / "a", [("lm loss", 1.0, s, T0 + s) for s in range(100)])
    write_tf1(tmp_path / "b", [("lm loss", 2.0, s, T0 + s) for s in range(100)])
    df = read_scalars(tmp_path, max_points=150)
    assert df.height == 150
    assert df.filter(pl.col("run") == "a").height == 100  # the first points read are kept
    assert read_scalars(tmp_path, max_points=0).height == 0


def test_max_files_reads_the_newest_by_name(tmp_path: Path) -> None:
    for i, stamp in enumerate(["1700000001", "1700000003", "1700000002"]):
        file = write_tf1(tmp_path / f"run{i}", [("lm loss", float(i), 1, T0)])
        file.rename(file.with_name(f"events.out.tfevents.{stamp}.host.1.0"))
    df = read_scalars(tmp_path, max_files=2)
    assert sorted(df["run"].to_list()) == ["run1", "run2"]


def test_hostile_length_does_not_allocate(tmp_path: Path) -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    good = write_tf1(tmp_path, [("lm loss", 1.0, 1, T0)]).read_bytes()
    header = struct.pack("<Q", 2**62)  # a record claiming 4 EiB, with a valid header CRC
    evil = tmp_path / "events.out.tfevents.evil"
    evil.write_bytes(good + header + struct.pack("<I", masked_crc32c(header)) + b"x" * 64)
    assert read_scalars(evil)["value"].to_list() == [1.0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_and_link_outside_are_refused(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    os.mkfifo(logdir / "events.out.tfevents.fifo")
    with pytest.raises(BundleError, match="not a regular file"):
        read_scalars(logdir)
    os.unlink(logdir / "events.out.tfevents.fifo")

    outside_file = write_tf1(tmp_path / "elsewhere", [("lm loss", 1.0, 1, T0)])
    (logdir / "events.out.tfevents.link").symlink_to(outside_file)
    with pytest.raises(BundleError, match="outside"):
        read_scalars(logdir)


def test_real_lingvo_event_file() -> None:
    # tensorflow/lingvo lingvo/core/ops/testdata/events.out.tfevents.test (see tests/data/tensorboard/SOURCES.md):
    # 360 evaluation events of 7 simple_value tags each, steps 1500..185200.
    df = read_scalars(LINGVO)
    assert df.height == 360 * 7
    assert df["tag"].n_unique() == 7
    bleu = df.filter(pl.col("tag") == "bleu/dev")
    assert bleu.height == 360
    assert bleu["step"][0] == 1500 and bleu["value"][0] == pytest.approx(0.112010188)
    assert bleu["ts"][0] == datetime(
        2018, 8, 18, 7, 24, 46, 21000, tzinfo=UTC
    )  # wall_time 1534577086.0208557, to the ms
    # lingvo's own best_step_op_test (testTfEventAscendingValTol0): best bleu/dev at 102600, last step 185200
    assert bleu["step"][-1] == 185200
    assert bleu.filter(pl.col("value") == bleu["value"].max())["step"][0] == 102600


def test_importing_perfkit_does_not_import_tensorboard() -> None:
    code = "import sys, perfkit.sources.tensorboard; sys.exit('tensorboard' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
