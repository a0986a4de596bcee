"""``perfkit trace PATH [--format json|table] [--whole-trace]`` through the real command group."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner
from trace_synth import FIXTURES, expected

from perfkit.app.cli.main import cli

ISSUE_KEYS = {  # the per-rank keys issue 12 names for the JSON output
    "rank",
    "kernel_time_us",
    "idle_us",
    "compute_us",
    "non_compute_us",
    "idle_pct",
    "compute_pct",
    "non_compute_pct",
    "comm_comp_overlap_pct",
}


def run(*args: str):
    return CliRunner().invoke(cli, ["trace", *args])


def test_json_for_a_folder_of_ranks_has_the_issue_shape_and_htas_numbers():
    res = run(str(FIXTURES / "trace_filter"), "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    hta = {row["rank"]: row for row in expected("trace_filter")["default"]["temporal"]}
    for r in out["ranks"]:
        assert set(r) >= ISSUE_KEYS
        for key in ("idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct"):
            assert 0 <= r[key] <= 100
        assert abs(r["idle_pct"] - hta[r["rank"]]["idle_time_pctg"]) <= 0.1
        assert abs(r["idle_pct"] + r["compute_pct"] + r["non_compute_pct"] - 100) <= 0.02
    assert out["whole_trace"] is False and "last ProfilerStep" in out["trimming"]
    assert set(out["stragglers"]) >= {"ranks", "kernel", "note"}


def test_whole_trace_option_turns_trimming_off():
    res = run(str(FIXTURES / "trace_filter" / "sampled_rank-0.json.gz"), "--format", "json", "--whole-trace")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    hta = expected("trace_filter")["whole"]["temporal"][0]
    assert out["whole_trace"] is True
    assert abs(out["ranks"][0]["idle_pct"] - hta["idle_time_pctg"]) <= 0.1


def test_table_for_people():
    res = run(str(FIXTURES / "trace_diff" / "control"))
    assert res.exit_code == 0, res.output
    assert "GPU time by rank" in res.output and "idle %" in res.output
    assert "16.20" in res.output  # HTA 0.5.0: rank 3 idle 16.20 %
    assert "Profiler steps" in res.output and "data loader" in res.output


def test_a_bad_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "rank-0.json.gz"
    bad.write_bytes((FIXTURES / "trace_filter" / "sampled_rank-0.json.gz").read_bytes()[:1000])
    res = run(str(bad))
    assert res.exit_code == 2
    assert res.output.strip().count("\n") == 0
    assert "truncated gzip stream" in res.output and str(bad) in res.output


def test_the_installed_command_runs(tmp_path):
    """The console script path: ``python -m perfkit trace`` in a child process."""
    out = subprocess.run(
        [sys.executable, "-m", "perfkit", "trace", str(FIXTURES / "amd_trace"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rank = json.loads(out.stdout)["ranks"][0]
    assert rank["idle_pct"] == expected("amd_trace")["default"]["temporal"][0]["idle_time_pctg"]
