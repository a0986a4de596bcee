from __future__ import annotations

import gzip
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from perfkit.core.frames import LOG_SCHEMA, STATS_SCHEMA, Window
from perfkit.sources.engine_config import engine_config, engine_config_from_logs
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


# -- real lines as they appear in the wild (tests/sources/data/SOURCES.md names each source) ---------
# Each file holds lines pasted in a public GitHub thread or printed in an upstream project's docs.

SEP_OCT_2024 = Window(datetime(2024, 9, 1, tzinfo=UTC), datetime(2024, 10, 31, tzinfo=UTC))


def test_wrapped_engine_config_line_is_joined_back_vllm_pr_9532():
    """vllm-project/vllm#9532 pasted vLLM 0.6.x's config line cut at 1000 columns inside "chunked":
    both settings after the cut (chunked prefill, prefix caching) come back."""
    result = read_logs(DATA / "vllm_wrapped_config_pr9532.log", window=SEP_OCT_2024)
    assert [(ts, line, kind) for ts, line, kind, _, _ in rows(result)] == [
        (t(4, 32, 46, day=20, month=10, year=2024), 1, "vllm"),
        (t(4, 32, 47, day=20, month=10, year=2024), 3, "vllm"),
    ]
    assert result.unknown == 0  # the continuation row is part of line 1, not an unknown line
    message = result.records["message"][0]
    assert "num_scheduler_steps=1, chunked_prefill_enabled=True multi_step" in message
    assert message.endswith("mm_processor_kwargs=None)")
    assert engine_config_from_logs(result.records) == {"chunked_prefill": True, "prefix_caching": True}


def test_wrapped_namespace_line_is_joined_back_vllm_issue_8242():
    """vllm-project/vllm#8242 pasted vLLM 0.6.0's args line cut at 1000 columns inside a quoted value
    ('auto / '); the second row is kept as far as the stored thread shows it."""
    result = read_logs(DATA / "vllm_wrapped_namespace_issue8242.log", window=SEP_OCT_2024)
    assert result.records["line"].to_list() == [1, 2] and result.unknown == 0
    assert "lora_dtype='auto', lora_extra_vocab_size=256" in result.records["message"][1]
    config = engine_config(result.records, None, SEP_OCT_2024)
    assert config == {
        "max_num_seqs": {
            "value": 512,
            "source": "log line vllm_wrapped_namespace_issue8242.log:2",
        },  # 2nd row
        "gpu_memory_utilization": {"value": 0.9, "source": "log line vllm_wrapped_namespace_issue8242.log:2"},
        "prefix_caching": {"value": True, "source": "log line vllm_wrapped_namespace_issue8242.log:2"},
    }  # enable_chunked_prefill=None and max_num_batched_tokens=None: decided later, not known


def test_joining_is_bounded_to_rows_that_cannot_start_a_record():
    """A full-width row ends the join at the first row that is a record of its own, or indented, or
    after a row shorter than the first (the last piece); a line under 80 columns is never continued."""
    first, rest = (DATA / "vllm_wrapped_config_pr9532.log").read_text().splitlines()[:2]
    cut = [first, '  File "x.py", line 1', rest]  # an indented row: not a wrap
    assert parse_lines(cut, window=SEP_OCT_2024).unknown == 2
    stamped = [first, "2024-10-20 04:32:46 " + rest]  # a row with its own time is its own line
    assert parse_lines(stamped, window=SEP_OCT_2024).unknown == 1
    short = ["INFO 10-20 04:32:46 api_server.py:1] args: Namespace(max_num_seqs=8, max_", "num_seqs=256)"]
    assert parse_lines(short, window=SEP_OCT_2024).unknown == 1  # 73 columns: no terminal wraps there
    done = [first, rest, "hunked_prefill_enabled=False"]  # the row before was shorter: the join ended
    result = parse_lines(done, window=SEP_OCT_2024)
    assert result.unknown == 1
    assert engine_config_from_logs(result.records)["chunked_prefill"] is True
    started = time.perf_counter()
    huge = [first] + ["x" * 1000] * 5000  # full-width rows forever: capped at 256 rows, 64 KiB
    result = parse_lines(huge, window=SEP_OCT_2024)
    assert len(result.records["message"][0]) <= 64 * 2**10 and result.unknown == 5000 - 64
    assert time.perf_counter() - started < 2.0


def test_vllm_0_2_and_0_3_stats_lines():
    """vllm-project/vllm#2595 (vLLM 0.2.x llm_engine.py:706, through Ray's actor prefix) and #3094
    (vLLM 0.3.x metrics.py:161): "Swapped"/"Pending", GPU and CPU KV cache usage."""
    window = Window(datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 3, 31, tzinfo=UTC))
    result = read_logs(DATA / "vllm_stats_v0_2_v0_3.log", window=window)
    assert result.records["kind"].to_list() == ["vllm_stats"] * 3
    assert_stats(
        stats_rows(result),
        [
            (t(11, 26, 58, day=25, month=1, year=2024), "0", 0.0, 77.3, 1, 0, 0.002, None, None),
            (t(11, 27, 3, day=25, month=1, year=2024), "0", 0.0, 77.3, 1, 0, 0.003, None, None),
            (t(21, 48, 18, day=28, month=2, year=2024), "0", 0.0, 44.9, 2, 3, 0.821, None, None),
        ],
    )


def test_v0_cpu_prefix_cache_hit_rate_is_not_the_gpu_one_vllm_pr_18674():
    """vllm-project/vllm#18674: V0 on a CPU build logs "Prefix cache hit rate: GPU: 0.00%, CPU: 90.00%"."""
    window = Window(datetime(2025, 5, 1, tzinfo=UTC), datetime(2025, 5, 31, tzinfo=UTC))
    result = read_logs(DATA / "vllm_v0_prefix_cpu_pr18674.log", window=window)
    assert result.stats["prefix_cache_hit_frac"].to_list() == [0.0, 0.0]
    assert result.stats["kv_cache_usage_frac"].to_list() == [0.0, 0.0]  # GPU 0.0 %, not CPU's 0.1 %


def test_a_cpu_prefix_cache_hit_rate_on_the_stats_line_is_not_read_as_the_gpu_one():
    # hand-written (no upstream line found that names both on one line): the word before "prefix cache
    # hit rate" says whose cache it is; a CPU (offload) or external cache is never the engine's own.
    # The reader before this fix took "CPU Prefix cache hit rate: 90.0%" for the GPU figure.
    tail = (
        "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 5.0%, "
    )
    lines = [
        f"INFO 11-30 00:00:01 [loggers.py:1] {tail}CPU Prefix cache hit rate: 90.0%, Prefix cache hit rate: 12.5%",
        f"INFO 11-30 00:00:02 [loggers.py:1] {tail}GPU prefix cache hit rate: 12.5%, CPU prefix cache hit rate: 90.0%",
        f"INFO 11-30 00:00:03 [loggers.py:1] {tail}CPU Prefix cache hit rate: 90.0%",
        f"INFO 11-30 00:00:04 [loggers.py:1] {tail}External prefix cache hit rate: 50.0%, Prefix cache hit rate: 7.0%",
    ]
    assert parse_lines(lines, window=NOV30).stats["prefix_cache_hit_frac"].to_list() == [
        0.125,
        0.125,
        None,
        0.07,
    ]


def test_watchdog_time_after_pid_rank_and_ray_prefixes():
    """hiyouga/LlamaFactory#7396 pasted torch watchdog lines behind a "[pid] [rankN]:" prefix; their
    c10 stamps ("E321": 21 March) are the records' times, not a time carried from elsewhere."""
    window = Window(datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 31, tzinfo=UTC))
    result = read_logs(DATA / "train_pid_prefixed_issue7396.log", window=window)
    assert [r[:4] for r in rows(result)] == [
        (t(2, 7, 8, 408, day=21, month=3, year=2025), 1, "nccl_timeout", "ERROR"),
        (t(2, 7, 8, 414, day=21, month=3, year=2025), 2, "nccl_timeout", "ERROR"),
    ]
    assert result.unknown == 2
    # verl-project/verl#1309's line without its log collector's "[2025-05-10 00:18:21] " stamp (so the
    # c10 stamp after Ray's "(WorkerDict pid=.., ip=..)" prefix is the only one), and indented
    ray = (
        "(WorkerDict pid=1230, ip=train-1316148307689748608-9zzm714v3bpc-worker-0) [rank15]:[E510 "
        "00:18:19.328053719 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800041 "
        "milliseconds before timing out."
    )
    may = Window(datetime(2025, 5, 1, tzinfo=UTC), datetime(2025, 5, 31, tzinfo=UTC))
    got = parse_lines([ray, "    " + ray.replace("00:18:19", "00:18:20")], window=may)
    assert got.records["ts"].to_list() == [
        t(0, 18, 19, 328, day=10, month=5, year=2025),
        t(0, 18, 20, 328, day=10, month=5, year=2025),
    ]


def test_gpu_fallen_off_the_bus_without_an_xid_nvsentinel_issue_155():
    """NVIDIA/NVSentinel#155: the driver's three-line "fallen off the bus" message (dmesg), no Xid."""
    result = read_logs(DATA / "kern_fallen_off_bus_issue155.log", window=NOV30)
    assert [r[1:4] for r in rows(result)] == [(3, "xid", "ERROR")]
    assert result.records["ts"].to_list() == [None]  # dmesg's time since boot, nothing before it
    assert result.unknown == 4


def test_launch_lines_give_vllms_flags():
    """vllm-project/vllm#5176's server command line as a launcher echoes it, and the args line of the k8s
    Deployment in vLLM's docs/deployment/k8s.md ("_" spellings of a flag are vLLM's too)."""
    launch = read_logs(DATA / "vllm_launch_issue5176.log", window=NOV30)
    assert [r[2] for r in rows(launch)] == ["vllm_launch"]
    assert engine_config_from_logs(launch.records) == {"gpu_memory_utilization": 0.8, "prefix_caching": True}
    k8s = read_logs(DATA / "k8s_deployment_vllm_docs.yaml", window=NOV30)
    assert (k8s.records["line"].to_list(), k8s.unknown) == ([6], 6)  # the image line sets no flag
    assert engine_config_from_logs(k8s.records) == {"chunked_prefill": True, "max_num_batched_tokens": 1024}


def test_launch_lines_are_not_confused_with_vllms_own_lines():
    """vLLM's own start-up lines after the launcher's echo win for a key both give; a later start
    (launcher line, then vLLM's lines) replaces the earlier one; argparse's usage text is no launch."""
    echo = (DATA / "vllm_launch_issue5176.log").read_text().strip()
    own = (
        "INFO 11-30 00:01:00 [utils.py:326] non-default args: {'model': 'TheBloke/Mistral-7B-Instruct-v0.2-AWQ', "
        "'gpu_memory_utilization': 0.85, 'max_num_seqs': 64}"
    )
    first = parse_lines(
        [echo, "INFO 11-30 00:01:00 [api_server.py:1] vLLM API server version 0.8.5", own], window=NOV30
    )
    assert [r[2] for r in rows(first)] == ["vllm_launch", "vllm", "vllm"]
    assert engine_config(first.records, None, NOV30) == {
        "max_num_seqs": {"value": 64, "source": "log line <lines>:3"},
        "gpu_memory_utilization": {"value": 0.85, "source": "log line <lines>:3"},  # vLLM's own line wins
        "prefix_caching": {"value": True, "source": "log line <lines>:1"},  # only the launcher said it
    }
    restart = [
        echo,
        own,
        "INFO 11-30 01:00:00 [x.py:1] shutting down",
        echo.replace(" --enable-prefix-caching", ""),
    ]
    assert engine_config_from_logs(parse_lines(restart, window=NOV30).records) == {
        "gpu_memory_utilization": 0.8
    }
    usage = "usage: api_server.py [-h] [--gpu-memory-utilization GPU_MEMORY_UTILIZATION] [--max-num-seqs MAX_NUM_SEQS]"
    assert (
        parse_lines([usage, "  --enable-prefix-caching, --no-enable-prefix-caching"], window=NOV30).unknown
        == 2
    )
