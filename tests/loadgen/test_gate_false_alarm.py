"""Issue 21 item 2, small: against ``perfkit lab serve`` on 127.0.0.1, one baseline, three identical
reruns must pass (a gate that fails identical runs gets switched off) and the README's slowdown
(50 ms TTFT / 10 ms per token to 80 / 12 ms) must be caught, exit 1. The full measurement (the
README's 1,000-request runs, 20 reruns, 20 slowed) is ``benchmarks/gate_false_alarm.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.gate import gate
from perfkit.app.cli.main import Cli
from perfkit.loadgen import store

perfkit = Cli(name="perfkit", commands={"gate": gate})
pytestmark = pytest.mark.slow  # five runs of ~10 s each


def bench(out: Path, ttft_ms: float, itl_ms: float) -> Path:
    from perfkit.lab.serve import serving
    from perfkit.loadgen.bench import BenchOptions, run_bench
    from perfkit.loadgen.shapes import concurrency_plan

    with serving(ttft_ms=ttft_ms, itl_ms=itl_ms, model="perfkit-lab") as url:
        plan = concurrency_plan(600, 32, 16, 16)
        options = BenchOptions(
            url=url, model="perfkit-lab", plan=plan, out=out, concurrency=16, slo_ms={"ttft": 200.0},
            labels={"hardware": "test"}, warmup=8,
        )  # fmt: skip
        run_bench(options)
    return out


def test_identical_reruns_pass_and_the_readme_slowdown_is_caught(tmp_path: Path) -> None:
    st = tmp_path / "store"
    store.add(bench(tmp_path / "base.json", 50, 10), st)
    for i in range(3):
        run = bench(tmp_path / f"same-{i}.json", 50, 10)
        assert json.loads(run.read_text())["records"]  # the within-run noise comes from these
        args = ["gate", str(run), "--store", str(st), "-o", str(tmp_path / "v.json"), "--allow-invalid"]
        res = CliRunner().invoke(perfkit, args)  # judged even if a loaded machine marked it invalid
        verdict = json.loads((tmp_path / "v.json").read_text())
        assert res.exit_code == 0 and verdict["verdict"] == "pass", res.output
        medians = [m for m in verdict["metrics"] if m["metric"].startswith("median_")]
        judged = [m for m in medians if m["status"] != "no-data"]
        assert judged and {m["noise_from"] for m in judged} == {"within-run CI"}
        # on a loaded machine the requests sent together share its state: a median whose records
        # leave too few independent ones is said unjudged (the records' own reason), never guessed
        assert all("independent" in (m["why"] or "") for m in medians if m["status"] == "no-data"), medians
    slow = bench(tmp_path / "slow.json", 80, 12)
    res = CliRunner().invoke(perfkit, ["gate", str(slow), "--store", str(st), "--allow-invalid"])
    assert res.exit_code == 1, res.output
    assert "median_ttft_ms" in res.stdout.splitlines()[0] and "mean_tpot_ms" in res.stdout.splitlines()[0]
