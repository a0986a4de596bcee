"""Step numbers and the world size read from real training logs (tests/data/trainers, SOURCES.md)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from perfkit.core.frames import Window
from perfkit.sources.logs import parse_lines, read_logs
from perfkit.sources.trainer_steps import nccl_world_size, step_points

DATA = Path(__file__).resolve().parents[1] / "data" / "trainers"
WIDE = Window(datetime(2019, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))


def test_torchtitan_steps_in_time_order() -> None:
    text = (DATA / "torchtitan.log").read_text()
    # the rank with the most step lines: rank 0 (the file holds several runs' pastes, some unlabelled)
    stamped = re.findall(
        r"^\[rank0\]:\[titan\] \d{4}-\d\d-\d\d [\d:,]+ - root - INFO - step:\s+(\d+)", text, re.M
    )
    points = step_points(read_logs(DATA / "torchtitan.log", window=WIDE).records)
    assert len(points) == len(stamped) > 10
    assert [t for t, _ in points] == sorted(t for t, _ in points)
    assert sorted(s for _, s in points) == sorted(int(s) for s in stamped)


def test_a_script_progress_line_gives_its_step_and_nothing_else_reads_it() -> None:
    lines = [
        "[rank0]:[2026-12-16 15:20:03,348] [INFO] [train.py:402] step 2500 | loss 1.2297 | lr 2.00e-05 | step_time 3.35s",
        "[rank1]:[2026-12-16 15:20:03,349] [INFO] [train.py:402] step 2500 | loss 1.2301 | lr 2.00e-05 | step_time 3.35s",
        "[rank0]:[2026-12-16 15:20:39,790] [INFO] [train.py:402] step 2510 | loss 1.2272 | lr 2.00e-05 | step_time 3.59s",
        "[2026-12-16 15:20:40,000] step 99 of the data loader | not a loss line",
    ]
    records = parse_lines(lines, window=WIDE).records
    assert set(records["kind"]) == {"train_progress"}
    assert [s for _, s in step_points(records)] == [2500, 2510]  # rank 0's only


def test_world_size_from_real_nccl_init_lines() -> None:
    nccl = (DATA / "nccl_async_event_issue310.log").read_text().splitlines()
    sizes = {int(m) for m in re.findall(r"nranks (\d+)", "\n".join(nccl))}
    assert sizes == {8}
    # NCCL's lines carry no time: placed between two stamped lines, as in a launcher's log
    lines = [
        "[2026-12-09 20:57:06,000] launcher: starting job",
        *nccl,
        "[2026-12-09 20:57:30,000] launcher: job running",
    ]
    records = parse_lines(lines, window=WIDE).records
    assert nccl_world_size(records, datetime(2026, 12, 9, 21, 0, tzinfo=UTC)) == 8
    assert nccl_world_size(records, datetime(2026, 12, 9, 20, 0, tzinfo=UTC)) is None  # not yet launched
