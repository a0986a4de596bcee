"""Issue 22 M1/C3: no window longer than 90 days reaches a reader. A 1,000-year incident.yaml window
had `scaling` use 22.7 GB, `bench --replay` 8.5 GB and `triage` 4.1 GB before failing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.core.incident import MAX_WINDOW_DAYS, make_window
from perfkit.errors import ConfigError

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"


def test_a_window_over_90_days_is_refused_naming_it():
    assert make_window("2026-01-01T00:00:00Z", "2026-03-31T00:00:00Z").seconds == 89 * 86400
    with pytest.raises(ConfigError, match=f"longer than {MAX_WINDOW_DAYS} days"):
        make_window("1026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", what="window")


@pytest.mark.parametrize(
    "args",
    [
        ["triage", "--bundle", "{b}"],
        ["scaling", "{b}"],
        ["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--replay", "{b}", "-o", "{t}/r.json"],
        [
            "scaling",
            str(SCENARIOS / "allreduce-scaling-64gpu"),
            "--after",
            "1000-01-01T00:00:00Z/9999-01-01T00:00:00Z",
        ],
    ],
)
def test_commands_refuse_a_millennium_window_in_one_line(tmp_path, args):
    bundle = tmp_path / "b"
    shutil.copytree(SCENARIOS / "allreduce-scaling-64gpu", bundle)
    text = (bundle / "incident.yaml").read_text()
    start = next(line for line in text.splitlines() if line.strip().startswith("start:"))
    (bundle / "incident.yaml").write_text(
        text.replace(start, start.split(":")[0] + ": '1026-12-07T02:20:00Z'", 1)
    )
    res = CliRunner().invoke(cli, [a.format(b=bundle, t=tmp_path) for a in args])
    assert res.exit_code == 2, res.output
    assert "longer than 90 days" in res.output and "Traceback" not in res.output
