"""The trainer's loss by step, read from log lines in the formats trainers write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from perfkit.analyses.training_evidence import loss_by_step
from perfkit.core.frames import LOG_SCHEMA, Window
from perfkit.core.incident import Incident

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _logs(lines: list[tuple[int, str]]) -> pl.DataFrame:
    rows = [
        {
            "ts": T0 + timedelta(seconds=s),
            "source": "train.log",
            "line": n,
            "kind": "",
            "level": "INFO",
            "message": m,
        }
        for n, (s, m) in enumerate(lines, start=1)
    ]
    return pl.DataFrame(rows, schema=LOG_SCHEMA)


def _incident() -> Incident:
    return Incident(
        id="INC-1",
        title="t",
        service="train",
        window=Window(T0 + timedelta(seconds=100), T0 + timedelta(seconds=200)),
        baseline=Window(T0, T0 + timedelta(seconds=100)),
    )


def test_three_trainers_formats_and_a_rerun_step():
    logs = _logs(
        [
            (
                10,
                "[rank0]:[2026-12-01 08:00:10,000] [INFO] [train.py:402] step 100 | loss 2.5000 | lr 3.00e-04",
            ),
            (
                10,
                "[rank1]:[2026-12-01 08:00:10,000] [INFO] [train.py:402] step 100 | loss 2.7000 | lr 3.00e-04",
            ),
            # torchtitan, with its ANSI colours
            (20, "\x1b[31mstep:  101  \x1b[32mloss:  2.4000  \x1b[33mmemory: 30.1GiB(38.2%)"),
            # Megatron-LM
            (
                30,
                " iteration      102/   10000 | consumed samples: 816 | lm loss: 2.300000E+00 | loss scale: 1.0 |",
            ),
            # after a restart from the checkpoint at step 100: the same steps again, in the incident window
            (
                150,
                "[rank0]:[2026-12-01 08:02:30,000] [INFO] [train.py:402] step 100 | loss 3.1000 | lr 3.00e-04",
            ),
            (160, "step 101 | loss nan | lr 3.00e-04"),  # not a number: skipped
            (170, "validation loss 2.2"),  # no step: not a training step's loss
            (300, "step 103 | loss 2.2"),  # after the window: not read
        ]
    )
    got = loss_by_step(logs, _incident())
    assert got == {"baseline": {100: 2.6, 101: 2.4, 102: 2.3}, "incident": {100: 3.1}}


def test_no_step_lines_is_none():
    assert loss_by_step(_logs([(10, "NCCL INFO Channel 00/02")]), _incident()) is None
    assert loss_by_step(None, _incident()) is None
