"""Issue 25's 'done when': a bundle holding only a REAL Megatron-LM log gives a step-time series,
the loss and the throughput in the training runbook's executed notebook.

The log is the 2021 BigScience GPT-2 run in tests/data/trainers/megatron_lm.log (lines 1-55; source
and licence in SOURCES.md): Megatron-LM's iteration lines of that time carry no timestamp, so the
file's modification time (set here) places them. The expected numbers are read off the log's lines
by this test, not taken from perfkit's output."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from perfkit.app.runner.run import execute
from perfkit.core.findings import findings_from_notebook

LOG = Path(__file__).resolve().parents[1] / "data" / "trainers" / "megatron_lm.log"
END = datetime(2021, 5, 26, 4, 0, tzinfo=UTC)


def _bundle(root: Path) -> tuple[Path, list[str]]:
    run = LOG.read_text(encoding="utf-8").splitlines()[:55]
    (root / "logs").mkdir(parents=True)
    log = root / "logs" / "megatron.log"
    log.write_text("\n".join(run) + "\n", encoding="utf-8")
    os.utime(log, (END.timestamp(), END.timestamp()))
    iso = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    incident = {
        "id": "INC-megatron-real-log",
        "title": "GPT-2 pretraining: is the step time steady?",
        "service": "gpt2-pretrain",
        "window": {"start": iso(END - timedelta(seconds=110)), "end": iso(END + timedelta(seconds=1))},
        "baseline": {"start": iso(END - timedelta(seconds=240)), "end": iso(END - timedelta(seconds=115))},
        "hardware": {"gpu": "NVIDIA A100-SXM4-80GB", "count": 16},
    }
    (root / "incident.yaml").write_text(yaml.safe_dump(incident, sort_keys=False), encoding="utf-8")
    return root, run


@pytest.mark.notebook
def test_a_real_megatron_log_alone_gives_step_time_loss_and_throughput(tmp_path):
    bundle, run = _bundle(tmp_path / "bundle")
    result = execute("training_step", tmp_path / "out", {"bundle": str(bundle)})
    assert result.error is None, result.error
    nb = json.loads(result.notebook.read_text())
    f = findings_from_notebook(nb)
    text = "\n".join(run)
    stated_steps = {float(v) / 1e3 for v in re.findall(r"elapsed time per iteration \(ms\): ([\d.]+)", text)}
    stated_losses = {float(v) for v in re.findall(r"\| lm loss: ([\d.E+-]+) \|", text)}

    training = f["training"]
    assert training.status != "missing", training.summary
    assert "Megatron-LM" in training.data["sources"]["train_step"]
    assert "Megatron-LM" in training.summary  # the section says where its numbers came from
    traces = {t["name"]: t for t in training.figure["data"]}
    steps = [y for y in traces["step time (s, avg over ranks)"]["y"] if y is not None]
    assert len(steps) >= 5 and {round(y, 4) for y in steps} <= {round(v, 4) for v in stated_steps}
    losses = [y for y in traces["loss (avg)"]["y"] if y is not None]
    assert len(losses) >= 5 and {round(y, 4) for y in losses} <= {round(v, 4) for v in stated_losses}
    rows = {r[0]: r for r in training.table["rows"]}
    samples = rows["samples/s (framework, as reported)"]
    # global batch size 4 / the stated step times of the incident window's lines: about 2.9 samples/s
    assert 4 / max(stated_steps) <= samples[3] <= 4 / min(stated_steps)

    checklist = f["training_evidence"]
    assert checklist.data["frameworks"] == ["Megatron-LM"]
    table = {r[0]: r for r in checklist.table["rows"]}
    assert "Megatron-LM" in table["training_instability row"][2]
    # the run's one-line timers hold batch-generator (data wait) and the all-reduces (communication)
    assert (
        "Megatron-LM" in table["data_pipeline row"][2]
        and "Megatron-LM" in table["network_communication row"][2]
    )
    waits = {float(v) / 1e3 for v in re.findall(r"\| batch-generator: ([\d.]+)", text)}
    plotted = [y for y in traces["data wait (s, slowest rank)"]["y"] if y is not None]
    assert plotted and {round(y, 5) for y in plotted} <= {round(v, 5) for v in waits}
    # it predates --log-throughput: the efficiency row says which flag gives the framework's TFLOP/s
    assert table["efficiency (MFU) section"][2] == "missing"
    assert "--log-throughput" in table["efficiency (MFU) section"][3]
    assert any("placed back from the file's modification time" in n for n in checklist.data["notes"])
