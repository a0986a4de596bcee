"""One command-line grammar (issue 21, docs/cli.md): the same option means the same thing and is
checked the same way in every command."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from perfkit.app.cli import cli


@pytest.mark.parametrize(
    "args",
    [
        ["lab", "whatif", "--replay", "demo", "--set", "max_num_seqs=8"],
        ["lab", "serve"],
        ["drill", "start", "drill-01", "--live"],
        ["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1", "-o", "r.json"],
    ],
)
def test_a_negative_seed_is_a_usage_error_everywhere(args, tmp_path, monkeypatch):
    """`--seed -1` was a traceback in bench, what-if, serve and drills (issue 22 C3)."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, [*args, "--seed", "-1"])
    assert res.exit_code == 2, res.output
    assert "--seed" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "r.json").exists()
