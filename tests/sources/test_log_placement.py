"""Issue 35 item 3, "lines placed in time whatever the framework": a line without a time of its own
(NCCL's INFO/WARN lines, a ``torch.distributed`` error, a CUDA OOM, a traceback) is placed by the
stamped lines around it in any log whose lines carry time, and the uncertainty is said once per file.

Every stamped line and every untimed line below is a real line from tests/data (SOURCES.md there and
in tests/sources/data names each one's source). Where a sample holds no NCCL line (torchtitan, NeMo,
vLLM, SGLang ...), real NCCL lines of another run are put between two of its real stamped lines: the
lines are real, their neighbourhood is the test's. The expected times are read off the sample lines
by hand, never from the parser's output."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from perfkit.core.frames import Window
from perfkit.sources.logs import parse_lines, read_logs
from perfkit.triage.evidence import _log_counts  # how the triage counts a kind in the window

TESTS = Path(__file__).resolve().parents[1]
TRAINERS = TESTS / "data" / "trainers"
ENGINES = TESTS / "data" / "engines"
SOURCES = TESTS / "sources" / "data"
ANY_TIME = Window(datetime(2021, 1, 1, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC))
NOV30 = Window(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 11, 30, 4, tzinfo=UTC))


def line(path: Path, number: int) -> str:
    return path.read_text(encoding="utf-8").splitlines()[number - 1]


def nccl_warns() -> list[str]:
    """NCCL's ``host:pid:tid [dev] file:line NCCL WARN`` lines, no time (DeepSpeedExamples#310)."""
    return [
        x for x in (TRAINERS / "nccl_async_event_issue310.log").read_text().splitlines() if "NCCL WARN" in x
    ]


UNTIMED = [
    nccl_warns()[0],
    line(
        TRAINERS / "distbackend_error_issue266.log", 1
    ),  # torch.distributed.DistBackendError: NCCL error in:
    line(SOURCES / "vllm_api.log", 11),  # torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...
]
UNTIMED_KINDS = {"nccl_warn": 1, "nccl_error": 1, "cuda_oom": 1}


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


# (framework, its stamped line, the time it states, a later stamped line, the time that one states)
STAMPED = {
    "vLLM": (SOURCES / "vllm_api.log", 1, at(2026, 11, 30, 0, 10, 0), 2, at(2026, 11, 30, 0, 10, 5)),
    "SGLang": (
        ENGINES / "sglang_log_lines.txt",
        2,
        at(2025, 1, 23, 19, 35, 14),
        3,
        at(2025, 1, 23, 19, 35, 15),
    ),
    "Megatron-LM": (TRAINERS / "megatron_lm.log", 63, at(2024, 4, 6, 3, 2, 12), 64, at(2024, 4, 6, 3, 2, 18)),
    "NeMo": (
        TRAINERS / "nemo_logger_issue20.log",
        1,
        at(2024, 3, 21, 12, 53, 36),
        2,
        at(2024, 3, 21, 12, 53, 37),
    ),
    "torchtitan": (
        TRAINERS / "torchtitan.log",
        32,
        at(2026, 5, 18, 16, 4, 46, 338000),
        33,
        at(2026, 5, 18, 16, 4, 47, 456000),
    ),  # fmt: skip
    "DeepSpeed": (
        TRAINERS / "deepspeed.log",
        81,
        at(2023, 7, 25, 21, 3, 17, 269000),
        84,
        at(2023, 7, 25, 21, 3, 21, 37000),
    ),  # fmt: skip
    "HF Trainer (LLaMA-Factory)": (
        TRAINERS / "hf_hosts_issue2470.log",
        1,
        at(2024, 2, 11, 22, 36, 19),
        2,
        at(2024, 2, 11, 22, 36, 22, 106000),
    ),  # fmt: skip
    "Python logging": (
        TRAINERS / "python_logging_nccl_issue11658.log",
        1,
        at(2021, 5, 10, 10, 56, 35),
        9,
        at(2021, 5, 10, 10, 56, 59),
    ),  # fmt: skip
}


@pytest.mark.parametrize("framework", list(STAMPED))
def test_untimed_lines_take_the_time_of_the_stamped_line_before_them(framework: str) -> None:
    path, first, t1, second, t2 = STAMPED[framework]
    window = NOV30 if framework == "vLLM" else ANY_TIME
    result = parse_lines([line(path, first), *UNTIMED, line(path, second)], window=window, source="x.log")
    placed = result.records.filter(result.records["line"].is_in([2, 3, 4]))
    assert placed.select("line", "kind").rows() == [(2, "nccl_warn"), (3, "nccl_error"), (4, "cuda_oom")]
    assert placed["ts"].to_list() == [t1, t1, t1]
    # counted in a window that starts at the stamped line before them (and ends before the next), as
    # the triage counts
    counts = _log_counts(result.records, Window(t1, t2 - timedelta(milliseconds=1)))
    assert {k: counts.get(k) for k in UNTIMED_KINDS} == UNTIMED_KINDS
    early = f"{(t2 - t1).total_seconds():.3g} s"
    assert result.notes == [
        f"x.log: 3 lines without a time of their own placed by their timestamped neighbours "
        f"(at the time of the line before, at most {early} early)"
    ]


def test_nccl_warnings_between_torchtitan_steps_are_counted_in_the_window(tmp_path: Path) -> None:
    """The issue's case: torchtitan under torchrun (``[rank0]:[titan] <time> ...`` step lines) and NCCL
    WARN lines without a time between two steps. They were read without a time ("no NCCL lines"):
    torchtitan's stamp stands behind its ``[titan]`` tag, and nothing carried it to the next line."""
    steps = (TRAINERS / "torchtitan.log").read_text().splitlines()[31:39]  # steps 14-21, 16:04:46-16:04:54
    assert all(s.startswith("[rank0]:[titan] 2026-05-18 16:04:") and " step: " in s for s in steps)
    warns = [f"[rank0]:{w}" for w in nccl_warns()]  # torchrun --tee writes rank 0's NCCL lines behind its tag
    log = tmp_path / "train.log"
    log.write_text("\n".join([*steps[:3], *warns, *steps[3:]]) + "\n")
    result = read_logs(log, window=ANY_TIME)
    warned = result.records.filter(result.records["kind"] == "nccl_warn")
    assert warned["ts"].to_list() == [at(2026, 5, 18, 16, 4, 48, 577000)] * 4  # step 16's line, before them
    incident = Window(at(2026, 5, 18, 16, 4, 48), at(2026, 5, 18, 16, 4, 55))
    assert _log_counts(result.records, incident)["nccl_warn"] == 4
    assert (
        _log_counts(result.records, Window(at(2026, 5, 18, 16, 4, 49), at(2026, 5, 18, 16, 5)))["torchtitan"]
        == 5
    )
    assert result.notes == [
        "train.log: 4 lines without a time of their own placed by their timestamped neighbours "
        "(at the time of the line before, at most 1.12 s early)"
    ]


def test_a_real_log_with_nccl_lines_between_python_logging_lines() -> None:
    """transformers#11658 as the user pasted it: NCCL 2.7.8's WARN and INFO lines between two lines of
    Python's logging, then the traceback (no record: it holds no signal)."""
    result = read_logs(TRAINERS / "python_logging_nccl_issue11658.log", window=ANY_TIME)
    rows = result.records.select("ts", "line", "kind").rows()
    assert rows[0] == (at(2021, 5, 10, 10, 56, 35), 2, "nccl_warn")
    assert [r[2] for r in rows[1:7]] == ["nccl_info"] * 6 and {r[0] for r in rows[:7]} == {
        at(2021, 5, 10, 10, 56, 35)
    }
    assert rows[7] == (at(2021, 5, 10, 10, 56, 59), 9, "nccl_error")  # its own stamp
    assert result.notes == [
        "python_logging_nccl_issue11658.log: 7 lines without a time of their own placed by their "
        "timestamped neighbours (at the time of the line before, at most 24 s early)"
    ]


def test_lines_after_the_last_stamp_and_before_the_first_are_said_too() -> None:
    nemo = TRAINERS / "nemo_logger_issue20.log"
    result = parse_lines(
        [nccl_warns()[0], line(nemo, 1), nccl_warns()[1], line(nemo, 2), *UNTIMED[1:]],
        window=ANY_TIME,
        source="nemo.log",
    )
    assert result.records.select("ts", "kind").rows() == [
        (None, "nccl_warn"),  # nothing before it to place it by
        (at(2024, 3, 21, 12, 53, 36), "nccl_warn"),
        (at(2024, 3, 21, 12, 53, 37), "nccl_error"),  # after the last stamp: at it, early by how much unknown
        (at(2024, 3, 21, 12, 53, 37), "cuda_oom"),
    ]
    assert result.notes == [
        "nemo.log: 1 line without a time of their own placed by their timestamped neighbours (at the time "
        "of the line before, at most 1 s early); 2 lines after the last timestamped line placed at it "
        "(early by an unknown amount); 1 line before the first timestamped line left without a time"
    ]


def test_a_file_without_any_time_says_nothing_and_files_do_not_lend_each_other_times(tmp_path: Path) -> None:
    stamped = tmp_path / "a.log"
    stamped.write_text(line(TRAINERS / "python_logging_nccl_issue11658.log", 1) + "\n")
    untimed = tmp_path / "b.log"
    untimed.write_text((TRAINERS / "nccl_async_event_issue310.log").read_text())
    result = read_logs([stamped, untimed], window=ANY_TIME)
    b = result.records.filter(result.records["source"] == "b.log")
    assert b.height == 13 and b["ts"].null_count() == 13
    assert result.notes == []


def test_a_progress_line_without_a_time_is_left_to_the_trainer_series() -> None:
    """An HF Trainer dict has no time; trainer_series places it by its own epoch and step rate, so the
    neighbours do not (they would make every dict of an interval one point)."""
    python_log = TRAINERS / "python_logging_nccl_issue11658.log"
    hf = line(TRAINERS / "hf_trainer.log", 1)
    result = parse_lines([line(python_log, 1), hf, line(python_log, 9)], window=ANY_TIME, source="hf.log")
    assert result.records.select("ts", "kind").rows()[0] == (None, "hf")
    assert result.notes == []


@pytest.mark.parametrize(
    "text",
    [
        "[titan] 2025-13-45 12:00:00,000 - root - INFO - step: 1  loss: 1.0",  # no 13th month
        "gpu003: 13/45/2024 22:36:19 - INFO - x",
        "[NeMo I 2024-02-30 12:53:37 dataset:228] no 30 February",
        "checkpoint saved to /ckpt/2025-01-01 12:00:00 step 10",  # a date in the message, not a header
    ],
)
def test_what_is_not_a_stamp_gives_no_time(text: str) -> None:
    result = parse_lines([f"{text} {nccl_warns()[0]}"], window=ANY_TIME)
    assert result.records["ts"].to_list() == [None]


def test_hostile_headers_are_read_in_bounded_time() -> None:
    """Lines that look like a header for as long as they can: each part of the header is bounded, so a
    64 KiB line is tried a fixed number of times, not once from every position."""
    lines = [
        "[a]" * 21_000,
        "[NeMo " * 10_000,
        "x" * 60_000 + ": 2025-01-01 00:00:00",
        "0: " * 20_000,
        "[INFO|" + "a" * 60_000,
    ] * 40
    plain = ["x" * len(text) for text in lines]  # as many bytes with nothing header-like in them
    started = time.perf_counter()
    parse_lines(plain, window=ANY_TIME)
    reference = time.perf_counter() - started
    started = time.perf_counter()
    result = parse_lines(lines, window=ANY_TIME)
    hostile = time.perf_counter() - started
    # side by side in one run (the machine's load cancels): linear, not quadratic (a 64 KiB line tried
    # from every position would take thousands of times as long)
    assert hostile < 50 * reference + 0.5, f"{hostile:.2f} s against {reference:.2f} s for plain lines"
    assert result.records.height == 0 and result.unknown == len(lines)


def test_the_window_edge_is_a_stamped_line_not_a_guess() -> None:
    """A line placed at the line before it is never later than it was: an NCCL warning printed just
    after the window's start but behind a stamp before it is counted before the window (said early)."""
    path, first, t1, second, t2 = STAMPED["torchtitan"]
    result = parse_lines([line(path, first), nccl_warns()[0], line(path, second)], window=ANY_TIME)
    assert _log_counts(result.records, Window(t1 + timedelta(milliseconds=1), t2)).get("nccl_warn") is None


def test_a_bundles_placed_lines_are_a_note_not_missing_evidence() -> None:
    """Lines placed by their neighbours were read: the uncertainty is said once per file, as a note of
    the bundle and of the triage JSON, not as evidence missing."""
    from perfkit.sources.bundle import load_bundle
    from perfkit.triage.table import triage_bundle

    bundle = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "nccl-socket-fallback"
    b = load_bundle(bundle)
    placed = [n for n in b.notes if "placed by their timestamped neighbours" in n]
    assert placed and all(n.startswith("logs: train.log: ") for n in placed)
    assert not [m for m in b.missing if "placed" in m]
    result = triage_bundle(bundle).to_json()
    assert result["notes"] == b.notes and not [m for m in result["missing"] if "placed" in m]
