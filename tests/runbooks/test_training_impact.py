"""A training job's impact counts what it gained, not its rate while running (issue 36, item 1):
a crash loop that resumes from one checkpoint is 100 % lost; the GPU count is the job's, not the
highest rank that exports; the P0 names the config change the crashes started with.

Expected values are read from the bundles' own files by this test (the launcher's and trainer's
lines, NCCL's init lines, events.csv), not from perfkit's output.
"""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from perfkit.app.runner.run import execute

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
pytestmark = pytest.mark.slow
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]")


def _run(tmp_path_factory: pytest.TempPathFactory, name: str) -> dict:
    out = tmp_path_factory.mktemp(name)
    result = execute("training_step", out, {"bundle": str(SCENARIOS / name)})
    assert result.error is None, result.error
    return {
        "md": (out / "postmortem.md").read_text(),
        "json": json.loads((out / "findings.json").read_text()),
    }


def _ts(line: str) -> datetime | None:
    m = _STAMP.search(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) if m else None


def test_a_crash_loop_is_all_lost_and_its_p0_reverts_the_change(tmp_path_factory) -> None:
    name = "train-oom-batch-size"
    log = (SCENARIOS / name / "logs" / "train.log").read_text().splitlines()
    start = datetime(2026, 12, 16, 15, 20, tzinfo=UTC)  # incident.yaml's window
    end = datetime(2026, 12, 16, 15, 40, tzinfo=UTC)
    # what the log says: the first step each launch logged in the window, and the highest before it
    step = re.compile(r"\bstep (\d+) \|")
    highest_before = max(
        int(m.group(1)) for line in log if (t := _ts(line)) and t < start and (m := step.search(line))
    )
    firsts, launched = [], False
    for line in log:
        t = _ts(line)
        if "launcher: starting" in line:
            launched = True
        elif launched and (m := step.search(line)) and t is not None:
            if start <= t <= end:
                firsts.append(int(m.group(1)))
            launched = False
    assert len(set(firsts)) == 1 and len(firsts) >= 3  # one checkpoint, again and again
    highest_in_window = max(
        int(m.group(1)) for line in log if (t := _ts(line)) and start <= t <= end and (m := step.search(line))
    )
    assert highest_in_window < highest_before  # it never got past where it had been

    run = _run(tmp_path_factory, name)
    cost = run["json"]["findings"]["training_cost"]["data"]
    prog = cost["progress"]["incident"]
    assert prog["crash_loop"] and prog["steps_new"] == 0
    assert {r["resumed_step"] for r in prog["restarts"]} == set(firsts)
    assert cost["lost_share"] == pytest.approx(1.0)
    assert cost["lost_gpu_hours"] == pytest.approx(20 / 60 * 8)  # the whole window, all 8 GPUs
    assert cost["lost_usd_per_day"] == pytest.approx(24 * 8 * 2.5)  # incident.yaml's price
    md = run["md"]
    assert "**Severity:** SEV-2" in md
    assert "no net progress" in md.split("## Impact")[0]  # said in the summary
    with (SCENARIOS / name / "events.csv").open() as f:
        change = next(r for r in csv.DictReader(f) if r["kind"] == "config")["detail"]
    p0 = next(line for line in md.splitlines() if "| P0 |" in line)
    assert "revert the config change" in p0 and change.split(" (")[0].replace(">", "\\>") in p0


def test_the_gpu_count_is_the_jobs_not_the_highest_exporting_rank(tmp_path_factory) -> None:
    name = "nccl-socket-fallback"
    log = (SCENARIOS / name / "logs" / "train.log").read_text()
    world = max(int(n) for n in re.findall(r"\bnranks (\d+)", log))
    metrics = (SCENARIOS / name / "metrics" / "train.om").read_text()
    exporting = {int(r) for r in re.findall(r'rank="(\d+)"', metrics)}
    assert max(exporting) + 1 < world  # the ranks that export undercount the job

    run = _run(tmp_path_factory, name)
    gpus = next(line for line in run["md"].splitlines() if line.startswith("| GPUs |"))
    assert gpus.split("|")[2].strip() == gpus.split("|")[3].strip() == str(world)
    cost = run["json"]["findings"]["training_cost"]["data"]
    assert cost["lost_gpu_hours"] == pytest.approx(cost["lost_share"] * 20 / 60 * world)
    # the hang and the relaunch: the job resumed below where it had been, nothing new in the window
    prog = cost["progress"]["incident"]
    assert prog["restarts"] and prog["restarts"][0]["resumed_step"] < prog["frontier_start"]


def test_rolling_back_a_release_that_spoiled_training_counts_the_steps_it_discards(tmp_path_factory) -> None:
    """Loss spikes after a trainer release: the job runs at full speed, but its P0 reverts the release
    and resumes from the last checkpoint before it, so every step since is lost (the expert's "$0
    lost, SEV-4" where the rollback discards everything since the bad release)."""
    name = "loss-spikes-no-warmup"
    with (SCENARIOS / name / "events.csv").open() as f:
        deploy = next(r for r in csv.DictReader(f) if r["kind"] == "deploy")
    at = datetime.fromisoformat(deploy["ts"].replace("Z", "+00:00"))
    end = datetime(2026, 12, 11, 9, 40, tzinfo=UTC)  # incident.yaml's window end
    log = (SCENARIOS / name / "logs" / "train.log").read_text().splitlines()
    saves = [
        (t, int(m.group(1)))
        for line in log
        if (t := _ts(line)) and (m := re.search(r"checkpoint step_(\d+)", line))
    ]
    saved_at, resume = max((s for s in saves if s[0] <= at), key=lambda s: s[0])
    frontier = max(int(m.group(1)) for line in log if (t := _ts(line)) and t <= end and (m := re.search(r"\bstep (\d+) \|", line)))  # fmt: skip

    run = _run(tmp_path_factory, name)
    md = run["md"]
    rows = {r.split("|")[1].strip(): r.split("|") for r in md.split("## Impact")[1].split("##")[0].splitlines() if r.startswith("| ")}  # fmt: skip
    steps = next(v for k, v in rows.items() if k.startswith("steps a rollback of"))
    assert steps[3].strip() == f"{frontier - resume:,}"
    assert f"step {resume:,}" in steps[5]
    hours = rows["GPU-hours a rollback discards"][3].strip()
    assert float(hours) == pytest.approx((end - saved_at).total_seconds() / 3600 * 8, abs=0.06)  # 8 GPUs
    assert "**Severity:** SEV-2" in md  # the whole window is trained again
    assert "discards" in md.split("## Impact")[0]  # said in the summary
    p0 = next(line for line in md.splitlines() if "| P0 |" in line)
    assert f"resume from the checkpoint of step {resume:,}" in p0


def test_a_throughput_regression_reverts_without_discarding_steps(tmp_path_factory) -> None:
    # a slower data loader after a config change: its steps stay good, reverting discards none
    md = _run(tmp_path_factory, "dataloader-starvation")["md"]
    assert "rollback" not in md.split("## Detection")[0]
