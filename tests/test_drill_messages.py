"""What ``drill check`` says perfkit's triage found agrees with the triage table itself: "every
direction ruled out" only when no row that applies to the workload is left inconclusive, and each
inconclusive row is named with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.drills.ids import REGISTRY
from perfkit.triage.table import triage_bundle

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
ID_OF = {name: drill for drill, name in REGISTRY.items()}


@pytest.mark.parametrize(
    "scenario", ["train-healthy", "healthy-busy-evening", "healthy-decoy-deploy", "surge-overlapping-deploy"]
)
def test_check_says_what_the_triage_table_says(scenario):
    res = CliRunner().invoke(cli, ["drill", "check", ID_OF[scenario], "--answer", "none"])
    assert res.exit_code in (0, 1), res.output
    result = triage_bundle(SCENARIOS / scenario)
    top = result.results[0]
    open_rows = [
        r for r in result.results if r.verification.verdict == "inconclusive" and r.applies and r is not top
    ]
    said = [line for line in res.output.splitlines() if line.startswith("perfkit's triage")]
    assert len(said) == 1, res.output
    if top.verification.verdict != "ruled_out":
        assert f"rank 1 {top.row.direction} ({top.verification.verdict})" in said[0]
    elif open_rows:
        assert "every direction ruled out" not in res.output
        assert "no direction confirmed" in said[0]
    else:
        assert "every direction ruled out (nothing to fix)" in said[0]
    for r in open_rows[:4]:
        assert f"  inconclusive: {r.row.direction}: {r.verification.why}" in res.output
