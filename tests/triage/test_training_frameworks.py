"""The training rows on a job told by its framework's own lines (issue 25): no ``train_*`` series,
only Megatron-LM's, torchtitan's, DeepSpeed's or the HF Trainer's lines and TensorBoard scalars,
as the training simulator writes them with ``framework:`` (perfkit.lab.sim.training_frameworks).

The expected answers are the scenarios' answer keys (written with the scenario), and for the
framework that never logs a signal, that the row says so rather than guessing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from perfkit.analyses.training_evidence import signal_sources
from perfkit.app.drills.grading import grade_bundle
from perfkit.app.runner.embedded import base_specs
from perfkit.engine.local import LocalEngine
from perfkit.sources.bundle import load_bundle
from perfkit.triage.table import triage_bundle


def _told(name: str, framework: str, tmp_path):
    factory, generate = base_specs()[name]
    out = tmp_path / f"{name}-{framework}"
    generate(replace(factory(), framework=framework), out)
    return out


def _row(result, direction: str) -> dict:
    return next(r for r in result.to_json()["directions"] if r["id"] == direction)


@pytest.mark.parametrize(
    "name", ["dataloader-starvation", "allreduce-scaling-64gpu", "loss-spikes-no-warmup", "train-healthy"]
)
def test_megatron_lines_give_the_answer_the_exporter_gives(name, tmp_path):
    bundle = _told(name, "megatron", tmp_path)
    exported = "".join(p.read_text() for p in (bundle / "metrics").glob("*.om"))
    assert "DCGM_FI_DEV_GPU_UTIL" in exported and "train_step_duration_seconds" not in exported
    g = grade_bundle(bundle)
    assert g.correct, (g.want, g.got, g.confirmed)
    if g.want == "none":
        assert not g.confirmed


def test_the_rows_name_the_framework_their_numbers_came_from(tmp_path):
    bundle = _told("dataloader-starvation", "megatron", tmp_path)
    b = load_bundle(bundle)
    assert b.trainer is not None and b.trainer.frameworks.get("Megatron-LM", 0) > 0
    assert "batch-generator" in b.trainer.timers
    assert "batch-generator" in b.trainer.sources["trainer_data_wait_seconds"]
    row = _row(triage_bundle(bundle), "data_pipeline")
    assert row["verdict"] == "confirmed", row


def test_without_a_data_wait_timer_the_network_is_not_blamed_for_a_starved_loader(tmp_path):
    """DeepSpeed times its allreduce but not the DataLoader: in a starved job the fast ranks wait in
    the allreduce for the slow one, which looks like a slow network. With the host busy feeding the
    GPUs the network row stays inconclusive and says why, and the data row names the missing timer."""
    result = triage_bundle(_told("dataloader-starvation", "deepspeed", tmp_path))
    net = _row(result, "network_communication")
    assert (
        net["verdict"] == "inconclusive" and "no data-wait timer is logged" in net["verification"]["why"]
    ), net
    data = _row(result, "data_pipeline")
    assert data["verdict"] == "inconclusive" and "no data-wait timer" in data["verification"]["why"], data


def test_torchtitan_tensorboard_scalars_and_lines_are_both_read(tmp_path):
    bundle = _told("loss-spikes-no-warmup", "torchtitan", tmp_path)
    assert list((bundle / "tensorboard").rglob("*tfevents*"))
    b = load_bundle(bundle)
    assert b.trainer is not None
    assert (
        b.trainer.frameworks.get("torchtitan", 0) > 0
        and b.trainer.frameworks.get("torchtitan (TensorBoard)", 0) > 0
    )
    sources = signal_sources(LocalEngine(b.store))
    assert sources["train_loss"] == "torchtitan log lines and TensorBoard scalars (trainer_loss)"
    assert grade_bundle(bundle).correct


def test_hf_dicts_without_times_are_placed_by_tensorboard_not_guessed(tmp_path):
    """The HF Trainer's dicts have no time and a running job has no final dict: they are not placed
    (the bundle says so); its TensorBoard ``train/loss`` carries wall times and answers instead."""
    bundle = _told("loss-spikes-no-warmup", "hf", tmp_path)
    b = load_bundle(bundle)
    assert any("Hugging Face" in m and "not placed" in m for m in b.missing), b.missing
    assert b.trainer is not None and "TensorBoard `train/loss`" in b.trainer.sources["trainer_loss"]
    assert (
        signal_sources(LocalEngine(b.store))["train_loss"]
        == "Hugging Face Trainer TensorBoard scalars (trainer_loss)"
    )
    assert grade_bundle(bundle).correct


def test_tensorboard_kept_outside_the_bundle_is_read_with_the_flag(tmp_path):
    """``perfkit triage --tensorboard DIR``: the HF job's scalars moved out of the bundle. Without the
    flag its untimed dicts answer nothing; with it, the loss row confirms as it does in the bundle."""
    import json
    import shutil

    from click.testing import CliRunner

    from perfkit.app.cli.main import cli

    bundle = _told("loss-spikes-no-warmup", "hf", tmp_path)
    elsewhere = tmp_path / "tb-elsewhere"
    shutil.move(str(bundle / "tensorboard"), elsewhere)
    runner = CliRunner()
    bare = runner.invoke(cli, ["triage", "--bundle", str(bundle), "--format", "json"])
    assert bare.exit_code == 0, bare.output
    assert _verdict(json.loads(bare.output), "training_instability") != "confirmed"
    given = runner.invoke(
        cli, ["triage", "--bundle", str(bundle), "--tensorboard", str(elsewhere), "--format", "json"]
    )
    assert given.exit_code == 0, given.output
    assert _verdict(json.loads(given.output), "training_instability") == "confirmed"


def _verdict(doc: dict, direction: str) -> str:
    return next(r["verdict"] for r in doc["directions"] if r["id"] == direction)


def test_torchtitan_with_nccl_2_21_places_its_network_lines_and_confirms_the_network(tmp_path):
    """Issue 35 item 3: the IB fabric fails under a torchtitan job, its log written as torchrun --tee
    and NCCL 2.21.5 (the version its init lines state) write it: ``[rank0]:`` before torchtitan's
    ``[titan] <time>`` lines, and no time on NCCL's WARN lines (src/debug.cc stamps none before 2.26;
    the simulator writes 2.26's stamp, removed here). The WARN lines take the time of the torchtitan
    step before them (they had the time of the last line torchtitan did not write, minutes earlier:
    its ``[titan]`` stamps were read for its own lines only), the log says how they were placed, and
    the network row is confirmed."""
    import re
    from datetime import timedelta

    from perfkit.sources.logs import read_logs

    bundle = _told("nccl-socket-fallback", "torchtitan", tmp_path)
    log = bundle / "logs" / "train.log"
    stamp = re.compile(r"^(\[rank\d+\]:)\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] (?=\S+ \[\d+\] \S+ NCCL WARN )")
    lines = log.read_text().splitlines()
    rewritten = [stamp.sub(r"\1", "[rank0]:" + x if x.startswith("[titan] ") else x) for x in lines]
    assert sum(a != b for a, b in zip(lines, rewritten, strict=True)) > 100
    assert not any(stamp.match(x) for x in rewritten)
    log.write_text("\n".join(rewritten) + "\n")

    result = read_logs(log, window=load_bundle(bundle).incident.window)
    rows = result.records.select("ts", "line", "kind").rows()
    warns = [(ts, n) for ts, n, kind in rows if kind == "nccl_warn"]
    assert len(warns) == 2
    for ts, n in warns:
        step_before = max((r for r in rows if r[2] == "torchtitan" and r[1] < n), key=lambda r: r[1])
        assert ts == step_before[0]
        # the last step before the hang; NCCL gave up on IB at 21:19:41 (the simulator's own stamp)
        assert timedelta(0) <= datetime(2026, 12, 9, 21, 19, 41, tzinfo=UTC) - ts < timedelta(minutes=1)
    assert any("placed by their timestamped neighbours" in note for note in result.notes)
    row = _row(triage_bundle(bundle), "network_communication")
    assert row["verdict"] == "confirmed", row
