"""`perfkit batch`: one folder per incident; a broken incident does not stop the others; exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli

pytestmark = pytest.mark.notebook
SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


@pytest.mark.slow
def test_batch_runs_the_rest_when_one_fails(tmp_path):
    f = tmp_path / "incidents.yaml"
    f.write_text(
        f"- name: surge\n  bundle: {SCENARIOS / 'queueing-traffic-surge'}\n"
        f"- name: gone\n  bundle: {tmp_path / 'no-such-bundle'}\n"
    )
    res = CliRunner().invoke(cli, ["batch", str(f), "-j", "2", "-o", str(tmp_path / "out")])
    assert res.exit_code == 1
    assert "1 ok, 1 failed" in res.output and "bundle folder not found" in res.output
    assert (tmp_path / "out" / "surge" / "postmortem.html").exists()
    assert not (tmp_path / "out" / "gone").exists()
