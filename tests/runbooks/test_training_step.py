"""The training runbook, executed with papermill on training incidents; assertions on its findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.app.runner.run import execute
from perfkit.core.findings import findings_from_notebook

pytestmark = pytest.mark.notebook
SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


@pytest.mark.parametrize(
    ("name", "direction"),
    [("dataloader-starvation", "data_pipeline"), ("allreduce-scaling-64gpu", "network_communication")],
)
def test_training_runbook_finds_the_direction(name, direction, tmp_path):
    result = execute("training_step", tmp_path, {"bundle": str(SCENARIOS / name)})
    assert result.error is None
    f = findings_from_notebook(json.loads(result.notebook.read_text()))
    assert all(x.status != "error" for x in f.values()), {k: x.summary for k, x in f.items()}
    top = f["triage"].data["directions"][0]
    assert (top["id"], top["verdict"]) == (direction, "confirmed")
    t = f["training"].data
    if direction == "data_pipeline":
        assert t["data_wait_share"]["incident"] > 10 * t["data_wait_share"]["baseline"]
    else:
        assert t["comm_share"]["incident"] > 2 * t["comm_share"]["baseline"]
    assert t["tokens_per_s"]["incident"] < t["tokens_per_s"]["baseline"]
    assert (tmp_path / "figures" / "training.png").exists()
