from __future__ import annotations

import gzip
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from perfkit.core.frames import LOG_SCHEMA, STATS_SCHEMA, Window
from perfkit.sources.logs import LogResult, expand, parse_lines, read_logs, source_names

DATA = Path(__file__).parent / "data"
NOV30 = Window(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 11, 30, 4, tzinfo=UTC))
STATS_LINE = (
    "Engine 000: Avg prompt throughput: 1234.5 tokens/s, Avg generation throughput: 456.7 tokens/s, "
    "Running: 24 reqs, Waiting: 5 reqs, GPU KV cache usage: 73.1%, Prefix cache hit rate: 33.2%"
)


def t(
    hh: int, mm: int, ss: int, ms: int = 0, *, day: int = 30, month: int = 11, year: int = 2026
) -> datetime:
    return datetime(year, month, day, hh, mm, ss, ms * 1000, tzinfo=UTC)


def rows(result: LogResult) -> list[tuple[object, ...]]:
    """(ts, line, kind, level, message) of every record."""
    return result.records.select("ts", "line", "kind", "level", "message").rows()


def stats_rows(result: LogResult) -> list[tuple[object, ...]]:
    return result.stats.rows()


def assert_stats(actual: list[tuple[object, ...]], expected: list[tuple[object, ...]]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got[:2] == want[:2]
        for g, w in zip(got[2:], want[2:], strict=True):
            assert g == (w if w is None or isinstance(w, int) else pytest.approx(w))


# -- vLLM ----------------------------------------------------------------------------------------


def test_vllm_v1_log_gives_records_stats_and_unknown_count():
    result = read_logs(DATA / "vllm_api.log", window=NOV30)
    assert result.records.schema == pl.Schema(LOG_SCHEMA)
    assert result.stats.schema == pl.Schema(STATS_SCHEMA)
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free."
    )
    records = rows(result)
    assert [r[:4] for r in records] == [
        (t(0, 10, 0), 1, "vllm", "INFO"),
        (t(0, 10, 5), 2, "vllm_stats", "INFO"),
        (t(0, 10, 15), 4, "vllm_stats", "DEBUG"),
        (t(0, 10, 25), 5, "vllm_stats", "INFO"),
        (t(0, 10, 35), 6, "vllm_stats", "INFO"),
        (t(0, 11, 2), 8, "vllm", "ERROR"),
        (t(0, 11, 2), 11, "cuda_oom", "ERROR"),  # traceback line: time of the line before it
        (t(0, 11, 3), 12, "vllm", "WARNING"),
    ]
    assert records[0][4] == "Starting vLLM API server 0 on http://0.0.0.0:8000"
    assert records[1][4] == STATS_LINE
    assert records[6][4] == oom
    assert records[7][4] == "Engine core died; shutting down"
    assert set(result.records["source"]) == {"vllm_api.log"}
    assert_stats(
        stats_rows(result),
        [
            (t(0, 10, 5), "0", 1234.5, 456.7, 24, 5, 0.731, 0.332, None),
            (t(0, 10, 15), "1", 0.0, 0.0, 0, 0, 0.0, 0.0, None),
            # Deferred / KV fetch / Preemptions / XPU device / External and MM hit rates
            (t(0, 10, 25), "0", 980.0, 2100.4, 31, 12, 0.915, 0.12, 4),
            # no "Prefix cache hit rate" before the first query
            (t(0, 10, 35), "0", 10.0, 20.0, 1, 0, 0.025, None, None),
        ],
    )
    # the access log line and the two traceback frames; the blank line is not counted
    assert result.unknown == 3
    assert result.unknown_by_file == {"vllm_api.log": 3}
    assert result.files == ["vllm_api.log"]
    assert result.errors == []


def test_old_vllm_forms_and_logging_prefix():
    result = read_logs(DATA / "vllm_old.log", window=NOV30)
    assert rows(result) == [
        (
            t(0, 20, 0),
            1,
            "vllm_stats",
            "INFO",
            "Avg prompt throughput: 150.2 tokens/s, Avg generation throughput: 300.9 tokens/s, Running: 8 reqs, "
            "Swapped: 1 reqs, Pending: 2 reqs, GPU KV cache usage: 45.0%, CPU KV cache usage: 3.0%.",
        ),
        (
            t(0, 20, 5),
            2,
            "vllm_stats",
            "INFO",
            "Avg prompt throughput: 7.5 tokens/s, Avg generation throughput: 8.5 tokens/s, Running: 3 reqs, "
            "Waiting: 1 reqs, CPU KV cache usage: 12.3%, Prefix cache hit rate: 0.5%",
        ),
        (t(0, 20, 10), 3, "vllm", "INFO", "prefixed line"),
        (
            t(0, 20, 11),
            4,
            "vllm",
            "WARNING",
            "Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode",
        ),
    ]
    assert_stats(
        stats_rows(result),
        [
            # V0: Pending is the waiting queue; the GPU figure, not the CPU swap space
            (t(0, 20, 0), "0", 150.2, 300.9, 8, 2, 0.45, None, None),
            (t(0, 20, 5), "0", 7.5, 8.5, 3, 1, 0.123, 0.005, None),
        ],
    )
    assert result.unknown == 0


def test_ansi_colour_codes_are_removed():
    lines = [
        "\x1b[36m(APIServer pid=7)\x1b[0m \x1b[32mINFO\x1b[0m 11-30 00:10:05 \x1b[90m[loggers.py:335]\x1b[0m "
        + STATS_LINE,
        "\x1b[1;31mRuntimeError: CUDA error: out of memory\x1b[0m",
        "\x1b[33mplain coloured noise\x1b[0m",
    ]
    result = parse_lines(lines, window=NOV30, source="tty.log")
    assert rows(result) == [
        (t(0, 10, 5), 1, "vllm_stats", "INFO", STATS_LINE),
        (t(0, 10, 5), 2, "cuda_oom", "ERROR", "RuntimeError: CUDA error: out of memory"),
    ]
    assert result.stats["kv_cache_usage_frac"].to_list() == [pytest.approx(0.731)]
    assert result.unknown_by_file == {"tty.log": 1}


def test_year_comes_from_window_across_new_year():
    window = Window(datetime(2026, 12, 31, 23, tzinfo=UTC), datetime(2027, 1, 1, 1, tzinfo=UTC))
    lines = [
        "(APIServer pid=7) INFO 12-31 23:59:58 [loggers.py:335] " + STATS_LINE,
        "(APIServer pid=7) INFO 01-01 00:00:03 [loggers.py:335] " + STATS_LINE,
        "Jan  1 00:00:04 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        "[rank1]:[E0101 00:00:05.500000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 milliseconds",
        "Dec 31 23:59:59 node kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, DBE",
    ]
    result = parse_lines(lines, window=window)
    assert result.records.select("ts", "kind").rows() == [
        (datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC), "vllm_stats"),
        (datetime(2027, 1, 1, 0, 0, 3, tzinfo=UTC), "vllm_stats"),
        (datetime(2027, 1, 1, 0, 0, 4, tzinfo=UTC), "xid"),
        (datetime(2027, 1, 1, 0, 0, 5, 500000, tzinfo=UTC), "nccl_timeout"),
        (datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), "xid"),
    ]
    assert result.stats["ts"].to_list() == [
        datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC),
        datetime(2027, 1, 1, 0, 0, 3, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    ("window", "stamp", "expected"),
    [
        # June 2026: Nov 30 2026 is 168 days away, Nov 30 2025 is 197
        (
            Window(datetime(2026, 6, 15, tzinfo=UTC), datetime(2026, 6, 16, tzinfo=UTC)),
            "11-30 01:02:03",
            2026,
        ),
        # early January: a December date belongs to the year before
        (Window(datetime(2027, 1, 2, tzinfo=UTC), datetime(2027, 1, 3, tzinfo=UTC)), "12-28 01:02:03", 2026),
        # late December: a January date belongs to the year after
        (
            Window(datetime(2026, 12, 30, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC)),
            "01-02 01:02:03",
            2027,
        ),
    ],
)
def test_year_nearest_to_window_middle(window: Window, stamp: str, expected: int):
    result = parse_lines([f"INFO {stamp} [x.py:1] hello"], window=window)
    month, day = int(stamp[:2]), int(stamp[3:5])
    assert result.records["ts"].to_list() == [datetime(expected, month, day, 1, 2, 3, tzinfo=UTC)]


def test_feb_29_and_missing_previous_timestamp():
    leap = Window(datetime(2028, 2, 28, tzinfo=UTC), datetime(2028, 3, 1, tzinfo=UTC))
    result = parse_lines(["INFO 02-29 12:00:00 [x.py:1] leap day"], window=leap)
    assert result.records["ts"].to_list() == [datetime(2028, 2, 29, 12, tzinfo=UTC)]
    # no Feb 29 in 2025-2027, and nothing before it to borrow a time from
    result = parse_lines(
        ["torch.OutOfMemoryError: CUDA out of memory.", "INFO 02-29 12:00:00 [x.py:1] no such day"],
        window=NOV30,
    )
    assert result.records.select("ts", "kind").rows() == [(None, "cuda_oom"), (None, "vllm")]


# -- training, kernel, JSON --------------------------------------------------------------------------


def test_training_log_signals():
    result = read_logs(DATA / "train_rank0.log", window=NOV30)
    assert [r[:4] for r in rows(result)] == [
        (t(2, 0, 0), 2, "nccl_info", "INFO"),  # time of the app line before it
        (t(2, 0, 1), 3, "nccl_info", "INFO"),  # NCCL_DEBUG_TIMESTAMP_LEVELS stamp
        (t(2, 0, 1), 4, "nccl_warn", "WARNING"),
        (t(2, 0, 1), 5, "nccl_info", "INFO"),  # torchrun "[default0]:" prefix
        (t(2, 10, 1, 123), 6, "nccl_timeout", "ERROR"),  # glog stamp, year from the window
        (t(2, 10, 1, 200), 8, "nccl_error", "ERROR"),  # time of the watchdog line before it
        (t(2, 15, 0), 9, "dataloader_error", "ERROR"),
        (t(2, 15, 0), 10, "dataloader_error", "ERROR"),
        (t(2, 15, 0), 11, "dataloader_error", "ERROR"),
    ]
    messages = result.records["message"].to_list()
    assert messages[3] == "[default0]:node1:4242:4252 [0] NCCL INFO Using network IB"
    assert messages[7] == "RuntimeError: DataLoader worker (pid(s) 5151, 5152) exited unexpectedly"
    # app line, "failure detected by watchdog" line and the tqdm bar
    assert result.unknown == 3
    assert result.stats.height == 0


def test_kernel_xid_with_syslog_dmesg_and_dmesg_t_prefixes():
    result = read_logs(DATA / "kern.log", window=NOV30)
    assert [r[:4] for r in rows(result)] == [
        (t(2, 10, 1), 1, "xid", "ERROR"),
        (t(2, 10, 2), 3, "xid", "ERROR"),  # seconds since boot: time of the syslog line before it
        (t(2, 12, 0), 4, "xid", "ERROR"),
    ]
    assert result.records["message"][1].startswith("[1234570.123456] NVRM: Xid (PCI:0000:86:00): 48,")
    assert result.unknown == 1


def test_json_lines():
    result = read_logs(DATA / "app.jsonl", window=NOV30)
    assert rows(result) == [
        (t(2, 0, 0, 250), 1, "json", "INFO", "request served"),
        (t(2, 0, 1, 500), 2, "json", "WARNING", "slow upstream"),  # epoch ms
        (
            t(2, 0, 2),
            3,
            "vllm_stats",
            "INFO",
            "Engine 000: Avg prompt throughput: 5.0 tokens/s, Avg generation throughput: 6.0 tokens/s, "
            "Running: 1 reqs, Waiting: 2 reqs, GPU KV cache usage: 10.0%, Prefix cache hit rate: 50.0%",
        ),
        (
            t(2, 0, 3),
            4,
            "cuda_oom",
            "ERROR",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
        ),
        (t(2, 0, 5, 250), 9, "json", None, "epoch seconds with fraction"),
    ]
    assert_stats(stats_rows(result), [(t(2, 0, 2), "0", 5.0, 6.0, 1, 2, 0.1, 0.5, None)])
    # no message, no timestamp, not JSON, unparseable timestamp
    assert result.unknown == 4


# -- files: gz, globs, folders, errors ---------------------------------------------------------------


def test_gzip_and_glob(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with gzip.open(tmp_path / "a" / "vllm.log.gz", "wb") as fh:
        fh.write((DATA / "vllm_api.log").read_bytes())
    # rotated and compressed without a .gz suffix: recognised by its magic number
    with gzip.open(tmp_path / "b" / "kern.log.1", "wb") as fh:
        fh.write((DATA / "kern.log").read_bytes())
    shutil.copy(DATA / "train_rank0.log", tmp_path / "b" / "train.log")
    result = read_logs(str(tmp_path / "*" / "*"), window=NOV30)
    assert result.files == ["a/vllm.log.gz", "b/kern.log.1", "b/train.log"]
    assert result.unknown_by_file == {"a/vllm.log.gz": 3, "b/kern.log.1": 1, "b/train.log": 3}
    assert result.unknown == 7
    assert result.errors == []
    counts = dict(result.records.group_by("source").len().rows())
    assert counts == {"a/vllm.log.gz": 8, "b/kern.log.1": 3, "b/train.log": 9}
    assert result.stats.height == 4
    plain = read_logs(DATA / "vllm_api.log", window=NOV30)
    assert result.stats.equals(plain.stats)


def test_unreadable_files_are_recorded_and_others_still_read(tmp_path: Path):
    (tmp_path / "core.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "latin1.log").write_bytes("café déjà vu à côté\n".encode("latin-1") * 20)
    (tmp_path / "broken.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    shutil.copy(DATA / "kern.log", tmp_path / "kern.log")
    missing = tmp_path / "gone.log"
    result = read_logs(
        [tmp_path / "*.bin", tmp_path / "latin1.log", tmp_path / "*.gz", missing, tmp_path / "kern.log"],
        window=NOV30,
    )
    assert result.files == ["kern.log"]
    assert result.records.height == 3
    assert len(result.errors) == 4
    assert result.errors[0] == "core.bin: binary file (NUL bytes), skipped"
    assert result.errors[1] == "latin1.log: not UTF-8 text (first bad byte at offset 3), skipped"
    assert result.errors[2].startswith("broken.gz: cannot read (")
    assert result.errors[3] == "gone.log: cannot read (No such file or directory)"


def test_a_few_bad_bytes_are_replaced_not_fatal(tmp_path: Path):
    good = b"(APIServer pid=7) INFO 11-30 00:10:00 [api_server.py:1] ok\n"
    bad = b"(APIServer pid=7) INFO 11-30 00:10:01 [api_server.py:1] caf\xe9\n"
    (tmp_path / "x.log").write_bytes(good * 50 + bad + good)
    result = read_logs(tmp_path / "x.log", window=NOV30)
    assert result.records.height == 52
    assert result.records["message"][50] == "caf\ufffd"
    assert result.errors == ["x.log: 1 line(s) with bytes that are not UTF-8 (replaced)"]


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path):
    lines = [
        f"(APIServer pid=7) INFO 11-30 00:{i // 60 % 60:02d}:{i % 60:02d} [x.py:1] request {i}\n"
        for i in range(60000)
    ]
    blob = gzip.compress("".join(lines).encode())
    (tmp_path / "cut.log.gz").write_bytes(blob[: len(blob) // 2])
    result = read_logs(tmp_path / "cut.log.gz", window=NOV30)
    assert result.files == ["cut.log.gz"]
    assert 0 < result.records.height < 60000
    assert len(result.errors) == 1
    assert result.errors[0].startswith("cut.log.gz: read stopped after line ")


def test_crlf_blank_lines_and_line_numbers():
    result = parse_lines(["\r\n", "INFO 11-30 00:00:01 [x.py:1] a\r\n", "   \n", "noise\r\n"], window=NOV30)
    assert rows(result) == [(t(0, 0, 1), 2, "vllm", "INFO", "a")]
    assert result.unknown == 1


def test_expand_folders_globs_and_duplicates(tmp_path: Path):
    for name in ("b.log", "a.jsonl", ".hidden", "c.log.gz"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.log").write_text("x\n")
    assert [p.name for p in expand(tmp_path)] == ["a.jsonl", "b.log", "c.log.gz"]
    assert [p.name for p in expand(str(tmp_path / "**" / "*.log"))] == ["b.log", "d.log"]
    found = expand([tmp_path / "b.log", str(tmp_path / "*.log"), tmp_path / "nope.log"])
    assert [p.name for p in found] == ["b.log", "nope.log"]
    assert expand(str(tmp_path / "*.none")) == []


def test_source_names_are_short_and_unique():
    assert source_names([Path("logs/a.log")]) == ["a.log"]
    assert source_names([Path("n1/logs/a.log"), Path("n2/logs/a.log")]) == ["n1/logs/a.log", "n2/logs/a.log"]
    assert source_names([]) == []


def test_within_limits_records_and_stats():
    result = read_logs(DATA / "vllm_api.log", window=NOV30)
    cut = result.within(Window(t(0, 10, 10), t(0, 11, 2)))
    assert cut.records["line"].to_list() == [4, 5, 6, 8, 11]
    assert cut.stats["ts"].to_list() == [t(0, 10, 15), t(0, 10, 25), t(0, 10, 35)]
    assert cut.unknown == result.unknown


def test_100k_vllm_lines_parse_fast(tmp_path: Path):
    lines = []
    for i in range(100_000):
        stamp = f"11-30 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        if i % 20 == 0:
            lines.append(f"(APIServer pid=7) INFO {stamp} [loggers.py:335] {STATS_LINE}\n")
        elif i % 3 == 0:
            lines.append(f'INFO:     10.0.0.7:{i} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
        else:
            lines.append(
                f"(APIServer pid=7) INFO {stamp} [logger.py:43] Received request chatcmpl-{i}: params\n"
            )
    (tmp_path / "big.log").write_text("".join(lines))
    start = time.perf_counter()
    result = read_logs(tmp_path / "big.log", window=NOV30)
    elapsed = time.perf_counter() - start
    assert result.stats.height == 5000
    assert result.records.height + result.unknown == 100_000
    # well under a second on a laptop; the bound leaves room for a busy CI runner
    assert elapsed < 3.0
